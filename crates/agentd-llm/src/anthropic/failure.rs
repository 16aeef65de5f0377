//! How a failed attempt is classified, the way Anthropic documents its errors
//! (`{"type": "error", "error": {"type": …, "message": …}}`): retried or not, how long to wait,
//! and the message, with the API key redacted from it.

use super::{AnthropicProvider, PROVIDER};
use crate::LlmError;
use serde_json::Value;
use std::time::Duration;

/// One failed attempt.
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) error: LlmError,
    /// Try again inside this call (retryable, and not a bound that the same request would hit
    /// again).
    pub(super) retry_here: bool,
    /// What the server asked to wait (`retry-after-ms` or `retry-after`), if it did.
    pub(super) retry_after: Option<Duration>,
}

/// Error types whose failure another attempt may not repeat (Anthropic's `error.type`).
fn retryable_type(kind: &str) -> bool {
    matches!(
        kind,
        "overloaded_error" | "api_error" | "rate_limit_error" | "timeout_error"
    )
}

/// Statuses Anthropic's SDKs retry: 408, 409, 429 and every 5xx (529 `overloaded_error`).
pub(super) fn retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429) || status >= 500
}

/// `retry-after-ms`, else `retry-after` in seconds (HTTP dates are not used by the API).
pub(super) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let read = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
    };
    read("retry-after-ms")
        .map(|ms| ms / 1000.0)
        .or_else(|| read("retry-after"))
        .map(|s| Duration::from_secs_f64(s.min(86_400.0)))
}

/// `(error.type, error.message)` of an Anthropic error body, if `v` is one.
pub(super) fn error_in(v: &Value) -> Option<(String, String)> {
    let err = v.get("error").filter(|e| !e.is_null())?;
    let kind = err["type"].as_str().unwrap_or_default().to_string();
    let message = match err {
        Value::String(s) => s.clone(),
        _ => err["message"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| clip(&err.to_string(), 300)),
    };
    Some((kind, message))
}

/// At most `max` characters of `s`.
pub(super) fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]), // checked: `i` is a char boundary of `s`
        None => s.to_string(),
    }
}

impl AnthropicProvider {
    /// A failure whose message has the API key removed; retried here when `retryable`.
    pub(super) fn failure(&self, message: impl Into<String>, retryable: bool) -> Failure {
        let mut message = message.into();
        let key = &self.settings.api_key;
        if key.len() >= 4 {
            message = message.replace(key.as_str(), "[redacted]");
        }
        Failure {
            error: LlmError::new(PROVIDER, message, retryable),
            retry_here: retryable,
            retry_after: None,
        }
    }

    /// A failure retrying cannot cure within this call (a bound the same answer would pass
    /// again), though it is `retryable` for the caller.
    pub(super) fn final_failure(&self, message: impl Into<String>, retryable: bool) -> Failure {
        let mut f = self.failure(message, retryable);
        f.retry_here = false;
        f
    }

