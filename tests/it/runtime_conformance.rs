//! The conformance suite of the worker runtime (apalis 1.0 over our own `agentd_jobs` table,
//! crates/agentd-queue/src/apalis/), against a real PostgreSQL: exactly-once runs, retries with backoff in the
//! database, dead jobs, panics and timeouts as failures, attempt fencing through the apalis
//! acknowledger, lost leases, heartbeats, re-runs after a crashed worker's lease, wake-ups,
//! on-time delayed jobs and graceful shutdown. It absorbed the native runtime's suite (the
//! runtime section of tests/it/queue.rs) when that runtime was removed (issue 18).

use crate::common;
use agentd::clock::SystemClock;
use agentd::queue::apalis::build_worker;
use agentd::queue::backoff::Backoff;
use agentd::queue::maintenance::Rescuer;
use agentd::queue::store;
use agentd::queue::worker::{
    JobContext, JobHandler, KindRuntime, Prefetch, WorkerOptions, WorkerReport, WorkerStats,
};
use agentd::queue::{JobError, NewJob, enqueue, enqueue_committed, enqueue_many};
use chrono::{Duration as CDuration, Utc};
use common::{TestDb, wait_until};
use serde_json::json;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

fn kinds(k: &str) -> Vec<String> {
    vec![k.to_string()]
}

async fn state_of(db: &TestDb, id: i64) -> (agentd::queue::JobState, i32, i32, Option<String>) {
    let r = store::get(&db.pool, id).await.unwrap().unwrap();
    (r.state, r.attempt, r.released, r.last_error)
}

async fn count_state(db: &TestDb, state: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM agentd_jobs WHERE state = $1")
        .bind(state)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Ok,
    Retry,
    Fatal,
    Panic,
    Sleep,
    SlowOk,
    /// Waits for the test to open the gate, then succeeds.
    Gate,
    /// Succeeds once its cancellation token fires (or after 20 s).
    UntilCancelled,
}

struct Recorder {
    mode: Mode,
    runs: Mutex<Vec<i64>>,
    calls: Mutex<Vec<Instant>>,
    cancelled: AtomicUsize,
    gate: Notify,
}

#[async_trait::async_trait]
impl JobHandler for Recorder {
    async fn handle(&self, job: JobContext) -> Result<(), JobError> {
        self.calls.lock().unwrap().push(Instant::now());
        match self.mode {
            Mode::Retry => return Err(JobError::Retryable("provider down".into())),
            Mode::Fatal => return Err(JobError::Fatal("payload is malformed".into())),
            Mode::Panic => panic!("handler exploded"),
            Mode::Sleep => tokio::time::sleep(Duration::from_secs(30)).await,
            Mode::SlowOk => tokio::time::sleep(Duration::from_millis(300)).await,
            Mode::Gate => self.gate.notified().await,
            Mode::UntilCancelled => {
                tokio::select! {
                    _ = job.cancel.cancelled() => { self.cancelled.fetch_add(1, Ordering::SeqCst); }
                    _ = tokio::time::sleep(Duration::from_secs(20)) => {}
                }
            }
            Mode::Ok => {}
        }
        self.runs.lock().unwrap().push(job.job.id);
        Ok(())
    }
}

fn recorder(mode: Mode) -> Arc<Recorder> {
    Arc::new(Recorder {
        mode,
        runs: Mutex::new(Vec::new()),
        calls: Mutex::new(Vec::new()),
        cancelled: AtomicUsize::new(0),
        gate: Notify::new(),
    })
}

impl Recorder {
    fn calls(&self) -> usize {
        self.calls.lock().unwrap().len()
    }
}

fn opts(poll: Duration) -> WorkerOptions {
    WorkerOptions {
        worker_id: "apalis-test".into(),
        claim_batch: 16,
        prefetch: Prefetch::Fixed(0),
        poll_interval: poll,
        lease: Duration::from_secs(4),
        heartbeat: Duration::from_secs(1),
        shutdown_grace: Duration::from_millis(500),
    }
}

