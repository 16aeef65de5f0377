//! The `anthropic` provider: Anthropic's Messages API (`POST {base}/v1/messages`, headers
//! `x-api-key` and `anthropic-version: 2023-06-01`), streamed (SSE) or not, spoken natively
//! with reqwest rather than through an OpenAI-compatible shim (issue 32, item 1).
//!
//! - **Request** (`request.rs`): system messages become the top-level `system`; tool results go
//!   back as `tool_result` blocks in user turns; `max_tokens` is always sent (the API requires
//!   it); `tool_choice` maps auto / any (required) / none; the stable prefix (tool definitions,
//!   system prompt) carries `cache_control: {"type": "ephemeral"}`. An extraction request (a
//!   `response_format` JSON Schema and no tools) is asked the Anthropic way: one forced tool
//!   whose `input_schema` is the schema, its input handed back as the JSON text the caller
//!   expects.
//! - **Answer** (`response.rs`): `text` and `tool_use` blocks, from one body or from the stream's
//!   `content_block_*` events (`text_delta`, `input_json_delta`); `stop_reason` mapped; usage
//!   with cache writes and reads counted as input (they are prompt tokens the call processed).
//! - **Failures** (`failure.rs`): retried as Anthropic's SDKs do — 408, 409, 429, 5xx (529
//!   `overloaded_error` included) and connection errors, or as an `x-should-retry` header says;
//!   a `retry-after(-ms)` of at most [`MAX_RETRY_AFTER`] is waited out, a longer one ends the
//!   call (retryable: the job comes back later). 400, 401, 403, 404, 413 are not retried.
//! - **Transport** (`transport.rs`): the fleet limiter (`llm::limits`) before every attempt and a
//!   429 recorded for the fleet; every body read through `llm.max_response_bytes`.
//!
//! Redaction of personal data, metering and budgets wrap every provider alike (`llm::redacting`,
//! `agent::metering`): this module sees only what already passed them. Error messages never
//! contain the API key.

mod failure;
mod request;
#[doc(hidden)]
pub mod response;
mod transport;

use super::{CompletionRequest, CompletionResponse, LlmError, LlmProvider};
use crate::limits::FleetLimiter;
use failure::Failure;
use std::sync::Arc;
use std::time::Duration;

const PROVIDER: &str = "anthropic";

/// The `anthropic-version` header every request carries.
pub const API_VERSION: &str = "2023-06-01";

/// Where Anthropic's SDKs send requests when `ANTHROPIC_BASE_URL` is unset.
pub use crate::config::ANTHROPIC_DEFAULT_BASE_URL as DEFAULT_BASE_URL;

/// The longest `retry-after` waited out inside one call (what Anthropic's SDKs wait at most);
/// a longer one fails the call as retryable and the job's own backoff takes over.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// `max_tokens` when a request names none (the Messages API requires one).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// How to reach one Anthropic endpoint: what a provider entry of kind `anthropic` holds.
#[derive(Clone)]
pub struct AnthropicSettings {
    /// The API host, as `ANTHROPIC_BASE_URL` (e.g. `https://api.anthropic.com`);
    /// `/v1/messages` is appended (only `/messages` when it already ends in `/v1`).
    pub base_url: String,
    /// Sent as `x-api-key`. Never logged, never in an error message.
    pub api_key: String,
    /// The longest one attempt may take, from sending to the last byte of the answer.
    pub timeout: Duration,
    /// Extra attempts after a retryable failure (see the module docs).
    pub max_retries: u32,
    /// Stream the answer (SSE) instead of waiting for one JSON body.
    pub stream: bool,
    /// Most bytes of text and tool input one streamed answer may accumulate
    /// (`llm.max_stream_bytes`): a model that never stops fails the call.
    pub max_stream_bytes: usize,
    /// Most bytes of one raw response body, JSON or SSE (`llm.max_response_bytes`).
    pub max_response_bytes: usize,
}

impl std::fmt::Debug for AnthropicSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicSettings")
            .field("base_url", &self.base_url)
            .field("api_key", &"[redacted]")
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("stream", &self.stream)
            .field("max_stream_bytes", &self.max_stream_bytes)
            .field("max_response_bytes", &self.max_response_bytes)
            .finish()
    }
}

