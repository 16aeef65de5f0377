//! What the loop does next, decided from the run's state alone: no database, no clock, no
//! provider. `Engine::drive` gathers the [`State`] (the transcript rebuilt from the run's
//! checkpoints, the goal, the counters, the time against the deadline), asks [`next_step`] and
//! executes the answer; a provider round due is decided once the org's budget is read
//! ([`RoundDue::given`]), which only a round needs. Every branch is unit-tested below.

use super::caps::{Caps, StopReason, cap_reached};
use super::goals::GoalState;
use super::transcript::{ToolCall, Transcript};
use super::{one_call, summary};
use crate::store::runs::{Budget, RunStatus};

/// What the decision looks at.
#[derive(Debug)]
pub(super) struct State<'a> {
    pub t: &'a Transcript,
    pub goal: Option<&'a GoalState>,
    pub caps: &'a Caps,
    /// `LoopSettings::max_nudges` and `max_repeats`.
    pub max_nudges: u32,
    pub max_repeats: u32,
    /// The run's token total.
    pub tokens: u64,
    /// The run's active time has reached its deadline.
    pub past_deadline: bool,
    /// The run's rounds that require a call are constrained (`round::constrained`).
    pub constrained: bool,
}

/// How a run ends: its status, stop reason and final text.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Finish {
    pub status: RunStatus,
    pub reason: StopReason,
    pub text: String,
}

impl Finish {
    /// A capped end whose text is built from the run's records (`model_text`: the model's own,
    /// when it gave one).
    pub fn capped(
        reason: StopReason,
        model_text: Option<&str>,
        t: &Transcript,
        goal: Option<&GoalState>,
    ) -> Self {
        Self {
            status: RunStatus::Capped,
            reason,
            text: summary::final_text(model_text, t, goal, reason),
        }
    }

    fn completed(text: String) -> Self {
        Self {
            status: RunStatus::Succeeded,
            reason: StopReason::Completed,
            text,
        }
    }
}

/// The loop's next move.
#[derive(Debug, PartialEq)]
pub(super) enum Next {
    /// Run (or refuse) the first call of the last response still waiting for its result.
    Call(ToolCall),
    /// The model answered in prose before the goal was met: checkpoint a nudge naming what is
    /// missing.
    Nudge {
        text: String,
        missing: Vec<&'static str>,
    },
    /// End the run.
    Finish(Finish),
    /// A provider round is due: what it is depends on the org's budget ([`RoundDue::given`]).
    Round(RoundDue),
}

/// A provider round is due; `capped`: the cap the run has reached (recorded or not).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct RoundDue {
    pub capped: Option<StopReason>,
    /// The cap is already checkpointed (the round is its forced summary).
    pub recorded: bool,
}

/// What the due round is, the org's budget known.
#[derive(Debug, PartialEq)]
pub(super) enum Round {
    /// The org's monthly budget is used up: end without a provider call.
    OutOfBudget(Finish),
    /// Checkpoint the cap that ends the run (first, so a resume makes the same summary).
    RecordCap(StopReason),
    /// Ask the model; `capped`: for the forced summary after that cap.
    Ask { capped: Option<StopReason> },
}

/// What the loop does next with a run in state `s`.
pub(super) fn next_step(s: &State) -> Next {
    let t = s.t;
    if let Some(call) = t.pending.first() {
        return Next::Call(call.clone());
    }
    let recorded = t.cap.as_deref().and_then(StopReason::parse);
    if t.summary_done {
        let reason = recorded.unwrap_or(StopReason::MaxRounds);
        return Next::Finish(Finish::capped(reason, t.final_text.as_deref(), t, s.goal));
    }
    if let Some(text) = &t.final_text
        && recorded.is_none()
    {
        return match s.goal {
            Some(g) if !g.met() && t.nudges < s.max_nudges => Next::Nudge {
                text: g.nudge(),
                missing: g.missing.iter().map(|p| p.noun()).collect(),
            },
            // Keeps the model's text as it is (even when empty).
            Some(g) if !g.met() => Next::Finish(Finish {
                status: RunStatus::Capped,
                reason: StopReason::MaxNudges,
                text: text.clone(),
            }),
            _ => Next::Finish(Finish::completed(text.clone())),
        };
    }
    // Nothing for a model to add (a constrained run whose extraction flags nothing): the
    // summary is built from the run's records instead of asked for.
    if recorded.is_none()
        && one_call::nothing_to_add(s.constrained, s.goal, t)
        && let Some(g) = s.goal
    {
        return Next::Finish(Finish::completed(one_call::summary(g)));
    }
    let capped =
        recorded.or_else(|| cap_reached(s.caps, s.max_repeats, t, s.tokens, s.past_deadline));
    Next::Round(RoundDue {
        capped,
        recorded: recorded.is_some(),
    })
}

