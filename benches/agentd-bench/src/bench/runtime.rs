//! agentd's worker runtime (apalis 1.0 over our backend), started the same way for every
//! measurement.

use agentd::app::App;
use agentd::queue::worker::{KindRuntime, WorkerOptions, WorkerReport, WorkerStats};
use sqlx::PgPool;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// What the bench calls agentd's runtime in its rows.
pub const LABEL: &str = "apalis runtime";

/// Starts an agentd worker for one kind with the service's worker config, adjusted by `tune`.
pub fn spawn_worker(
    pool: PgPool,
    app: &App,
    kind: KindRuntime,
    tune: impl FnOnce(&mut WorkerOptions),
) -> (
    Arc<WorkerStats>,
    CancellationToken,
    tokio::task::JoinHandle<WorkerReport>,
) {
    spawn_worker_on(pool, app, kind, agentd::clock::system(), tune)
}

/// [`spawn_worker`] on `clock` (the history bench compresses a week).
pub fn spawn_worker_on(
    pool: PgPool,
    app: &App,
    kind: KindRuntime,
    clock: agentd::clock::SharedClock,
    tune: impl FnOnce(&mut WorkerOptions),
) -> (
    Arc<WorkerStats>,
    CancellationToken,
    tokio::task::JoinHandle<WorkerReport>,
) {
    let mut wopts = WorkerOptions::from_config(&app.config.worker);
    wopts.worker_id = format!("bench:{}", uuid::Uuid::new_v4().simple());
    tune(&mut wopts);
    let stop = CancellationToken::new();
    let w = agentd::queue::apalis::build_worker(pool, clock, &wopts, kind);
    (w.stats(), stop.clone(), tokio::spawn(w.run(stop)))
}
