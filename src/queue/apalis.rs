//! apalis 1.0 as the worker runtime over our own `agentd_jobs` table.
//!
//! [`AgentdBackend`] is an apalis-core [`Backend`] that claims batches with [`store::claim`]
//! (lease + attempt), wakes on LISTEN/NOTIFY with a poll fallback and on-time wake for delayed
//! jobs, and yields `Task<ClaimedJob>` whose metadata carry [`JobMeta`] `(job id, attempt,
//! kind)`. [`build_worker`] puts it under apalis's `WorkerBuilder` with this stack (outermost
//! first):
//!
//! | layer | from | does |
//! |---|---|---|
//! | [`GraceLayer`] | the backend's own middleware (`BackendConfig::middleware`) | ends a task at the end of the shutdown grace period (it is released) |
//! | `ack_with(`[`AgentdAck`]`)` | apalis `worker::ext::ack` | success → `complete_many`, failure → `fail` with backoff in `run_at`; batched |
//! | `concurrency(n)` | apalis `WorkerBuilderExt` (tower `ConcurrencyLimit`) | bounds running handlers per kind |
//! | `parallelize(`[`spawn_abort_on_drop`]`)` | apalis `worker::ext::parallelize` | each handler on its own tokio task (both cores), cancelled if its task is dropped |
//! | [`RunningLayer`] | here | tracing span per job; counts running handlers so claims fit the free slots |
//! | `CatchPanicLayer` | apalis `layers::catch_panic` | a panic is a (retryable) failure |
//! | `TimeoutLayer` | tower `timeout` | a run longer than the kind's timeout is a (retryable) failure |
//! | [`HandlerService`] | here | our [`JobHandler`], unchanged |
//!
//! Leases are renewed by a background task that also detects lost leases (rescued or cancelled
//! jobs): their [`JobContext::cancel`] fires and their outcome is dropped. A stale attempt's ack
//! changes nothing (the SQL is fenced by `(id, attempt, state = 'running')`) and surfaces as
//! [`AckError::Stale`].
//!
//! # What apalis 1.0 could not carry, and what this module does instead
//!
//! Checked against apalis-core 1.0.0 (and apalis 1.0.0 for the layers):
//!
//! 1. **Per-task lease renewal.** The `Backend` trait has only `poll_ready`/`poll_next`/
//!    `poll_close` (`src/backend/mod.rs` 113-181), and the one heartbeat apalis has is per
//!    *worker* (`Persistence::heartbeat(&WorkerContext)`, `src/backend/persistence/mod.rs` 40-44)
//!    and runs *inside* `poll_ready` (same file, 262-283). `CallAll` calls `poll_ready` only while
//!    it is looking for work, never while draining at shutdown (`src/worker/call_all.rs`
//!    160-172), so a poll-driven heartbeat stops exactly while a long job finishes inside the
//!    grace period. Leases are therefore renewed by a background task over the set of held
//!    `(id, attempt)` pairs, started on the first `poll_ready` and stopped in `poll_close`.
//! 2. **Batched acks.** `Acknowledge::ack` is per task and awaited inside that task's future
//!    (`src/worker/ext/ack/mod.rs` 97, 176). [`AgentdAck`] hands the outcome to one acker task
//!    that coalesces whatever is pending into one `complete_many` statement (failures are one
//!    `fail` each, as in the native worker) and answers each ack when its batch is written, so a
//!    task ends only after its outcome is durable. The ack sits outside the concurrency limit,
//!    so a finished handler frees its slot before its ack lands (the native worker does the
//!    same).
//! 3. **Releasing unfinished tasks at shutdown.** After `stop()`, `CallAll` waits for *every*
//!    in-flight task future with no deadline before it calls `poll_close`
//!    (`src/worker/call_all.rs` 162-167), and the `Monitor`'s only deadline
//!    (`shutdown_timeout`/`with_terminator`) drops the worker futures outright
//!    (`src/monitor/mod.rs` 527-531): nothing gets a chance to release its lease, and a dropped
//!    `poll_close` cannot either. [`ApalisWorker::run`] therefore owns the grace period: it calls
//!    `WorkerContext::stop()` (stop claiming), waits up to `shutdown_grace`, then fires
//!    [`GraceLayer`] (every unfinished task future ends at once, its spawned handler is aborted)
//!    and releases the held attempts with [`store::release`]; `poll_close` then waits for an
//!    in-flight claim and releases what was claimed but never started. Registering this worker
//!    in an apalis `Monitor` would lose the release step; run it with [`ApalisWorker::run`].
//! 4. **Transient database errors.** Any `Err` from `poll_ready`/`poll_next` ends the worker:
//!    `CallAll` sets `eof` or forwards it (`src/worker/call_all.rs` 182-184, 203-204), the
//!    stream maps it to `WorkerError::BackendError` (`src/worker/stream.rs` 86) and
//!    `Worker::run` returns at once (`src/worker/mod.rs` 238), dropping in-flight task futures
//!    without `poll_close`; `Persisted` goes `Dead` on the first failed fetch
//!    (`src/backend/persistence/mod.rs` 348-351). So this backend never yields an error: a failed
//!    claim is logged and retried with capped exponential backoff (and [`ApalisWorker::run`]
//!    releases whatever is still held if the worker ends anyway).
//! 5. **Attempts.** apalis increments its own in-memory `Attempt` on the first poll of a task
//!    (`src/worker/lifecycle.rs` 185), and its error classes (`AbortError`, `RetryAfterError`;
//!    lifecycle.rs 202-211) only set an in-memory `Status`; there is no retry schedule in storage.
//!    The fencing token is our `attempt` column, carried in [`JobMeta`]; the backoff is computed
//!    from the kind's [`Backoff`] and written to `run_at` by the ack. apalis's `Attempt` is
//!    seeded so that it reads the same number while the task runs, but nothing relies on it.
//! 6. **Panics.** apalis's default panic handler turns a panic into an `AbortError` ("never
//!    retry", apalis `src/layers/catch_panic/mod.rs` 263-273); a panic is a *retryable* failure
//!    here, so the layer is built with a handler that yields `PanicError` instead.
//! 7. **Parallelism and cancellation.** Without `parallelize`, every task future is polled inside
//!    the worker's single stream task (`FuturesUnordered` in `src/worker/call_all.rs`). With
//!    `parallelize(tokio::spawn)` a dropped task would keep running detached (dropping a
//!    `JoinHandle` does not cancel; `src/worker/ext/parallelize/mod.rs` 101), so the executor is
//!    [`spawn_abort_on_drop`].
//! 8. **Claim size.** A backend cannot see the service's free slots: `CallAll` reserves one slot
//!    (`svc.poll_ready`, `src/worker/call_all.rs` 189-193) before each `poll_next` (198).
//!    [`RunningLayer`] counts running handlers so a claim asks for at most `concurrency -
//!    running` jobs (capped by `claim_batch`) and no claimed job waits for a slot with its lease
//!    ticking.