fn kind(h: Arc<Recorder>, timeout: Duration, concurrency: usize, backoff: Backoff) -> KindRuntime {
    KindRuntime {
        kind: "t".into(),
        handler: h,
        concurrency,
        timeout,
        backoff,
        delete_on_success: false,
        max_running_per_org: None,
        newcomer_slots: 0,
    }
}

fn fast_backoff() -> Backoff {
    Backoff {
        base: Duration::from_millis(10),
        max: Duration::from_millis(20),
    }
}

#[tokio::test]
async fn apalis_runs_every_job_exactly_once() {
    let db = TestDb::new().await;
    let jobs: Vec<NewJob> = (0..300)
        .map(|i| NewJob::new("t", json!({ "i": i })))
        .collect();
    enqueue_many(&db.pool, &jobs).await.unwrap();
    let h = recorder(Mode::Ok);
    let w = build_worker(
        db.pool.clone(),
        Arc::new(SystemClock),
        &opts(Duration::from_millis(200)),
        kind(h.clone(), Duration::from_secs(5), 8, fast_backoff()),
    );
    let stop = CancellationToken::new();
    let run = tokio::spawn(w.run(stop.clone()));
    wait_until(30, "all jobs succeeded", || async {
        count_state(&db, "succeeded").await == 300
    })
    .await;
    stop.cancel();
    let report = run.await.unwrap();
    assert_eq!(report.succeeded, 300, "every ack counted");
    assert_eq!(report.released, 0);
    let runs = h.runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 300, "every job ran");
    assert_eq!(
        runs.iter().collect::<HashSet<_>>().len(),
        300,
        "no job ran twice"
    );
    let attempts: Vec<i32> = sqlx::query_scalar("SELECT DISTINCT attempt FROM agentd_jobs")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(attempts, vec![1], "each job claimed once");
}

#[tokio::test]
async fn handler_errors_back_off_in_the_database_then_die() {
    let db = TestDb::new().await;
    let id = enqueue(&db.pool, &NewJob::new("t", json!({})).max_attempts(3))
        .await
        .unwrap()
        .unwrap();
    let h = recorder(Mode::Retry);
    // delay(1) in [0.5 s, 1 s], delay(2) in [1 s, 2 s].
    let backoff = Backoff {
        base: Duration::from_secs(1),
        max: Duration::from_secs(4),
    };
    let w = build_worker(
        db.pool.clone(),
        Arc::new(SystemClock),
        &opts(Duration::from_millis(50)),
        kind(h.clone(), Duration::from_secs(5), 4, backoff),
    );
    let stop = CancellationToken::new();
    let run = tokio::spawn(w.run(stop.clone()));
    // After the first failure the job waits in the database with run_at pushed out.
    wait_until(10, "first failure recorded", || async {
        let (state, attempt, _, _) = state_of(&db, id).await;
        state == "available" && attempt == 1
    })
    .await;
    let row = store::get(&db.pool, id).await.unwrap().unwrap();
    assert_eq!(row.last_error.as_deref(), Some("provider down"));
    let pushed = row.run_at - row.started_at.unwrap();
    assert!(
        pushed >= CDuration::milliseconds(500),
        "run_at carries the backoff: {pushed}"
    );
    assert!(row.lease_expires_at.is_none() && row.locked_by.is_none());
    wait_until(15, "job dead", || async {
        state_of(&db, id).await.0 == "dead"
    })
    .await;
    stop.cancel();
    let report = run.await.unwrap();
    let (_, attempt, _, err) = state_of(&db, id).await;
    assert_eq!(attempt, 3, "max_attempts then dead");
    assert_eq!(err.as_deref(), Some("provider down"));
    assert_eq!(report.failed, 3);
    let calls = h.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 3);
    // No retry ran before its run_at.
    assert!(
        calls[1] - calls[0] >= Duration::from_millis(490),
        "{:?}",
        calls[1] - calls[0]
    );
    assert!(
        calls[2] - calls[1] >= Duration::from_millis(990),
        "{:?}",
        calls[2] - calls[1]
    );
}

