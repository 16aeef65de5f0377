//! [`AgentdBackend`]: the apalis-core `Backend` over `agentd_jobs` (claims, wake-ups, held
//! leases and their renewal).

use super::ack::{AgentdAck, ack_loop};
use super::layers::{AroundLayer, Grace, GraceLayer, Running, RunningLayer};
use super::{AckRequest, Held, JobMeta, JobToken, KindPolicy};
use crate::clock::SharedClock;
use crate::store;
use crate::worker::{WorkerOptions, WorkerStats};
use crate::{ClaimedJob, QueueError};
use apalis_core::backend::finalize::Ephemeral;
use apalis_core::backend::{Backend, BackendConfig};
use apalis_core::task::Task;
use apalis_core::task::builder::TaskBuilder;
use apalis_core::task::task_id::TaskId;
use apalis_core::worker::context::WorkerContext;
use futures::FutureExt;
use futures::future::BoxFuture;
use sqlx::PgPool;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

pub(super) struct Shared {
    pub(super) pool: PgPool,
    pub(super) clock: SharedClock,
    pub(super) opts: WorkerOptions,
    pub(super) kinds: Vec<String>,
    /// Claims only jobs whose payload names this org (`agentd eval`); `None`: every job.
    pub(super) only_org: Option<uuid::Uuid>,
    pub(super) policies: HashMap<String, KindPolicy>,
    pub(super) concurrency: usize,
    pub(super) stats: Arc<WorkerStats>,
    pub(super) held: Mutex<HashMap<i64, Held>>,
    /// Handlers running now (see [`RunningLayer`]).
    pub(super) running: AtomicUsize,
    /// How long a handler that succeeds takes, in µs, weighted toward the latest (`f64` bits; 0:
    /// no job succeeded yet). Sizes an automatic prefetch.
    pub(super) job_micros: AtomicU64,
    /// How long a claim takes to come back, in µs, weighted toward the latest (`f64` bits; 0:
    /// none yet). Says when a read-ahead claim must start ([`read_ahead_at`]).
    pub(super) claim_micros: AtomicU64,
    pub(super) wake: Arc<Notify>,
    /// Fired by [`super::ApalisWorker::run`] when the shutdown grace period is over.
    pub(super) grace_over: CancellationToken,
    /// Stops the listener, the heartbeat and (after draining) the acker.
    pub(super) closing: CancellationToken,
    pub(super) ack_tx: mpsc::UnboundedSender<AckRequest>,
    pub(super) ack_rx: Mutex<Option<mpsc::UnboundedReceiver<AckRequest>>>,
    pub(super) background: Mutex<Vec<JoinHandle<()>>>,
    pub(super) started: AtomicBool,
    /// The kind's newcomer slots (one kind, every org): see [`Shared::newcomer_share`].
    pub(super) newcomer_slots: usize,
    /// When this worker last claimed a job of each org (kept for [`NEWCOMER_WINDOW`]).
    pub(super) seen: Mutex<HashMap<String, Instant>>,
    /// Set by every NOTIFY (a job was enqueued): a newcomer claim may be due (see
    /// [`AgentdBackend`]).
    pub(super) arrived: Arc<Notify>,
    /// Jobs of newcomer claims, handed out before the buffer.
    pub(super) front: Mutex<VecDeque<ClaimedJob>>,
    /// Stops newcomer claims (the worker is closing); the task is awaited before the held jobs
    /// are released, so none is claimed after.
    pub(super) stop_claims: CancellationToken,
    pub(super) newcomer_task: Mutex<Option<JoinHandle<()>>>,
}

/// How long after this worker last claimed a job of another org the newcomer slots stay kept.
pub const NEWCOMER_WINDOW: Duration = Duration::from_secs(60);