use super::backoff::Backoff;
use super::store::{self, FailOutcome};
use super::worker::{
    JobContext, JobHandler, KindRuntime, Worker, WorkerOptions, WorkerReport, WorkerStats,
};
use super::{ClaimedJob, JobError, NewJob, QueueError};
use crate::clock::SharedClock;
use ::apalis::layers::WorkerBuilderExt;
use ::apalis::layers::catch_panic::{CatchPanicLayer, PanicError};
use apalis_core::backend::finalize::Ephemeral;
use apalis_core::backend::{Backend, BackendConfig};
use apalis_core::error::{BoxDynError, WorkerError};
use apalis_core::task::builder::TaskBuilder;
use apalis_core::task::metadata::{Metadata, MetadataStore};
use apalis_core::task::task_id::TaskId;
use apalis_core::task::{ExecutionContext, Task};
use apalis_core::worker::builder::WorkerBuilder;
use apalis_core::worker::context::WorkerContext;
use apalis_core::worker::ext::ack::{Acknowledge, AcknowledgementExt};
use apalis_core::worker::ext::parallelize::ParallelizeExt;
use chrono::{DateTime, Utc};
use futures::FutureExt;
use futures::future::BoxFuture;
use sqlx::PgPool;
use std::any::Any;
use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::{JoinError, JoinHandle};
use tokio_util::sync::CancellationToken;
use tower::timeout::TimeoutLayer;
use tower::timeout::error::Elapsed;
use tower::{Layer, Service};
use tracing::{Instrument, debug, error, info, info_span, warn};

/// Metadata key of the job id.
pub const META_JOB_ID: &str = "agentd.job_id";
/// Metadata key of the attempt (the fencing token).
pub const META_ATTEMPT: &str = "agentd.attempt";
/// Metadata key of the job kind.
pub const META_KIND: &str = "agentd.kind";

/// What every task yielded by [`AgentdBackend`] carries in its apalis metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobMeta {
    pub id: i64,
    /// The fencing token: only this attempt's ack or failure changes the row.
    pub attempt: i32,
    pub kind: String,
}

/// A task without valid [`JobMeta`] (not produced by [`AgentdBackend`]).
#[derive(Debug, Clone, thiserror::Error)]
#[error("task metadata lacks a valid `{0}` (not a task from AgentdBackend)")]
pub struct MissingJobMeta(&'static str);

impl Metadata for JobMeta {
    type Error = MissingJobMeta;

    fn extract(store: &MetadataStore) -> Result<Self, Self::Error> {
        let id = store
            .get(META_JOB_ID)
            .and_then(|v| v.parse().ok())
            .ok_or(MissingJobMeta(META_JOB_ID))?;
        let attempt = store
            .get(META_ATTEMPT)
            .and_then(|v| v.parse().ok())
            .ok_or(MissingJobMeta(META_ATTEMPT))?;
        let kind = store
            .get(META_KIND)
            .ok_or(MissingJobMeta(META_KIND))?
            .to_string();
        Ok(Self { id, attempt, kind })
    }

    fn inject(&self, map: &mut MetadataStore) -> Result<(), Self::Error> {
        map.replace(META_JOB_ID, self.id.to_string());
        map.replace(META_ATTEMPT, self.attempt.to_string());
        map.replace(META_KIND, self.kind.clone());
        Ok(())
    }
}

/// Per-task runtime data (apalis task extensions): the handler's cancellation token and when
/// the task was handed to the worker.
#[derive(Debug, Clone)]
pub struct JobToken {
    /// Fires when the lease is lost or the job is released at shutdown.
    pub cancel: CancellationToken,
    pub yielded_at: Instant,
}

/// Failure policy of one kind served by an [`AgentdBackend`].
#[derive(Debug, Clone)]
pub struct KindPolicy {
    pub kind: String,
    pub backoff: Backoff,
    /// Only used to word the timeout error.
    pub timeout: Duration,
}

/// An attempt this process holds a lease on (claimed and not yet settled).
struct Held {
    attempt: i32,
    cancel: CancellationToken,
}

/// What a handler run produced, as the acker writes it.
enum Outcome {
    Succeeded,
    Failed {
        message: String,
        fatal: bool,
        retry_at: DateTime<Utc>,
    },
}

/// What the database made of an ack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckOutcome {
    Succeeded,
    Retry,
    Dead,
    /// The attempt was stale (fenced out): nothing changed.
    Stale,
}

