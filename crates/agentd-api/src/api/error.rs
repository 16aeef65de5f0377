//! RFC 9457 problem details: every error the API returns, including what the extractors
//! reject (malformed JSON, wrong types, unknown fields, oversize bodies, bad ids and cursors),
//! is `application/problem+json` with `type`, `title`, `status`, `detail` and, for bad input,
//! the `field` at fault.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// An error answer.
#[derive(Debug, Clone)]
pub struct Problem {
    /// HTTP status.
    pub status: StatusCode,
    /// A short slug; `type` is `urn:agentd:problem:<slug>`.
    pub slug: &'static str,
    /// What happened, for a person.
    pub detail: String,
    /// The input at fault (a JSON path, query parameter, header or `id`).
    pub field: Option<String>,
    /// Members added to the body (e.g. `changes` of a stale approval).
    pub extra: Option<Value>,
}

impl Problem {
    /// A problem with this status, slug and detail.
    pub fn new(status: StatusCode, slug: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            slug,
            detail: detail.into(),
            field: None,
            extra: None,
        }
    }

    /// Names the input at fault.
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// Adds members to the body.
    pub fn extra(mut self, extra: Value) -> Self {
        self.extra = Some(extra);
        self
    }

    /// 400: the request cannot be read (malformed JSON, bad query, bad id).
    pub fn bad_request(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad-request", detail).field(field)
    }

    /// 422: well-formed but invalid (wrong type, unknown field, failed validation).
    pub fn invalid(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid-input", detail).field(field)
    }

    /// 404 for ids of other orgs too: never confirm that something exists elsewhere.
    pub fn not_found(what: &str, id: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not-found",
            format!("no {what} with id {id}"),
        )
    }

    /// 409: the resource is not in a state that allows this.
    pub fn conflict(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", detail)
    }

    /// 500: logged in full, answered in general terms.
    pub fn internal(err: impl std::fmt::Display) -> Self {
        tracing::error!(error = %err, "API request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; the server log has the cause",
        )
    }

    fn title(&self) -> &'static str {
        self.status.canonical_reason().unwrap_or("Error")
    }

    /// The body as JSON.
    pub fn body(&self) -> Value {
        let mut body = json!({
            "type": format!("urn:agentd:problem:{}", self.slug),
            "title": self.title(),
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        if let Some(f) = &self.field {
            body["field"] = json!(f);
        }
        if let Some(Value::Object(extra)) = &self.extra {
            for (k, v) in extra {
                body[k] = v.clone();
            }
        }
        body
    }
}

/// The body of a [`Problem`] as the OpenAPI document describes it (`Problem`, content type
/// `application/problem+json`); [`Problem::body`] writes it. Some problems add members (a stale
/// approval's `changes` and `approval`, a refused transition's `state`), so others may appear.
#[derive(utoipa::ToSchema)]
#[schema(as = Problem)]
#[allow(dead_code)] // Only its schema is used.
pub struct ProblemBody {
    /// `urn:agentd:problem:<slug>`, e.g. `urn:agentd:problem:invalid-input`.
    #[schema(pattern = "^urn:agentd:problem:[a-z-]+$")]
    r#type: String,
    /// The status's reason phrase, e.g. `Unprocessable Entity`.
    title: String,
    /// The HTTP status.
    #[schema(minimum = 400, maximum = 599)]
    status: u16,
    /// What happened, for a person.
    detail: String,
    /// The input at fault: a JSON path of the body, a query parameter, a header or `id`.
    field: Option<String>,
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let bytes = serde_json::to_vec(&self.body()).unwrap_or_default();
        let mut res = (self.status, bytes).into_response();
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if self.status == StatusCode::UNAUTHORIZED {
            res.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        res
    }
}

impl Problem {
    /// 503 for a request refused by the API's limits (review L11): over the concurrency limit,
    /// or not answered within the request timeout.
    pub fn from_limit(e: &tower::BoxError, timeout: std::time::Duration) -> Response {
        if e.is::<tower::timeout::error::Elapsed>() {
            return Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "timeout",
                format!(
                    "the request was not answered within {} s (api.request_timeout_secs); the handler was stopped and what it had not committed is rolled back; retry with the same Idempotency-Key",
                    timeout.as_secs()
                ),
            )
            .into_response();
        }
        let mut res = Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded",
            "the server is handling as many requests as it takes (api.max_concurrent_requests); retry after a second",
        )
        .into_response();
        res.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        res
    }
}

impl Problem {
    /// 503 for an upload while `api.max_concurrent_uploads` are handled (review D8).
    pub fn uploads_full() -> Response {
        let mut res = Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded",
            "the server is reading as many uploads at once as it takes (api.max_concurrent_uploads); retry after a second",
        )
        .into_response();
        res.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        res
    }
}

impl Problem {
    /// 429 for a request past a rate of `api.*_per_minute_*` (`rate`), with `Retry-After`.
    pub fn rate_limited(l: &super::rate::Limited) -> Response {
        let secs = l.retry_after.as_secs().max(1);
        let mut res = Problem::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate-limited",
            format!(
                "more than {} requests a minute ({}); retry after {secs} s",
                l.per_minute, l.limit
            ),
        )
        .into_response();
        if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
            res.headers_mut().insert(header::RETRY_AFTER, v);
        }
        res
    }
}

impl From<sqlx::Error> for Problem {
    fn from(e: sqlx::Error) -> Self {
        Problem::internal(e)
    }
}

impl From<anyhow::Error> for Problem {
    fn from(e: anyhow::Error) -> Self {
        Problem::internal(format!("{e:#}"))
    }
}

impl From<crate::queue::QueueError> for Problem {
    fn from(e: crate::queue::QueueError) -> Self {
        match e {
            crate::queue::QueueError::Invalid(m) => Problem::invalid("kind", m),
            crate::queue::QueueError::Db(e) => Problem::internal(e),
        }
    }
}

/// A JSON answer with a status.
pub fn json_response(status: StatusCode, body: &impl serde::Serialize) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => {
            let mut res = (status, bytes).into_response();
            res.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            res
        }
        Err(e) => Problem::internal(e).into_response(),
    }
}

/// What a handler returns.
pub type ApiResult = Result<Response, Problem>;

/// 200 with a JSON body.
pub fn ok(body: &impl serde::Serialize) -> ApiResult {
    Ok(json_response(StatusCode::OK, body))
}
