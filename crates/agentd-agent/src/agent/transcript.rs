//! Rebuilding a run's state from its checkpoints: the message list sent to the provider, the
//! counters the caps look at, and the tool calls still waiting for a result.

use crate::llm::schema_output::Unconstrained;
use crate::llm::{Block, CompletionResponse, Message, Role};
use crate::store::runs::{AuditDecision, StepKind, StepRow};
use crate::tools::Registry;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};

pub use crate::store::runs::CHECKPOINT_VERSION;

/// A checkpoint this build cannot read: the run fails with this instead of a panic.
#[derive(Debug, thiserror::Error)]
#[error("checkpoint {seq} ({kind}) of this run cannot be resumed: {reason}")]
pub struct CheckpointError {
    pub seq: i32,
    pub kind: String,
    pub reason: String,
}

/// A tool call the model asked for: its id, the tool's name and the arguments as sent (raw
/// JSON text, parsed and repaired only when run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub args: String,
}

impl ToolCall {
    pub fn new(id: impl Into<String>, name: impl Into<String>, args: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            args: args.into(),
        }
    }
}

/// A tool result as checkpointed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ToolResultStep {
    pub call_id: String,
    pub tool: String,
    /// What the model sees.
    pub content: String,
    pub is_error: bool,
    /// auto_approved | proposed | denied | error | capped
    pub decision: String,
}

/// The state of a run, derived from its steps.
#[derive(Debug, Default)]
pub struct Transcript {
    /// Provider responses and tool results after the system and first messages.
    pub messages: Vec<Message>,
    /// Provider responses so far.
    pub rounds: u32,
    /// Tool results so far.
    pub tool_calls: u32,
    /// Next checkpoint sequence number.
    pub next_seq: i32,
    /// Calls of the last response with no result yet, in order.
    pub pending: Vec<ToolCall>,
    /// The last response had no tool calls: its text ends the run.
    pub final_text: Option<String>,
    /// Successful calls per tool (refinement accounting).
    pub successes: HashMap<String, u32>,
    /// Refinements used so far.
    pub refinements: u32,
    /// A forced final summary (tool_choice none) was already made.
    pub summary_done: bool,
    /// The cap that ended the run, once recorded (a `cap` step): the summary follows it.
    pub cap: Option<String>,
    /// Nudges sent (prose answers before the goal was met).
    pub nudges: u32,
    /// Calls refused as repeats of an earlier identical call.
    pub repeats: u32,
    /// Every answered call, in order (repeat guard, compaction, fallback summary).
    pub history: Vec<CallRecord>,
    /// A constrained round of this run went without its format (refused, or answered outside
    /// it: `llm::schema_output`): the run's rounds are asked with plain tool calls from then on.
    pub unconstrained: bool,
    /// The run's approvals whose outcome the model was told after a wait (`decided` marks).
    pub reported: HashSet<String>,
}

/// One answered tool call.
#[derive(Debug, Clone)]
pub struct CallRecord {
    pub call_id: String,
    pub tool: String,
    /// The arguments as the model sent them.
    pub raw_args: String,
    pub is_error: bool,
    pub decision: String,
    /// What the model was shown.
    pub content: String,
    /// Index of the round (provider response) that asked for it, from 0.
    pub round: u32,
}