struct AckRequest {
    id: i64,
    attempt: i32,
    kind: String,
    outcome: Outcome,
    elapsed: Option<Duration>,
    reply: oneshot::Sender<Result<AckOutcome, String>>,
}

/// Why an ack did not count.
#[derive(Debug, thiserror::Error)]
pub enum AckError {
    #[error(transparent)]
    Meta(#[from] MissingJobMeta),
    /// This process no longer holds the attempt (lease lost, or released at shutdown).
    #[error(
        "job {id} attempt {attempt}: lease no longer held (rescued, cancelled or released); outcome dropped"
    )]
    NotHeld { id: i64, attempt: i32 },
    /// The database ignored the ack: another attempt owns the job now.
    #[error("job {id} attempt {attempt}: stale attempt, the ack changed nothing")]
    Stale { id: i64, attempt: i32 },
    /// The write failed after retries; the lease will expire and the job is retried.
    #[error("job {id}: could not record the outcome ({message}); the lease will expire")]
    Db { id: i64, message: String },
    #[error("the acker has stopped")]
    Closed,
}

/// A task ended by [`GraceLayer`]: the shutdown grace period is over and its attempt was
/// released for another worker.
#[derive(Debug, thiserror::Error)]
#[error("released at shutdown: the grace period ended before the handler did")]
pub struct Released;

struct Shared {
    pool: PgPool,
    clock: SharedClock,
    opts: WorkerOptions,
    kinds: Vec<String>,
    policies: HashMap<String, KindPolicy>,
    concurrency: usize,
    stats: Arc<WorkerStats>,
    held: Mutex<HashMap<i64, Held>>,
    /// Handlers running now (see [`RunningLayer`]).
    running: AtomicUsize,
    wake: Arc<Notify>,
    /// Fired by [`ApalisWorker::run`] when the shutdown grace period is over.
    grace_over: CancellationToken,
    /// Stops the listener, the heartbeat and (after draining) the acker.
    closing: CancellationToken,
    ack_tx: mpsc::UnboundedSender<AckRequest>,
    ack_rx: Mutex<Option<mpsc::UnboundedReceiver<AckRequest>>>,
    background: Mutex<Vec<JoinHandle<()>>>,
    started: AtomicBool,
}

impl Shared {
    fn lease(&self) -> chrono::Duration {
        chrono::Duration::from_std(self.opts.lease).expect("lease fits")
    }

    fn start_background(self: &Arc<Self>) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut bg = self.background.lock().expect("background");
        bg.push(tokio::spawn(super::worker::listen(
            self.pool.clone(),
            vec![self.wake.clone()],
            self.closing.clone(),
        )));
        bg.push(tokio::spawn(heartbeat_loop(self.clone())));
        if let Some(rx) = self.ack_rx.lock().expect("ack rx").take() {
            bg.push(tokio::spawn(ack_loop(self.clone(), rx)));
        }
    }

    /// Claims up to `want` jobs and records them as held before anyone can see them.
    async fn claim(self: Arc<Self>, want: u32) -> Result<Vec<ClaimedJob>, QueueError> {
        let jobs = store::claim(
            &self.pool,
            &self.kinds,
            want,
            &self.opts.worker_id,
            self.clock.now(),
            self.lease(),
        )
        .await?;
        let mut held = self.held.lock().expect("held");
        for j in &jobs {
            held.insert(
                j.id,
                Held {
                    attempt: j.attempt,
                    cancel: CancellationToken::new(),
                },
            );
            metrics::counter!("agentd_jobs_claimed_total", "kind" => j.kind.clone()).increment(1);
        }
        self.stats
            .claimed
            .fetch_add(jobs.len() as u64, Ordering::Relaxed);
        Ok(jobs)
    }

    /// Waits for a NOTIFY, the poll interval, or the next delayed job's `run_at`.
    async fn idle(self: Arc<Self>) {
        let poll = self.opts.poll_interval;
        let wait = match store::next_run_at(&self.pool, &self.kinds, self.clock.now()).await {
            Ok(Some(t)) => (t - self.clock.now())
                .to_std()
                .unwrap_or_default()
                .min(poll),
            _ => poll,
        };
        tokio::select! {
            _ = self.wake.notified() => {},
            _ = tokio::time::sleep(wait) => {},
        }
    }

    /// Gives back every held attempt (not counted against `max_attempts`).
    async fn release_held(&self, why: &str) -> u64 {
        let left: Vec<(i64, Held)> = self.held.lock().expect("held").drain().collect();
        if left.is_empty() {
            return 0;
        }
        for (_, h) in &left {
            h.cancel.cancel();
        }
        let pairs: Vec<(i64, i32)> = left.iter().map(|(id, h)| (*id, h.attempt)).collect();
        match super::worker::retry_db(|| store::release(&self.pool, &pairs, self.clock.now())).await
        {
            Ok(n) => {
                self.stats.released.fetch_add(n, Ordering::Relaxed);
                info!(released = n, why, "released jobs for other workers");
                n
            }
            Err(e) => {
                error!(error = %e, "could not release jobs; their leases will expire and the rescuer re-queues them");
                0
            }
        }
    }

    fn task(&self, job: ClaimedJob, cancel: CancellationToken) -> Task<ClaimedJob> {
        let meta = JobMeta {
            id: job.id,
            attempt: job.attempt,
            kind: job.kind.clone(),
        };
        // apalis bumps its own in-memory attempt on the first poll (lifecycle.rs 185): seed it
        // one lower so it reads our attempt while the task runs.
        let seed = (job.attempt.max(1) - 1) as usize;
        TaskBuilder::new(job.clone())
            .task_id(TaskId::from_int(job.id as u64))
            .attempt(seed)
            .max_attempts(job.max_attempts.max(0) as usize)
            .lock_by(Some(self.opts.worker_id.clone()))
            .metadata(&meta)
            .data(JobToken {
                cancel,
                yielded_at: Instant::now(),
            })
            .build()
    }
}

