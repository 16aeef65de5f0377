//! The span of an API request, when this process exports traces (`crate::telemetry`): a
//! server span named `METHOD /route` (the route's template, never the path's ids or the query),
//! continuing the caller's `traceparent`. A handler that enqueues a job stores the context it
//! should continue with [`job_traceparent`].

use axum::extract::{MatchedPath, Request};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;
use tracing::field::Empty;

use crate::telemetry::propagation;

/// The caller's `traceparent` header, if it is text.
fn incoming(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(propagation::TRACEPARENT)
        .and_then(|v| v.to_str().ok())
}

/// Middleware: runs the request in its span (only while traces are exported).
pub async fn request_span(req: Request, next: Next) -> Response {
    if !crate::telemetry::exporting() {
        return next.run(req).await;
    }
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let method = req.method().as_str().to_string();
    let span = tracing::info_span!(
        "http.request",
        otel.name = %format!("{method} {route}"),
        otel.kind = "server",
        http.request.method = %method,
        http.route = %route,
        http.response.status_code = Empty,
        otel.status_code = Empty,
    );
    propagation::continue_request(&span, incoming(req.headers()));
    let response = next.run(req).instrument(span.clone()).await;
    let status = response.status();
    // As i64: tracing-opentelemetry writes a u64 field as text.
    span.record("http.response.status_code", i64::from(status.as_u16()));
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
    response
}

/// The `traceparent` to store with a job this request enqueues (see
/// [`propagation::for_job`]).
pub fn job_traceparent(headers: &HeaderMap) -> Option<String> {
    propagation::for_job(incoming(headers))
}
