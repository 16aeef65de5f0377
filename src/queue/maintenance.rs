//! Maintenance services, each a small unit with a `run_once` that tests call directly:
//! the rescuer (re-queues jobs whose lease expired) and retention (deletes old finished jobs).

use super::QueueError;
use super::store::{self, RescueReport};
use crate::clock::SharedClock;
use sqlx::PgPool;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// Re-queues running jobs whose lease expired (crashed or hung worker).
pub struct Rescuer {
    pub pool: PgPool,
    pub clock: SharedClock,
    pub interval: Duration,
    pub batch: u32,
    /// Rescued jobs back off like failed ones (per kind, from the job files).
    pub backoff: store::RescueBackoff,
}

impl Rescuer {
    /// One pass: rescues every expired lease, in batches.
    pub async fn run_once(&self) -> Result<RescueReport, QueueError> {
        let mut total = RescueReport::default();
        loop {
            let r =
                store::rescue_expired_with(&self.pool, self.clock.now(), self.batch, &self.backoff)
                    .await?;
            total.requeued += r.requeued;
            total.dead += r.dead;
            if r.requeued + r.dead < u64::from(self.batch) {
                break;
            }
        }
        if total.requeued + total.dead > 0 {
            warn!(
                requeued = total.requeued,
                dead = total.dead,
                "rescued jobs with expired leases"
            );
            metrics::counter!("agentd_jobs_rescued_total").increment(total.requeued + total.dead);
        }
        Ok(total)
    }

    /// Runs until `stop`.
    pub async fn run(self, stop: CancellationToken) {
        loop {
            if let Err(e) = self.run_once().await {
                warn!(error = %e, "rescue pass failed");
            }
            tokio::select! {
                _ = tokio::time::sleep(self.interval) => {},
                _ = stop.cancelled() => return,
            }
        }
    }
}

/// Deletes finished jobs older than the retention, in batches (no table bloat, no long locks).
pub struct Retention {
    pub pool: PgPool,
    pub clock: SharedClock,
    pub keep: chrono::Duration,
    pub batch: u32,
    pub interval: Duration,
}

impl Retention {
    /// One pass; returns the number of jobs deleted.
    pub async fn run_once(&self) -> Result<u64, QueueError> {
        let cutoff = self.clock.now() - self.keep;
        let mut total = 0;
        loop {
            let n = store::purge_finished(&self.pool, cutoff, self.batch).await?;
            total += n;
            if n < u64::from(self.batch) {
                break;
            }
        }
        if total > 0 {
            info!(deleted = total, "retention deleted finished jobs");
        }
        Ok(total)
    }

    /// Runs until `stop`.
    pub async fn run(self, stop: CancellationToken) {
        loop {
            if let Err(e) = self.run_once().await {
                warn!(error = %e, "retention pass failed");
            }
            tokio::select! {
                _ = tokio::time::sleep(self.interval) => {},
                _ = stop.cancelled() => return,
            }
        }
    }
}
