//! The web console (`agentd serve`, `/`): a small static bundle — HTML, vanilla JS, CSS —
//! compiled into the binary and served by agentd (no Node toolchain, works offline). The page
//! uses only the public `/v1` API with the API key the person signs in with (kept in the tab's
//! `sessionStorage`). Every value is put on the page as text (`textContent`, never `innerHTML`),
//! and a Content-Security-Policy forbids inline scripts and foreign origins as a second guard.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The bundle: file name, content type, contents.
pub const ASSETS: [(&str, &str, &str); 14] = [
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("assets/index.html"),
    ),
    (
        "console.css",
        "text/css; charset=utf-8",
        include_str!("assets/console.css"),
    ),
    (
        "core.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/core.js"),
    ),
    (
        "queue.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/queue.js"),
    ),
    (
        "documents.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/documents.js"),
    ),
    (
        "approvals.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/approvals.js"),
    ),
    (
        "runs.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/runs.js"),
    ),
    (
        "jobs.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/jobs.js"),
    ),
    (
        "usage.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/usage.js"),
    ),
    (
        "suggestions.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/suggestions.js"),
    ),
    (
        "settings.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/settings.js"),
    ),
    (
        "webhooks.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/webhooks.js"),
    ),
    (
        "keys.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/keys.js"),
    ),
    (
        "start.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/start.js"),
    ),
];

/// Only this origin, no inline script or style, no frames.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

fn asset(name: &str) -> Response {
    let Some(&(_, ctype, body)) = ASSETS.iter().find(|(n, _, _)| *n == name) else {
        return (StatusCode::NOT_FOUND, "no such console file\n").into_response();
    };
    let mut res = body.into_response();
    let h = res.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    res
}

/// `/` and `/console/{file}` (no key needed: the bundle holds no data).
pub fn router() -> Router {
    Router::new()
        .route("/", get(|| async { asset("index.html") }))
        .route(
            "/console/{file}",
            get(|Path(file): Path<String>| async move { asset(&file) }),
        )
}
