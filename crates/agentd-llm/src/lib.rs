//! LLM providers behind one trait with neutral types: messages made of text, tool_use and
//! tool_result blocks; usage; a stop reason. Providers: `openai` (async-openai, any
//! OpenAI-compatible server), `anthropic` (Anthropic's Messages API), `scripted` (tests) and
//! `offline` (a deterministic heuristic model, the default when no key or base URL is
//! configured); `chain` puts the configured entries (`[[llm.providers]]`) behind one provider
//! with fallback and circuit breakers; `org_keys` the provider keys orgs bring.
//!
//! **Crate.** `agentd-llm` (layer 9 of ARCHITECTURE.md § Layers) may use `agentd-store`,
//! `agentd-queue`, `agentd-analysis` and `agentd-base`; the tools sit above it.

// The modules of the crates below, under the names they had when they were one crate, so a
// path reads `crate::store::…` wherever it is used. Only crates below this one can be named
// here: Cargo has no edge upward.
use agentd_analysis as analysis;
use agentd_base::{clock, config, db, error_chain};
use agentd_store::{pii, store};

pub mod anthropic;
pub mod budget;
pub mod chain;
pub mod limits;
pub mod offline;
pub mod openai;
pub mod org_keys;
pub mod redacting;
pub mod repair;
pub mod schema_output;
pub mod scripted;
pub mod textcalls;
pub mod tokens;
pub mod traced;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;

/// Who said it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    /// Tool results (sent back to the model).
    Tool,
}

/// One piece of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    Text {
        text: String,
    },
    /// The model asks for a tool call. `arguments` is the raw text the model produced: it may
    /// not be valid JSON, and the loop turns that into a tool error the model can correct.
    ToolUse {
        id: String,
        name: String,
        arguments: String,
    },
    /// The answer to a tool call.
    ToolResult {
        call_id: String,
        content: String,
        is_error: bool,
    },
}

/// A message of the transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Block>,
}

impl Message {
    /// A message with one text block.
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Self {
            role,
            content: vec![Block::Text { text: text.into() }],
        }
    }

    /// The concatenated text blocks.
    pub fn joined_text(&self) -> String {
        self.content
            .iter()
            .filter_map(|b| match b {
                Block::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("")
    }

    /// The tool calls, in order: (id, name, raw arguments).
    pub fn tool_calls(&self) -> Vec<(&str, &str, &str)> {
        self.content
            .iter()
            .filter_map(|b| match b {
                Block::ToolUse {
                    id,
                    name,
                    arguments,
                } => Some((id.as_str(), name.as_str(), arguments.as_str())),
                _ => None,
            })
            .collect()
    }
}

/// A tool as offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
    /// Sent as `"strict": true` (OpenAI strict function calling; `llm.strict_tools`).
    #[serde(default)]
    pub strict: bool,
}

/// Whether the model may call tools in this request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolChoice {
    Auto,
    /// No tool calls: the forced final summary when a cap is hit (the tools stay in the
    /// request so servers accept the history).
    None,
    /// A tool call is required: rounds before the run's goal is met, where the server supports
    /// it (`llm.tool_choice_required`).
    Required,
}

/// One provider call.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompletionRequest {
    pub model: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub tool_choice: ToolChoice,
    pub max_tokens: Option<u32>,
    /// OpenAI structured-output `response_format` (run_extraction uses it).
    pub response_format: Option<Value>,
}

/// Tokens used by one call. `input_tokens` is every prompt token the call processed; of them,
/// `cache_read_tokens` were read from the provider's prompt cache (OpenAI's `cached_tokens`,
/// Anthropic's `cache_read_input_tokens`) and `cache_write_tokens` written to it (Anthropic's
/// `cache_creation_input_tokens`), which are priced apart (`config::prices`). Zero counts are
/// not written, so a checkpoint without cache reads the same as before they were counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The most tokens one call is charged for each of input and output. A server's usage is
/// outside input: a figure past this (2^40, far beyond any context window) is charged as this,
/// so sums over a month stay far from `i64::MAX` and nothing overflows or wraps into a refund.
pub const MAX_REPORTED_TOKENS: u64 = 1 << 40;

impl Usage {
    /// Input plus output, each bounded by [`MAX_REPORTED_TOKENS`].
    pub fn total(&self) -> u64 {
        self.input() + self.output()
    }

    /// Input tokens, bounded by [`MAX_REPORTED_TOKENS`].
    pub fn input(&self) -> u64 {
        self.input_tokens.min(MAX_REPORTED_TOKENS)
    }

    /// Output tokens, bounded by [`MAX_REPORTED_TOKENS`].
    pub fn output(&self) -> u64 {
        self.output_tokens.min(MAX_REPORTED_TOKENS)
    }

    /// [`Usage::total`] as the database's `bigint` (lossless: it is at most 2^41).
    pub fn total_i64(&self) -> i64 {
        self.total() as i64
    }

    /// (input, output) as `bigint`s, each bounded.
    pub fn split_i64(&self) -> (i64, i64) {
        (self.input() as i64, self.output() as i64)
    }

