//! The OpenAI-compatible provider: chat completions through async-openai against any
//! OpenAI-compatible base URL (OpenAI, vLLM, Ollama, llama.cpp).
//!
//! What it survives (docs/agent.md, "Real models"): `content: ""` beside `tool_calls`; `id` and
//! `function.name` repeated in every stream delta (the first value wins); an SSE `error` event
//! after a 200; HTTP 500 for model output the server could not parse; servers whose JSON does
//! not match OpenAI's schema exactly (bodies are read leniently as `serde_json::Value`).
//!
//! Retries, in two layers:
//! - async-openai's transport always retries 429, 5xx and connection failures 3 times, honouring
//!   a `Retry-After` in seconds (exponential backoff from 100 ms otherwise). With the features
//!   this crate enables that layer can be neither configured nor turned off.
//! - this adapter retries, up to `max_retries` times with jittered exponential backoff (backon),
//!   the retryable failures the transport does not retry: timeouts, a broken or failed stream,
//!   a body with no choices, transport errors after connecting.
//!
//! Error messages never contain the API key: server-supplied text is redacted before use.

use super::{
    Block, CompletionRequest, CompletionResponse, FinishReason, LlmError, LlmProvider, Message,
    Role, ToolChoice, Usage,
};
use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::types::chat::{
    ChatCompletionMessageToolCall, ChatCompletionMessageToolCalls,
    ChatCompletionRequestAssistantMessage, ChatCompletionRequestAssistantMessageContent,
    ChatCompletionRequestMessage, ChatCompletionRequestSystemMessage,
    ChatCompletionRequestSystemMessageContent, ChatCompletionRequestToolMessage,
    ChatCompletionRequestToolMessageContent, ChatCompletionRequestUserMessage,
    ChatCompletionRequestUserMessageContent, ChatCompletionStreamOptions, ChatCompletionTool,
    ChatCompletionToolChoiceOption, ChatCompletionTools, CreateChatCompletionRequest, FunctionCall,
    FunctionObject, ResponseFormat, ToolChoiceOptions,
};
use backon::{ExponentialBuilder, Retryable};
use futures::StreamExt;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

mod failure;
mod limited;
mod request;
// Public (hidden) for the fuzz targets: `response::assembly`.
#[doc(hidden)]
pub mod response;

use failure::Failure;
use request::*;
use response::*;

const PROVIDER: &str = "openai";

/// How to reach an OpenAI-compatible server.
#[derive(Clone)]
pub struct OpenAiSettings {
    /// API base including the version path, e.g. `https://api.openai.com/v1` or
    /// `http://localhost:11434/v1`; `/chat/completions` is appended.
    pub base_url: String,
    /// Sent as `Authorization: Bearer …`; may be empty for local servers. Never logged.
    pub api_key: String,
    /// The longest one attempt may take, from sending the request to the last byte of the
    /// answer. It also bounds async-openai's built-in 429/5xx retries inside that attempt.
    pub timeout: Duration,
    /// Extra attempts this adapter makes for timeouts and broken streams (see module docs).
    pub max_retries: u32,
    /// Stream the answer (SSE) instead of waiting for one JSON body.
    pub stream: bool,
}

/// Default of [`OpenAiProvider::with_max_stream_bytes`] (`llm.max_stream_bytes`).
pub const DEFAULT_MAX_STREAM_BYTES: usize = 4 << 20;
/// Default of [`OpenAiProvider::with_max_response_bytes`] (`llm.max_response_bytes`).
pub use crate::config::DEFAULT_MAX_RESPONSE_BYTES;

impl std::fmt::Debug for OpenAiSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiSettings")
            .field("base_url", &self.base_url)
            .field("api_key", &"[redacted]")
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("stream", &self.stream)
            .finish()
    }
}

/// The `openai` provider.
pub struct OpenAiProvider {
    client: Client<OpenAIConfig>,
    settings: OpenAiSettings,
    /// `{base_url}/chat/completions`, for error messages.
    endpoint: String,
    /// Most bytes of text and arguments one streamed answer may accumulate; past it the call
    /// fails (a model that never stops must not exhaust memory or the timeout).
    max_stream_bytes: usize,
    /// Most bytes of one response body, streamed or not (the transport fails it past this).
    max_response_bytes: usize,
    /// The fleet-wide limiter every attempt passes, if limits are set.
    limiter: Option<std::sync::Arc<crate::limits::FleetLimiter>>,
}

