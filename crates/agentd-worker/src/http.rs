//! The operator's endpoints: `/healthz` (process alive), `/readyz` (database reachable,
//! migrations current, workers running) and `/metrics` (Prometheus text), served on the
//! operator's own listener (`http.addr`, `agentd serve --ops-addr`). The public API port gets
//! only [`public_router`]: `/healthz` and a `/readyz` that says ready or not and nothing else
//! (the reason goes to the log), since metrics name every kind, endpoint and queue depth.

use axum::{Router, extract::State, http::StatusCode, routing::get};
use metrics_exporter_prometheus::PrometheusHandle;
use sqlx::PgPool;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What `/readyz` looks at.
#[derive(Clone)]
pub struct HealthState {
    pub pool: PgPool,
    /// Set once the workers run; cleared at shutdown.
    pub workers_running: Arc<AtomicBool>,
    pub metrics: PrometheusHandle,
    /// Every known kind, so a kind whose queue drained reports 0 instead of its last depth.
    pub kinds: Vec<String>,
}

static RECORDER: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide Prometheus recorder once and returns its handle.
pub fn metrics_handle() -> PrometheusHandle {
    RECORDER
        .get_or_init(|| {
            metrics_exporter_prometheus::PrometheusBuilder::new()
                .install_recorder()
                .expect("install the Prometheus recorder")
        })
        .clone()
}

/// How long the public `/readyz` answer is reused (review D8).
const PUBLIC_READY_TTL: Duration = Duration::from_secs(1);

/// What the public API port answers without a key: `/healthz`, and `/readyz` as a bare status
/// (load balancers need it; the reason is logged, not served). The public `/readyz` checks at
/// most once a [`PUBLIC_READY_TTL`]: requests in between (and those arriving while a check
/// runs, which wait for it) get its answer, so a flood of them costs one query a second, not
/// one each (review D8).
pub fn public_router(state: HealthState) -> Router {
    let last: Arc<tokio::sync::Mutex<Option<(std::time::Instant, StatusCode)>>> = Arc::default();
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move |s: State<HealthState>| async move {
                let mut last = last.lock().await;
                let code = match *last {
                    Some((at, code)) if at.elapsed() < PUBLIC_READY_TTL => code,
                    _ => {
                        let (code, why) = readyz(s).await;
                        if code != StatusCode::OK {
                            tracing::warn!(reason = why.trim_end(), "readyz: not ready");
                        }
                        *last = Some((std::time::Instant::now(), code));
                        code
                    }
                };
                let text = if code == StatusCode::OK {
                    "ready\n"
                } else {
                    "not ready\n"
                };
                (code, text)
            }),
        )
        .with_state(state)
}

/// `/healthz`, `/readyz` and `/metrics`: the operator's listener.
pub fn router(state: HealthState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(state)
}

/// Serves until `stop`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: HealthState,
    stop: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await
}

async fn readyz(State(s): State<HealthState>) -> (StatusCode, String) {
    let db = tokio::time::timeout(
        Duration::from_secs(2),
        crate::db::migrations_current(&s.pool),
    )
    .await;
    let workers = s.workers_running.load(Ordering::Relaxed);
    match db {
        Ok(Ok(true)) if workers => (StatusCode::OK, "ready\n".into()),
        Ok(Ok(true)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "workers not running\n".into(),
        ),
        Ok(Ok(false)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "migrations pending: run `agentd migrate`\n".into(),
        ),
        Ok(Err(e)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("database unreachable: {e}\n"),
        ),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "database did not answer within 2s\n".into(),
        ),
    }
}

async fn metrics_text(State(s): State<HealthState>) -> String {
    crate::store::status::ready_ages(&s.pool, None, chrono::Utc::now())
        .await
        .map(|ages| {
            for k in &s.kinds {
                metrics::gauge!("agentd_queue_ready", "kind" => k.clone()).set(0.0);
                metrics::gauge!("agentd_queue_oldest_ready_seconds", "kind" => k.clone()).set(0.0);
            }
            for a in ages {
                metrics::gauge!("agentd_queue_ready", "kind" => a.kind.clone()).set(a.ready as f64);
                metrics::gauge!("agentd_queue_oldest_ready_seconds", "kind" => a.kind)
                    .set(a.oldest_ready_secs.unwrap_or(0.0));
            }
        })
        .ok();
    crate::queue::pause::paused(&s.pool, None)
        .await
        .map(|paused| {
            for k in &s.kinds {
                let orgs = paused.iter().filter(|p| &p.kind == k).count();
                metrics::gauge!("agentd_queue_paused_orgs", "kind" => k.clone()).set(orgs as f64);
            }
        })
        .ok();
    crate::llm::limits::publish_metrics(&s.pool).await.ok();
    s.metrics.render()
}