#[tokio::test]
async fn fatal_error_is_dead_at_once() {
    let db = TestDb::new().await;
    let id = enqueue(&db.pool, &NewJob::new("t", json!({})).max_attempts(5))
        .await
        .unwrap()
        .unwrap();
    let h = recorder(Mode::Fatal);
    let w = build_worker(
        db.pool.clone(),
        Arc::new(SystemClock),
        &opts(Duration::from_millis(50)),
        kind(h.clone(), Duration::from_secs(5), 4, fast_backoff()),
    );
    let stop = CancellationToken::new();
    let run = tokio::spawn(w.run(stop.clone()));
    wait_until(20, "job dead", || async {
        count_state(&db, "dead").await == 1
    })
    .await;
    // Give a wrongly scheduled retry time to happen.
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.cancel();
    run.await.unwrap();
    assert_eq!(h.calls(), 1, "no retry");
    let (state, attempt, _, err) = state_of(&db, id).await;
    assert_eq!((state.as_str(), attempt), ("dead", 1));
    assert_eq!(err.as_deref(), Some("payload is malformed"));
}

#[tokio::test]
async fn panics_and_timeouts_are_failures_that_retry_then_die() {
    for mode in [Mode::Panic, Mode::Sleep] {
        let db = TestDb::new().await;
        let id = enqueue(&db.pool, &NewJob::new("t", json!({})).max_attempts(2))
            .await
            .unwrap()
            .unwrap();
        let h = recorder(mode);
        let w = build_worker(
            db.pool.clone(),
            Arc::new(SystemClock),
            &opts(Duration::from_millis(50)),
            kind(h.clone(), Duration::from_millis(300), 4, fast_backoff()),
        );
        let stop = CancellationToken::new();
        let run = tokio::spawn(w.run(stop.clone()));
        wait_until(20, "job dead", || async {
            count_state(&db, "dead").await == 1
        })
        .await;
        stop.cancel();
        let report = run.await.unwrap();
        let name = if mode == Mode::Panic {
            "panic"
        } else {
            "timeout"
        };
        let (_, attempt, _, err) = state_of(&db, id).await;
        assert_eq!(attempt, 2, "{name}: retried once, then dead");
        let err = err.unwrap();
        let expected = if mode == Mode::Panic {
            "handler panicked: handler exploded"
        } else {
            "timed out"
        };
        assert!(err.contains(expected), "{name}: {err}");
        assert_eq!(h.calls(), 2, "{name}");
        assert_eq!(report.failed, 2, "{name}: both attempts failed");
        assert_eq!(report.succeeded, 0, "{name}");
    }
}

#[tokio::test]
async fn stale_attempt_cannot_ack_through_the_apalis_acknowledger() {
    let db = TestDb::new().await;
    let id = enqueue(&db.pool, &NewJob::new("t", json!({})))
        .await
        .unwrap()
        .unwrap();
    let h = recorder(Mode::Gate);
    // Long lease and heartbeat: no heartbeat runs during the test, so the stale outcome reaches
    // the acknowledger and its fenced SQL. Concurrency 1: the worker cannot claim while the
    // gated handler runs.
    let mut o = opts(Duration::from_secs(60));
    o.lease = Duration::from_secs(120);
    o.heartbeat = Duration::from_secs(60);
    let w = build_worker(
        db.pool.clone(),
        Arc::new(SystemClock),
        &o,
        kind(h.clone(), Duration::from_secs(60), 1, fast_backoff()),
    );
    let stats = w.stats();
    let stop = CancellationToken::new();
    let run = tokio::spawn(w.run(stop.clone()));
    wait_until(10, "first attempt running", || async { h.calls() == 1 }).await;
    assert_eq!(state_of(&db, id).await.1, 1);
    // The first attempt "hangs": its lease is rewritten into the past, the rescuer re-queues the
    // job and another worker claims attempt 2.
    sqlx::query("UPDATE agentd_jobs SET lease_expires_at = $2 WHERE id = $1")
        .bind(id)
        .bind(Utc::now() - CDuration::minutes(1))
        .execute(&db.pool)
        .await
        .unwrap();
    let r = store::rescue_expired(&db.pool, Utc::now(), 10)
        .await
        .unwrap();
    assert_eq!(r.requeued, 1);
    let second = store::claim(
        &db.pool,
        &kinds("t"),
        1,
        "other-worker",
        Utc::now(),
        CDuration::seconds(30),
    )
    .await
    .unwrap();
    assert_eq!((second[0].id, second[0].attempt), (id, 2));
    // Attempt 1 now finishes and apalis acks it: the ack is ignored.
    h.gate.notify_one();
    wait_until(10, "stale ack processed", || async {
        stats.stale.load(Ordering::Relaxed) == 1
    })
    .await;
    let row = store::get(&db.pool, id).await.unwrap().unwrap();
    assert_eq!(row.state, "running", "the stale success changed nothing");
    assert_eq!(row.attempt, 2);
    assert_eq!(row.locked_by.as_deref(), Some("other-worker"));
    assert!(row.finished_at.is_none());
    assert_eq!(stats.succeeded.load(Ordering::Relaxed), 0);
    // The current attempt's ack counts.
    assert_eq!(
        store::complete_many(&db.pool, &[(id, 2)], Utc::now())
            .await
            .unwrap(),
        vec![id]
    );
    assert_eq!(state_of(&db, id).await.0, "succeeded");
    stop.cancel();
    let report = run.await.unwrap();
    assert_eq!((report.succeeded, report.released), (0, 0));
}