impl std::fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiProvider")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl OpenAiProvider {
    /// A provider for `settings`. Whitespace around the key (a trailing newline from a file)
    /// is dropped.
    pub fn new(mut settings: OpenAiSettings) -> Self {
        settings.base_url = settings.base_url.trim().trim_end_matches('/').to_string();
        settings.api_key = settings.api_key.trim().to_string();
        let config = OpenAIConfig::new()
            .with_api_base(settings.base_url.clone())
            .with_api_key(settings.api_key.clone());
        let endpoint = format!("{}/chat/completions", settings.base_url);
        let mut p = Self {
            client: Client::with_config(config),
            settings,
            endpoint,
            max_stream_bytes: DEFAULT_MAX_STREAM_BYTES,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            limiter: None,
        };
        // Every attempt goes through our transport (`limited::transport`): the body bound, and
        // the fleet limiter once one is set. `timeout` is enforced per attempt with
        // `tokio::time::timeout`.
        p.client = limited::transport(&p);
        p
    }

    /// The same provider with another bound on one streamed answer.
    pub fn with_max_stream_bytes(mut self, bytes: usize) -> Self {
        self.max_stream_bytes = bytes;
        self
    }

    /// One attempt, bounded by the timeout.
    async fn attempt(
        &self,
        body: &CreateChatCompletionRequest,
    ) -> Result<CompletionResponse, Failure> {
        let call = async {
            if self.settings.stream {
                self.attempt_stream(body.clone()).await
            } else {
                self.attempt_once(body.clone()).await
            }
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
                true,
            )),
        }
    }

    async fn attempt_once(
        &self,
        body: CreateChatCompletionRequest,
    ) -> Result<CompletionResponse, Failure> {
        let fallback_model = body.model.clone();
        let answer = self.client.chat().create(body).await;
        let value = self.answer_json(answer, "the response", false)?;
        if let Some(err) = error_in_body(&value) {
            return Err(self.body_failure(&err, false, "the server answered with an error"));
        }
        let choice = match value
            .get("choices")
            .map(|c| c.as_array().and_then(|c| c.first()))
        {
            Some(Some(choice)) => choice,
            Some(None) => return Err(self.no_choices()),
            // Not a chat completion at all, e.g. a 404 page whose status async-openai dropped.
            None => {
                let err = BodyError::unknown(&value);
                return Err(self.body_failure(&err, false, "the server answered"));
            }
        };
        Ok(Assembled::from_choice(&value, choice).into_response(fallback_model))
    }

    async fn attempt_stream(
        &self,
        mut body: CreateChatCompletionRequest,
    ) -> Result<CompletionResponse, Failure> {
        let fallback_model = body.model.clone();
        body.stream = Some(true);
        body.stream_options = Some(ChatCompletionStreamOptions {
            include_usage: Some(true),
            include_obfuscation: None,
        });
        let mut stream = match self.client.chat().create_stream(body).await {
            Ok(stream) => stream,
            Err(OpenAIError::JSONDeserialize(_, raw)) => {
                // An error body that is not OpenAI's `{"error": {...}}` (vLLM, llama.cpp).
                let value = self.parse_raw(&raw, false)?;
                let err = error_in_body(&value).unwrap_or_else(|| BodyError::unknown(&value));
                return Err(self.body_failure(&err, false, "the server refused the request"));
            }
            Err(e) => return Err(self.map_error(e)),
        };
        let mut acc = Assembled::default();
        let mut chunks = 0usize;
        while let Some(item) = stream.next().await {
            // Chunks that do not fit async-openai's types, including error events, come raw.
            let chunk = self.answer_json(item, "a stream chunk", true)?;
            if let Some(err) = error_in_body(&chunk) {
                return Err(self.body_failure(
                    &err,
                    true,
                    "error event in the stream after HTTP 200",
                ));
            }
            chunks += 1;
            acc.push_chunk(&chunk);
            if acc.bytes() > self.max_stream_bytes {
                return Err(self.failure(
                    format!(
                        "the streamed answer from {} passed llm.max_stream_bytes ({} bytes); \
                         lower llm.max_output_tokens or raise the limit",
                        self.endpoint, self.max_stream_bytes
                    ),
                    false,
                    false,
                ));
            }
        }
        if chunks == 0 {
            return Err(self.failure(
                format!(
                    "the stream from {} ended without any chunk (does the server support \
                     stream: true?)",
                    self.endpoint
                ),
                true,
                true,
            ));
        }
        if !acc.saw_choice {
            return Err(self.no_choices());
        }
        if acc.finish.is_none() {
            return Err(self.failure(
                format!(
                    "the stream from {} ended before the model finished (no finish_reason)",
                    self.endpoint
                ),
                true,
                true,
            ));
        }
        Ok(acc.into_response(fallback_model))
    }

    /// The chat-completions body for `req`.
    fn build_request(
        &self,
        req: &CompletionRequest,
    ) -> Result<CreateChatCompletionRequest, LlmError> {
        let invalid = |m: String| LlmError::new(PROVIDER, m, false);
        let mut messages = Vec::new();
        for (i, msg) in req.messages.iter().enumerate() {
            convert_message(i, msg, &mut messages).map_err(invalid)?;
        }
        let tools: Vec<ChatCompletionTools> = req
            .tools
            .iter()
            .map(|t| {
                ChatCompletionTools::Function(ChatCompletionTool {
                    function: FunctionObject {
                        name: t.name.clone(),
                        description: Some(t.description.clone()).filter(|d| !d.is_empty()),
                        parameters: Some(t.parameters.clone()),
                        strict: t.strict.then_some(true),
                    },
                })
            })
            .collect();
        let response_format = match &req.response_format {
            None => None,
            Some(v) => Some(
                serde_json::from_value::<ResponseFormat>(v.clone()).map_err(|e| {
                    invalid(format!(
                        "response_format is not an OpenAI response_format (expected {{\"type\": \
                     \"json_schema\", \"json_schema\": {{\"name\": …, \"schema\": …}}}}): {e}"
                    ))
                })?,
            ),
        };
        let has_tools = !tools.is_empty();
        let tool_choice = match req.tool_choice {
            ToolChoice::Auto => ToolChoiceOptions::Auto,
            ToolChoice::None => ToolChoiceOptions::None,
            ToolChoice::Required => ToolChoiceOptions::Required,
        };
        Ok(CreateChatCompletionRequest {
            model: req.model.clone(),
            messages,
            max_completion_tokens: req.max_tokens,
            response_format,
            // OpenAI rejects tool_choice / parallel_tool_calls without tools.
            tool_choice: has_tools.then_some(ChatCompletionToolChoiceOption::Mode(tool_choice)),
            parallel_tool_calls: has_tools.then_some(false),
            tools: has_tools.then_some(tools),
            ..Default::default()
        })
    }
}