/// The apalis backend over `agentd_jobs` for a set of kinds.
pub struct AgentdBackend {
    sh: Arc<Shared>,
    buffer: VecDeque<ClaimedJob>,
    claim: Option<JoinHandle<Result<Vec<ClaimedJob>, QueueError>>>,
    want: u32,
    idle: Option<BoxFuture<'static, ()>>,
    db_backoff: Duration,
    close: Option<BoxFuture<'static, ()>>,
}

impl AgentdBackend {
    /// A backend claiming jobs of `kinds` for a worker running at most `concurrency` handlers.
    pub fn new(
        pool: PgPool,
        clock: SharedClock,
        opts: &WorkerOptions,
        kinds: Vec<KindPolicy>,
        concurrency: usize,
    ) -> Self {
        let stats = Arc::new(WorkerStats::default());
        stats.db_ok.store(true, Ordering::Relaxed);
        let (ack_tx, ack_rx) = mpsc::unbounded_channel();
        let sh = Arc::new(Shared {
            pool,
            clock,
            opts: opts.clone(),
            kinds: kinds.iter().map(|k| k.kind.clone()).collect(),
            policies: kinds.into_iter().map(|k| (k.kind.clone(), k)).collect(),
            concurrency: concurrency.max(1),
            stats,
            held: Mutex::new(HashMap::new()),
            running: AtomicUsize::new(0),
            wake: Arc::new(Notify::new()),
            grace_over: CancellationToken::new(),
            closing: CancellationToken::new(),
            ack_tx,
            ack_rx: Mutex::new(Some(ack_rx)),
            background: Mutex::new(Vec::new()),
            started: AtomicBool::new(false),
        });
        Self {
            sh,
            buffer: VecDeque::new(),
            claim: None,
            want: 0,
            idle: None,
            db_backoff: Duration::from_millis(100),
            close: None,
        }
    }

    /// Live counters (shared with the acknowledger and the worker report).
    pub fn stats(&self) -> Arc<WorkerStats> {
        self.sh.stats.clone()
    }

    /// The acknowledger to pass to `ack_with`.
    pub fn acknowledger(&self) -> AgentdAck {
        AgentdAck {
            sh: self.sh.clone(),
        }
    }

    /// The layer counting running handlers (put it inside the concurrency limit).
    pub fn running_layer(&self) -> RunningLayer {
        RunningLayer {
            sh: self.sh.clone(),
        }
    }
}

impl Backend for AgentdBackend {
    type Task = Task<ClaimedJob>;
    type Error = QueueError;

    fn poll_ready(
        &mut self,
        _cx: &mut Context<'_>,
        _worker: &WorkerContext,
    ) -> Poll<Result<(), Self::Error>> {
        self.sh.start_background();
        Poll::Ready(Ok(()))
    }

    fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
        _worker: &WorkerContext,
    ) -> Poll<Option<Result<Self::Task, Self::Error>>> {
        loop {
            if let Some(job) = self.buffer.pop_front() {
                let cancel = {
                    let held = self.sh.held.lock().expect("held");
                    match held.get(&job.id) {
                        Some(h) if h.attempt == job.attempt => h.cancel.clone(),
                        // Lost or released before it started: not ours to run.
                        _ => continue,
                    }
                };
                return Poll::Ready(Some(Ok(self.sh.task(job, cancel))));
            }
            if let Some(claim) = self.claim.as_mut() {
                let res = ready!(claim.poll_unpin(cx));
                self.claim = None;
                let res = res
                    .map_err(|e| QueueError::Invalid(format!("claim task failed: {e}")))
                    .and_then(|r| r);
                match res {
                    Ok(jobs) => {
                        self.sh.stats.db_ok.store(true, Ordering::Relaxed);
                        self.db_backoff = Duration::from_millis(100);
                        if (jobs.len() as u32) < self.want {
                            self.idle = Some(self.sh.clone().idle().boxed());
                        }
                        self.buffer.extend(jobs);
                    }
                    Err(e) => {
                        self.sh.stats.db_ok.store(false, Ordering::Relaxed);
                        warn!(kinds = ?self.sh.kinds, error = %e, retry_in = ?self.db_backoff, "claim failed");
                        self.idle = Some(tokio::time::sleep(self.db_backoff).boxed());
                        self.db_backoff = (self.db_backoff * 2).min(Duration::from_secs(5));
                    }
                }
                continue;
            }
            if let Some(idle) = self.idle.as_mut() {
                ready!(idle.poll_unpin(cx));
                self.idle = None;
            }
            // apalis reserved one slot before calling us; claim what fits the free slots.
            let running = self.sh.running.load(Ordering::SeqCst);
            let free = self.sh.concurrency.saturating_sub(running).max(1);
            self.want = (free as u32).min(self.sh.opts.claim_batch.max(1));
            self.claim = Some(tokio::spawn(self.sh.clone().claim(self.want)));
        }
    }

    fn poll_close(
        &mut self,
        cx: &mut Context<'_>,
        _worker: &WorkerContext,
    ) -> Poll<Result<(), Self::Error>> {
        if self.close.is_none() {
            let claim = self.claim.take();
            self.idle = None;
            self.buffer.clear();
            let sh = self.sh.clone();
            self.close = Some(
                async move {
                    if let Some(c) = claim {
                        let _ = c.await;
                    }
                    // apalis drains every task future before poll_close (call_all.rs 162-167):
                    // whatever is still held was claimed but never started.
                    sh.release_held("claimed but not started before shutdown")
                        .await;
                    sh.closing.cancel();
                    let handles = std::mem::take(&mut *sh.background.lock().expect("background"));
                    for h in handles {
                        let _ = h.await;
                    }
                }
                .boxed(),
            );
        }
        self.close
            .as_mut()
            .expect("close future")
            .poll_unpin(cx)
            .map(Ok)
    }
}

