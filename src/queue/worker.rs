//! The worker runtime: per-kind claim loops (batched claims, bounded concurrency), LISTEN/NOTIFY
//! wake-ups with a poll fallback and on-time wake for delayed jobs, a heartbeat that renews the
//! leases of running attempts, a batching acker, and graceful shutdown that releases what did
//! not finish within the grace period.

use super::backoff::Backoff;
use super::store::{self, FailOutcome};
use super::{ClaimedJob, JobError, NOTIFY_CHANNEL};
use crate::clock::SharedClock;
use futures::FutureExt;
use sqlx::PgPool;
use sqlx::postgres::PgListener;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, Semaphore, mpsc};
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, debug, error, info, info_span, warn};

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
}

/// Worker tuning (from `[worker]` in the config).
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Appears in `locked_by`; unique per process.
    pub worker_id: String,
    pub claim_batch: u32,
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

struct InFlight {
    attempt: i32,
    cancel: CancellationToken,
    /// When the claim or heartbeat that last extended this lease was sent.
    renewed_at: Instant,
    abort: Option<AbortHandle>,
}

struct Completion {
    id: i64,
    attempt: i32,
    kind: String,
    result: Result<(), JobError>,
    retry_at: chrono::DateTime<chrono::Utc>,
    elapsed: Duration,
}

struct Shared {
    pool: PgPool,
    clock: SharedClock,
    opts: WorkerOptions,
    stats: Arc<WorkerStats>,
    inflight: Mutex<HashMap<i64, InFlight>>,
    tracker: TaskTracker,
}

/// A queue worker process: serve `kinds` until `shutdown` is cancelled.
pub struct Worker {
    shared: Arc<Shared>,
    kinds: Vec<KindRuntime>,
}

impl Worker {
    /// A worker over `pool` for `kinds`.
    pub fn new(
        pool: PgPool,
        clock: SharedClock,
        opts: WorkerOptions,
        kinds: Vec<KindRuntime>,
    ) -> Self {
        let stats = Arc::new(WorkerStats::default());
        stats.db_ok.store(true, Ordering::Relaxed);
        Self {
            shared: Arc::new(Shared {
                pool,
                clock,
                opts,
                stats,
                inflight: Mutex::new(HashMap::new()),
                tracker: TaskTracker::new(),
            }),
            kinds,
        }
    }

    /// Live counters.
    pub fn stats(&self) -> Arc<WorkerStats> {
        self.shared.stats.clone()
    }

