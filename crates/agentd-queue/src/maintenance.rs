//! Maintenance services, each a small unit with a `run_once` that tests call directly and a
//! `run` that repeats it ([`every`]): the rescuer (re-queues jobs whose lease expired) and
//! retention (deletes old finished jobs and vacuums the job table, `vacuum.rs`); the reconciler
//! (`jobs::reconcile`) and transcript
//! retention (`pii::retention`) run the same way.

use super::QueueError;
use super::store::{self, RescueReport};
use super::vacuum::JobsVacuum;
use crate::clock::SharedClock;
use sqlx::PgPool;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// Runs `pass` now and then every `interval` until `stop`: a failed pass is logged as
/// "`what` pass failed" and the next one comes anyway.
pub async fn every<T, E, Fut>(
    interval: Duration,
    stop: CancellationToken,
    what: &str,
    mut pass: impl FnMut() -> Fut,
) where
    E: std::fmt::Display,
    Fut: Future<Output = Result<T, E>>,
{
    loop {
        if let Err(e) = pass().await {
            warn!(error = %e, "{what} pass failed");
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {},
            _ = stop.cancelled() => return,
        }
    }
}

/// Runs `batch_pass` until it handles fewer than `batch` rows (so a pass never holds a long
/// lock); returns the rows handled.
pub async fn drain<E, Fut>(batch: u32, mut batch_pass: impl FnMut() -> Fut) -> Result<u64, E>
where
    Fut: Future<Output = Result<u64, E>>,
{
    let mut total = 0;
    loop {
        let n = batch_pass().await?;
        total += n;
        if n < u64::from(batch) {
            return Ok(total);
        }
    }
}

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
            let r = store::rescue_expired_with(
                &self.pool,
                self.clock.lease_now(),
                self.batch,
                &self.backoff,
            )
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
        every(self.interval, stop, "rescue", || self.run_once()).await
    }
}

/// Deletes finished jobs older than the retention, in batches (no long locks), then vacuums
/// the job table when its dead rows pass the threshold ([`JobsVacuum`]), so the table stays
/// flat without autovacuum keeping up.
pub struct Retention {
    pub pool: PgPool,
    pub clock: SharedClock,
    pub keep: chrono::Duration,
    pub batch: u32,
    pub interval: Duration,
    pub vacuum: JobsVacuum,
}

impl Retention {
    /// One pass; returns the number of jobs deleted.
    pub async fn run_once(&self) -> Result<u64, QueueError> {
        let cutoff = self.clock.now() - self.keep;
        let purge = || store::purge_finished(&self.pool, cutoff, self.batch);
        let total = drain(self.batch, purge).await?;
        if total > 0 {
            info!(deleted = total, "retention deleted finished jobs");
        }
        // The deletes are done and stay done whatever the vacuum does.
        if let Err(e) = self.vacuum.check(&self.pool, total).await {
            warn!(error = %e, "vacuum of agentd_jobs failed");
        }
        Ok(total)
    }

    /// Runs until `stop`.
    pub async fn run(self, stop: CancellationToken) {
        every(self.interval, stop, "retention", || self.run_once()).await
    }
}