impl AnthropicSettings {
    /// The settings of `llm.*`: `llm.base_url`, else `ANTHROPIC_BASE_URL`, else
    /// [`DEFAULT_BASE_URL`]; `llm.api_key`, else `ANTHROPIC_API_KEY`. `env` reads one
    /// environment variable (the process environment in [`from_config`]).
    pub fn from_config(c: &crate::config::LlmConfig, env: impl Fn(&str) -> Option<String>) -> Self {
        let (base_url, api_key) = c.anthropic_endpoint(env);
        AnthropicSettings {
            base_url,
            api_key,
            timeout: Duration::from_secs(c.request_timeout_secs),
            max_retries: c.max_retries,
            stream: c.stream,
            max_stream_bytes: c.max_stream_bytes,
            max_response_bytes: c.max_response_bytes,
        }
    }
}

/// The `anthropic` provider.
pub struct AnthropicProvider {
    settings: AnthropicSettings,
    /// `{base_url}/v1/messages`: where requests go, and what error messages name.
    endpoint: String,
    client: reqwest::Client,
    /// The fleet-wide limiter every attempt passes, if limits are set.
    limiter: Option<Arc<FleetLimiter>>,
}

impl std::fmt::Debug for AnthropicProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicProvider")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl AnthropicProvider {
    /// A provider for `settings`. Whitespace around the key and the URL is dropped.
    pub fn new(mut settings: AnthropicSettings) -> Self {
        settings.base_url = settings.base_url.trim().trim_end_matches('/').to_string();
        settings.api_key = settings.api_key.trim().to_string();
        let endpoint = if settings.base_url.ends_with("/v1") {
            format!("{}/messages", settings.base_url)
        } else {
            format!("{}/v1/messages", settings.base_url)
        };
        Self {
            settings,
            endpoint,
            client: crate::limits::provider_http_client(),
            limiter: None,
        }
    }

    /// Sends every attempt, retries included, through the fleet-wide `limiter`.
    pub fn with_limiter(mut self, limiter: Arc<FleetLimiter>) -> Self {
        self.limiter = Some(limiter);
        self
    }

    /// The URL requests are sent to.
    pub fn messages_url(&self) -> &str {
        &self.endpoint
    }

    /// A key that cannot be sent, or no key for Anthropic's own API: refused before sending.
    fn check_key(&self) -> Result<(), LlmError> {
        let key = &self.settings.api_key;
        if key.bytes().any(|b| !(0x20..=0x7e).contains(&b)) {
            return Err(LlmError::new(
                PROVIDER,
                "the Anthropic API key (llm.api_key or ANTHROPIC_API_KEY) contains characters \
                 not allowed in an HTTP header (control or non-ASCII characters); fix the key",
                false,
            ));
        }
        if key.is_empty() && self.settings.base_url == DEFAULT_BASE_URL {
            return Err(LlmError::new(
                PROVIDER,
                "no Anthropic API key: set ANTHROPIC_API_KEY or llm.api_key",
                false,
            ));
        }
        Ok(())
    }

    /// One attempt, bounded by the timeout.
    async fn attempt(&self, plan: &request::Plan) -> Result<CompletionResponse, Failure> {
        let call = async {
            let response = self.send(&plan.body).await?;
            let assembled = if self.settings.stream {
                self.read_stream(response).await?
            } else {
                self.read_body(response).await?
            };
            Ok(assembled.into_response(&plan.model, plan.extraction.as_ref()))
        };
        match tokio::time::timeout(self.settings.timeout, call).await {
            Ok(result) => result,
            Err(_) => Err(self.failure(
                format!(
                    "timed out after {:?} waiting for {} (raise llm.request_timeout_secs if the \
                     model is slow)",
                    self.settings.timeout, self.endpoint
                ),
                true,
            )),
        }
    }
}

/// Backoff before retry `n` (0-based) without a `retry-after`: 0.5 s doubling to 8 s, with up
/// to a quarter of jitter (as Anthropic's SDKs).
fn backoff(n: u32) -> Duration {
    let base = 0.5 * 2f64.powi(n.min(5) as i32);
    let base = base.min(8.0);
    let jitter = 1.0 - rand::random::<f64>() * 0.25;
    Duration::from_secs_f64(base * jitter)
}