    /// Runs until `shutdown` is cancelled, then stops claiming, waits up to the grace period
    /// for in-flight jobs and releases the rest so another worker takes them at once.
    pub async fn run(self, shutdown: CancellationToken) -> WorkerReport {
        let sh = self.shared;
        let stop_claiming = shutdown.child_token();
        let stop_background = CancellationToken::new();
        let wakers: Vec<Arc<Notify>> = self.kinds.iter().map(|_| Arc::new(Notify::new())).collect();
        let (ack_tx, ack_rx) = mpsc::unbounded_channel::<Completion>();

        let listener = tokio::spawn(listen(
            sh.pool.clone(),
            wakers.clone(),
            stop_background.clone(),
        ));
        let heartbeat = tokio::spawn(heartbeat_loop(sh.clone(), stop_background.clone()));
        let acker = tokio::spawn(ack_loop(sh.clone(), ack_rx));
        info!(worker_id = %sh.opts.worker_id, kinds = ?self.kinds.iter().map(|k| &k.kind).collect::<Vec<_>>(), "worker started");

        let mut loops = Vec::new();
        for (k, wake) in self.kinds.into_iter().zip(wakers) {
            loops.push(tokio::spawn(claim_loop(
                sh.clone(),
                Arc::new(k),
                wake,
                stop_claiming.clone(),
                ack_tx.clone(),
            )));
        }
        drop(ack_tx);
        for l in loops {
            let _ = l.await;
        }
        // Claiming stopped. Let in-flight jobs finish within the grace period.
        sh.tracker.close();
        let pending = sh.inflight.lock().expect("inflight").len();
        if pending > 0 {
            info!(pending, grace = ?sh.opts.shutdown_grace, "shutting down: waiting for in-flight jobs");
        }
        let finished = tokio::time::timeout(sh.opts.shutdown_grace, sh.tracker.wait())
            .await
            .is_ok();
        let mut released = 0;
        if !finished {
            let left: Vec<(i64, InFlight)> =
                sh.inflight.lock().expect("inflight").drain().collect();
            let held: Vec<(i64, i32)> = left.iter().map(|(id, f)| (*id, f.attempt)).collect();
            for (_, f) in &left {
                f.cancel.cancel();
                if let Some(a) = &f.abort {
                    a.abort();
                }
            }
            match store::release(&sh.pool, &held, sh.clock.now()).await {
                Ok(n) => {
                    released = n;
                    sh.stats.released.fetch_add(n, Ordering::Relaxed);
                    info!(released = n, "released unfinished jobs for other workers");
                }
                Err(e) => {
                    error!(error = %e, "could not release unfinished jobs; their leases will expire and the rescuer re-queues them")
                }
            }
            sh.tracker.wait().await;
        }
        // Every sender is gone once all job tasks ended: the acker flushes and returns.
        let _ = acker.await;
        stop_background.cancel();
        let _ = heartbeat.await;
        let _ = listener.await;
        WorkerReport {
            succeeded: sh.stats.succeeded.load(Ordering::Relaxed),
            failed: sh.stats.retried.load(Ordering::Relaxed)
                + sh.stats.dead.load(Ordering::Relaxed),
            released,
        }
    }
}

