//! The HTTP of one attempt: the fleet limiter before sending (and a 429 recorded for the
//! fleet), the headers, and the answer read through `llm.max_response_bytes` — one JSON body,
//! or an SSE stream assembled event by event under `llm.max_stream_bytes`.

use super::failure::{Failure, clip};
use super::response::{Assembled, Event};
use super::{API_VERSION, AnthropicProvider};
use crate::limits::{self, BodyChunk, LIMITER_UNREACHABLE};
use eventsource_stream::{EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use serde_json::Value;

/// Most bytes of an error body read (the message is all that is used).
const MAX_ERROR_BODY: usize = 64 << 10;

impl AnthropicProvider {
    /// Sends `body`; a 2xx response comes back to be read, anything else is the failure.
    pub(super) async fn send(&self, body: &Value) -> Result<reqwest::Response, Failure> {
        let bytes = serde_json::to_vec(body)
            .map_err(|e| self.failure(format!("could not encode the request: {e}"), false))?;
        if let Some(limiter) = &self.limiter {
            limiter
                .acquire(limits::estimate_tokens(&bytes))
                .await
                .map_err(|e| {
                    // Not sent: the fleet limiter's database did not answer (review N5).
                    self.failure(
                        format!(
                            "request to {} not sent: provider limit of {}: {LIMITER_UNREACHABLE}: {e}",
                            self.endpoint,
                            limiter.key()
                        ),
                        true,
                    )
                })?;
        }
        let mut key = reqwest::header::HeaderValue::from_str(&self.settings.api_key)
            .map_err(|_| self.failure("the API key is not a valid header value", false))?;
        key.set_sensitive(true);
        let accept = if self.settings.stream {
            "text/event-stream"
        } else {
            "application/json"
        };
        let response = self
            .client
            .post(&self.endpoint)
            .header("x-api-key", key)
            .header("anthropic-version", API_VERSION)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, accept)
            .body(bytes)
            .send()
            .await
            .map_err(|e| self.transport_failure(&e))?;
        let status = response.status().as_u16();
        if status == 429
            && let Some(limiter) = &self.limiter
        {
            let wait = super::failure::retry_after(response.headers())
                .unwrap_or(std::time::Duration::from_secs(1));
            if let Err(e) = limiter.rate_limited(wait).await {
                tracing::warn!(error = %e, endpoint = limiter.key(), "could not record a 429 for the fleet");
            }
        }
        if response.status().is_success() {
            return Ok(response);
        }
        let headers = response.headers().clone();
        // The error body, bounded; what did not arrive is left out of the message.
        let mut raw = Vec::new();
        let mut chunks = response.bytes_stream();
        while let Some(Ok(chunk)) = chunks.next().await {
            let room = MAX_ERROR_BODY.saturating_sub(raw.len()).min(chunk.len());
            raw.extend_from_slice(chunk.get(..room).unwrap_or_default());
            if raw.len() >= MAX_ERROR_BODY {
                break;
            }
        }
        Err(self.status_failure(status, &headers, &raw))
    }

    /// The body of `response`, bounded.
    fn body_of(
        &self,
        response: reqwest::Response,
    ) -> Result<impl Stream<Item = BodyChunk> + Send + 'static + use<>, Failure> {
        limits::bounded_body(response, self.settings.max_response_bytes).map_err(|m| {
            self.final_failure(
                format!("the answer from {} was too large: {m}", self.endpoint),
                false,
            )
        })
    }

    /// A non-streamed answer.
    pub(super) async fn read_body(
        &self,
        response: reqwest::Response,
    ) -> Result<Assembled, Failure> {
        let mut chunks = Box::pin(self.body_of(response)?);
        let mut raw = Vec::new();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|e| self.transport_failure(e.as_ref()))?;
            raw.extend_from_slice(&chunk);
        }
        let value: Value = serde_json::from_slice(&raw).map_err(|_| {
            self.failure(
                format!(
                    "{} sent a body that is not JSON: {}",
                    self.endpoint,
                    clip(&String::from_utf8_lossy(&raw), 300)
                ),
                false,
            )
        })?;
        if value["type"] == "error" || value.get("error").is_some_and(|e| !e.is_null()) {
            return Err(self.body_failure(&value));
        }
        Assembled::from_body(&value).ok_or_else(|| self.body_failure(&value))
    }

    /// A streamed answer, event by event.
    pub(super) async fn read_stream(
        &self,
        response: reqwest::Response,
    ) -> Result<Assembled, Failure> {
        let mut events = Box::pin(self.body_of(response)?.eventsource());
        let mut acc = Assembled::default();
        while let Some(item) = events.next().await {
            let event = match item {
                Ok(event) => event,
                Err(EventStreamError::Transport(e)) => {
                    let mut f = self.transport_failure(e.as_ref());
                    if !f.error.message.contains(limits::BODY_TOO_LARGE) {
                        f = self.failure(
                            format!(
                                "the stream from {} broke after HTTP 200: {}",
                                self.endpoint, f.error.message
                            ),
                            true,
                        );
                    }
                    return Err(f);
                }
                Err(e) => {
                    return Err(self.failure(
                        format!(
                            "{} sent an unparseable stream after HTTP 200: {e}",
                            self.endpoint
                        ),
                        true,
                    ));
                }
            };
            if event.data.trim().is_empty() {
                continue;
            }
            let data: Value = serde_json::from_str(&event.data).map_err(|_| {
                self.failure(
                    format!(
                        "{} sent an unparseable stream event after HTTP 200: {}",
                        self.endpoint,
                        clip(&event.data, 300)
                    ),
                    true,
                )
            })?;
            if let Event::Error = acc.push_event(&data) {
                return Err(self.event_failure(&data));
            }
            if acc.bytes() > self.settings.max_stream_bytes {
                return Err(self.final_failure(
                    format!(
                        "the streamed answer from {} passed llm.max_stream_bytes ({} bytes); \
                         lower llm.max_output_tokens or raise the limit",
                        self.endpoint, self.settings.max_stream_bytes
                    ),
                    false,
                ));
            }
        }
        if acc.events == 0 {
            return Err(self.failure(
                format!(
                    "the stream from {} ended without any event (does the server speak the \
                     Messages API's streaming?)",
                    self.endpoint
                ),
                true,
            ));
        }
        if !acc.finished() {
            return Err(self.failure(
                format!(
                    "the stream from {} ended before the model finished (no message_delta \
                     with a stop_reason)",
                    self.endpoint
                ),
                true,
            ));
        }
        Ok(acc)
    }
}
