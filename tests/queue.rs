//! Queue guarantees against a real PostgreSQL: claims, leases and fencing, retries, dead jobs,
//! unique keys, transactional enqueue, wake-ups, cron ticks, graceful shutdown, retention.

mod common;

use agentd::clock::{ManualClock, SharedClock, SystemClock};
use agentd::queue::backoff::Backoff;
use agentd::queue::cron::{CronEntry, Scheduler};
use agentd::queue::maintenance::{Rescuer, Retention};
use agentd::queue::store::{self, FailOutcome};
use agentd::queue::worker::{JobContext, JobHandler, KindRuntime, Worker, WorkerOptions};
use agentd::queue::{JobError, NewJob, enqueue, enqueue_many};
use chrono::{Duration as CDuration, TimeZone, Utc};
use common::{TestDb, wait_until};
use serde_json::json;
use std::collections::HashSet;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn kinds(k: &str) -> Vec<String> {
    vec![k.to_string()]
}

async fn state_of(db: &TestDb, id: i64) -> (String, i32, i32, Option<String>) {
    let r = store::get(&db.pool, id).await.unwrap().unwrap();
    (r.state, r.attempt, r.released, r.last_error)
}

fn lease() -> CDuration {
    CDuration::seconds(30)
}

#[tokio::test]
async fn two_claimers_never_get_the_same_job() {
    let db = TestDb::new().await;
    let jobs: Vec<NewJob> = (0..600)
        .map(|i| NewJob::new("t", json!({ "i": i })))
        .collect();
    assert_eq!(enqueue_many(&db.pool, &jobs).await.unwrap(), 600);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for w in 0..4 {
        let (pool, seen) = (db.pool.clone(), seen.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let got =
                    store::claim(&pool, &kinds("t"), 7, &format!("w{w}"), Utc::now(), lease())
                        .await
                        .unwrap();
                if got.is_empty() {
                    break;
                }
                seen.lock().unwrap().extend(got.iter().map(|j| j.id));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let seen = seen.lock().unwrap();
    let unique: HashSet<_> = seen.iter().collect();
    assert_eq!(seen.len(), 600, "every job claimed");
    assert_eq!(unique.len(), 600, "no job claimed twice");
}

#[tokio::test]
async fn claim_honours_priority_then_run_at() {
    let db = TestDb::new().await;
    let t0 = Utc::now() - CDuration::seconds(10);
    let low_old = enqueue(&db.pool, &NewJob::new("t", json!({})).run_at(t0))
        .await
        .unwrap()
        .unwrap();
    let high = enqueue(&db.pool, &NewJob::new("t", json!({})).priority(5))
        .await
        .unwrap()
        .unwrap();
    let low_new = enqueue(&db.pool, &NewJob::new("t", json!({})))
        .await
        .unwrap()
        .unwrap();
    let future = enqueue(
        &db.pool,
        &NewJob::new("t", json!({}))
            .priority(9)
            .run_at(Utc::now() + CDuration::hours(1)),
    )
    .await
    .unwrap()
    .unwrap();
    let got = store::claim(&db.pool, &kinds("t"), 10, "w", Utc::now(), lease())
        .await
        .unwrap();
    let ids: Vec<i64> = got.iter().map(|j| j.id).collect();
    assert_eq!(ids.len(), 3, "the delayed job is not claimable yet");
    // RETURNING order is not guaranteed; check the claim order with single claims instead.
    assert!(!ids.contains(&future));
    let db2 = TestDb::new().await;
    let a = enqueue(&db2.pool, &NewJob::new("t", json!({})).run_at(t0))
        .await
        .unwrap()
        .unwrap();
    let b = enqueue(&db2.pool, &NewJob::new("t", json!({})).priority(5))
        .await
        .unwrap()
        .unwrap();
    let first = store::claim(&db2.pool, &kinds("t"), 1, "w", Utc::now(), lease())
        .await
        .unwrap();
    assert_eq!(first[0].id, b, "higher priority first");
    let second = store::claim(&db2.pool, &kinds("t"), 1, "w", Utc::now(), lease())
        .await
        .unwrap();
    assert_eq!(second[0].id, a);
    let _ = (low_old, high, low_new);
}

#[tokio::test]
async fn stale_attempt_ack_changes_nothing() {
    let db = TestDb::new().await;
    let id = enqueue(&db.pool, &NewJob::new("t", json!({})))
        .await
        .unwrap()
        .unwrap();
    let t0 = Utc::now();
    let first = store::claim(&db.pool, &kinds("t"), 1, "w1", t0, lease())
        .await
        .unwrap();
    assert_eq!(first[0].attempt, 1);
    // The first worker hangs; its lease expires and the rescuer re-queues the job.
    let later = t0 + CDuration::seconds(31);
    let r = store::rescue_expired(&db.pool, later, 100).await.unwrap();
    assert_eq!(r.requeued, 1);
    let second = store::claim(&db.pool, &kinds("t"), 1, "w2", later, lease())
        .await
        .unwrap();
    assert_eq!(second[0].attempt, 2);
    // The stale first attempt now reports success and failure: both are ignored.
    assert!(
        store::complete_many(&db.pool, &[(id, 1)], later)
            .await
            .unwrap()
            .is_empty()
    );
    let out = store::fail(&db.pool, id, 1, "late", true, later, later)
        .await
        .unwrap();
    assert_eq!(out, FailOutcome::Stale);
    assert_eq!(state_of(&db, id).await.0, "running");
    // The current attempt's ack counts.
    assert_eq!(
        store::complete_many(&db.pool, &[(id, 2)], later)
            .await
            .unwrap(),
        vec![id]
    );
    assert_eq!(state_of(&db, id).await.0, "succeeded");
}

#[tokio::test]
async fn heartbeat_extends_lease_and_reports_lost_ones() {
    let db = TestDb::new().await;
    let a = enqueue(&db.pool, &NewJob::new("t", json!({})))
        .await
        .unwrap()
        .unwrap();
    let b = enqueue(&db.pool, &NewJob::new("t", json!({})))
        .await
        .unwrap()
        .unwrap();
    let t0 = Utc::now();
    store::claim(&db.pool, &kinds("t"), 2, "w", t0, lease())
        .await
        .unwrap();
    store::cancel(&db.pool, b, t0).await.unwrap();
    let kept = store::heartbeat(
        &db.pool,
        &[(a, 1), (b, 1)],
        t0 + CDuration::seconds(20),
        lease(),
    )
    .await
    .unwrap();
    assert_eq!(kept, vec![a], "the cancelled job's lease is gone");
    // Renewed at t0+20 for 30s: not expired at t0+40.
    let r = store::rescue_expired(&db.pool, t0 + CDuration::seconds(40), 10)
        .await
        .unwrap();
    assert_eq!(r.requeued, 0);
    let r = store::rescue_expired(&db.pool, t0 + CDuration::seconds(51), 10)
        .await
        .unwrap();
    assert_eq!(r.requeued, 1);
}

#[tokio::test]
async fn failures_back_off_in_the_database_then_die_and_can_be_retried() {
    let db = TestDb::new().await;
    let id = enqueue(&db.pool, &NewJob::new("t", json!({})).max_attempts(2))
        .await
        .unwrap()
        .unwrap();
    let t0 = Utc::now();
    store::claim(&db.pool, &kinds("t"), 1, "w", t0, lease())
        .await
        .unwrap();
    let retry_at = t0 + CDuration::seconds(90);
    assert_eq!(
        store::fail(&db.pool, id, 1, "boom", false, retry_at, t0)
            .await
            .unwrap(),
        FailOutcome::Retry
    );
    let row = store::get(&db.pool, id).await.unwrap().unwrap();
    assert_eq!(row.state, "available");
    assert_eq!(row.run_at.timestamp_millis(), retry_at.timestamp_millis());
    assert_eq!(row.last_error.as_deref(), Some("boom"));
    // Not claimable before its run_at.
    assert!(
        store::claim(
            &db.pool,
            &kinds("t"),
            1,
            "w",
            t0 + CDuration::seconds(10),
            lease()
        )
        .await
        .unwrap()
        .is_empty()
    );
    let c = store::claim(&db.pool, &kinds("t"), 1, "w", retry_at, lease())
        .await
        .unwrap();
    assert_eq!(c[0].attempt, 2);
    assert_eq!(
        store::fail(&db.pool, id, 2, "boom again", false, retry_at, retry_at)
            .await
            .unwrap(),
        FailOutcome::Dead
    );
    let (state, _, _, err) = state_of(&db, id).await;
    assert_eq!(state, "dead");
    assert_eq!(
        err.as_deref(),
        Some("boom again"),
        "dead jobs keep their last error"
    );
    // Retry by command: available again with a fresh budget.
    assert!(
        store::retry(&db.pool, id, retry_at)
            .await
            .unwrap()
            .is_some()
    );
    let c = store::claim(&db.pool, &kinds("t"), 1, "w", retry_at, lease())
        .await
        .unwrap();
    assert_eq!(c[0].counted_attempts, 1);
}

#[tokio::test]
async fn fatal_errors_are_dead_at_once() {
    let db = TestDb::new().await;
    let id = enqueue(&db.pool, &NewJob::new("t", json!({})).max_attempts(5))
        .await
        .unwrap()
        .unwrap();
    let t0 = Utc::now();
    store::claim(&db.pool, &kinds("t"), 1, "w", t0, lease())
        .await
        .unwrap();
    assert_eq!(
        store::fail(&db.pool, id, 1, "bad payload", true, t0, t0)
            .await
            .unwrap(),
        FailOutcome::Dead
    );
    assert_eq!(state_of(&db, id).await.0, "dead");
}

#[tokio::test]
async fn rescue_counts_the_lost_attempt_and_kills_after_max() {
    let db = TestDb::new().await;
    let id = enqueue(&db.pool, &NewJob::new("t", json!({})).max_attempts(2))
        .await
        .unwrap()
        .unwrap();
    let mut now = Utc::now();
    for expected in ["available", "dead"] {
        store::claim(&db.pool, &kinds("t"), 1, "w", now, lease())
            .await
            .unwrap();
        now += CDuration::seconds(31);
        store::rescue_expired(&db.pool, now, 10).await.unwrap();
        let (state, _, _, err) = state_of(&db, id).await;
        assert_eq!(state, expected);
        assert!(err.unwrap().contains("lease expired"));
    }
}

#[tokio::test]
async fn duplicate_unique_keys_are_skipped_even_inside_a_batch() {
    let db = TestDb::new().await;
    let first = enqueue(&db.pool, &NewJob::new("t", json!({})).unique_key("k1"))
        .await
        .unwrap();
    assert!(first.is_some());
    let dup = enqueue(&db.pool, &NewJob::new("t", json!({})).unique_key("k1"))
        .await
        .unwrap();
    assert!(dup.is_none(), "a duplicate is skipped, not an error");
    let batch = vec![
        NewJob::new("t", json!({})).unique_key("k1"),
        NewJob::new("t", json!({})).unique_key("k2"),
        NewJob::new("t", json!({})).unique_key("k2"),
        NewJob::new("t", json!({})),
    ];
    assert_eq!(
        enqueue_many(&db.pool, &batch).await.unwrap(),
        2,
        "k2 once and the keyless job"
    );
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM agentd_jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(n, 3);
}

#[tokio::test]
async fn enqueue_joins_the_callers_transaction() {
    let db = TestDb::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    enqueue(&mut *tx, &NewJob::new("t", json!({"n": 1})))
        .await
        .unwrap();
    enqueue_many(
        &mut *tx,
        &[NewJob::new("t", json!({})), NewJob::new("t", json!({}))],
    )
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM agentd_jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(n, 0, "rollback leaves no job");
    let mut tx = db.pool.begin().await.unwrap();
    enqueue(&mut *tx, &NewJob::new("t", json!({})))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM agentd_jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(n, 1);
}

#[tokio::test]
async fn retention_deletes_only_old_finished_jobs() {
    let db = TestDb::new().await;
    let now = Utc::now();
    let clock = ManualClock::new(now);
    let ids: Vec<i64> = {
        let mut v = Vec::new();
        for _ in 0..5 {
            v.push(
                enqueue(&db.pool, &NewJob::new("t", json!({})))
                    .await
                    .unwrap()
                    .unwrap(),
            );
        }
        v
    };
    sqlx::query("UPDATE agentd_jobs SET state = 'succeeded', finished_at = $2 WHERE id = ANY($1)")
        .bind(&ids[..3])
        .bind(now - CDuration::days(10))
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("UPDATE agentd_jobs SET state = 'dead', finished_at = $2 WHERE id = $1")
        .bind(ids[3])
        .bind(now - CDuration::hours(1))
        .execute(&db.pool)
        .await
        .unwrap();
    let r = Retention {
        pool: db.pool.clone(),
        clock: clock.clone(),
        keep: CDuration::days(7),
        batch: 2,
        interval: Duration::from_secs(60),
    };
    assert_eq!(r.run_once().await.unwrap(), 3, "batches of 2 until done");
    let left: Vec<i64> = sqlx::query_scalar("SELECT id FROM agentd_jobs ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        left,
        vec![ids[3], ids[4]],
        "recent dead and available jobs stay"
    );
}

#[tokio::test]
async fn three_schedulers_racing_on_one_tick_enqueue_one_job() {
    let db = TestDb::new().await;
    let now = Utc.with_ymd_and_hms(2026, 11, 22, 10, 7, 30).unwrap();
    let entry = CronEntry {
        kind: "approval_expiry".into(),
        schedule: cron::Schedule::from_str("0 */5 * * * *").unwrap(),
        fan_out: None,
        priority: 0,
        max_attempts: 3,
    };
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let s = Scheduler::new(db.pool.clone(), ManualClock::new(now), vec![entry.clone()]);
        tasks.push(tokio::spawn(async move { s.run_once().await.unwrap() }));
    }
    let mut inserted = 0;
    for t in tasks {
        inserted += t.await.unwrap()[0].inserted;
    }
    assert_eq!(inserted, 1);
    let run_at: chrono::DateTime<Utc> = sqlx::query_scalar("SELECT run_at FROM agentd_jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        run_at,
        Utc.with_ymd_and_hms(2026, 11, 22, 10, 5, 0).unwrap(),
        "the latest tick at or before now"
    );
}

#[tokio::test]
async fn after_downtime_only_the_latest_missed_tick_runs() {
    let db = TestDb::new().await;
    let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap());
    let entry = CronEntry {
        kind: "approval_expiry".into(),
        schedule: cron::Schedule::from_str("0 */5 * * * *").unwrap(),
        fan_out: None,
        priority: 0,
        max_attempts: 3,
    };
    let s = Scheduler::new(db.pool.clone(), clock.clone(), vec![entry]);
    s.run_once().await.unwrap();
    // Three hours of downtime: 36 ticks missed; only the latest is enqueued.
    clock.advance(CDuration::hours(3) + CDuration::minutes(2));
    let r = s.run_once().await.unwrap();
    assert_eq!(r[0].inserted, 1);
    assert_eq!(
        r[0].tick,
        Utc.with_ymd_and_hms(2026, 11, 22, 13, 0, 0).unwrap()
    );
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM agentd_jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(n, 2);
    // Running again in the same period adds nothing.
    assert_eq!(s.run_once().await.unwrap()[0].inserted, 0);
}