async fn claim_loop(
    sh: Arc<Shared>,
    k: Arc<KindRuntime>,
    wake: Arc<Notify>,
    stop: CancellationToken,
    ack_tx: mpsc::UnboundedSender<Completion>,
) {
    let sem = Arc::new(Semaphore::new(k.concurrency.max(1)));
    let kinds = vec![k.kind.clone()];
    let mut db_backoff = Duration::from_millis(100);
    loop {
        let first = tokio::select! {
            p = sem.clone().acquire_owned() => p.expect("semaphore open"),
            _ = stop.cancelled() => break,
        };
        let want = (sem.available_permits() + 1).min(sh.opts.claim_batch as usize) as u32;
        let now = sh.clock.now();
        let lease = chrono::Duration::from_std(sh.opts.lease).expect("lease fits");
        let jobs = match store::claim(&sh.pool, &kinds, want, &sh.opts.worker_id, now, lease).await
        {
            Ok(jobs) => {
                sh.stats.db_ok.store(true, Ordering::Relaxed);
                db_backoff = Duration::from_millis(100);
                jobs
            }
            Err(e) => {
                sh.stats.db_ok.store(false, Ordering::Relaxed);
                warn!(kind = %k.kind, error = %e, retry_in = ?db_backoff, "claim failed");
                drop(first);
                tokio::select! {
                    _ = tokio::time::sleep(db_backoff) => {},
                    _ = stop.cancelled() => break,
                }
                db_backoff = (db_backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        let got = jobs.len();
        sh.stats.claimed.fetch_add(got as u64, Ordering::Relaxed);
        metrics::counter!("agentd_jobs_claimed_total", "kind" => k.kind.clone())
            .increment(got as u64);
        let mut first = Some(first);
        for job in jobs {
            let permit = first.take().unwrap_or_else(|| {
                sem.clone()
                    .try_acquire_owned()
                    .expect("claimed within free slots")
            });
            spawn_job(&sh, &k, job, permit, ack_tx.clone());
        }
        if (got as u32) < want {
            let poll = sh.opts.poll_interval;
            let wait = match store::next_run_at(&sh.pool, &kinds, sh.clock.now()).await {
                Ok(Some(t)) => (t - sh.clock.now()).to_std().unwrap_or_default().min(poll),
                _ => poll,
            };
            tokio::select! {
                _ = wake.notified() => {},
                _ = tokio::time::sleep(wait) => {},
                _ = stop.cancelled() => break,
            }
        }
    }
}

fn spawn_job(
    sh: &Arc<Shared>,
    k: &Arc<KindRuntime>,
    job: ClaimedJob,
    permit: tokio::sync::OwnedSemaphorePermit,
    ack_tx: mpsc::UnboundedSender<Completion>,
) {
    let cancel = CancellationToken::new();
    let (id, attempt) = (job.id, job.attempt);
    sh.inflight.lock().expect("inflight").insert(
        id,
        InFlight {
            attempt,
            cancel: cancel.clone(),
            renewed_at: Instant::now(),
            abort: None,
        },
    );
    let span = info_span!("job", id, kind = %k.kind, attempt);
    let (sh2, k2) = (sh.clone(), k.clone());
    let handle = sh.tracker.spawn(
        async move {
            let started = Instant::now();
            let ctx = JobContext { job, cancel };
            let run = AssertUnwindSafe(k2.handler.handle(ctx)).catch_unwind();
            let result = match tokio::time::timeout(k2.timeout, run).await {
                Err(_) => Err(JobError::Retryable(format!(
                    "timed out after {}s (queue.timeout_secs)",
                    k2.timeout.as_secs()
                ))),
                Ok(Err(panic)) => Err(JobError::Retryable(format!(
                    "handler panicked: {}",
                    panic_message(&panic)
                ))),
                Ok(Ok(r)) => r,
            };
            drop(permit);
            // Whoever removes the in-flight entry owns the outcome: if shutdown or a lost
            // lease took it first, this attempt reports nothing.
            if sh2.inflight.lock().expect("inflight").remove(&id).is_none() {
                debug!("attempt no longer held; outcome dropped");
                return;
            }
            let retry_at = sh2.clock.now()
                + chrono::Duration::from_std(k2.backoff.delay(attempt)).unwrap_or_default();
            let _ = ack_tx.send(Completion {
                id,
                attempt,
                kind: k2.kind.clone(),
                result,
                retry_at,
                elapsed: started.elapsed(),
            });
        }
        .instrument(span),
    );
    if let Some(f) = sh.inflight.lock().expect("inflight").get_mut(&id) {
        f.abort = Some(handle.abort_handle());
    }
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

async fn ack_loop(sh: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<Completion>) {
    let mut batch = Vec::new();
    while let Some(first) = rx.recv().await {
        batch.push(first);
        while batch.len() < 1000 {
            match rx.try_recv() {
                Ok(c) => batch.push(c),
                Err(_) => break,
            }
        }
        flush(&sh, std::mem::take(&mut batch)).await;
    }
}

async fn flush(sh: &Shared, batch: Vec<Completion>) {
    let now = sh.clock.now();
    let mut ok = Vec::new();
    for c in &batch {
        metrics::histogram!("agentd_job_duration_seconds", "kind" => c.kind.clone())
            .record(c.elapsed.as_secs_f64());
        if c.result.is_ok() {
            ok.push((c.id, c.attempt));
        }
    }
    if !ok.is_empty() {
        let acked = retry_db(|| store::complete_many(&sh.pool, &ok, now)).await;
        let n = acked.map(|v| v.len() as u64).unwrap_or(0);
        sh.stats.succeeded.fetch_add(n, Ordering::Relaxed);
        sh.stats
            .stale
            .fetch_add(ok.len() as u64 - n, Ordering::Relaxed);
        for c in batch.iter().filter(|c| c.result.is_ok()) {
            metrics::counter!("agentd_jobs_succeeded_total", "kind" => c.kind.clone()).increment(1);
        }
    }
    for c in batch {
        let Err(e) = &c.result else { continue };
        let fatal = !e.is_retryable();
        let message = e.to_string();
        let outcome =
            retry_db(|| store::fail(&sh.pool, c.id, c.attempt, &message, fatal, c.retry_at, now))
                .await;
        match outcome {
            Ok(FailOutcome::Retry) => {
                sh.stats.retried.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("agentd_jobs_failed_total", "kind" => c.kind.clone())
                    .increment(1);
                warn!(job.id = c.id, kind = %c.kind, attempt = c.attempt, error = %e, retry_at = %c.retry_at, "job failed; will retry");
            }
            Ok(FailOutcome::Dead) => {
                sh.stats.dead.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("agentd_jobs_dead_total", "kind" => c.kind.clone()).increment(1);
                error!(job.id = c.id, kind = %c.kind, attempt = c.attempt, error = %e, fatal, "job is dead");
            }
            Ok(FailOutcome::Stale) => {
                sh.stats.stale.fetch_add(1, Ordering::Relaxed);
            }
            Err(err) => {
                error!(job.id = c.id, error = %err, "could not record the failure; the lease will expire and the job is retried")
            }
        }
    }
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

async fn heartbeat_loop(sh: Arc<Shared>, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(sh.opts.heartbeat) => {},
            _ = stop.cancelled() => return,
        }
        let held: Vec<(i64, i32)> = sh
            .inflight
            .lock()
            .expect("inflight")
            .iter()
            .map(|(id, f)| (*id, f.attempt))
            .collect();
        if held.is_empty() {
            continue;
        }
        let lease = chrono::Duration::from_std(sh.opts.lease).expect("lease fits");
        let sent = Instant::now();
        let write = store::heartbeat(&sh.pool, &held, sh.clock.now(), lease);
        match super::lease::bounded(sh.opts.heartbeat, write).await {
            Ok(kept) => {
                sh.stats.db_ok.store(true, Ordering::Relaxed);
                let kept: std::collections::HashSet<i64> = kept.into_iter().collect();
                let mut inflight = sh.inflight.lock().expect("inflight");
                for (id, attempt) in held {
                    if kept.contains(&id) {
                        if let Some(f) = inflight.get_mut(&id) {
                            f.renewed_at = sent;
                        }
                        continue;
                    }
                    if let Some(f) = inflight.get(&id)
                        && f.attempt == attempt
                    {
                        warn!(
                            job.id = id,
                            attempt, "lease lost (rescued or cancelled); stopping this attempt"
                        );
                        f.cancel.cancel();
                        inflight.remove(&id);
                    }
                }
            }
            Err(e) => {
                sh.stats.db_ok.store(false, Ordering::Relaxed);
                warn!(error = %e, "heartbeat failed; leases may expire");
                let now = Instant::now();
                let mut inflight = sh.inflight.lock().expect("inflight");
                inflight.retain(|id, f| {
                    if !super::lease::may_have_expired(
                        f.renewed_at,
                        sh.opts.lease,
                        sh.opts.heartbeat,
                        now,
                    ) {
                        return true;
                    }
                    warn!(
                        job.id = id,
                        attempt = f.attempt,
                        "lease may have expired (heartbeats failing); stopping this attempt"
                    );
                    metrics::counter!("agentd_leases_abandoned_total").increment(1);
                    f.cancel.cancel();
                    false
                });
            }
        }
    }
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
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {},
                    _ = stop.cancelled() => return,
                }
                delay = (delay * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        if let Err(e) = listener.listen(NOTIFY_CHANNEL).await {
            warn!(error = %e, "LISTEN failed; polling meanwhile");
            tokio::select! {
                _ = tokio::time::sleep(delay) => {},
                _ = stop.cancelled() => return,
            }
            delay = (delay * 2).min(Duration::from_secs(5));
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
