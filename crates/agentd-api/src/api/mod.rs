//! The HTTP API (`agentd serve`): JSON over `/v1`, every route scoped to the org of the
//! caller's API key, errors as RFC 9457 problem details, keyset pagination, and an OpenAPI 3.1
//! document generated from the handlers at `/v1/openapi.json`. One file per resource group;
//! SQL stays in `store/` (`api_keys`, `api_reads`).

pub mod acts;
mod also_found;
mod approvals;
mod artifacts;
pub mod auth;
mod console_routes;
mod documents;
pub mod error;
pub mod events;
pub mod extract;
mod forks;
mod jobs;
mod keys;
mod listen;
pub mod openapi;
mod operate;
mod provider_key;
pub mod rate;
mod reads;
mod settings;
mod suggestions;
mod trace;
mod webhooks;

use crate::app::App;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::middleware;
use axum::routing::{get, post};
use error::Problem;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub use auth::{Role, create_key, hash_key};
pub use openapi::ApiDoc;

/// What every handler gets.
#[derive(Clone)]
pub struct ApiState {
    pub app: App,
    /// Wakes event streams (one LISTEN per process).
    pub events: events::EventWaker,
    /// Cancelled when the server stops: open event streams end.
    pub shutdown: CancellationToken,
    /// Request rates per key and org, refused tokens per source (`rate`).
    pub limits: Arc<rate::RateLimits>,
    /// Tokens refused and accepted lately, by hash (`auth`).
    pub tokens: Arc<auth::Tokens>,
    /// Uploads handled at once (`api.max_concurrent_uploads`, review D8).
    pub uploads: Arc<tokio::sync::Semaphore>,
}

/// Body limit of every route but document upload.
pub const MAX_BODY: usize = 64 * 1024;

async fn not_found() -> Problem {
    Problem::new(StatusCode::NOT_FOUND, "not-found", "no such route")
}

async fn method_not_allowed() -> Problem {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
        "this route does not take this method",
    )
}

/// The `/v1` routes (authenticated, except the OpenAPI document).
pub fn router(app: App) -> Router {
    router_until(app, CancellationToken::new())
}

/// [`router`] whose event streams end when `stop` is cancelled.
pub fn router_until(app: App, stop: CancellationToken) -> Router {
    router_with(app, stop, Router::new())
}