impl Shared {
    /// With newcomer slots, and another org's job claimed here within [`NEWCOMER_WINDOW`]: no
    /// org may hold more than `concurrency - newcomer_slots` of this worker's jobs (claimed,
    /// buffered or running; plus the prefetch), so that many slots stay for the other orgs'
    /// jobs as they arrive. Alone (no other org lately), an org has every slot (`None`).
    pub(super) fn newcomer_share(&self, prefetch: u32) -> Option<crate::fair::WorkerShare> {
        let n = self.newcomer_slots;
        if n == 0 || self.kinds.len() != 1 || self.only_org.is_some() {
            return None;
        }
        let holds = self.holds();
        // Two orgs or more lately: those holding jobs here and those claimed in the window.
        let lately = self
            .seen
            .lock()
            .expect("seen")
            .iter()
            .filter(|(org, at)| at.elapsed() < NEWCOMER_WINDOW && !holds.contains_key(*org))
            .count();
        if holds.len() + lately < 2 {
            return None;
        }
        let max = self.concurrency.saturating_sub(n) + prefetch as usize;
        Some(crate::fair::WorkerShare {
            max: u32::try_from(max).unwrap_or(u32::MAX),
            holds,
        })
    }

    /// The share of a newcomer claim: one job for each org that holds none of this worker's
    /// jobs (the orgs holding some are at their cap, walked past). `None` when nothing is held
    /// (the ordinary claim serves every org) or claims here are not shared by org (several
    /// kinds, or one org's jobs only).
    pub(super) fn newcomer_claim_share(&self) -> Option<crate::fair::WorkerShare> {
        if self.kinds.len() != 1 || self.only_org.is_some() {
            return None;
        }
        let holds = self.holds();
        (!holds.is_empty()).then_some(crate::fair::WorkerShare { max: 1, holds })
    }

    /// How many jobs each org holds in this worker (claimed, buffered or running).
    fn holds(&self) -> HashMap<String, u32> {
        let mut holds: HashMap<String, u32> = HashMap::new();
        for h in self.held.lock().expect("held").values() {
            *holds.entry(h.org.clone()).or_default() += 1;
        }
        holds
    }

    /// Takes in how long one handler ran (a moving average: each job weighs 1/16).
    pub(super) fn record_duration(&self, took: Duration) {
        moving_average(&self.job_micros, took, 16.0);
    }

    /// The buffer length at which a read-ahead claim starts ([`read_ahead_at`]).
    pub(super) fn read_ahead_at(&self, prefetch: u32) -> usize {
        read_ahead_at(
            prefetch,
            self.concurrency,
            average(&self.job_micros),
            average(&self.claim_micros),
        )
    }

    /// The prefetch buffer's size now (see [`crate::worker::Prefetch`]), at most a claim.
    pub(super) fn prefetch(&self) -> u32 {
        self.opts
            .prefetch
            .size(self.concurrency, average(&self.job_micros))
            .min(self.opts.claim_batch.max(1))
    }

    pub(super) fn lease(&self) -> chrono::Duration {
        chrono::Duration::from_std(self.opts.lease).expect("lease fits")
    }