    /// A non-2xx answer: its status, the error body's type and message, and what the headers
    /// say about retrying (`x-should-retry` overrides the status, as in Anthropic's SDKs).
    pub(super) fn status_failure(
        &self,
        status: u16,
        headers: &reqwest::header::HeaderMap,
        body: &[u8],
    ) -> Failure {
        let parsed = serde_json::from_slice::<Value>(body).ok();
        let (kind, detail) = match parsed.as_ref().and_then(error_in) {
            Some((kind, message)) => (kind, message),
            None => (
                String::new(),
                clip(&String::from_utf8_lossy(body), 300).trim().to_string(),
            ),
        };
        let should_retry = headers
            .get("x-should-retry")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| match v.trim() {
                "true" => Some(true),
                "false" => Some(false),
                _ => None,
            });
        let retryable = should_retry.unwrap_or_else(|| retryable_status(status));
        let hint = match status {
            401 => " (check llm.api_key or ANTHROPIC_API_KEY)",
            404 if kind.is_empty() || kind == "not_found_error" => {
                " (check llm.base_url or ANTHROPIC_BASE_URL: the API host, e.g. \
                 https://api.anthropic.com, to which /v1/messages is appended; or llm.model)"
            }
            // Not followed (`limits::provider_http_client`, review D10).
            300..=399 => {
                " (a redirect, which is not followed: the request would carry the API key to \
                 wherever it points; set llm.base_url or ANTHROPIC_BASE_URL to the URL it \
                 redirects to)"
            }
            _ => "",
        };
        let kind = if kind.is_empty() {
            String::new()
        } else {
            format!("{kind}: ")
        };
        let mut f = self.failure(
            format!("HTTP {status} from {}: {kind}{detail}{hint}", self.endpoint),
            retryable,
        );
        if retryable {
            f.retry_after = retry_after(headers);
        }
        f
    }

    /// An `error` event in a stream after HTTP 200 (an `overloaded_error` mid-answer). The
    /// message says so, which is how the loop knows the input was spent.
    pub(super) fn event_failure(&self, v: &Value) -> Failure {
        let (kind, message) = error_in(v).unwrap_or_default();
        self.failure(
            format!(
                "error event in the stream after HTTP 200 from {}: {kind}: {message}",
                self.endpoint
            ),
            retryable_type(&kind),
        )
    }

    /// A 200 body that is an error, or not a message at all.
    pub(super) fn body_failure(&self, v: &Value) -> Failure {
        match error_in(v) {
            Some((kind, message)) => self.failure(
                format!(
                    "{} answered with an error: {kind}: {message}",
                    self.endpoint
                ),
                retryable_type(&kind),
            ),
            None => self.failure(
                format!(
                    "{} did not answer with a Messages API message (check llm.base_url or \
                     ANTHROPIC_BASE_URL): {}",
                    self.endpoint,
                    clip(&v.to_string(), 300)
                ),
                false,
            ),
        }
    }

    /// reqwest failed: a timeout or connection failure is retried, a request it cannot build
    /// is not, and a body past `llm.max_response_bytes` is not retried here (the same server
    /// would send the same again; review N15).
    pub(super) fn transport_failure(&self, e: &(dyn std::error::Error + 'static)) -> Failure {
        let chain = crate::error_chain(e);
        if chain.contains(crate::limits::BODY_TOO_LARGE) {
            return self.final_failure(
                format!("the answer from {} was too large: {chain}", self.endpoint),
                false,
            );
        }
        let Some(re) = e.downcast_ref::<reqwest::Error>() else {
            return self.failure(
                format!("the answer from {} broke off: {chain}", self.endpoint),
                true,
            );
        };
        if re.is_builder() {
            self.failure(
                format!(
                    "invalid request to {} (check llm.base_url or ANTHROPIC_BASE_URL): {chain}",
                    self.endpoint
                ),
                false,
            )
        } else if chain.contains("invalid peer certificate") {
            self.failure(
                format!(
                    "TLS: the certificate of {} is not trusted (the system CA store, or \
                     SSL_CERT_FILE / SSL_CERT_DIR, must hold its CA): {chain}",
                    self.endpoint
                ),
                false,
            )
        } else if re.is_connect() {
            self.failure(
                format!("could not connect to {}: {chain}", self.endpoint),
                true,
            )
        } else if re.is_timeout() {
            self.failure(
                format!("timed out talking to {}: {chain}", self.endpoint),
                true,
            )
        } else {
            self.failure(
                format!("HTTP transport error with {}: {chain}", self.endpoint),
                true,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_prefers_milliseconds_and_reads_seconds() {
        let mut h = reqwest::header::HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", "2".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", "1500".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_millis(1500)));
        h.insert("retry-after-ms", "soon".parse().unwrap());
        h.insert("retry-after", "-1".parse().unwrap());
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn statuses_are_retried_as_the_sdks_do() {
        for s in [408, 409, 429, 500, 502, 503, 529] {
            assert!(retryable_status(s), "{s}");
        }
        for s in [400, 401, 403, 404, 413, 422] {
            assert!(!retryable_status(s), "{s}");
        }
    }
}
