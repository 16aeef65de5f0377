//! `agentd worker`: workers, cron, rescuer and retention until SIGINT/SIGTERM.

use super::bad;
use crate::app::{App, RunningWorker, StartError, WorkerArgs};
use clap::Args;
use tokio_util::sync::CancellationToken;

#[derive(Args, Debug)]
pub struct WorkerCmd {
    /// Comma-separated kinds to serve (default: all).
    #[arg(long, value_delimiter = ',')]
    pub kinds: Vec<String>,
    /// Concurrency per kind (default: queue.concurrency of each job file).
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Do not run the cron scheduler in this process.
    #[arg(long)]
    pub no_cron: bool,
}

pub(super) async fn run(app: &App, w: WorkerCmd) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    crate::app::cancel_on_signals(shutdown.clone());
    let running = start(app, w, shutdown).await?;
    stopped(running).await;
    Ok(())
}

/// Starts the workers of `w` (and cron unless `--no-cron`) until `shutdown` is cancelled.
pub(super) async fn start(
    app: &App,
    w: WorkerCmd,
    shutdown: CancellationToken,
) -> anyhow::Result<RunningWorker> {
    app.start_worker(
        WorkerArgs {
            kinds: w.kinds,
            concurrency: w.concurrency,
            cron: !w.no_cron,
            only_org: None,
        },
        shutdown,
    )
    .await
    .map_err(|e| match e {
        // The database, not the operator's input: exit 1 so a supervisor retries.
        StartError::Database(_) => anyhow::Error::new(e),
        e => bad(e),
    })
}

/// Waits until the workers drained (their token cancelled) and logs what they did.
pub(super) async fn stopped(running: RunningWorker) {
    let report = running.join().await;
    tracing::info!(
        succeeded = report.succeeded,
        failed = report.failed,
        released = report.released,
        "worker stopped"
    );
}