#[tokio::test]
async fn a_lost_lease_is_detected_and_the_handler_cancelled() {
    let db = TestDb::new().await;
    let id = enqueue(&db.pool, &NewJob::new("t", json!({})))
        .await
        .unwrap()
        .unwrap();
    let h = recorder(Mode::UntilCancelled);
    let mut o = opts(Duration::from_millis(50));
    o.lease = Duration::from_secs(2);
    o.heartbeat = Duration::from_millis(200);
    let w = build_worker(
        db.pool.clone(),
        Arc::new(SystemClock),
        &o,
        kind(h.clone(), Duration::from_secs(60), 2, fast_backoff()),
    );
    let stats = w.stats();
    let stop = CancellationToken::new();
    let run = tokio::spawn(w.run(stop.clone()));
    wait_until(10, "running", || async { h.calls() == 1 }).await;
    assert!(
        store::cancel(&db.pool, id, Utc::now())
            .await
            .unwrap()
            .is_some()
    );
    wait_until(5, "handler told its lease is gone", || async {
        h.cancelled.load(Ordering::SeqCst) == 1
    })
    .await;
    wait_until(5, "outcome dropped", || async {
        stats.stale.load(Ordering::Relaxed) == 1
    })
    .await;
    assert_eq!(state_of(&db, id).await.0, "cancelled", "stays cancelled");
    assert_eq!(stats.succeeded.load(Ordering::Relaxed), 0);
    stop.cancel();
    run.await.unwrap();
}

