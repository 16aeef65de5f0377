//! How the loop talks to a model, per run: nudges, the repeat guard, guided mode, `tool_choice`,
//! output and context sizes. Built from the job file's `[agent]` section and the service's
//! `[llm]` section (`llm.guided` overrides every job file's `agent.guided`).

use crate::catalog::AgentSpec;
use crate::config::LlmConfig;

/// Loop behaviour of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopSettings {
    /// Nudges sent when the model answers in prose before the goal is met (`agent.max_nudges`).
    pub max_nudges: u32,
    /// Refused repeated calls before the run stops (`agent.max_repeats`).
    pub max_repeats: u32,
    /// Offer only the tools of the next unmet goal (`agent.guided`, `llm.guided`).
    pub guided: bool,
    /// Send `tool_choice: "required"` before the goal is met (`llm.tool_choice_required`).
    pub tool_choice_required: bool,
    /// Send a `response_format` only a call satisfies where a call is required
    /// (`llm.constrained_calls`, see `agent::constrain`).
    pub constrained_calls: crate::config::Constrained,
    /// `max_completion_tokens` of each call (`llm.max_output_tokens`).
    pub max_output_tokens: u32,
    /// The model's context window (`llm.context_window_tokens`).
    pub context_window_tokens: u64,
    /// Bounded context: the document excerpt in the first message, superseded tool results
    /// compacted, a working-state block each round, denied tools not offered. False
    /// reproduces the request shape before issue 11 (benchmarks compare the two).
    pub compact: bool,
    /// Check the kind's goal (nudges, `tool_choice: "required"`); false ends the run at the
    /// first text answer, as for kinds without a goal.
    pub goals: bool,
}

impl Default for LoopSettings {
    fn default() -> Self {
        Self {
            max_nudges: 2,
            max_repeats: 3,
            guided: false,
            tool_choice_required: true,
            constrained_calls: crate::config::Constrained::Off,
            max_output_tokens: 4096,
            context_window_tokens: 128_000,
            compact: true,
            goals: true,
        }
    }
}

impl LoopSettings {
    /// The settings of a job kind under the service config.
    pub fn for_job(llm: &LlmConfig, agent: &AgentSpec) -> Self {
        Self {
            max_nudges: agent.max_nudges,
            max_repeats: agent.max_repeats,
            guided: match llm.guided.as_str() {
                "on" => true,
                "off" => false,
                _ => agent.guided,
            },
            tool_choice_required: llm.tool_choice_required,
            constrained_calls: llm.constrained_calls,
            max_output_tokens: llm.max_output_tokens,
            context_window_tokens: llm.context_window_tokens,
            compact: true,
            goals: true,
        }
    }
}