impl BackendConfig for AgentdBackend {
    type Args = ClaimedJob;
    type Id = i64;
    type Kind = Ephemeral;
    type Config = WorkerOptions;
    type Layer = GraceLayer;

    fn config(&self) -> &Self::Config {
        &self.sh.opts
    }

    fn middleware(&mut self, _worker: &mut WorkerContext) -> Self::Layer {
        GraceLayer {
            grace_over: self.sh.grace_over.clone(),
        }
    }
}

/// The backend's middleware (outermost): when the shutdown grace period is over, every
/// unfinished task future ends with [`Released`], dropping (and so aborting) its handler.
#[derive(Debug, Clone)]
pub struct GraceLayer {
    grace_over: CancellationToken,
}

impl<S> Layer<S> for GraceLayer {
    type Service = GraceService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GraceService {
            inner,
            grace_over: self.grace_over.clone(),
        }
    }
}

/// See [`GraceLayer`].
#[derive(Debug, Clone)]
pub struct GraceService<S> {
    inner: S,
    grace_over: CancellationToken,
}

impl<S, Args> Service<Task<Args>> for GraceService<S>
where
    S: Service<Task<Args>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxDynError>,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxDynError;
    type Future = BoxFuture<'static, Result<S::Response, BoxDynError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, task: Task<Args>) -> Self::Future {
        let grace_over = self.grace_over.clone();
        let fut = self.inner.call(task);
        async move {
            tokio::select! {
                biased;
                r = fut => r.map_err(Into::into),
                _ = grace_over.cancelled() => Err(Box::new(Released) as BoxDynError),
            }
        }
        .boxed()
    }
}

/// Counts running handlers (claims are sized to the free slots) and runs each job in a
/// `job` span like the native worker. Sits under `parallelize`, so the count drops when the
/// spawned handler ends or is aborted.
#[derive(Clone)]
pub struct RunningLayer {
    sh: Arc<Shared>,
}

impl<S> Layer<S> for RunningLayer {
    type Service = RunningService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RunningService {
            inner,
            sh: self.sh.clone(),
        }
    }
}

/// See [`RunningLayer`].
#[derive(Clone)]
pub struct RunningService<S> {
    inner: S,
    sh: Arc<Shared>,
}

struct RunningGuard(Arc<Shared>);

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

impl<S> Service<Task<ClaimedJob>> for RunningService<S>
where
    S: Service<Task<ClaimedJob>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxDynError>,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxDynError;
    type Future = BoxFuture<'static, Result<S::Response, BoxDynError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, task: Task<ClaimedJob>) -> Self::Future {
        let span = info_span!("job", id = task.args.id, kind = %task.args.kind, attempt = task.args.attempt);
        self.sh.running.fetch_add(1, Ordering::SeqCst);
        let guard = RunningGuard(self.sh.clone());
        let fut = self.inner.call(task);
        async move {
            let _guard = guard;
            fut.await.map_err(Into::into)
        }
        .instrument(span)
        .boxed()
    }
}

/// Our [`JobHandler`] as the apalis service.
#[derive(Clone)]
pub struct HandlerService {
    handler: Arc<dyn JobHandler>,
}

impl HandlerService {
    pub fn new(handler: Arc<dyn JobHandler>) -> Self {
        Self { handler }
    }
}

impl Service<Task<ClaimedJob>> for HandlerService {
    type Response = ();
    type Error = JobError;
    type Future = BoxFuture<'static, Result<(), JobError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, task: Task<ClaimedJob>) -> Self::Future {
        let cancel = task
            .data()
            .get::<JobToken>()
            .map(|t| t.cancel.clone())
            .unwrap_or_default();
        let handler = self.handler.clone();
        let (job, _ctx) = task.take();
        async move { handler.handle(JobContext { job, cancel }).await }.boxed()
    }
}

/// The apalis acknowledger: writes each task's outcome to `agentd_jobs`, fenced by attempt.
/// Success → `complete_many` (batched with whatever else is pending); failure → `fail` with
/// the kind's backoff written to `run_at`, `dead` when fatal or out of attempts. Resolves when
/// the write is done; a stale attempt resolves to [`AckError::Stale`].
#[derive(Clone)]
pub struct AgentdAck {
    sh: Arc<Shared>,
}