    /// The counts as they are priced: cache reads and writes bounded by the input they are
    /// part of.
    pub fn priced(&self) -> crate::config::TokenCounts {
        let input = self.input();
        let cache_read = self.cache_read_tokens.min(input);
        crate::config::TokenCounts {
            input,
            cache_read,
            cache_write: self.cache_write_tokens.min(input - cache_read),
            output: self.output(),
        }
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    EndTurn,
    ToolUse,
    MaxTokens,
    Other,
}

/// The provider's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionResponse {
    /// Always role Assistant.
    pub message: Message,
    pub usage: Usage,
    pub finish: FinishReason,
    /// The model that answered, as the provider reports it.
    pub model: String,
}

/// A provider failure.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{provider}: {message}")]
pub struct LlmError {
    pub provider: String,
    pub message: String,
    /// Worth retrying later (429, 5xx, timeouts, connection errors).
    pub retryable: bool,
}

impl LlmError {
    /// A new error.
    pub fn new(provider: &str, message: impl Into<String>, retryable: bool) -> Self {
        Self {
            provider: provider.to_string(),
            message: message.into(),
            retryable,
        }
    }

    /// The server could not parse what the model generated (llama.cpp answers HTTP 500 or an
    /// SSE error event mentioning parsing). A model error: worth one retry with a hint.
    pub fn is_unparsed_output(&self) -> bool {
        let m = self.message.to_lowercase();
        (m.contains("http 500") || m.contains("error event in the stream"))
            && (m.contains("pars") || m.contains("format"))
    }

    /// The model had generated when the call failed (an error event after HTTP 200, or a
    /// server that could not parse its output): the input was spent and is charged.
    pub fn after_generation(&self) -> bool {
        self.is_unparsed_output() || self.message.contains("error event in the stream")
    }

    /// The server refused the key (HTTP 401 or 403): not retried, not the endpoint's failure.
    pub fn is_auth_refusal(&self) -> bool {
        !self.retryable && (self.message.contains("HTTP 401") || self.message.contains("HTTP 403"))
    }
}

/// A chat model that can call tools.
#[async_trait::async_trait]
pub trait LlmProvider: Send + Sync {
    /// `openai`, `anthropic`, `scripted` or `offline`: stored on runs and audit rows.
    fn name(&self) -> &str;
    /// The HTTP endpoint a call for `model` goes to, for a provider that may constrain its
    /// output to a `response_format` JSON Schema (`llm.constrained_calls = "auto"` tries it there
    /// and remembers an endpoint that refuses or ignores it, see [`schema_output`]); `None` for
    /// in-process providers and those without the OpenAI format.
    fn endpoint(&self, _model: &str) -> Option<schema_output::Endpoint<'_>> {
        None
    }
    /// Its provider entries' circuit breakers at `now` (the fleet's, not an org key's), for
    /// the worker's row of `agentd_workers`; none for a provider that is not a chain.
    fn breakers(&self, _now: chrono::DateTime<chrono::Utc>) -> Vec<chain::breaker::Snapshot> {
        Vec::new()
    }
    /// The model a run is recorded with when its settings name `requested`: that one for a
    /// provider that calls a model; the offline heuristic calls none and says so.
    fn model_for<'a>(&'a self, requested: &'a str) -> &'a str {
        requested
    }
    /// One completion.
    async fn complete(&self, req: CompletionRequest) -> Result<CompletionResponse, LlmError>;
    /// Whether [`LlmProvider::scoped`] makes another provider of this one (a chain of entries;
    /// a test's scripted or offline provider is used as it is).
    fn scopable(&self) -> bool {
        false
    }
    /// This provider for one org's calls (see [`org_keys::provider_for_org`]): its attempts
    /// recorded, the org's own key used where it stored one. `Ok(None)`: use `self`.
    fn scoped(&self, _scope: org_keys::CallScope) -> Result<Option<SharedProvider>, LlmError> {
        Ok(None)
    }
}

/// A provider shared across tasks.
pub type SharedProvider = Arc<dyn LlmProvider>;

/// The provider the config asks for: the chain of its provider entries ([`chain`]), which for a
/// config without `[[llm.providers]]` is one entry — `anthropic` when `llm.provider =
/// "anthropic"`, `openai` when `llm.provider = "openai"`, or `auto` with an API key or base URL
/// configured (config or `OPENAI_API_KEY` / `OPENAI_BASE_URL`); else `offline`.
pub fn from_config(c: &crate::config::LlmConfig) -> SharedProvider {
    from_config_with_limits(c, None)
}

/// [`from_config`], with each entry's fleet-wide limits (`requests_per_minute`,
/// `tokens_per_minute`) kept in `pool` (see [`limits`]); breakers on the wall clock.
pub fn from_config_with_limits(
    c: &crate::config::LlmConfig,
    pool: Option<&sqlx::PgPool>,
) -> SharedProvider {
    Arc::new(chain::from_config(
        c,
        pool,
        Arc::new(crate::clock::SystemClock),
    ))
}