    pub(super) fn start_background(self: &Arc<Self>) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut bg = self.background.lock().expect("background");
        bg.push(tokio::spawn(crate::worker::listen(
            crate::db::pooling::listen_pool(&self.pool),
            vec![self.wake.clone(), self.arrived.clone()],
            self.closing.clone(),
        )));
        bg.push(tokio::spawn(heartbeat_loop(self.clone())));
        if let Some(rx) = self.ack_rx.lock().expect("ack rx").take() {
            bg.push(tokio::spawn(ack_loop(self.clone(), rx)));
        }
        drop(bg);
        if self.kinds.len() == 1 && self.only_org.is_none() {
            *self.newcomer_task.lock().expect("newcomer task") =
                Some(tokio::spawn(newcomer_loop(self.clone())));
        }
    }

    /// Claims up to `want` jobs (none past `share`: newcomer slots) and records them as held
    /// before anyone can see them.
    pub(super) async fn claim(
        self: Arc<Self>,
        want: u32,
        share: Option<crate::fair::WorkerShare>,
    ) -> Result<Vec<ClaimedJob>, QueueError> {
        let sent = Instant::now();
        let per_org = match self.kinds.as_slice() {
            [one] => self.policies.get(one).and_then(|p| p.max_running_per_org),
            _ => None,
        };
        let jobs = match (&share, self.kinds.as_slice()) {
            (Some(share), [kind]) => {
                crate::fair::claim_capped(
                    &self.pool,
                    kind,
                    per_org,
                    Some(share),
                    want,
                    &self.opts.worker_id,
                    self.clock.lease_now(),
                    self.lease(),
                )
                .await?
            }
            _ => {
                store::claim_scoped(
                    &self.pool,
                    &self.kinds,
                    self.only_org,
                    per_org,
                    want,
                    &self.opts.worker_id,
                    self.clock.lease_now(),
                    self.lease(),
                )
                .await?
            }
        };
        moving_average(&self.claim_micros, sent.elapsed(), 8.0);
        if self.newcomer_slots > 0 && !jobs.is_empty() {
            let mut seen = self.seen.lock().expect("seen");
            seen.retain(|_, at| at.elapsed() < NEWCOMER_WINDOW);
            for j in &jobs {
                seen.insert(crate::fair::org_key(&j.payload), sent);
            }
        }
        let mut held = self.held.lock().expect("held");
        for j in &jobs {
            // Claimed again while an earlier attempt of it is still held here (its lease was
            // rescued elsewhere, e.g. under clock skew): that attempt is cancelled, not left
            // running beside the new one (review #27).
            if let Some(old) = held.insert(
                j.id,
                Held {
                    attempt: j.attempt,
                    org: crate::fair::org_key(&j.payload),
                    cancel: CancellationToken::new(),
                    renewed_at: sent,
                },
            ) {
                old.cancel.cancel();
            }
            metrics::counter!("agentd_jobs_claimed_total", "kind" => j.kind.clone()).increment(1);
        }
        self.stats
            .claimed
            .fetch_add(jobs.len() as u64, Ordering::Relaxed);
        self.stats
            .largest_claim
            .fetch_max(jobs.len() as u64, Ordering::Relaxed);
        Ok(jobs)
    }

    /// Waits for a NOTIFY, the poll interval, or the next delayed job's `run_at`.
    pub(super) async fn idle(self: Arc<Self>) {
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
    pub(super) async fn release_held(&self, why: &str) -> u64 {
        let left: Vec<(i64, Held)> = self.held.lock().expect("held").drain().collect();
        if left.is_empty() {
            return 0;
        }
        for (_, h) in &left {
            h.cancel.cancel();
        }
        let pairs: Vec<(i64, i32)> = left.iter().map(|(id, h)| (*id, h.attempt)).collect();
        match crate::worker::retry_db(|| store::release(&self.pool, &pairs, self.clock.lease_now()))
            .await
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

    pub(super) fn task(&self, job: ClaimedJob, cancel: CancellationToken) -> Task<ClaimedJob> {
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

/// Takes `took` into the moving average of µs in `avg` (`f64` bits; 0: empty), each new
/// figure weighing `1 / weight`. Concurrent updates may overwrite each other's: an average,
/// not a count.
fn moving_average(avg: &AtomicU64, took: Duration, weight: f64) {
    let us = took.as_secs_f64() * 1e6;
    let old = f64::from_bits(avg.load(Ordering::Relaxed));
    let new = if old > 0.0 {
        old + (us - old) / weight
    } else {
        us.max(0.001)
    };
    avg.store(new.to_bits(), Ordering::Relaxed);
}

/// The moving average [`moving_average`] keeps in `avg`, `None` while it is empty.
fn average(avg: &AtomicU64) -> Option<f64> {
    Some(f64::from_bits(avg.load(Ordering::Relaxed))).filter(|d| *d > 0.0)
}

/// The buffer length at which a read-ahead claim starts, for a buffer of `prefetch` jobs:
/// the jobs the `concurrency` slots start while a claim is out (a claim's round trip
/// `claim_micros` at `job_micros` a job, half again for the spread of both), at least half the
/// prefetch and at most all of it. Starting at half alone left the slots empty for part of
/// every claim under a backlog of short jobs: 250 jobs are 8 ms of a 30k jobs/s drain, and a
/// claim of 500 took 12–15 ms to come back (docs/queue-profile.md). Unknown durations (no job
/// or no claim yet) start it at half.
fn read_ahead_at(
    prefetch: u32,
    concurrency: usize,
    job_micros: Option<f64>,
    claim_micros: Option<f64>,
) -> usize {
    let half = (prefetch as usize / 2).max(1);
    let (Some(job), Some(claim)) = (job_micros, claim_micros) else {
        return half;
    };
    let during = 1.5 * claim * concurrency as f64 / job.max(0.001);
    (during as usize).clamp(half, (prefetch as usize).max(1))
}

/// The apalis backend over `agentd_jobs` for a set of kinds.
///
/// Jobs are claimed into a buffer (free slots plus the prefetch) and start in claim order as
/// slots free up. **Newcomer claims** (issue 30): while the buffer holds jobs, a job enqueued
/// meanwhile (its NOTIFY) would wait for the buffer to drain to half and the next read-ahead
/// claim to reach it, behind every job buffered before it. So on a NOTIFY while claimed jobs
/// wait here, a task of the worker's ([`newcomer_loop`]) makes one claim at once (at most
/// `concurrency` jobs, [`Shared::newcomer_claim_share`]): one ready job of each org that holds
/// none of this worker's jobs, handed out before the buffer. Another org's upload is claimed
/// when it arrives and starts at the next free slot, whatever one org's backlog has buffered.
/// Nothing is preempted; an org already holding a job here waits its turn in the ordinary
/// claims. A drain with nothing enqueued meanwhile makes no such claim, and while they find
/// nothing a stream of NOTIFYs makes at most one every [`NEWCOMER_PAUSE_EMPTY`].
pub struct AgentdBackend {
    pub(super) sh: Arc<Shared>,
    pub(super) buffer: VecDeque<ClaimedJob>,
    pub(super) claim: Option<JoinHandle<Result<Vec<ClaimedJob>, QueueError>>>,
    pub(super) want: u32,
    /// The last claim was full (a backlog): the next one may wait briefly for more free slots.
    pub(super) last_full: bool,
    /// That brief wait happened already for this claim.
    pub(super) waited: bool,
    pub(super) idle: Option<BoxFuture<'static, ()>>,
    pub(super) db_backoff: Duration,
    pub(super) close: Option<BoxFuture<'static, ()>>,
}

impl AgentdBackend {
    /// A backend claiming jobs of `kinds` (of the org `only_org` only, when given) for a worker
    /// running at most `concurrency` handlers.
    pub fn new(
        pool: PgPool,
        clock: SharedClock,
        opts: &WorkerOptions,
        kinds: Vec<KindPolicy>,
        only_org: Option<uuid::Uuid>,
        concurrency: usize,
    ) -> Self {
        let stats = Arc::new(WorkerStats::default());
        stats.db_ok.store(true, Ordering::Relaxed);
        let (ack_tx, ack_rx) = mpsc::unbounded_channel();
        // Newcomer slots are the one kind's (a worker of several kinds keeps none).
        let kinds_newcomer_slots = match kinds.as_slice() {
            [one] => one.newcomer_slots.min(concurrency.saturating_sub(1)),
            _ => 0,
        };
        let sh = Arc::new(Shared {
            pool,
            clock,
            opts: opts.clone(),
            kinds: kinds.iter().map(|k| k.kind.clone()).collect(),
            only_org,
            policies: kinds.into_iter().map(|k| (k.kind.clone(), k)).collect(),
            concurrency: concurrency.max(1),
            stats,
            held: Mutex::new(HashMap::new()),
            running: AtomicUsize::new(0),
            job_micros: AtomicU64::new(0),
            claim_micros: AtomicU64::new(0),
            wake: Arc::new(Notify::new()),
            grace_over: CancellationToken::new(),
            closing: CancellationToken::new(),
            ack_tx,
            ack_rx: Mutex::new(Some(ack_rx)),
            background: Mutex::new(Vec::new()),
            started: AtomicBool::new(false),
            newcomer_slots: kinds_newcomer_slots,
            seen: Mutex::new(HashMap::new()),
            arrived: Arc::new(Notify::new()),
            front: Mutex::new(VecDeque::new()),
            stop_claims: CancellationToken::new(),
            newcomer_task: Mutex::new(None),
        });
        Self {
            sh,
            buffer: VecDeque::new(),
            claim: None,
            want: 0,
            last_full: false,
            waited: false,
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

    /// Takes in the result of a claim: jobs into the buffer; a short claim (no backlog) or an
    /// error makes the next claim wait (NOTIFY, poll, run_at; or the error backoff).
    fn claimed(
        &mut self,
        res: Result<Result<Vec<ClaimedJob>, QueueError>, tokio::task::JoinError>,
    ) {
        let res = res
            .map_err(|e| QueueError::Invalid(format!("claim task failed: {e}")))
            .and_then(|r| r);
        match res {
            Ok(jobs) => {
                self.sh.stats.db_ok.store(true, Ordering::Relaxed);
                self.db_backoff = Duration::from_millis(100);
                self.last_full = jobs.len() as u32 == self.want;
                if (jobs.len() as u32) < self.want {
                    self.idle = Some(self.sh.clone().idle().boxed());
                }
                self.buffer.extend(jobs);
            }
            Err(e) => {
                self.sh.stats.db_ok.store(false, Ordering::Relaxed);
                self.last_full = false;
                warn!(kinds = ?self.sh.kinds, error = %e, retry_in = ?self.db_backoff, "claim failed");
                self.idle = Some(tokio::time::sleep(self.db_backoff).boxed());
                self.db_backoff = (self.db_backoff * 2).min(Duration::from_secs(5));
            }
        }
    }

    /// The layer counting running handlers (put it inside the concurrency limit).
    pub fn running_layer(&self) -> RunningLayer {
        AroundLayer(Running {
            sh: self.sh.clone(),
        })
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
            if let Some(claim) = self.claim.as_mut() {
                match claim.poll_unpin(cx) {
                    Poll::Ready(res) => {
                        self.claim = None;
                        self.claimed(res);
                        continue;
                    }
                    // A read-ahead claim is in flight: serve the buffer meanwhile.
                    Poll::Pending
                        if self.buffer.is_empty()
                            && self.sh.front.lock().expect("front").is_empty() =>
                    {
                        return Poll::Pending;
                    }
                    Poll::Pending => {}
                }
            }
            let prefetch = self.sh.prefetch();
            // Read ahead: with a backlog (the last claim was full) and the buffer down to what
            // the slots start while a claim is out ([`read_ahead_at`]), claim the next batch
            // while the buffered jobs are handed out.
            if prefetch > 0
                && self.claim.is_none()
                && self.idle.is_none()
                && self.last_full
                && !self.buffer.is_empty()
                && self.buffer.len() <= self.sh.read_ahead_at(prefetch)
            {
                self.want = prefetch.min(self.sh.opts.claim_batch.max(1));
                let cap = self.sh.newcomer_share(prefetch);
                self.claim = Some(tokio::spawn(self.sh.clone().claim(self.want, cap)));
            }
            // Newcomer claims' jobs first (see above), then the buffer.
            let next = {
                let front = self.sh.front.lock().expect("front").pop_front();
                front.or_else(|| self.buffer.pop_front())
            };
            if let Some(job) = next {
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
            if self.claim.is_some() {
                continue;
            }
            if let Some(idle) = self.idle.as_mut() {
                ready!(idle.poll_unpin(cx));
                self.idle = None;
            }
            // apalis reserved one slot before calling us; claim what fits the free slots (and
            // the prefetch on top).
            let running = self.sh.running.load(Ordering::SeqCst);
            let free = self.sh.concurrency.saturating_sub(running).max(1);
            // Without prefetch, under a backlog with most slots busy, wait up to 0.5 ms so
            // handlers finishing now free their slots: one bigger claim instead of several of
            // one or two jobs (fewer commits per job). Negligible next to real jobs.
            if prefetch == 0 && self.last_full && free * 2 < self.sh.concurrency && !self.waited {
                self.waited = true;
                self.idle = Some(tokio::time::sleep(Duration::from_micros(500)).boxed());
                continue;
            }
            self.waited = false;
            self.want = (free as u32)
                .saturating_add(prefetch)
                .min(self.sh.opts.claim_batch.max(1));
            // Newcomer slots: no org takes more than its room in this worker; the free slots
            // beyond it wait for other orgs' jobs (a finished job wakes us).
            let cap = self.sh.newcomer_share(prefetch);
            self.claim = Some(tokio::spawn(self.sh.clone().claim(self.want, cap)));
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
                    sh.stop_claims.cancel();
                    let newcomers = sh.newcomer_task.lock().expect("newcomer task").take();
                    if let Some(t) = newcomers {
                        let _ = t.await;
                    }
                    sh.front.lock().expect("front").clear();
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
        AroundLayer(Grace {
            grace_over: self.sh.grace_over.clone(),
        })
    }
}

/// Newcomer claims (see [`AgentdBackend`]): on each NOTIFY while claimed jobs wait in this
/// worker (held beyond the running ones), one claim of one job per org holding none here; the
/// jobs go to [`Shared::front`] and the backend is woken to hand them out.
pub(super) async fn newcomer_loop(sh: Arc<Shared>) {
    let want = u32::try_from(sh.concurrency)
        .unwrap_or(u32::MAX)
        .min(sh.opts.claim_batch.max(1));
    loop {
        tokio::select! {
            _ = sh.arrived.notified() => {},
            _ = sh.stop_claims.cancelled() => return,
        }
        let waiting = sh.held.lock().expect("held").len() > sh.running.load(Ordering::SeqCst);
        if !waiting {
            continue;
        }
        let Some(share) = sh.newcomer_claim_share() else {
            continue;
        };
        let found = match sh.clone().claim(want, Some(share)).await {
            Ok(jobs) if jobs.is_empty() => false,
            Ok(jobs) => {
                sh.front.lock().expect("front").extend(jobs);
                sh.wake.notify_one();
                true
            }
            Err(e) => {
                debug!(kinds = ?sh.kinds, error = %e, "newcomer claim failed");
                false
            }
        };
        // A bound on the statements that find nothing (a busy org's own enqueues, say, while it
        // alone holds jobs here): NOTIFYs during the pause make one claim after it. A claim
        // that took jobs is their pickup, so the next one is not held back. Both pauses cost
        // pickup time in the fairness bench (quiet p95: none 15 ms, 20 ms after a claim that
        // took jobs 51 ms, 100 ms after an empty one 76 ms).
        if !found {
            tokio::select! {
                _ = tokio::time::sleep(NEWCOMER_PAUSE_EMPTY) => {},
                _ = sh.stop_claims.cancelled() => return,
            }
        }
    }
}

/// The least time between two newcomer claims of a worker after one that took none.
pub const NEWCOMER_PAUSE_EMPTY: Duration = Duration::from_millis(10);

pub(super) async fn heartbeat_loop(sh: Arc<Shared>) {
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
        let sent = Instant::now();
        let write = store::heartbeat(&sh.pool, &held, sh.clock.lease_now(), sh.lease());
        match crate::lease::bounded(sh.opts.heartbeat, write).await {
            Ok(kept) => {
                sh.stats.db_ok.store(true, Ordering::Relaxed);
                let kept: HashSet<i64> = kept.into_iter().collect();
                let mut map = sh.held.lock().expect("held");
                for (id, attempt) in held {
                    if kept.contains(&id) {
                        if let Some(h) = map.get_mut(&id) {
                            h.renewed_at = sent;
                        }
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
                let mut map = sh.held.lock().expect("held");
                crate::lease::give_up_expired(&mut map, sh.opts.lease, sh.opts.heartbeat);
            }
        }
    }
}

#[cfg(test)]
mod read_ahead_tests {
    use super::read_ahead_at;

    #[test]
    fn the_read_ahead_starts_early_enough_to_cover_a_claims_round_trip() {
        // Unknown durations: half the buffer, as before.
        assert_eq!(read_ahead_at(500, 32, None, Some(10_000.0)), 250);
        assert_eq!(read_ahead_at(500, 32, Some(5.0), None), 250);
        // No-op jobs (µs) and a claim of 13 ms: the whole buffer is used up meanwhile.
        assert_eq!(read_ahead_at(500, 32, Some(5.0), Some(13_000.0)), 500);
        // Jobs of 10 ms on 32 slots, a claim of 4 ms: 1.5 × 4 × 32 / 10 = 19 jobs, so half
        // of a buffer of 64 (the floor) holds.
        assert_eq!(read_ahead_at(64, 32, Some(10_000.0), Some(4_000.0)), 32);
        // Jobs of 0.5 ms, a claim of 4 ms: 1.5 × 4 × 32 / 0.5 = 384 jobs meanwhile, out of a
        // buffer of 500.
        assert_eq!(read_ahead_at(500, 32, Some(500.0), Some(4_000.0)), 384);
        // A buffer of one job.
        assert_eq!(read_ahead_at(1, 32, Some(5.0), Some(13_000.0)), 1);
    }
}