#[async_trait::async_trait]
impl LlmProvider for AnthropicProvider {
    fn name(&self) -> &str {
        PROVIDER
    }

    /// None: the Messages API takes no OpenAI `response_format`, so `llm.constrained_calls =
    /// "auto"` stays off here. A round that requires a call is already constrained by
    /// `tool_choice: {"type": "any"}`, and an extraction by its forced tool.
    fn endpoint(&self, _model: &str) -> Option<crate::schema_output::Endpoint<'_>> {
        None
    }

    async fn complete(&self, req: CompletionRequest) -> Result<CompletionResponse, LlmError> {
        self.check_key()?;
        let plan = request::build(&req, self.settings.stream)
            .map_err(|m| LlmError::new(PROVIDER, m, false))?;
        let mut retries = 0u32;
        loop {
            let f = match self.attempt(&plan).await {
                Ok(resp) => return Ok(resp),
                Err(f) => f,
            };
            if !f.retry_here || retries >= self.settings.max_retries {
                return Err(f.error);
            }
            let delay = match f.retry_after {
                Some(wait) if wait > MAX_RETRY_AFTER => {
                    let mut e = f.error;
                    e.message = format!(
                        "{} (the server asks to wait {wait:?}, longer than the {MAX_RETRY_AFTER:?} \
                         waited inside one call)",
                        e.message
                    );
                    return Err(e);
                }
                Some(wait) => wait,
                None => backoff(retries),
            };
            tracing::warn!(error = %f.error, ?delay, "anthropic: retrying");
            tokio::time::sleep(delay).await;
            retries += 1;
        }
    }
}

/// The provider `llm.*` configures (`llm.provider = "anthropic"`), reading
/// `ANTHROPIC_API_KEY` / `ANTHROPIC_BASE_URL` from the process environment, with the fleet
/// limits of `llm.requests_per_minute` / `llm.tokens_per_minute` kept in `pool` when given.
pub fn from_config(c: &crate::config::LlmConfig, pool: Option<&sqlx::PgPool>) -> AnthropicProvider {
    let settings = AnthropicSettings::from_config(c, |k| std::env::var(k).ok());
    let key = crate::limits::endpoint_key(&settings.base_url);
    let mut p = AnthropicProvider::new(settings);
    if let Some(limiter) = pool.and_then(|pool| {
        FleetLimiter::with_org_share(
            pool.clone(),
            &key,
            c.requests_per_minute,
            c.tokens_per_minute,
            c.org_share_percent,
        )
    }) {
        p = p.with_limiter(limiter);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_come_from_the_config_then_the_sdk_variables() {
        let mut c = crate::config::Config::defaults().llm;
        let env = |k: &str| match k {
            "ANTHROPIC_API_KEY" => Some("sk-ant-env".to_string()),
            "ANTHROPIC_BASE_URL" => Some("http://proxy:8080".to_string()),
            _ => None,
        };
        let s = AnthropicSettings::from_config(&c, env);
        assert_eq!(
            (s.base_url.as_str(), s.api_key.as_str()),
            ("http://proxy:8080", "sk-ant-env")
        );
        let s = AnthropicSettings::from_config(&c, |_| None);
        assert_eq!(
            (s.base_url.as_str(), s.api_key.as_str()),
            (DEFAULT_BASE_URL, "")
        );
        c.base_url = "https://gw.example/anthropic/".into();
        c.api_key = "sk-ant-file".into();
        let s = AnthropicSettings::from_config(&c, env);
        assert_eq!(s.api_key, "sk-ant-file");
        let p = AnthropicProvider::new(s);
        assert_eq!(p.messages_url(), "https://gw.example/anthropic/v1/messages");
        assert!(!format!("{p:?}").contains("sk-ant-file"));
        c.base_url = "http://127.0.0.1:9/v1".into();
        let p = AnthropicProvider::new(AnthropicSettings::from_config(&c, env));
        assert_eq!(p.messages_url(), "http://127.0.0.1:9/v1/messages");
    }

    #[test]
    fn backoff_doubles_to_eight_seconds() {
        assert!(
            backoff(0) <= Duration::from_millis(500) && backoff(0) >= Duration::from_millis(375)
        );
        assert!(backoff(9) <= Duration::from_secs(8) && backoff(9) >= Duration::from_secs(6));
    }
}