impl Transcript {
    /// Rebuilds from checkpoints in order; `registry` says which calls were refinements
    /// ([`crate::tools::Tool::refines`]).
    pub fn from_steps(steps: &[StepRow], registry: &Registry) -> Result<Self, CheckpointError> {
        let mut t = Transcript::default();
        let mut answered = HashSet::new();
        let mut last_calls: Vec<ToolCall> = Vec::new();
        let mut args_of: HashMap<String, (String, u32)> = HashMap::new();
        for s in steps {
            t.next_seq = s.seq + 1;
            let bad = |reason: String| CheckpointError {
                seq: s.seq,
                kind: s.kind.clone(),
                reason,
            };
            match s.payload.get("v") {
                None => {}
                Some(v) if v.as_u64() == Some(CHECKPOINT_VERSION) => {}
                Some(v) => {
                    return Err(bad(format!(
                        "format version {v}, this build reads version {CHECKPOINT_VERSION} (written by another agentd version?)"
                    )));
                }
            }
            match s.step_kind() {
                Some(StepKind::LlmResponse) => {
                    let resp: CompletionResponse =
                        serde_json::from_value(s.payload["response"].clone())
                            .map_err(|e| bad(format!("malformed response: {e}")))?;
                    if s.payload["summary"].as_bool() == Some(true) {
                        t.summary_done = true;
                    }
                    t.rounds += 1;
                    let why = s.payload["unconstrained"]
                        .as_str()
                        .and_then(Unconstrained::parse);
                    t.unconstrained |= why.is_some();
                    if why == Some(Unconstrained::Ignored) {
                        // An answer outside its format, discarded: counted and charged, not
                        // shown to the model; the round is asked again without the format.
                        last_calls.clear();
                        t.final_text = None;
                        continue;
                    }
                    last_calls = resp
                        .message
                        .tool_calls()
                        .into_iter()
                        .map(|(id, name, args)| ToolCall::new(id, name, args))
                        .collect();
                    for c in &last_calls {
                        args_of.insert(c.id.clone(), (c.args.clone(), t.rounds - 1));
                    }
                    t.final_text = last_calls.is_empty().then(|| resp.message.joined_text());
                    t.messages.push(resp.message);
                }
                Some(StepKind::ToolResult) => {
                    let r: ToolResultStep = serde_json::from_value(s.payload.clone())
                        .map_err(|e| bad(format!("malformed tool result: {e}")))?;
                    t.tool_calls += 1;
                    answered.insert(r.call_id.clone());
                    if r.decision == AuditDecision::Repeated {
                        t.repeats += 1;
                    }
                    let (raw_args, round) = args_of.get(&r.call_id).cloned().unwrap_or_default();
                    t.history.push(CallRecord {
                        call_id: r.call_id.clone(),
                        tool: r.tool.clone(),
                        raw_args,
                        is_error: r.is_error,
                        decision: r.decision.clone(),
                        content: r.content.clone(),
                        round,
                    });
                    if !r.is_error && r.decision == AuditDecision::AutoApproved {
                        let n = t.successes.entry(r.tool.clone()).or_default();
                        if registry
                            .get(&r.tool)
                            .is_some_and(|x| x.refines().counts(*n))
                        {
                            t.refinements += 1;
                        }
                        *n += 1;
                    }
                    t.messages.push(Message {
                        role: Role::Tool,
                        content: vec![Block::ToolResult {
                            call_id: r.call_id,
                            content: r.content,
                            is_error: r.is_error,
                        }],
                    });
                }
                Some(StepKind::Nudge) => {
                    t.nudges += 1;
                    t.final_text = None;
                    let text = s.payload["text"].as_str().unwrap_or_default();
                    t.messages.push(Message::text(Role::User, text));
                }
                Some(StepKind::Cap) => {
                    t.cap = s.payload["reason"].as_str().map(str::to_string);
                }
                // The decisions on the run's proposals after a wait (`agent/wait.rs`): a message
                // the model reads next, so the answer before the wait no longer ends the run.
                Some(StepKind::Decided) => {
                    t.final_text = None;
                    let ids = s.payload["approvals"].as_array().into_iter().flatten();
                    t.reported
                        .extend(ids.filter_map(|v| v.as_str()).map(str::to_string));
                    let text = s.payload["text"].as_str().unwrap_or_default();
                    t.messages.push(Message::text(Role::User, text));
                }
                _ => {}
            }
        }
        t.pending = last_calls
            .into_iter()
            .filter(|c| !answered.contains(&c.id))
            .collect();
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{FinishReason, Usage};
    use serde_json::json;

    fn response(seq: i32, message: Message, unconstrained: Option<&str>) -> StepRow {
        let resp = CompletionResponse {
            message,
            usage: Usage::default(),
            finish: FinishReason::EndTurn,
            model: "m".into(),
        };
        let mut payload = json!({"response": resp, "summary": false});
        if let Some(why) = unconstrained {
            payload["unconstrained"] = json!(why);
        }
        StepRow::written(
            seq,
            StepKind::LlmResponse,
            None,
            &payload,
            chrono::Utc::now(),
        )
    }

    #[test]
    fn an_answer_that_ignored_its_format_is_counted_not_shown_and_the_run_goes_unconstrained() {
        let registry = Registry::default();
        let junk = Message::text(Role::Assistant, r#"{"invoice_number": "INV-1"}"#);
        let t = Transcript::from_steps(&[response(0, junk, Some("ignored"))], &registry)
            .expect("readable");
        assert_eq!(t.rounds, 1, "the call counts");
        assert!(t.messages.is_empty(), "the model does not see it");
        assert_eq!(
            t.final_text, None,
            "no nudge follows: the round is asked again"
        );
        assert!(t.unconstrained);
        // Refused: the answer is the plain round's, kept as any answer.
        let text = Message::text(Role::Assistant, "Done.");
        let t = Transcript::from_steps(&[response(0, text, Some("refused"))], &registry)
            .expect("readable");
        assert_eq!((t.messages.len(), t.unconstrained), (1, true));
        assert_eq!(t.final_text.as_deref(), Some("Done."));
        let plain = Message::text(Role::Assistant, "Done.");
        let t = Transcript::from_steps(&[response(0, plain, None)], &registry).expect("readable");
        assert!(!t.unconstrained);
    }
}
