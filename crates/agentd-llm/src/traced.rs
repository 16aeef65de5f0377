//! The span of a provider call, with the OpenTelemetry GenAI semantic-convention attributes:
//! `gen_ai.operation.name`, `gen_ai.provider.name` (and the older `gen_ai.system`),
//! `gen_ai.request.model`, `gen_ai.request.max_tokens`, `gen_ai.response.model`,
//! `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`,
//! `gen_ai.response.finish_reasons`, and `error.type` on a failure. Never the messages, the tool
//! arguments or the answer: what a span holds reaches a collector, and a run's text is a
//! document's text and its personal data.

use super::SharedProvider;
use super::{CompletionRequest, CompletionResponse, FinishReason, LlmError, LlmProvider};
use opentelemetry::{Array, StringValue, Value};
use std::sync::Arc;
use tracing::Instrument;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// A provider whose every call runs in a `gen_ai` client span.
pub struct Traced {
    inner: SharedProvider,
}

impl Traced {
    /// Wraps `inner`.
    pub fn wrap(inner: SharedProvider) -> SharedProvider {
        Arc::new(Self { inner })
    }
}

/// The OpenAI spelling of a finish reason, the values the semantic conventions show.
pub fn finish_reason(f: FinishReason) -> &'static str {
    match f {
        FinishReason::EndTurn => "stop",
        FinishReason::ToolUse => "tool_calls",
        FinishReason::MaxTokens => "length",
        FinishReason::Other => "other",
    }
}

#[async_trait::async_trait]
impl LlmProvider for Traced {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn endpoint(&self, model: &str) -> Option<crate::schema_output::Endpoint<'_>> {
        self.inner.endpoint(model)
    }

    fn model_for<'a>(&'a self, requested: &'a str) -> &'a str {
        self.inner.model_for(requested)
    }

    async fn complete(&self, req: CompletionRequest) -> Result<CompletionResponse, LlmError> {
        let provider = self.inner.name();
        let span = tracing::info_span!(
            "gen_ai.chat",
            otel.name = %format!("chat {}", req.model),
            otel.kind = "client",
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = provider,
            gen_ai.system = provider,
            gen_ai.request.model = %req.model,
            gen_ai.request.max_tokens = req.max_tokens.map(i64::from),
            gen_ai.response.model = Empty,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            error.type = Empty,
            otel.status_code = Empty,
        );
        let result = self.inner.complete(req).instrument(span.clone()).await;
        match &result {
            Ok(resp) => {
                span.record("gen_ai.response.model", resp.model.as_str());
                // As i64 (at most 2^40 each): tracing-opentelemetry writes a u64 as text.
                let (input, output) = resp.usage.split_i64();
                span.record("gen_ai.usage.input_tokens", input);
                span.record("gen_ai.usage.output_tokens", output);
                // A string array, which a tracing field cannot be.
                let reasons = vec![StringValue::from(finish_reason(resp.finish))];
                span.set_attribute(
                    "gen_ai.response.finish_reasons",
                    Value::Array(Array::String(reasons)),
                );
            }
            Err(e) => {
                // The class of failure, not the message (a server's error may quote the input).
                let kind = if e.retryable { "retryable" } else { "fatal" };
                span.record("error.type", kind);
                span.record("otel.status_code", "ERROR");
            }
        }
        result
    }
}
