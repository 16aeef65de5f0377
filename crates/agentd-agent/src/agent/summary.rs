//! The end of a capped run: the instruction of the forced summary call, and the summary built
//! from the run's own records when the model's is empty or cannot be asked for.

use super::StopReason;
use super::goals::GoalState;
use super::guard::one_line;
use super::transcript::Transcript;

/// The user message that asks for the forced summary (`tool_choice: "none"`).
pub fn instruction(reason: StopReason) -> String {
    format!(
        "The run has reached its {} limit. Do not call tools; summarise in one paragraph what \
         you made (with ids) and what is left.",
        reason.as_str().trim_start_matches("max_").replace('_', " ")
    )
}

/// The model's summary, or one built from the transcript and the goal state when it is empty.
pub fn final_text(
    model_text: Option<&str>,
    t: &Transcript,
    goal: Option<&GoalState>,
    reason: StopReason,
) -> String {
    if let Some(text) = model_text.filter(|s| !s.trim().is_empty()) {
        return text.to_string();
    }
    let mut out = format!("Stopped at the {} cap.", reason.as_str());
    if let Some(g) = goal {
        let made: Vec<String> = [
            g.schema.as_ref().map(|s| format!("schema {s}")),
            g.prompt.as_ref().map(|p| format!("prompt {p}")),
            g.extraction.map(|e| format!("extraction {e}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !made.is_empty() {
            out.push_str(&format!(" Made: {}.", made.join(", ")));
        }
        if !g.met() {
            let missing: Vec<&str> = g.missing.iter().map(|p| p.noun()).collect();
            out.push_str(&format!(" Missing: {}.", missing.join(", ")));
        }
    }
    let last: Vec<String> = t.history.iter().rev().take(6).map(one_line).collect();
    if !last.is_empty() {
        let last: Vec<String> = last.into_iter().rev().collect();
        out.push_str(&format!(" Last tool results: {}.", last.join("; ")));
    }
    out
}
