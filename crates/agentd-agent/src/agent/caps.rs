//! The limits of a run and why it stopped: [`Caps`], [`StopReason`] and the check of which cap
//! a transcript has reached.

use super::transcript::Transcript;
use serde::Serialize;
use std::time::Duration;

/// Limits of one run.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    pub max_rounds: u32,
    pub max_tool_calls: u32,
    pub max_tokens: u64,
    pub deadline: Duration,
    pub max_refinements: u32,
}

/// Why a run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model answered without tool calls.
    Completed,
    MaxRounds,
    MaxToolCalls,
    MaxTokens,
    Deadline,
    MaxRefinements,
    /// The org's monthly token budget is used up.
    Budget,
    /// The model kept answering in prose before the goal was met, after every nudge.
    MaxNudges,
    /// The model kept repeating identical calls.
    MaxRepeats,
    /// The run waited for the decisions on its proposals (`agent.await_decisions`) past the
    /// approvals' TTL: one of them expired undecided.
    ApprovalTtl,
}

impl StopReason {
    /// The name stored on the run.
    pub fn as_str(&self) -> &'static str {
        match self {
            StopReason::Completed => "completed",
            StopReason::MaxRounds => "max_rounds",
            StopReason::MaxToolCalls => "max_tool_calls",
            StopReason::MaxTokens => "max_tokens",
            StopReason::Deadline => "deadline",
            StopReason::MaxRefinements => "max_refinements",
            StopReason::Budget => "budget",
            StopReason::MaxNudges => "max_nudges",
            StopReason::MaxRepeats => "max_repeats",
            StopReason::ApprovalTtl => "approval_ttl",
        }
    }

    /// The reason stored as `name`.
    pub fn parse(name: &str) -> Option<Self> {
        [
            StopReason::Completed,
            StopReason::MaxRounds,
            StopReason::MaxToolCalls,
            StopReason::MaxTokens,
            StopReason::Deadline,
            StopReason::MaxRefinements,
            StopReason::Budget,
            StopReason::MaxNudges,
            StopReason::MaxRepeats,
            StopReason::ApprovalTtl,
        ]
        .into_iter()
        .find(|r| r.as_str() == name)
    }
}

/// The first cap `t` has reached, if any (`max_repeats`: `LoopSettings::max_repeats`, 0 off).
pub(super) fn cap_reached(
    c: &Caps,
    max_repeats: u32,
    t: &Transcript,
    tokens: u64,
    past_deadline: bool,
) -> Option<StopReason> {
    if t.refinements > c.max_refinements {
        Some(StopReason::MaxRefinements)
    } else if past_deadline {
        Some(StopReason::Deadline)
    } else if tokens >= c.max_tokens {
        Some(StopReason::MaxTokens)
    } else if t.tool_calls >= c.max_tool_calls {
        Some(StopReason::MaxToolCalls)
    } else if max_repeats > 0 && t.repeats >= max_repeats {
        Some(StopReason::MaxRepeats)
    } else if t.rounds >= c.max_rounds {
        Some(StopReason::MaxRounds)
    } else {
        None
    }
}