impl Acknowledge<()> for AgentdAck {
    type Error = AckError;
    type Future = BoxFuture<'static, Result<(), AckError>>;

    fn ack(&mut self, res: &Result<(), BoxDynError>, ctx: &ExecutionContext) -> Self::Future {
        let sh = self.sh.clone();
        let meta = match JobMeta::extract(ctx.metadata()) {
            Ok(m) => m,
            Err(e) => return async move { Err(AckError::Meta(e)) }.boxed(),
        };
        let policy = sh.policies.get(&meta.kind);
        let outcome = match res {
            Ok(()) => Outcome::Succeeded,
            Err(e) => {
                let (message, fatal) = classify(e, policy.map(|p| p.timeout));
                let delay = policy.map(|p| p.backoff.delay(meta.attempt));
                let retry_at = sh.clock.now()
                    + chrono::Duration::from_std(delay.unwrap_or_default()).unwrap_or_default();
                Outcome::Failed {
                    message,
                    fatal,
                    retry_at,
                }
            }
        };
        // Whoever removes the held entry owns the outcome: a lost lease (heartbeat) or a
        // release at shutdown took it first, and this attempt reports nothing.
        let held = {
            let mut held = sh.held.lock().expect("held");
            match held.get(&meta.id) {
                Some(h) if h.attempt == meta.attempt => held.remove(&meta.id),
                _ => None,
            }
        };
        if held.is_none() {
            sh.stats.stale.fetch_add(1, Ordering::Relaxed);
            debug!(
                job.id = meta.id,
                attempt = meta.attempt,
                "attempt no longer held; outcome dropped"
            );
            return async move {
                Err(AckError::NotHeld {
                    id: meta.id,
                    attempt: meta.attempt,
                })
            }
            .boxed();
        }
        let (reply, rx) = oneshot::channel();
        let sent = sh.ack_tx.send(AckRequest {
            id: meta.id,
            attempt: meta.attempt,
            kind: meta.kind,
            outcome,
            elapsed: ctx.data().get::<JobToken>().map(|t| t.yielded_at.elapsed()),
            reply,
        });
        let (id, attempt) = (meta.id, meta.attempt);
        async move {
            sent.map_err(|_| AckError::Closed)?;
            match rx.await {
                Ok(Ok(AckOutcome::Stale)) => Err(AckError::Stale { id, attempt }),
                Ok(Ok(_)) => Ok(()),
                Ok(Err(message)) => Err(AckError::Db { id, message }),
                Err(_) => Err(AckError::Closed),
            }
        }
        .boxed()
    }
}

/// A failed run's message and whether it is fatal (dead at once).
fn classify(e: &BoxDynError, timeout: Option<Duration>) -> (String, bool) {
    if let Some(j) = e.downcast_ref::<JobError>() {
        return (j.to_string(), !j.is_retryable());
    }
    if e.is::<Elapsed>() {
        let secs = timeout.map(|t| t.as_secs_f64()).unwrap_or_default();
        return (
            format!("timed out after {secs:.1}s (queue.timeout_secs)"),
            false,
        );
    }
    if let Some(p) = e.downcast_ref::<PanicError>() {
        return (format!("handler panicked: {}", p.0), false);
    }
    if let Some(j) = e.downcast_ref::<JoinError>() {
        return (format!("handler task ended abnormally: {j}"), false);
    }
    (e.to_string(), false)
}

fn panic_error(p: &Box<dyn Any + Send>) -> PanicError {
    PanicError(
        p.downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into()),
    )
}

/// A spawned task that is aborted when this handle is dropped (apalis `parallelize` executor).
pub struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.poll_unpin(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `tokio::spawn`, but dropping the handle cancels the task.
pub fn spawn_abort_on_drop<F>(fut: F) -> AbortOnDrop<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    AbortOnDrop(tokio::spawn(fut))
}

