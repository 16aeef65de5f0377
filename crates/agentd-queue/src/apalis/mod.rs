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
//!    `fail` each, one statement per failure) and answers each ack when its batch is written, so a
//!    task ends only after its outcome is durable. The ack sits outside the concurrency limit,
//!    so a finished handler frees its slot before its ack lands .
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
//!
//! [`Backend`]: apalis_core::backend::Backend
//! [`store::claim`]: crate::store::claim
//! [`store::release`]: crate::store::release
//! [`JobHandler`]: crate::worker::JobHandler
//! [`JobContext::cancel`]: crate::worker::JobContext::cancel

use super::QueueError;
use super::backoff::Backoff;
use super::worker::{KindRuntime, WorkerOptions, WorkerReport, WorkerStats};
use crate::clock::SharedClock;
use ::apalis::layers::WorkerBuilderExt;
use ::apalis::layers::catch_panic::{CatchPanicLayer, PanicError};
use apalis_core::error::WorkerError;
use apalis_core::task::metadata::{Metadata, MetadataStore};
use apalis_core::worker::builder::WorkerBuilder;
use apalis_core::worker::context::WorkerContext;
use apalis_core::worker::ext::ack::AcknowledgementExt;
use apalis_core::worker::ext::parallelize::ParallelizeExt;
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tower::timeout::TimeoutLayer;
use tracing::{error, info, warn};

mod ack;
mod backend;
mod layers;

pub use ack::*;
pub use backend::*;
pub use layers::*;

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
    /// Succeeded jobs are deleted ([`crate::store::delete_succeeded`]) instead of kept.
    pub delete_on_success: bool,
    /// See [`KindRuntime::max_running_per_org`].
    pub max_running_per_org: Option<u32>,
    /// See [`KindRuntime::newcomer_slots`].
    pub newcomer_slots: usize,
}

/// An attempt this process holds a lease on (claimed and not yet settled). After a failed
/// heartbeat, [`crate::lease::give_up_expired`] cancels it if its lease may have expired.
pub(crate) struct Held {
    pub(crate) attempt: i32,
    /// The job's org ([`crate::fair::org_key`]): what newcomer slots count.
    org: String,
    /// Stops the handler (its provider call and tools).
    pub(crate) cancel: CancellationToken,
    /// When the claim or heartbeat that last extended this lease was sent.
    pub(crate) renewed_at: Instant,
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
    /// The batch's write error is shared by every ack in the batch.
    reply: oneshot::Sender<Result<AckOutcome, Arc<QueueError>>>,
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
    #[error("job {id}: could not record the outcome ({source}); the lease will expire")]
    Db { id: i64, source: Arc<QueueError> },
    #[error("the acker has stopped")]
    Closed,
}

/// A task ended by [`GraceLayer`]: the shutdown grace period is over and its attempt was
/// released for another worker.
#[derive(Debug, thiserror::Error)]
#[error("released at shutdown: the grace period ended before the handler did")]
pub struct Released;

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

/// apalis's `WorkerBuilder` over [`AgentdBackend`] for one kind, running our
/// [`JobHandler`](crate::worker::JobHandler) with the kind's concurrency, timeout and backoff (see
/// the module docs for the layers).
pub fn build_worker(
    pool: PgPool,
    clock: SharedClock,
    opts: &WorkerOptions,
    kind: KindRuntime,
) -> ApalisWorker {
    build_scoped_worker(pool, clock, opts, kind, None)
}

/// [`build_worker`] claiming only the jobs whose payload names `only_org` (when given): the
/// worker `agentd eval` runs beside whatever else the database holds.
pub fn build_scoped_worker(
    pool: PgPool,
    clock: SharedClock,
    opts: &WorkerOptions,
    kind: KindRuntime,
    only_org: Option<uuid::Uuid>,
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
            delete_on_success: kind.delete_on_success,
            max_running_per_org: kind.max_running_per_org,
            newcomer_slots: kind.newcomer_slots,
        }],
        only_org,
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