impl RoundDue {
    /// The round, given the org's budget (`None`: the org has none).
    pub fn given(self, budget: Option<Budget>, t: &Transcript, goal: Option<&GoalState>) -> Round {
        if let Some(b) = budget
            && b.tokens_used >= b.monthly_limit
        {
            let reason = self.capped.unwrap_or(StopReason::Budget);
            return Round::OutOfBudget(Finish::capped(reason, None, t, goal));
        }
        match self.capped {
            Some(reason) if !self.recorded => Round::RecordCap(reason),
            capped => Round::Ask { capped },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::goals::Part;
    use crate::agent::transcript::CallRecord;
    use crate::tools::extraction::RunExtraction;
    use crate::tools::typed::Declaration;
    use std::time::Duration;

    const CAPS: Caps = Caps {
        max_rounds: 10,
        max_tool_calls: 20,
        max_tokens: 100_000,
        deadline: Duration::from_secs(600),
        max_refinements: 3,
    };

    fn state<'a>(t: &'a Transcript, goal: Option<&'a GoalState>) -> State<'a> {
        State {
            t,
            goal,
            caps: &CAPS,
            max_nudges: 2,
            max_repeats: 3,
            tokens: 0,
            past_deadline: false,
            constrained: false,
        }
    }

    fn unmet() -> GoalState {
        GoalState {
            missing: vec![Part::Prompt, Part::Extraction],
            schema: Some("s1:1".into()),
            ..GoalState::default()
        }
    }

    fn met() -> GoalState {
        GoalState {
            schema: Some("s1:1".into()),
            schema_fields: vec!["total".into()],
            prompt: Some("p1:1".into()),
            extraction: Some(uuid::Uuid::nil()),
            ..GoalState::default()
        }
    }

    fn answered(text: &str) -> Transcript {
        Transcript {
            rounds: 1,
            final_text: Some(text.into()),
            ..Transcript::default()
        }
    }

    /// The round `s` decides, with an org budget of `budget`.
    fn round(s: &State, budget: Option<Budget>) -> Round {
        match next_step(s) {
            Next::Round(due) => due.given(budget, s.t, s.goal),
            other => panic!("expected a round, got {other:?}"),
        }
    }

    #[test]
    fn a_pending_call_runs_first_whatever_else_holds() {
        let call = ToolCall::new("c1", "some_tool", "{}");
        let t = Transcript {
            pending: vec![call.clone(), ToolCall::new("c2", "x", "{}")],
            summary_done: true,
            cap: Some("max_rounds".into()),
            ..Transcript::default()
        };
        let mut s = state(&t, None);
        s.past_deadline = true;
        assert_eq!(next_step(&s), Next::Call(call));
    }

    #[test]
    fn a_made_summary_ends_the_run_capped_by_its_recorded_reason() {
        let t = Transcript {
            summary_done: true,
            cap: Some("max_tool_calls".into()),
            final_text: Some("made s1".into()),
            ..Transcript::default()
        };
        let Next::Finish(f) = next_step(&state(&t, None)) else {
            panic!("expected a finish");
        };
        assert_eq!(
            (f.status, f.reason, f.text.as_str()),
            (RunStatus::Capped, StopReason::MaxToolCalls, "made s1")
        );
        // No recorded reason (an older run): max_rounds, and an empty summary is rebuilt.
        let t = Transcript {
            summary_done: true,
            final_text: Some("  ".into()),
            ..Transcript::default()
        };
        let Next::Finish(f) = next_step(&state(&t, None)) else {
            panic!("expected a finish");
        };
        assert_eq!(f.reason, StopReason::MaxRounds);
        assert!(
            f.text.starts_with("Stopped at the max_rounds cap."),
            "{}",
            f.text
        );
    }

    #[test]
    fn prose_before_the_goal_is_met_is_nudged_until_the_nudges_run_out() {
        let goal = unmet();
        let mut t = answered("I think we are done");
        assert_eq!(
            next_step(&state(&t, Some(&goal))),
            Next::Nudge {
                text: goal.nudge(),
                missing: vec!["prompt", "extraction"],
            }
        );
        t.nudges = 2;
        assert_eq!(
            next_step(&state(&t, Some(&goal))),
            Next::Finish(Finish {
                status: RunStatus::Capped,
                reason: StopReason::MaxNudges,
                text: "I think we are done".into(),
            })
        );
    }

    #[test]
    fn prose_with_the_goal_met_or_without_a_goal_completes_the_run() {
        let t = answered("done: s1, p1");
        let done = Next::Finish(Finish::completed("done: s1, p1".into()));
        assert_eq!(next_step(&state(&t, Some(&met()))), done);
        assert_eq!(next_step(&state(&t, None)), done);
    }

    #[test]
    fn a_clean_extraction_of_a_constrained_run_ends_it_without_another_call() {
        let goal = met();
        let t = Transcript {
            rounds: 1,
            tool_calls: 3,
            history: vec![CallRecord {
                call_id: "c3".into(),
                tool: RunExtraction::NAME.into(),
                raw_args: "{}".into(),
                is_error: false,
                decision: "auto_approved".into(),
                content: r#"{"values": {"total": "12"}}"#.into(),
                round: 0,
            }],
            ..Transcript::default()
        };
        let mut s = state(&t, Some(&goal));
        s.constrained = true;
        assert_eq!(
            next_step(&s),
            Next::Finish(Finish::completed(one_call::summary(&goal)))
        );
        // Unconstrained, the model is asked.
        s.constrained = false;
        assert_eq!(round(&s, None), Round::Ask { capped: None });
    }

    #[test]
    fn a_flagged_field_asks_again_a_flagged_table_cell_or_a_correction_ends_the_run() {
        let goal = met();
        let extraction = |content: &str| CallRecord {
            call_id: "c3".into(),
            tool: RunExtraction::NAME.into(),
            raw_args: "{}".into(),
            is_error: false,
            decision: "auto_approved".into(),
            content: content.into(),
            round: 0,
        };
        let ends = |history: Vec<CallRecord>| {
            let t = Transcript {
                rounds: 2,
                history,
                ..Transcript::default()
            };
            let mut s = state(&t, Some(&goal));
            s.constrained = true;
            matches!(next_step(&s), Next::Finish(_))
        };
        let field = r#"{"result": {"total": 9}, "ungrounded": ["/total"], "ungrounded_note": "n"}"#;
        let cell =
            r#"{"result": {"t": [{"a": 9}]}, "ungrounded": ["/t/0/a"], "ungrounded_note": "n"}"#;
        assert!(!ends(vec![extraction(field)]));
        assert!(ends(vec![extraction(cell)]));
        // The review's correction after the flagged field: the field has had its look.
        let correction = CallRecord {
            call_id: "c4".into(),
            tool: crate::tools::extraction::UpdateExtractionField::NAME.into(),
            ..extraction("{}")
        };
        assert!(ends(vec![extraction(field), correction]));
    }

    #[test]
    fn a_spent_budget_ends_the_run_under_the_cap_reached_or_budget() {
        let spent = Budget {
            monthly_limit: 1000,
            tokens_used: 1000,
        };
        let t = Transcript::default();
        let mut s = state(&t, None);
        let Round::OutOfBudget(f) = round(&s, Some(spent)) else {
            panic!("expected out of budget");
        };
        assert_eq!(
            (f.status, f.reason),
            (RunStatus::Capped, StopReason::Budget)
        );
        s.past_deadline = true;
        let Round::OutOfBudget(f) = round(&s, Some(spent)) else {
            panic!("expected out of budget");
        };
        assert_eq!(f.reason, StopReason::Deadline);
        // Room left: the model is asked.
        s.past_deadline = false;
        let room = Budget {
            tokens_used: 999,
            ..spent
        };
        assert_eq!(round(&s, Some(room)), Round::Ask { capped: None });
    }

    #[test]
    fn a_cap_reached_is_recorded_then_its_summary_asked_for() {
        let t = Transcript {
            rounds: 10,
            ..Transcript::default()
        };
        assert_eq!(
            round(&state(&t, None), None),
            Round::RecordCap(StopReason::MaxRounds)
        );
        let mut s = state(&t, None);
        s.tokens = 100_000;
        assert_eq!(round(&s, None), Round::RecordCap(StopReason::MaxTokens));
        // Recorded: the summary, under the recorded reason (not the one reached now), even
        // after the model's prose.
        let t = Transcript {
            rounds: 10,
            cap: Some("deadline".into()),
            final_text: Some("partial".into()),
            ..Transcript::default()
        };
        assert_eq!(
            round(&state(&t, Some(&unmet())), None),
            Round::Ask {
                capped: Some(StopReason::Deadline)
            }
        );
    }

    #[test]
    fn a_run_with_nothing_reached_asks_the_model() {
        let t = Transcript {
            rounds: 3,
            tool_calls: 5,
            ..Transcript::default()
        };
        assert_eq!(
            round(&state(&t, Some(&unmet())), None),
            Round::Ask { capped: None }
        );
    }
}