async fn ack_loop(sh: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<AckRequest>) {
    let mut batch = Vec::new();
    loop {
        let first = tokio::select! {
            biased;
            r = rx.recv() => match r {
                Some(r) => r,
                None => break,
            },
            // Only reached with nothing queued: every ack sent before closing was flushed.
            _ = sh.closing.cancelled() => break,
        };
        batch.push(first);
        while batch.len() < 1000 {
            match rx.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        flush(&sh, std::mem::take(&mut batch)).await;
    }
}

async fn flush(sh: &Shared, batch: Vec<AckRequest>) {
    let now = sh.clock.now();
    let ok: Vec<(i64, i32)> = batch
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Succeeded))
        .map(|r| (r.id, r.attempt))
        .collect();
    let acked: Result<HashSet<i64>, String> = if ok.is_empty() {
        Ok(HashSet::new())
    } else {
        super::worker::retry_db(|| store::complete_many(&sh.pool, &ok, now))
            .await
            .map(|v| v.into_iter().collect())
            .map_err(|e| e.to_string())
    };
    for req in batch {
        if let Some(d) = req.elapsed {
            metrics::histogram!("agentd_job_duration_seconds", "kind" => req.kind.clone())
                .record(d.as_secs_f64());
        }
        let result = match &req.outcome {
            Outcome::Succeeded => match &acked {
                Ok(set) if set.contains(&req.id) => {
                    sh.stats.succeeded.fetch_add(1, Ordering::Relaxed);
                    metrics::counter!("agentd_jobs_succeeded_total", "kind" => req.kind.clone())
                        .increment(1);
                    Ok(AckOutcome::Succeeded)
                }
                Ok(_) => {
                    sh.stats.stale.fetch_add(1, Ordering::Relaxed);
                    warn!(
                        job.id = req.id,
                        attempt = req.attempt,
                        "stale attempt: success ignored"
                    );
                    Ok(AckOutcome::Stale)
                }
                Err(m) => {
                    error!(job.id = req.id, error = %m, "could not record success; the lease will expire and the job is retried");
                    Err(m.clone())
                }
            },
            Outcome::Failed {
                message,
                fatal,
                retry_at,
            } => {
                let res = super::worker::retry_db(|| {
                    store::fail(
                        &sh.pool,
                        req.id,
                        req.attempt,
                        message,
                        *fatal,
                        *retry_at,
                        now,
                    )
                })
                .await;
                match res {
                    Ok(FailOutcome::Retry) => {
                        sh.stats.retried.fetch_add(1, Ordering::Relaxed);
                        metrics::counter!("agentd_jobs_failed_total", "kind" => req.kind.clone())
                            .increment(1);
                        warn!(job.id = req.id, kind = %req.kind, attempt = req.attempt, error = %message, retry_at = %retry_at, "job failed; will retry");
                        Ok(AckOutcome::Retry)
                    }
                    Ok(FailOutcome::Dead) => {
                        sh.stats.dead.fetch_add(1, Ordering::Relaxed);
                        metrics::counter!("agentd_jobs_dead_total", "kind" => req.kind.clone())
                            .increment(1);
                        error!(job.id = req.id, kind = %req.kind, attempt = req.attempt, error = %message, fatal, "job is dead");
                        Ok(AckOutcome::Dead)
                    }
                    Ok(FailOutcome::Stale) => {
                        sh.stats.stale.fetch_add(1, Ordering::Relaxed);
                        Ok(AckOutcome::Stale)
                    }
                    Err(e) => {
                        error!(job.id = req.id, error = %e, "could not record the failure; the lease will expire and the job is retried");
                        Err(e.to_string())
                    }
                }
            }
        };
        let _ = req.reply.send(result);
    }
}

async fn heartbeat_loop(sh: Arc<Shared>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(sh.opts.heartbeat) => {},
            _ = sh.closing.cancelled() => return,
        }
        let held: Vec<(i64, i32)> = sh
            .held
            .lock()
            .expect("held")
            .iter()
            .map(|(id, h)| (*id, h.attempt))
            .collect();
        if held.is_empty() {
            continue;
        }
        match store::heartbeat(&sh.pool, &held, sh.clock.now(), sh.lease()).await {
            Ok(kept) => {
                sh.stats.db_ok.store(true, Ordering::Relaxed);
                let kept: HashSet<i64> = kept.into_iter().collect();
                let mut map = sh.held.lock().expect("held");
                for (id, attempt) in held {
                    if kept.contains(&id) {
                        continue;
                    }
                    if map.get(&id).is_some_and(|h| h.attempt == attempt)
                        && let Some(h) = map.remove(&id)
                    {
                        warn!(
                            job.id = id,
                            attempt, "lease lost (rescued or cancelled); stopping this attempt"
                        );
                        h.cancel.cancel();
                    }
                }
            }
            Err(e) => {
                sh.stats.db_ok.store(false, Ordering::Relaxed);
                warn!(error = %e, "heartbeat failed; leases may expire");
            }
        }
    }
}

type RunFuture = Pin<Box<dyn Future<Output = Result<(), WorkerError>> + Send>>;

/// One kind's apalis worker over `agentd_jobs`, ready to [`run`](ApalisWorker::run).
pub struct ApalisWorker {
    ctx: WorkerContext,
    sh: Arc<Shared>,
    fut: RunFuture,
}

impl ApalisWorker {
    /// Live counters.
    pub fn stats(&self) -> Arc<WorkerStats> {
        self.sh.stats.clone()
    }

    /// apalis's worker context (name, state, pause/resume).
    pub fn context(&self) -> &WorkerContext {
        &self.ctx
    }

    /// Runs until `shutdown` is cancelled, then stops claiming (`WorkerContext::stop`), waits up
    /// to the grace period for in-flight jobs and releases the rest so another worker takes
    /// them at once.
    pub async fn run(self, shutdown: CancellationToken) -> WorkerReport {
        let ApalisWorker { ctx, sh, mut fut } = self;
        info!(worker = ctx.name(), kinds = ?sh.kinds, "apalis worker started");
        // Biased: the worker is polled (and so started) before a stop can be requested;
        // `stop()` on a worker that never started fails (context.rs 191-195).
        let early = tokio::select! {
            biased;
            r = &mut fut => Some(r),
            _ = shutdown.cancelled() => None,
        };
        let result = match early {
            Some(r) => r,
            None => {
                if let Err(e) = ctx.stop() {
                    warn!(error = %e, "could not stop the apalis worker");
                }
                let pending = sh.held.lock().expect("held").len();
                if pending > 0 {
                    info!(pending, grace = ?sh.opts.shutdown_grace, "shutting down: waiting for in-flight jobs");
                }
                match tokio::time::timeout(sh.opts.shutdown_grace, &mut fut).await {
                    Ok(r) => r,
                    Err(_) => {
                        sh.grace_over.cancel();
                        sh.release_held("shutdown grace period over").await;
                        fut.await
                    }
                }
            }
        };
        if let Err(e) = &result {
            error!(error = %e, "apalis worker ended with an error");
        }
        // If the worker ended without poll_close (an error), still give back what we hold.
        sh.release_held("worker ended").await;
        sh.closing.cancel();
        let handles = std::mem::take(&mut *sh.background.lock().expect("background"));
        for h in handles {
            let _ = h.await;
        }
        let s = &sh.stats;
        WorkerReport {
            succeeded: s.succeeded.load(Ordering::Relaxed),
            failed: s.retried.load(Ordering::Relaxed) + s.dead.load(Ordering::Relaxed),
            released: s.released.load(Ordering::Relaxed),
        }
    }
}

