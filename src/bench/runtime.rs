//! agentd's two worker runtimes, started the same way for every measurement.

use crate::app::App;
use crate::queue::worker::{KindRuntime, Worker, WorkerOptions, WorkerReport, WorkerStats};
use sqlx::PgPool;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// agentd's two worker runtimes (`worker.runtime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// apalis 1.0's worker over agentd's own queue (`AgentdBackend`), the default.
    Apalis,
    /// agentd's own `Worker`.
    Native,
}

impl Runtime {
    /// The runtime the service config selects.
    pub fn configured(app: &App) -> Self {
        if app.config.worker.runtime == "native" {
            Runtime::Native
        } else {
            Runtime::Apalis
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            Runtime::Apalis => "apalis runtime",
            Runtime::Native => "native runtime",
        }
    }
}

/// Starts an agentd worker of runtime `rt` for one kind, with the service's worker config.
pub fn spawn_worker(
    pool: PgPool,
    app: &App,
    rt: Runtime,
    kind: KindRuntime,
) -> (
    Arc<WorkerStats>,
    CancellationToken,
    tokio::task::JoinHandle<WorkerReport>,
) {
    let mut wopts = WorkerOptions::from_config(&app.config.worker);
    wopts.worker_id = format!("bench:{}", uuid::Uuid::new_v4().simple());
    let clock = crate::clock::system();
    let stop = CancellationToken::new();
    match rt {
        Runtime::Native => {
            let w = Worker::new(pool, clock, wopts, vec![kind]);
            (w.stats(), stop.clone(), tokio::spawn(w.run(stop)))
        }
        Runtime::Apalis => {
            let w = crate::queue::apalis::build_worker(pool, clock, &wopts, kind);
            (w.stats(), stop.clone(), tokio::spawn(w.run(stop)))
        }
    }
}
