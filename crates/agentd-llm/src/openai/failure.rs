//! How a failed attempt is classified: retryable or not, retried here or already retried by
//! async-openai's transport, with the API key redacted from every message.

use super::response::{BodyError, clip, error_in_body};
use super::{LlmError, OpenAiProvider, PROVIDER};
use crate::error_chain;
use async_openai::error::OpenAIError;
use serde_json::Value;

/// One failed attempt.
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) error: LlmError,
    /// Retry inside this adapter. False when async-openai's transport already retried it (429,
    /// 5xx, connect errors) or when retrying cannot help.
    pub(super) retry_here: bool,
}

impl OpenAiProvider {
    /// A failure whose message has the API key removed.
    pub(super) fn failure(
        &self,
        message: impl Into<String>,
        retryable: bool,
        retry_here: bool,
    ) -> Failure {
        let mut message = message.into();
        let key = &self.settings.api_key;
        if key.len() >= 4 {
            message = message.replace(key.as_str(), "[redacted]");
        }
        Failure {
            error: LlmError::new(PROVIDER, message, retryable),
            retry_here: retryable && retry_here,
        }
    }

    pub(super) fn no_choices(&self) -> Failure {
        self.failure(
            format!("the response from {} had no choices", self.endpoint),
            true,
            true,
        )
    }

    /// What async-openai answered (`what`: the response, or a stream chunk) as JSON: the typed
    /// value re-encoded, or the raw body it could not type (error bodies and events included),
    /// or the failure.
    pub(super) fn answer_json<T: serde::Serialize>(
        &self,
        answer: Result<T, OpenAIError>,
        what: &str,
        in_stream: bool,
    ) -> Result<Value, Failure> {
        match answer {
            Ok(typed) => serde_json::to_value(&typed).map_err(|e| {
                self.failure(format!("could not re-encode {what}: {e}"), false, false)
            }),
            Err(OpenAIError::JSONDeserialize(_, raw)) => self.parse_raw(&raw, in_stream),
            Err(e) => Err(self.map_error(e)),
        }
    }

    /// A body async-openai could not type: JSON to read leniently, or an error.
    pub(super) fn parse_raw(&self, raw: &str, in_stream: bool) -> Result<Value, Failure> {
        serde_json::from_str(raw).map_err(|_| {
            let what = if in_stream {
                "an unparseable stream event after HTTP 200"
            } else {
                "a body that is not JSON"
            };
            self.failure(
                format!("{} sent {what}: {}", self.endpoint, clip(raw, 300)),
                in_stream,
                in_stream,
            )
        })
    }

    pub(super) fn body_failure(&self, err: &BodyError, in_stream: bool, what: &str) -> Failure {
        let retryable = err.retryable(in_stream);
        let lower = err.message.to_lowercase();
        // The model's output could not be parsed: the loop retries once with a corrective hint
        // (a verbatim retry mostly fails the same way).
        let unparsed = lower.contains("pars") || lower.contains("format");
        let message = match err.status {
            Some(status) if !in_stream => {
                format!("HTTP {status} from {}: {}", self.endpoint, err.message)
            }
            Some(status) => format!(
                "{what} from {} (code {status}): {}",
                self.endpoint, err.message
            ),
            None => format!("{what} from {}: {}", self.endpoint, err.message),
        };
        self.failure(message, retryable, retryable && !unparsed)
    }

    pub(super) fn map_error(&self, err: OpenAIError) -> Failure {
        match err {
            OpenAIError::ApiError(resp) => {
                let status = resp.status_code.as_u16();
                let detail = if resp.status_code.is_server_error() {
                    // async-openai keeps a 5xx body verbatim: read its message if it is JSON.
                    serde_json::from_str::<Value>(&resp.api_error.message)
                        .ok()
                        .and_then(|v| error_in_body(&v))
                        .map(|e| e.message)
                        .unwrap_or_else(|| clip(&resp.api_error.message, 300))
                } else {
                    resp.api_error.to_string()
                };
                let quota = resp.api_error.r#type.as_deref() == Some("insufficient_quota")
                    || resp.api_error.code.as_deref() == Some("insufficient_quota");
                let retryable = (status == 429 && !quota) || status == 408 || status >= 500;
                let after = if retryable && status != 408 {
                    " after retries"
                } else {
                    ""
                };
                let lower = detail.to_lowercase();
                let hint =
                    if status >= 500 && (lower.contains("parse") || lower.contains("parsing")) {
                        " (the server could not parse the model's output, e.g. a malformed tool \
                     call; another attempt may succeed)"
                    } else {
                        ""
                    };
                self.failure(
                    format!(
                        "HTTP {} from {}{after}: {detail}{hint}",
                        resp.status_code, self.endpoint
                    ),
                    retryable,
                    status == 408,
                )
            }
            OpenAIError::Reqwest(e) => {
                let chain = error_chain(&e);
                if chain.contains(crate::limits::BODY_TOO_LARGE) {
                    // The same server would send the same again: not retried (review N15).
                    self.failure(
                        format!("the answer from {} was too large: {chain}", self.endpoint),
                        false,
                        false,
                    )
                } else if e.is_builder() {
                    self.failure(
                        format!(
                            "invalid request to {} (check llm.base_url): {chain}",
                            self.endpoint
                        ),
                        false,
                        false,
                    )
                } else if e.is_timeout() {
                    self.failure(
                        format!("timed out talking to {}: {chain}", self.endpoint),
                        true,
                        true,
                    )
                } else if chain.contains("invalid peer certificate") {
                    // rustls refused the server's certificate: retrying cannot fix that.
                    self.failure(
                        format!(
                            "TLS: the certificate of {} is not trusted (the system CA store, or \
                             SSL_CERT_FILE / SSL_CERT_DIR, must hold its CA): {chain}",
                            self.endpoint
                        ),
                        false,
                        false,
                    )
                } else if e.is_connect() {
                    self.failure(
                        format!(
                            "could not connect to {} after retries: {chain}",
                            self.endpoint
                        ),
                        true,
                        false,
                    )
                } else {
                    self.failure(
                        format!("HTTP transport error with {}: {chain}", self.endpoint),
                        true,
                        true,
                    )
                }
            }
            OpenAIError::StreamError(e) => self.failure(
                format!(
                    "the stream from {} broke after HTTP 200: {e}",
                    self.endpoint
                ),
                true,
                true,
            ),
            OpenAIError::JSONDeserialize(_, raw) => self.failure(
                format!(
                    "{} sent an unexpected body: {}",
                    self.endpoint,
                    clip(&raw, 300)
                ),
                false,
                false,
            ),
            OpenAIError::InvalidArgument(m) if m.contains(crate::limits::BODY_TOO_LARGE) => {
                self.failure(format!("{}: {m}", self.endpoint), false, false)
            }
            OpenAIError::InvalidArgument(m) if m.contains(crate::limits::REDIRECT_NOT_FOLLOWED) => {
                // A 3xx: the same endpoint answers the same again (review D10).
                self.failure(format!("{m} (from {})", self.endpoint), false, false)
            }
            OpenAIError::InvalidArgument(m) if m.contains(crate::limits::LIMITER_UNREACHABLE) => {
                // Not sent: the fleet limiter's database did not answer. Retried here with
                // backoff, then by the job (review N5).
                self.failure(
                    format!("request to {} not sent: {m}", self.endpoint),
                    true,
                    true,
                )
            }
            other => self.failure(
                format!("request to {} failed: {other}", self.endpoint),
                false,
                false,
            ),
        }
    }
}