#[async_trait::async_trait]
impl LlmProvider for OpenAiProvider {
    fn name(&self) -> &str {
        PROVIDER
    }

    fn endpoint(&self, _model: &str) -> Option<crate::schema_output::Endpoint<'_>> {
        Some(crate::schema_output::Endpoint {
            provider: PROVIDER,
            url: &self.settings.base_url,
        })
    }

    async fn complete(&self, req: CompletionRequest) -> Result<CompletionResponse, LlmError> {
        // async-openai would panic building the Authorization header from such a key.
        if self
            .settings
            .api_key
            .bytes()
            .any(|b| !(0x20..=0x7e).contains(&b))
        {
            return Err(LlmError::new(
                PROVIDER,
                "llm.api_key contains characters not allowed in an HTTP header (control or \
                 non-ASCII characters); fix the key",
                false,
            ));
        }
        let body = self.build_request(&req)?;
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(250))
            .with_max_delay(Duration::from_secs(8))
            .with_max_times(self.settings.max_retries as usize)
            .with_jitter();
        (|| self.attempt(&body))
            .retry(backoff)
            .when(|f: &Failure| f.retry_here)
            .notify(|f: &Failure, delay: Duration| {
                tracing::warn!(error = %f.error, ?delay, "openai: retrying");
            })
            .await
            .map_err(|f| f.error)
    }
}