#[tokio::test]
async fn fan_out_enqueues_one_job_per_active_org_once() {
    let db = TestDb::new().await;
    sqlx::query("INSERT INTO orgs (id, name, active) SELECT gen_random_uuid(), 'org' || g, g % 10 <> 0 FROM generate_series(1, 2000) g")
        .execute(&db.pool)
        .await
        .unwrap();
    let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 11, 22, 2, 30, 0).unwrap());
    let entry = CronEntry {
        kind: "proactive_suggestion".into(),
        schedule: cron::Schedule::from_str("0 0 2 * * *").unwrap(),
        fan_out: Some(agentd::catalog::FanOut::Orgs),
        priority: 0,
        max_attempts: 3,
    };
    let s = Scheduler::new(db.pool.clone(), clock.clone(), vec![entry]);
    assert_eq!(
        s.run_once().await.unwrap()[0].inserted,
        1800,
        "active orgs only"
    );
    assert_eq!(
        s.run_once().await.unwrap()[0].inserted,
        0,
        "same night again adds none"
    );
    let key: String = sqlx::query_scalar("SELECT unique_key FROM agentd_jobs LIMIT 1")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(
        key.starts_with("proactive_suggestion:") && key.ends_with(":2026-11-22"),
        "{key}"
    );
}

// ---- the worker runtime ----