#[tokio::test]
async fn heartbeat_keeps_a_long_job_leased() {
    let db = TestDb::new().await;
    enqueue(&db.pool, &NewJob::new("t", json!({})))
        .await
        .unwrap();
    struct Long;
    #[async_trait::async_trait]
    impl JobHandler for Long {
        async fn handle(&self, _job: JobContext) -> Result<(), JobError> {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok(())
        }
    }
    let mut o = opts(Duration::from_millis(50));
    o.lease = Duration::from_secs(2);
    o.heartbeat = Duration::from_millis(500);
    let w = build_worker(
        db.pool.clone(),
        Arc::new(SystemClock),
        &o,
        KindRuntime {
            kind: "t".into(),
            handler: Arc::new(Long),
            concurrency: 1,
            timeout: Duration::from_secs(20),
            backoff: fast_backoff(),
            delete_on_success: false,
            max_running_per_org: None,
            newcomer_slots: 0,
        },
    );
    let stop = CancellationToken::new();
    let run = tokio::spawn(w.run(stop.clone()));
    let rescuer = Rescuer {
        pool: db.pool.clone(),
        clock: Arc::new(SystemClock),
        interval: Duration::from_secs(1),
        batch: 100,
        backoff: Default::default(),
    };
    // For 5 s (two and a half lease lengths) the rescuer finds nothing to rescue.
    let mut rescued = 0;
    let t0 = Instant::now();
    while count_state(&db, "succeeded").await == 0 {
        rescued += rescuer.run_once().await.unwrap().requeued;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(t0.elapsed() < Duration::from_secs(20), "never finished");
    }
    assert_eq!(rescued, 0);
    let attempt: i32 = sqlx::query_scalar("SELECT attempt FROM agentd_jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(attempt, 1);
    stop.cancel();
    run.await.unwrap();
}

#[tokio::test]
async fn notify_wakes_an_idle_worker_and_delayed_jobs_run_on_time() {
    let db = TestDb::new().await;
    let h = recorder(Mode::Ok);
    // Poll every 60 s: only NOTIFY (and the run_at wake) can explain pickups within seconds.
    let w = build_worker(
        db.pool.clone(),
        Arc::new(SystemClock),
        &opts(Duration::from_secs(60)),
        kind(h.clone(), Duration::from_secs(5), 4, fast_backoff()),
    );
    let stop = CancellationToken::new();
    let run = tokio::spawn(w.run(stop.clone()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..5 {
        enqueue(&db.pool, &NewJob::new("t", json!({})))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_until(10, "woken by NOTIFY", || async {
        count_state(&db, "succeeded").await == 5
    })
    .await;
    // enqueue_committed sends its NOTIFY after the commit (migration 0060): it wakes them too.
    for i in 0..5 {
        let job = NewJob::new("t", json!({})).unique_key(format!("after-commit-{i}"));
        assert!(enqueue_committed(&db.pool, &job).await.unwrap().is_some());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_until(10, "woken by the NOTIFY after the commit", || async {
        count_state(&db, "succeeded").await == 10
    })
    .await;
    let run_at = Utc::now() + CDuration::milliseconds(700);
    let id = enqueue(&db.pool, &NewJob::new("t", json!({})).run_at(run_at))
        .await
        .unwrap()
        .unwrap();
    wait_until(10, "delayed job ran", || async {
        count_state(&db, "succeeded").await == 11
    })
    .await;
    let row = store::get(&db.pool, id).await.unwrap().unwrap();
    assert!(row.started_at.unwrap() >= run_at, "not before run_at");
    stop.cancel();
    run.await.unwrap();
}

#[tokio::test]
async fn graceful_shutdown_finishes_short_jobs_and_releases_long_ones() {
    let db = TestDb::new().await;
    // A 300 ms job finishes inside the 500 ms grace period.
    let quick = enqueue(&db.pool, &NewJob::new("t", json!({})))
        .await
        .unwrap()
        .unwrap();
    let h = recorder(Mode::SlowOk);
    let w = build_worker(
        db.pool.clone(),
        Arc::new(SystemClock),
        &opts(Duration::from_millis(50)),
        kind(h.clone(), Duration::from_secs(30), 4, fast_backoff()),
    );
    let stop = CancellationToken::new();
    let run = tokio::spawn(w.run(stop.clone()));
    wait_until(10, "job started", || async { h.calls() == 1 }).await;
    stop.cancel();
    let report = run.await.unwrap();
    assert_eq!(report.released, 0);
    assert_eq!(report.succeeded, 1);
    assert_eq!(state_of(&db, quick).await.0, "succeeded");

    // A job that would run for 30 s is released at the end of the grace period.
    let long = enqueue(&db.pool, &NewJob::new("t", json!({})).max_attempts(1))
        .await
        .unwrap()
        .unwrap();
    let h = recorder(Mode::Sleep);
    let w = build_worker(
        db.pool.clone(),
        Arc::new(SystemClock),
        &opts(Duration::from_millis(50)),
        kind(h.clone(), Duration::from_secs(60), 4, fast_backoff()),
    );
    let stop = CancellationToken::new();
    let run = tokio::spawn(w.run(stop.clone()));
    wait_until(10, "long job started", || async { h.calls() == 1 }).await;
    let t0 = Instant::now();
    stop.cancel();
    let report = run.await.unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "shutdown took {:?}",
        t0.elapsed()
    );
    assert_eq!(report.released, 1);
    let row = store::get(&db.pool, long).await.unwrap().unwrap();
    assert_eq!(
        row.state, "available",
        "released for another worker at once"
    );
    assert_eq!(row.released, 1);
    assert!(row.lease_expires_at.is_none() && row.locked_by.is_none());
    // Released claims do not count: even with max_attempts = 1 the job can be claimed again.
    let c = store::claim(
        &db.pool,
        &kinds("t"),
        1,
        "other",
        Utc::now(),
        CDuration::seconds(30),
    )
    .await
    .unwrap();
    assert_eq!((c[0].id, c[0].counted_attempts), (long, 1));
}

#[tokio::test]
async fn a_killed_workers_job_is_rerun_after_its_lease() {
    let db = TestDb::new().await;
    let t0 = Utc::now() - CDuration::seconds(60);
    let id = enqueue(&db.pool, &NewJob::new("t", json!({})).run_at(t0))
        .await
        .unwrap()
        .unwrap();
    // A worker claims the job and dies without a word (no ack, no heartbeat).
    store::claim(
        &db.pool,
        &kinds("t"),
        1,
        "dead-worker",
        t0,
        CDuration::seconds(4),
    )
    .await
    .unwrap();
    let rescuer = Rescuer {
        pool: db.pool.clone(),
        clock: Arc::new(SystemClock),
        interval: Duration::from_secs(1),
        batch: 100,
        backoff: Default::default(),
    };
    assert_eq!(rescuer.run_once().await.unwrap().requeued, 1);
    let h = recorder(Mode::Ok);
    let w = build_worker(
        db.pool.clone(),
        Arc::new(SystemClock),
        &opts(Duration::from_millis(50)),
        kind(h.clone(), Duration::from_secs(5), 4, fast_backoff()),
    );
    let stop = CancellationToken::new();
    let run = tokio::spawn(w.run(stop.clone()));
    wait_until(10, "re-run", || async {
        count_state(&db, "succeeded").await == 1
    })
    .await;
    stop.cancel();
    run.await.unwrap();
    assert_eq!(h.calls(), 1);
    assert_eq!(state_of(&db, id).await.1, 2, "the lost attempt counted");
}

fn prefetch_opts(prefetch: u32) -> WorkerOptions {
    let mut o = opts(Duration::from_millis(50));
    o.prefetch = Prefetch::Fixed(prefetch);
    o
}

#[tokio::test]
async fn prefetch_claims_ahead_then_releases_the_buffer_at_shutdown_and_runs_each_job_once() {
    let db = TestDb::new().await;
    let jobs: Vec<NewJob> = (0..50)
        .map(|i| NewJob::new("t", json!({ "i": i })))
        .collect();
    enqueue_many(&db.pool, &jobs).await.unwrap();
    // Two slots, both held by handlers that wait: the claim took 2 + 10 (prefetch) jobs.
    let h = recorder(Mode::Gate);
    let w = build_worker(
        db.pool.clone(),
        Arc::new(SystemClock),
        &prefetch_opts(10),
        kind(h.clone(), Duration::from_secs(30), 2, fast_backoff()),
    );
    let stop = CancellationToken::new();
    let run = tokio::spawn(w.run(stop.clone()));
    wait_until(10, "two handlers started", || async { h.calls() == 2 }).await;
    assert_eq!(
        count_state(&db, "running").await,
        12,
        "2 running + 10 buffered"
    );
    let leased: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM agentd_jobs WHERE state = 'running' AND lease_expires_at > now()",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(leased, 12, "buffered jobs hold leases like running ones");
    stop.cancel();
    let report = run.await.unwrap();
    assert_eq!(
        report.released, 12,
        "running and buffered jobs are given back"
    );
    assert_eq!(count_state(&db, "available").await, 50);
    let counted: i64 =
        sqlx::query_scalar("SELECT count(*) FROM agentd_jobs WHERE attempt - released <> 0")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(counted, 0, "released claims do not count as attempts");

    // With a prefetch bigger than the claims' share, every job still runs exactly once.
    let h = recorder(Mode::Ok);
    let w = build_worker(
        db.pool.clone(),
        Arc::new(SystemClock),
        &prefetch_opts(8),
        kind(h.clone(), Duration::from_secs(5), 4, fast_backoff()),
    );
    let stop = CancellationToken::new();
    let run = tokio::spawn(w.run(stop.clone()));
    wait_until(20, "all jobs succeeded", || async {
        count_state(&db, "succeeded").await == 50
    })
    .await;
    stop.cancel();
    let report = run.await.unwrap();
    assert_eq!(report.succeeded, 50);
    let runs = h.runs.lock().unwrap();
    assert_eq!(runs.len(), 50);
    assert_eq!(
        runs.iter().collect::<HashSet<_>>().len(),
        50,
        "no job ran twice"
    );
}

/// Enqueues `n` jobs and starts a worker of two slots with automatic prefetch (claims of at
/// most 200) whose handlers run in `mode`.
async fn auto_prefetch_worker(
    db: &TestDb,
    n: usize,
    mode: Mode,
) -> (
    Arc<Recorder>,
    Arc<WorkerStats>,
    CancellationToken,
    tokio::task::JoinHandle<WorkerReport>,
) {
    let mut auto = opts(Duration::from_millis(50));
    auto.prefetch = Prefetch::Auto;
    auto.claim_batch = 200;
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| NewJob::new("t", json!({ "i": i })))
        .collect();
    enqueue_many(&db.pool, &jobs).await.unwrap();
    let h = recorder(mode);
    let w = build_worker(
        db.pool.clone(),
        Arc::new(SystemClock),
        &auto,
        kind(h.clone(), Duration::from_secs(5), 2, fast_backoff()),
    );
    let stats = w.stats();
    let stop = CancellationToken::new();
    let run = tokio::spawn(w.run(stop.clone()));
    (h, stats, stop, run)
}

/// Runs `n` jobs in `mode` through [`auto_prefetch_worker`] until all are in `state`; returns
/// the recorder and the largest claim.
async fn drain_with_auto_prefetch(
    db: &TestDb,
    n: usize,
    mode: Mode,
    state: &str,
) -> (Arc<Recorder>, u64) {
    let (h, stats, stop, run) = auto_prefetch_worker(db, n, mode).await;
    wait_until(30, &format!("all {n} jobs {state}"), || async {
        count_state(db, state).await == n as i64
    })
    .await;
    stop.cancel();
    run.await.unwrap();
    (h, stats.largest_claim.load(Ordering::Relaxed))
}

/// Failures say nothing of how long work takes: a backlog whose jobs all fail at once (a
/// provider outage failing agent runs in microseconds) never grows an automatic prefetch past
/// the free slots, so the worker does not claim hundreds of jobs it would then sit on.
#[tokio::test]
async fn auto_prefetch_ignores_fast_failures() {
    let db = TestDb::new().await;
    let (h, largest) = drain_with_auto_prefetch(&db, 300, Mode::Fatal, "dead").await;
    assert_eq!(h.calls(), 300);
    assert!(
        largest <= 2,
        "fast failures are claimed only into free slots (largest claim {largest})"
    );
}

#[tokio::test]
async fn auto_prefetch_claims_hundreds_of_short_jobs_and_never_buffers_long_ones() {
    let db = TestDb::new().await;
    // A backlog of jobs that take microseconds: once the first ones end, claims grow past the
    // two free slots to the claim limit, and every job still runs exactly once.
    let (h, largest) = drain_with_auto_prefetch(&db, 1_000, Mode::Ok, "succeeded").await;
    assert!(
        largest > 100,
        "claims of short jobs grow past the free slots (largest {largest})"
    );
    let runs = h.runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 1_000);
    assert_eq!(
        runs.iter().collect::<HashSet<_>>().len(),
        1_000,
        "no job ran twice"
    );

    // Jobs of 300 ms: 20 ms of work is less than one job, so nothing is claimed beyond the
    // free slots — the rest of the backlog stays available to other workers.
    sqlx::query("DELETE FROM agentd_jobs")
        .execute(&db.pool)
        .await
        .unwrap();
    let (h, stats, stop, run) = auto_prefetch_worker(&db, 12, Mode::SlowOk).await;
    // Claimed but not yet started (the prefetch buffer), sampled: claimed is read before the
    // starts, which only grow, so a sample never overstates it. (Rows still `running` in the
    // table overstate it: a finished job stays so until its batched ack.)
    let mut most_waiting = 0;
    let t0 = Instant::now();
    while count_state(&db, "succeeded").await < 12 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "slow jobs did not finish"
        );
        let claimed = stats.claimed.load(Ordering::SeqCst) as usize;
        most_waiting = most_waiting.max(claimed.saturating_sub(h.calls()));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    run.await.unwrap();
    assert!(
        most_waiting <= 2,
        "long jobs are claimed only into free slots ({most_waiting} claimed and waiting)"
    );
    assert!(stats.largest_claim.load(Ordering::Relaxed) <= 2);
    assert_eq!(h.runs.lock().unwrap().len(), 12);
}

#[tokio::test]
async fn delete_on_success_removes_succeeded_jobs_and_keeps_failures() {
    let db = TestDb::new().await;
    let jobs: Vec<NewJob> = (0..20)
        .map(|i| NewJob::new("t", json!({ "i": i })))
        .collect();
    enqueue_many(&db.pool, &jobs).await.unwrap();
    let h = recorder(Mode::Ok);
    let mut k = kind(h.clone(), Duration::from_secs(5), 4, fast_backoff());
    k.delete_on_success = true;
    let w = build_worker(
        db.pool.clone(),
        Arc::new(SystemClock),
        &opts(Duration::from_millis(50)),
        k,
    );
    let stats = w.stats();
    let stop = CancellationToken::new();
    let run = tokio::spawn(w.run(stop.clone()));
    wait_until(20, "all jobs acked", || async {
        stats.succeeded.load(Ordering::Relaxed) == 20
    })
    .await;
    stop.cancel();
    assert_eq!(run.await.unwrap().succeeded, 20);
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM agentd_jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, 0, "succeeded jobs are deleted");
    assert_eq!(h.runs.lock().unwrap().len(), 20);

    // A failure is kept (dead, with its error), whatever the kind's success policy.
    let id = enqueue(&db.pool, &NewJob::new("t", json!({})))
        .await
        .unwrap()
        .unwrap();
    let h = recorder(Mode::Fatal);
    let mut k = kind(h.clone(), Duration::from_secs(5), 4, fast_backoff());
    k.delete_on_success = true;
    let w = build_worker(
        db.pool.clone(),
        Arc::new(SystemClock),
        &opts(Duration::from_millis(50)),
        k,
    );
    let stop = CancellationToken::new();
    let run = tokio::spawn(w.run(stop.clone()));
    wait_until(10, "job dead", || async {
        count_state(&db, "dead").await == 1
    })
    .await;
    stop.cancel();
    run.await.unwrap();
    assert_eq!(
        state_of(&db, id).await.3.as_deref(),
        Some("payload is malformed")
    );

    // A stale attempt's delete changes nothing.
    let id = enqueue(&db.pool, &NewJob::new("u", json!({})))
        .await
        .unwrap()
        .unwrap();
    let c = store::claim(
        &db.pool,
        &kinds("u"),
        1,
        "w",
        Utc::now(),
        CDuration::seconds(30),
    )
    .await
    .unwrap();
    assert_eq!(c[0].id, id);
    let gone = store::delete_succeeded(&db.pool, &[(id, c[0].attempt - 1)])
        .await
        .unwrap();
    assert!(gone.is_empty());
    assert_eq!(state_of(&db, id).await.0, "running");
    let gone = store::delete_succeeded(&db.pool, &[(id, c[0].attempt)])
        .await
        .unwrap();
    assert_eq!(gone, vec![id]);
}