/// apalis's `WorkerBuilder` over [`AgentdBackend`] for one kind, running our [`JobHandler`]
/// with the kind's concurrency, timeout and backoff (see the module docs for the layers).
pub fn build_worker(
    pool: PgPool,
    clock: SharedClock,
    opts: &WorkerOptions,
    kind: KindRuntime,
) -> ApalisWorker {
    let concurrency = kind.concurrency.max(1);
    let backend = AgentdBackend::new(
        pool,
        clock,
        opts,
        vec![KindPolicy {
            kind: kind.kind.clone(),
            backoff: kind.backoff,
            timeout: kind.timeout,
        }],
        concurrency,
    );
    let sh = backend.sh.clone();
    let ack = backend.acknowledger();
    let running = backend.running_layer();
    let ctx = WorkerContext::new(&format!("{}:{}", opts.worker_id, kind.kind));
    let on_panic: fn(&Box<dyn Any + Send>) -> PanicError = panic_error;
    let worker = WorkerBuilder::new(&ctx)
        .backend(backend)
        .ack_with(ack)
        .concurrency(concurrency)
        .parallelize(spawn_abort_on_drop)
        .layer(running)
        .layer(CatchPanicLayer::with_panic_handler(on_panic))
        .layer(TimeoutLayer::new(kind.timeout))
        .build(HandlerService::new(kind.handler));
    ApalisWorker {
        ctx,
        sh,
        fut: Box::pin(worker.run()),
    }
}

/// The kind [`drain_benchmark`] enqueues and drains.
pub const BENCH_KIND: &str = "bench_apalis_noop";

struct Noop;

#[async_trait::async_trait]
impl JobHandler for Noop {
    async fn handle(&self, _job: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Which runtime [`drain`] measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainRuntime {
    /// apalis's worker over [`AgentdBackend`] ([`build_worker`]).
    Apalis,
    /// The native [`Worker`].
    Native,
}

/// No-op drain with the apalis runtime: enqueues `n` jobs of [`BENCH_KIND`] into `pool`'s
/// `agentd_jobs`, starts the worker at `concurrency` and returns jobs/s from start until the
/// `n`-th ack is written. The table should hold no other ready jobs of that kind.
pub async fn drain_benchmark(pool: &PgPool, n: u64, concurrency: usize) -> anyhow::Result<f64> {
    drain(pool, n, concurrency, DrainRuntime::Apalis).await
}

/// [`drain_benchmark`] with the native [`Worker`], measured the same way.
pub async fn drain_benchmark_native(
    pool: &PgPool,
    n: u64,
    concurrency: usize,
) -> anyhow::Result<f64> {
    drain(pool, n, concurrency, DrainRuntime::Native).await
}

/// The drain both benchmark entry points share: same backlog, options and clock.
pub async fn drain(
    pool: &PgPool,
    n: u64,
    concurrency: usize,
    runtime: DrainRuntime,
) -> anyhow::Result<f64> {
    let mut left = n;
    while left > 0 {
        let k = left.min(5_000);
        let jobs: Vec<NewJob> = (0..k)
            .map(|i| NewJob::new(BENCH_KIND, serde_json::json!({ "n": i })))
            .collect();
        super::enqueue_many(pool, &jobs).await?;
        left -= k;
    }
    sqlx::raw_sql("VACUUM ANALYZE agentd_jobs")
        .execute(pool)
        .await?;
    let opts = WorkerOptions {
        worker_id: format!("bench-{runtime:?}:{}", uuid::Uuid::new_v4().simple()),
        claim_batch: 64,
        poll_interval: Duration::from_millis(1000),
        lease: Duration::from_secs(30),
        heartbeat: Duration::from_secs(10),
        shutdown_grace: Duration::from_secs(20),
    };
    let kind = KindRuntime {
        kind: BENCH_KIND.into(),
        handler: Arc::new(Noop),
        concurrency,
        timeout: Duration::from_secs(60),
        backoff: Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(60),
        },
    };
    let clock = crate::clock::system();
    let stop = CancellationToken::new();
    let t0 = Instant::now();
    let (stats, handle) = match runtime {
        DrainRuntime::Apalis => {
            let w = build_worker(pool.clone(), clock, &opts, kind);
            let stats = w.stats();
            (stats, tokio::spawn(w.run(stop.clone())))
        }
        DrainRuntime::Native => {
            let w = Worker::new(pool.clone(), clock, opts, vec![kind]);
            let stats = w.stats();
            (stats, tokio::spawn(w.run(stop.clone())))
        }
    };
    let cap = Duration::from_secs(600);
    while stats.succeeded.load(Ordering::Relaxed) < n && t0.elapsed() < cap {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let secs = t0.elapsed().as_secs_f64();
    let done = stats.succeeded.load(Ordering::Relaxed);
    stop.cancel();
    let _ = handle.await;
    anyhow::ensure!(
        done >= n,
        "{runtime:?} drained only {done} of {n} jobs in {secs:.1}s"
    );
    Ok(done as f64 / secs)
}
