//! What a worker runtime is made of, independent of the runtime: the handler trait and what a
//! handler receives, one kind's settings, worker tuning, live counters, the LISTEN loop and the
//! retry of queue writes. The one runtime is apalis 1.0 over our backend (`queue::apalis`); the
//! native claim loop that used to live here was removed (issue 18), its tests folded into
//! `tests/it/runtime_conformance.rs`.

use super::backoff::Backoff;
use super::{ClaimedJob, JobError, NOTIFY_CHANNEL};
use sqlx::PgPool;
use sqlx::postgres::PgListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// Runs jobs of one kind.
#[async_trait::async_trait]
pub trait JobHandler: Send + Sync {
    /// Does the work. `Err(Fatal)` makes the job `dead` at once; `Err(Retryable)` retries it
    /// with backoff while attempts remain. Must be idempotent: a rescued job runs again.
    async fn handle(&self, job: JobContext) -> Result<(), JobError>;
}

/// What a handler receives.
#[derive(Debug, Clone)]
pub struct JobContext {
    /// The claimed job (payload, attempt).
    pub job: ClaimedJob,
    /// Cancelled when the lease is lost or the worker gives up the job at shutdown.
    pub cancel: CancellationToken,
}

/// One job kind served by this worker.
#[derive(Clone)]
pub struct KindRuntime {
    pub kind: String,
    pub handler: Arc<dyn JobHandler>,
    /// Jobs of this kind running at once in this process.
    pub concurrency: usize,
    /// A longer run fails the attempt.
    pub timeout: Duration,
    pub backoff: Backoff,
    /// Succeeded jobs are deleted instead of kept (the job file's `queue.delete_on_success`).
    pub delete_on_success: bool,
    /// Jobs of this kind one org may have running across the fleet (the job file's
    /// `queue.max_running_per_org`; an org's own cap in `agentd_org_queue_limits` wins).
    pub max_running_per_org: Option<u32>,
    /// Slots of this worker one org may not fill while other orgs' jobs of the kind were
    /// claimed here lately (the job file's `queue.newcomer_slots`; 0: none; `queue::apalis`).
    pub newcomer_slots: usize,
}

pub use crate::config::{AUTO_PREFETCH_WINDOW, Prefetch};

/// Worker tuning (from `[worker]` in the config).
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Appears in `locked_by`; unique per process.
    pub worker_id: String,
    pub claim_batch: u32,
    /// Jobs claimed beyond the free slots into a local buffer (their leases are renewed by the
    /// heartbeat like running ones; released at shutdown). Claims stay at most `claim_batch`.
    pub prefetch: Prefetch,
    pub poll_interval: Duration,
    pub lease: Duration,
    pub heartbeat: Duration,
    pub shutdown_grace: Duration,
}

impl WorkerOptions {
    /// Options from the service config.
    pub fn from_config(c: &crate::config::WorkerConfig) -> Self {
        Self {
            worker_id: format!(
                "{}:{}:{}",
                hostname(),
                std::process::id(),
                &uuid::Uuid::new_v4().simple().to_string()[..8]
            ),
            claim_batch: c.claim_batch,
            prefetch: c.prefetch(),
            poll_interval: Duration::from_millis(c.poll_interval_ms),
            lease: Duration::from_secs(c.lease_secs),
            heartbeat: Duration::from_secs(c.heartbeat_secs),
            shutdown_grace: Duration::from_secs(c.shutdown_grace_secs),
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// Counters a caller can read while the worker runs (tests, bench, status).
#[derive(Debug, Default)]
pub struct WorkerStats {
    pub claimed: AtomicU64,
    pub succeeded: AtomicU64,
    pub retried: AtomicU64,
    pub dead: AtomicU64,
    /// Acks or failures that arrived after the attempt lost its lease (fenced out).
    pub stale: AtomicU64,
    pub released: AtomicU64,
    /// The most jobs one claim took.
    pub largest_claim: AtomicU64,
    /// False while the database is unreachable.
    pub db_ok: AtomicBool,
}

impl WorkerStats {
    /// Jobs finished by this worker, whatever the outcome.
    pub fn finished(&self) -> u64 {
        self.succeeded.load(Ordering::Relaxed)
            + self.retried.load(Ordering::Relaxed)
            + self.dead.load(Ordering::Relaxed)
    }
}

/// What a worker did before it stopped.
#[derive(Debug, Clone, Copy, Default)]
pub struct WorkerReport {
    pub succeeded: u64,
    pub failed: u64,
    pub released: u64,
}

/// Retries a database write a few times (connection blips) before giving up; a write that never
/// lands is recovered by lease expiry.
pub(crate) async fn retry_db<T, F, Fut>(mut f: F) -> Result<T, super::QueueError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, super::QueueError>>,
{
    use backon::{ExponentialBuilder, Retryable};
    (|| f())
        .retry(
            ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(50))
                .with_max_delay(Duration::from_secs(2))
                .with_max_times(5),
        )
        .await
}

/// Waits `delay` before the next LISTEN attempt and doubles it (at most 5 s); false if `stop`
/// came first.
async fn back_off(delay: &mut Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(*delay) => {},
        _ = stop.cancelled() => return false,
    }
    *delay = (*delay * 2).min(Duration::from_secs(5));
    true
}

/// Listens on the NOTIFY channel and wakes every waker on each notification (and after every
/// reconnect, since notifications may have been missed); reconnects with backoff until `stop`.
pub(crate) async fn listen(pool: PgPool, wakers: Vec<Arc<Notify>>, stop: CancellationToken) {
    let wake_all = || wakers.iter().for_each(|w| w.notify_one());
    let mut delay = Duration::from_millis(100);
    loop {
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(l) => l,
            Err(e) => {
                warn!(error = %e, "LISTEN connection failed; polling meanwhile");
                if !back_off(&mut delay, &stop).await {
                    return;
                }
                continue;
            }
        };
        if let Err(e) = listener.listen(NOTIFY_CHANNEL).await {
            warn!(error = %e, "LISTEN failed; polling meanwhile");
            if !back_off(&mut delay, &stop).await {
                return;
            }
            continue;
        }
        delay = Duration::from_millis(100);
        // Anything enqueued while we were not listening is picked up now.
        wake_all();
        loop {
            tokio::select! {
                n = listener.try_recv() => match n {
                    Ok(Some(_)) => wake_all(),
                    // The connection dropped and was re-established: we may have missed some.
                    Ok(None) => wake_all(),
                    Err(e) => { warn!(error = %e, "LISTEN connection lost"); break; }
                },
                _ = stop.cancelled() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_prefetch_holds_twenty_milliseconds_of_work() {
        // 32 slots, jobs of 10 µs: 20 ms of work is 64,000 jobs (the claim limit cuts it).
        assert_eq!(Prefetch::Auto.size(32, Some(10.0)), 64_000);
        // 8 slots, jobs of 1 ms: 160 jobs.
        assert_eq!(Prefetch::Auto.size(8, Some(1_000.0)), 160);
        // Agent runs of seconds: none.
        assert_eq!(Prefetch::Auto.size(32, Some(5_000_000.0)), 0);
        // Before any job ended: none.
        assert_eq!(Prefetch::Auto.size(32, None), 0);
        assert_eq!(Prefetch::Fixed(7).size(32, Some(5_000_000.0)), 7);
    }
}