struct Recorder {
    runs: Mutex<Vec<i64>>,
    mode: &'static str,
    calls: AtomicUsize,
}

#[async_trait::async_trait]
impl JobHandler for Recorder {
    async fn handle(&self, job: JobContext) -> Result<(), JobError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match self.mode {
            "panic" => panic!("handler exploded"),
            "sleep" => {
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
            "slow_ok" => tokio::time::sleep(Duration::from_millis(300)).await,
            "fatal" => return Err(JobError::Fatal("payload is malformed".into())),
            _ => {}
        }
        self.runs.lock().unwrap().push(job.job.id);
        Ok(())
    }
}

fn recorder(mode: &'static str) -> Arc<Recorder> {
    Arc::new(Recorder {
        runs: Mutex::new(Vec::new()),
        mode,
        calls: AtomicUsize::new(0),
    })
}

fn worker(
    db: &TestDb,
    clock: SharedClock,
    h: Arc<Recorder>,
    timeout: Duration,
    poll: Duration,
) -> Worker {
    Worker::new(
        db.pool.clone(),
        clock,
        WorkerOptions {
            worker_id: "test-worker".into(),
            claim_batch: 16,
            poll_interval: poll,
            lease: Duration::from_secs(4),
            heartbeat: Duration::from_secs(1),
            shutdown_grace: Duration::from_millis(500),
        },
        vec![KindRuntime {
            kind: "t".into(),
            handler: h,
            concurrency: 8,
            timeout,
            backoff: Backoff {
                base: Duration::from_millis(10),
                max: Duration::from_millis(20),
            },
        }],
    )
}