/// [`router_until`] with `public` (routes without a key: health, the console) merged under the
/// same concurrency limit and request timeout (review D8).
fn router_with(app: App, stop: CancellationToken, public: Router) -> Router {
    let timeout = std::time::Duration::from_secs(app.config.api.request_timeout_secs);
    let concurrency = app.config.api.max_concurrent_requests.max(1) as usize;
    let uploads = app.config.api.max_concurrent_uploads.max(1) as usize;
    let state = ApiState {
        limits: Arc::new(rate::RateLimits::new(&app.config.api)),
        tokens: Arc::new(auth::Tokens::default()),
        uploads: Arc::new(tokio::sync::Semaphore::new(uploads)),
        app,
        events: events::EventWaker::default(),
        shutdown: stop,
    };
    let upload = axum::handler::Handler::layer(
        documents::create,
        middleware::from_fn_with_state(state.clone(), documents::upload_slot),
    );
    Router::new()
        .route("/v1/openapi.json", get(openapi::serve_json))
        .route(
            "/v1/documents",
            get(documents::list)
                .post(upload)
                .layer(DefaultBodyLimit::max(documents::MAX_DOCUMENT_BODY)),
        )
        .route("/v1/documents/{id}", get(documents::get))
        .route("/v1/documents/{id}/accept", post(documents::accept))
        .route("/v1/documents/{id}/reject", post(documents::reject))
        .route("/v1/documents/{id}/refine", post(documents::refine))
        .route("/v1/documents/{id}/fields", post(also_found::add))
        .route("/v1/schemas", get(artifacts::schemas))
        .route("/v1/prompts", get(artifacts::prompts))
        .route("/v1/tags", get(artifacts::tags))
        .route("/v1/approvals", get(approvals::list))
        .route("/v1/approvals/{id}", get(approvals::get))
        .route("/v1/approvals/{id}/approve", post(approvals::approve))
        .route("/v1/approvals/{id}/reject", post(approvals::reject))
        .route("/v1/suggestions", get(reads::suggestions))
        .route("/v1/suggestions/{id}/dismiss", post(suggestions::dismiss))
        .route("/v1/suggestions/{id}/shown", post(suggestions::shown))
        .route("/v1/runs", get(console_routes::runs))
        .route("/v1/runs/{id}", get(reads::run))
        .route("/v1/me", get(console_routes::me))
        .route("/v1/queue", get(console_routes::queue))
        .route("/v1/jobs/{id}/retry", post(console_routes::retry))
        .route("/v1/jobs/{id}/cancel", post(operate::cancel))
        .route("/v1/jobs/dead/retry", post(operate::retry_dead))
        .route("/v1/jobs/dead/cancel", post(operate::cancel_dead))
        .route("/v1/runs/{id}/cancel", post(operate::cancel_run))
        .route("/v1/runs/{id}/fork", post(forks::fork))
        .route("/v1/runs/{id}/adopt", post(forks::adopt))
        .route("/v1/queue/{kind}/pause", post(operate::pause_kind))
        .route("/v1/queue/{kind}/resume", post(operate::resume_kind))
        .route("/v1/status", get(reads::status))
        .route("/v1/usage", get(reads::usage))
        .route("/v1/jobs", get(jobs::list).post(jobs::create))
        .route("/v1/jobs/{id}", get(jobs::get))
        .route("/v1/settings", get(settings::get).patch(settings::patch))
        .route(
            "/v1/settings/provider-key",
            get(provider_key::get)
                .put(provider_key::put)
                .delete(provider_key::delete),
        )
        .route("/v1/events", get(events::list))
        .route("/v1/events/stream", get(events::stream))
        .route("/v1/webhooks", get(webhooks::list).post(webhooks::create))
        .route("/v1/webhooks/{id}", axum::routing::delete(webhooks::delete))
        .route("/v1/keys", get(keys::list).post(keys::create))
        .route("/v1/keys/{id}/revoke", post(keys::revoke))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
        .merge(public)
        // Review L11: every request (authentication included, and the public routes: review
        // D8) is answered within `api.request_timeout_secs`, and at most
        // `api.max_concurrent_requests` are handled at once; past either, a 503 problem
        // (`Retry-After` when over the limit), not a held connection or a queue that grows.
        .layer(
            tower::ServiceBuilder::new()
                .layer(axum::error_handling::HandleErrorLayer::new(
                    move |e: tower::BoxError| async move { error::Problem::from_limit(&e, timeout) },
                ))
                .load_shed()
                // One semaphore for every route (a `Router` layer wraps each route apart).
                .layer(tower::limit::GlobalConcurrencyLimitLayer::new(concurrency))
                .timeout(timeout),
        )
        // Outermost: the request's span covers authentication and the body limits too.
        .layer(middleware::from_fn(trace::request_span))
}

/// How long an `Idempotency-Key` answer is replayed.
pub const IDEMPOTENCY_TTL_HOURS: i64 = 24;

/// Hourly: forgets Idempotency-Key answers older than [`IDEMPOTENCY_TTL_HOURS`].
async fn purge_idempotency_keys(app: App, stop: CancellationToken) {
    loop {
        let cutoff = app.clock.now() - chrono::Duration::hours(IDEMPOTENCY_TTL_HOURS);
        if let Err(e) = crate::store::api_keys::purge_idempotency(&app.pool, cutoff).await {
            tracing::warn!(error = %e, "purging old Idempotency-Key answers failed; retrying in an hour");
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(std::time::Duration::from_secs(3600)) => {}
        }
    }
}

/// Serves the API, the console (`/`) and `/healthz`, `/readyz` on `listener` until `stop`;
/// `/metrics` (and the detailed `/readyz`) only on `ops`, the operator's listener, if given.
pub async fn serve(
    listener: tokio::net::TcpListener,
    ops: Option<tokio::net::TcpListener>,
    app: App,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let health = crate::http::HealthState {
        pool: app.pool.clone(),
        // No workers in this process: ready means the database answers, migrated.
        workers_running: Arc::new(AtomicBool::new(true)),
        metrics: crate::http::metrics_handle(),
        kinds: app.catalog.kinds.keys().cloned().collect(),
    };
    tokio::spawn(purge_idempotency_keys(app.clone(), stop.clone()));
    if let Some(ops) = ops {
        tokio::spawn(crate::http::serve(ops, health.clone(), stop.clone()));
    }
    let header_read_timeout = Duration::from_secs(app.config.api.header_read_timeout_secs);
    let public = crate::http::public_router(health).merge(crate::console::router());
    let router = router_with(app, stop.clone(), public);
    listen::serve(listener, router, header_read_timeout, stop).await
}