async fn count_state(db: &TestDb, state: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM agentd_jobs WHERE state = $1")
        .bind(state)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn worker_runs_every_job_exactly_once() {
    let db = TestDb::new().await;
    let jobs: Vec<NewJob> = (0..300)
        .map(|i| NewJob::new("t", json!({ "i": i })))
        .collect();
    enqueue_many(&db.pool, &jobs).await.unwrap();
    let h = recorder("ok");
    let w = worker(
        &db,
        Arc::new(SystemClock),
        h.clone(),
        Duration::from_secs(5),
        Duration::from_millis(200),
    );
    let stop = CancellationToken::new();
    let run = tokio::spawn(w.run(stop.clone()));
    wait_until(30, "all jobs succeeded", || async {
        count_state(&db, "succeeded").await == 300
    })
    .await;
    stop.cancel();
    let report = run.await.unwrap();
    assert_eq!(report.succeeded, 300);
    let runs = h.runs.lock().unwrap();
    assert_eq!(runs.len(), 300);
    assert_eq!(
        runs.iter().collect::<HashSet<_>>().len(),
        300,
        "no job ran twice"
    );
}

#[tokio::test]
async fn panics_and_timeouts_are_failures_that_retry_then_die() {
    for mode in ["panic", "sleep"] {
        let db = TestDb::new().await;
        let id = enqueue(&db.pool, &NewJob::new("t", json!({})).max_attempts(2))
            .await
            .unwrap()
            .unwrap();
        let h = recorder(mode);
        let w = worker(
            &db,
            Arc::new(SystemClock),
            h.clone(),
            Duration::from_millis(300),
            Duration::from_millis(50),
        );
        let stop = CancellationToken::new();
        let run = tokio::spawn(w.run(stop.clone()));
        wait_until(20, "job dead", || async {
            count_state(&db, "dead").await == 1
        })
        .await;
        stop.cancel();
        run.await.unwrap();
        let (_, attempt, _, err) = state_of(&db, id).await;
        assert_eq!(attempt, 2, "{mode}: retried once, then dead");
        let err = err.unwrap();
        let expected = if mode == "panic" {
            "handler panicked: handler exploded"
        } else {
            "timed out"
        };
        assert!(err.contains(expected), "{mode}: {err}");
        assert_eq!(h.calls.load(Ordering::SeqCst), 2);
    }
}

#[tokio::test]
async fn fatal_handler_error_is_dead_without_retry() {
    let db = TestDb::new().await;
    let id = enqueue(&db.pool, &NewJob::new("t", json!({})).max_attempts(5))
        .await
        .unwrap()
        .unwrap();
    let h = recorder("fatal");
    let w = worker(
        &db,
        Arc::new(SystemClock),
        h.clone(),
        Duration::from_secs(5),
        Duration::from_millis(50),
    );
    let stop = CancellationToken::new();
    let run = tokio::spawn(w.run(stop.clone()));
    wait_until(20, "job dead", || async {
        count_state(&db, "dead").await == 1
    })
    .await;
    stop.cancel();
    run.await.unwrap();
    assert_eq!(h.calls.load(Ordering::SeqCst), 1, "no retry storm");
    assert_eq!(
        state_of(&db, id).await.3.as_deref(),
        Some("payload is malformed")
    );
}

#[tokio::test]
async fn notify_wakes_an_idle_worker_long_before_the_poll() {
    let db = TestDb::new().await;
    let h = recorder("ok");
    // Poll every 60 s: only NOTIFY can explain a pickup within seconds.
    let w = worker(
        &db,
        Arc::new(SystemClock),
        h.clone(),
        Duration::from_secs(5),
        Duration::from_secs(60),
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
    stop.cancel();
    run.await.unwrap();
}

#[tokio::test]
async fn delayed_job_runs_on_time_not_before() {
    let db = TestDb::new().await;
    let h = recorder("ok");
    let w = worker(
        &db,
        Arc::new(SystemClock),
        h.clone(),
        Duration::from_secs(5),
        Duration::from_secs(60),
    );
    let stop = CancellationToken::new();
    let run = tokio::spawn(w.run(stop.clone()));
    let run_at = Utc::now() + CDuration::milliseconds(700);
    let id = enqueue(&db.pool, &NewJob::new("t", json!({})).run_at(run_at))
        .await
        .unwrap()
        .unwrap();
    wait_until(10, "delayed job ran", || async {
        count_state(&db, "succeeded").await == 1
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
    // A slow job finishes inside the grace period.
    let quick = enqueue(&db.pool, &NewJob::new("t", json!({})))
        .await
        .unwrap()
        .unwrap();
    let h = recorder("slow_ok");
    let w = worker(
        &db,
        Arc::new(SystemClock),
        h.clone(),
        Duration::from_secs(30),
        Duration::from_millis(50),
    );
    let stop = CancellationToken::new();
    let run = tokio::spawn(w.run(stop.clone()));
    wait_until(10, "job started", || async {
        count_state(&db, "running").await == 1
    })
    .await;
    stop.cancel();
    let report = run.await.unwrap();
    assert_eq!(report.released, 0);
    assert_eq!(state_of(&db, quick).await.0, "succeeded");

    // A job that would run for 30 s is released at the end of the 500 ms grace.
    let long = enqueue(&db.pool, &NewJob::new("t", json!({})).max_attempts(1))
        .await
        .unwrap()
        .unwrap();
    let h = recorder("sleep");
    let w = worker(
        &db,
        Arc::new(SystemClock),
        h.clone(),
        Duration::from_secs(60),
        Duration::from_millis(50),
    );
    let stop = CancellationToken::new();
    let run = tokio::spawn(w.run(stop.clone()));
    wait_until(10, "long job started", || async {
        count_state(&db, "running").await == 1
    })
    .await;
    stop.cancel();
    let report = run.await.unwrap();
    assert_eq!(report.released, 1);
    let row = store::get(&db.pool, long).await.unwrap().unwrap();
    assert_eq!(
        row.state, "available",
        "released for another worker at once"
    );
    assert!(row.lease_expires_at.is_none() && row.locked_by.is_none());
    // Released claims do not count: even with max_attempts = 1 the job can be claimed again.
    let c = store::claim(&db.pool, &kinds("t"), 1, "other", Utc::now(), lease())
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
    let h = recorder("ok");
    let w = worker(
        &db,
        Arc::new(SystemClock),
        h.clone(),
        Duration::from_secs(5),
        Duration::from_millis(50),
    );
    let stop = CancellationToken::new();
    let run = tokio::spawn(w.run(stop.clone()));
    wait_until(10, "re-run", || async {
        count_state(&db, "succeeded").await == 1
    })
    .await;
    stop.cancel();
    run.await.unwrap();
    assert_eq!(state_of(&db, id).await.1, 2, "the lost attempt counted");
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
            tokio::time::sleep(Duration::from_secs(6)).await;
            Ok(())
        }
    }
    let w = Worker::new(
        db.pool.clone(),
        Arc::new(SystemClock),
        WorkerOptions {
            worker_id: "w".into(),
            claim_batch: 4,
            poll_interval: Duration::from_millis(50),
            lease: Duration::from_secs(2),
            heartbeat: Duration::from_millis(500),
            shutdown_grace: Duration::from_secs(1),
        },
        vec![KindRuntime {
            kind: "t".into(),
            handler: Arc::new(Long),
            concurrency: 1,
            timeout: Duration::from_secs(20),
            backoff: Backoff {
                base: Duration::from_millis(10),
                max: Duration::from_millis(10),
            },
        }],
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
    // For 6 s (three lease lengths) the rescuer finds nothing to rescue.
    let mut rescued = 0;
    while count_state(&db, "succeeded").await == 0 {
        rescued += rescuer.run_once().await.unwrap().requeued;
        tokio::time::sleep(Duration::from_millis(200)).await;
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
