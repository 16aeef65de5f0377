//! Queue guarantees against a real PostgreSQL: claims, leases and fencing, retries, dead jobs,
//! unique keys, transactional enqueue, cron ticks, retention. The runtime (wake-ups, shutdown,
//! heartbeats) is covered by tests/it/runtime_conformance.rs.

use crate::common;
use agentd::clock::{Clock, ManualClock, SharedClock, SystemClock};
use agentd::queue::cron::{CronEntry, Scheduler};
use agentd::queue::maintenance::{Rescuer, Retention};
use agentd::queue::store::{self, FailOutcome};
use agentd::queue::vacuum::{JobsVacuum, MAX_PER_PASS};
use agentd::queue::{NewJob, enqueue, enqueue_committed, enqueue_many};
use chrono::{Duration as CDuration, TimeZone, Utc};
use common::TestDb;
use serde_json::json;
use std::collections::HashSet;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn kinds(k: &str) -> Vec<String> {
    vec![k.to_string()]
}

async fn state_of(db: &TestDb, id: i64) -> (agentd::queue::JobState, i32, i32, Option<String>) {
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

/// A batch whose jobs are on different attempts (a retry acked with first attempts) takes the
/// per-job attempt form: each row is fenced by its own attempt, and a stale one is left out.
#[tokio::test]
async fn mixed_attempt_batches_fence_each_job_by_its_own_attempt() {
    let db = TestDb::new().await;
    let mut ids = Vec::new();
    for _ in 0..4 {
        let id = enqueue(&db.pool, &NewJob::new("t", json!({})))
            .await
            .unwrap()
            .unwrap();
        ids.push(id);
    }
    let (a, b, c, d) = (ids[0], ids[1], ids[2], ids[3]);
    let t0 = Utc::now();
    store::claim(&db.pool, &kinds("t"), 4, "w", t0, lease())
        .await
        .unwrap();
    // a and c fail once and run again: attempt 2; b and d stay on attempt 1.
    for id in [a, c] {
        let out = store::fail(&db.pool, id, 1, "boom", false, t0, t0)
            .await
            .unwrap();
        assert_eq!(out, FailOutcome::Retry);
    }
    let again = store::claim(&db.pool, &kinds("t"), 4, "w", t0, lease())
        .await
        .unwrap();
    assert_eq!(again.len(), 2);
    assert!(again.iter().all(|j| j.attempt == 2));
    // c's ack names its stale first attempt: only a (2) and b (1) count.
    let mut acked = store::complete_many(&db.pool, &[(a, 2), (b, 1), (c, 1)], t0)
        .await
        .unwrap();
    acked.sort();
    assert_eq!(acked, vec![a, b]);
    assert_eq!(state_of(&db, c).await.0, "running");
    // Deleting takes the same fence: d's attempt 2 is stale, c's 2 is current.
    let gone = store::delete_succeeded(&db.pool, &[(c, 2), (d, 2)])
        .await
        .unwrap();
    assert_eq!(gone, vec![c]);
    assert_eq!(state_of(&db, d).await.0, "running");
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

/// Migration 0050: nothing indexes what a heartbeat changes, so renewals are HOT updates (no
/// new index entries per renewal).
#[tokio::test]
async fn heartbeats_are_hot_updates() {
    let db = TestDb::new().await;
    // One connection: the statistics this backend flushes are the heartbeats' own.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&db.url)
        .await
        .unwrap();
    let id = enqueue(&pool, &NewJob::new("t", json!({})))
        .await
        .unwrap()
        .unwrap();
    let t0 = Utc::now();
    let c = store::claim(&pool, &kinds("t"), 1, "w", t0, lease())
        .await
        .unwrap();
    let stats = |pool: sqlx::PgPool| async move {
        // Flush this backend's pending counters, then read them in a fresh snapshot.
        sqlx::query("SELECT pg_stat_force_next_flush()")
            .execute(&pool)
            .await
            .unwrap();
        sqlx::query("SELECT 1").execute(&pool).await.unwrap();
        let r: (i64, i64) = sqlx::query_as(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'agentd_jobs'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        r
    };
    let (upd0, hot0) = stats(pool.clone()).await;
    for i in 1..=5 {
        let kept = store::heartbeat(
            &pool,
            &[(id, c[0].attempt)],
            t0 + CDuration::seconds(i),
            lease(),
        )
        .await
        .unwrap();
        assert_eq!(kept, vec![id]);
    }
    let (upd1, hot1) = stats(pool.clone()).await;
    assert_eq!(upd1 - upd0, 5, "five renewals");
    assert_eq!(hot1 - hot0, 5, "every renewal was a HOT update");
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
    let dup = enqueue_committed(&db.pool, &NewJob::new("t", json!({})).unique_key("k1"))
        .await
        .unwrap();
    assert!(dup.is_none(), "enqueue_committed skips it too");
    let bad = enqueue_committed(&db.pool, &NewJob::new("", json!({}))).await;
    assert!(bad.is_err(), "enqueue_committed validates like enqueue");
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
        vacuum: JobsVacuum::new(0),
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

/// Vacuums of agentd_jobs so far (not autovacuum's).
async fn vacuums(db: &TestDb) -> i64 {
    sqlx::query_scalar("SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'agentd_jobs'")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// `n` succeeded jobs finished `age` ago.
async fn finished_jobs(db: &TestDb, n: i64, finished_at: chrono::DateTime<Utc>) {
    sqlx::query(
        "INSERT INTO agentd_jobs (kind, payload, state, finished_at)
         SELECT 't', '{}', 'succeeded', $2 FROM generate_series(1, $1)",
    )
    .bind(n)
    .bind(finished_at)
    .execute(&db.pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn retention_vacuums_the_job_table_once_enough_rows_are_dead() {
    let db = TestDb::new().await;
    let now = Utc::now();
    finished_jobs(&db, 3_000, now - CDuration::days(10)).await;
    finished_jobs(&db, 500, now - CDuration::hours(1)).await;
    let retention = |dead_rows| Retention {
        pool: db.pool.clone(),
        clock: ManualClock::new(now),
        keep: CDuration::days(7),
        batch: 1_000,
        interval: Duration::from_secs(60),
        vacuum: JobsVacuum::new(dead_rows),
    };
    assert_eq!(vacuums(&db).await, 0, "a fresh table was never vacuumed");

    // Off (0): deletes, never vacuums.
    finished_jobs(&db, 3_000, now - CDuration::days(10)).await;
    assert_eq!(retention(0).run_once().await.unwrap(), 6_000);
    assert_eq!(
        vacuums(&db).await,
        0,
        "vacuum_dead_rows = 0 leaves it to autovacuum"
    );

    // Below the threshold: no vacuum.
    finished_jobs(&db, 3_000, now - CDuration::days(10)).await;
    assert_eq!(retention(100_000).run_once().await.unwrap(), 3_000);
    assert_eq!(vacuums(&db).await, 0, "3,000 dead rows are below 100,000");

    // Past it: a VACUUM, which PostgreSQL refuses inside a transaction block, so it ran on its
    // own.
    finished_jobs(&db, 3_000, now - CDuration::days(10)).await;
    let unit = retention(2_000);
    assert_eq!(unit.run_once().await.unwrap(), 3_000);
    // (Statistics of the deletes that arrive after the first vacuum may start one more.)
    let after = vacuums(&db).await;
    assert!(
        (1..=i64::from(MAX_PER_PASS)).contains(&after),
        "3,000 rows deleted in the pass pass 2,000: vacuumed, at most {MAX_PER_PASS} times ({after})"
    );
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM agentd_jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, 500);

    // Dead rows the pass did not delete (a claim's and an ack's old row versions) count too,
    // once PostgreSQL's statistics hold them. First every connection's statistics are in (a
    // backend may hold them up to 10 s) and a manual VACUUM resets the dead count to the truth.
    settled(&db, "n_tup_ins = 12500 AND n_tup_del = 12000").await;
    sqlx::raw_sql("VACUUM agentd_jobs")
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(vacuums(&db).await, after + 1);
    // Claims and acks change `state`, so their old row versions are dead rows (not HOT).
    let mut conn = db.pool.acquire().await.unwrap();
    for state in [
        "dead",
        "succeeded",
        "dead",
        "succeeded",
        "dead",
        "succeeded",
    ] {
        sqlx::query("UPDATE agentd_jobs SET state = $1")
            .bind(state)
            .execute(&mut *conn)
            .await
            .unwrap();
    }
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    settled(&db, "n_tup_upd = 3000").await;
    // What PostgreSQL counts (page pruning may already have removed some).
    let dead: i64 = sqlx::query_scalar(
        "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'agentd_jobs'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(dead >= 100, "the updates left dead rows ({dead})");
    let dead = u64::try_from(dead).unwrap();
    assert_eq!(retention(dead + 1).run_once().await.unwrap(), 0);
    assert_eq!(
        vacuums(&db).await,
        after + 1,
        "{dead} dead rows, threshold one more: none"
    );
    let unit = retention(dead);
    assert_eq!(
        unit.run_once().await.unwrap(),
        0,
        "nothing old is left to delete"
    );
    assert_eq!(
        vacuums(&db).await,
        after + 2,
        "{dead} dead row versions reach the threshold: vacuumed, once (none dead after it)"
    );
    assert_eq!(unit.run_once().await.unwrap(), 0);
    assert_eq!(
        vacuums(&db).await,
        after + 2,
        "nothing dead since: no vacuum"
    );
}

/// Waits until agentd_jobs' statistics satisfy `cond` (every backend flushed its counts).
async fn settled(db: &TestDb, cond: &'static str) {
    let sql = format!("SELECT {cond} FROM pg_stat_user_tables WHERE relname = 'agentd_jobs'");
    let t0 = std::time::Instant::now();
    loop {
        let ok: bool = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.clone()))
            .fetch_one(&db.pool)
            .await
            .unwrap();
        if ok {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "statistics never flushed: {cond}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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
        fan_out: Some(agentd::store::nightly::fan_out(
            agentd::catalog::FanOut::Orgs,
            0,
        )),
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

/// The wall clock of a host whose time is off by the given amount: `SystemClock` there.
#[derive(Debug)]
struct SkewedWallClock(CDuration);

impl Clock for SkewedWallClock {
    fn now(&self) -> chrono::DateTime<Utc> {
        Utc::now() + self.0
    }
    fn lease_now(&self) -> Option<chrono::DateTime<Utc>> {
        SystemClock.lease_now()
    }
}

/// Review #11: leases are stamped and judged by the database's clock, so a worker whose clock
/// runs 10 minutes behind does not claim a lease that is already over, and a rescuer whose clock
/// runs 10 minutes ahead does not take a live lease; an expired lease is still rescued.
#[tokio::test]
async fn leases_follow_the_database_clock_not_the_nodes() {
    let db = TestDb::new().await;
    let id = enqueue(&db.pool, &NewJob::new("t", json!({})))
        .await
        .unwrap()
        .unwrap();
    let behind = SkewedWallClock(CDuration::minutes(-10));
    let ahead: SharedClock = Arc::new(SkewedWallClock(CDuration::minutes(10)));
    let got = store::claim(&db.pool, &kinds("t"), 1, "w", behind.lease_now(), lease())
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    let left: f64 = sqlx::query_scalar(
        "SELECT EXTRACT(EPOCH FROM lease_expires_at - now())::float8 FROM agentd_jobs WHERE id = $1",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(
        left > 20.0 && left <= 30.0,
        "lease left by the database's clock: {left} s"
    );
    let rescuer = |clock: SharedClock| Rescuer {
        pool: db.pool.clone(),
        clock,
        interval: Duration::from_secs(1),
        batch: 10,
        backoff: Default::default(),
    };
    for clock in [ahead.clone(), Arc::new(SystemClock) as SharedClock] {
        assert_eq!(rescuer(clock).run_once().await.unwrap().requeued, 0);
    }
    assert_eq!(state_of(&db, id).await.0, "running");
    // A heartbeat from the node behind keeps the lease on the database's clock too.
    let kept = store::heartbeat(
        &db.pool,
        &[(id, 1)],
        behind.lease_now(),
        CDuration::milliseconds(300),
    )
    .await
    .unwrap();
    assert_eq!(kept, vec![id]);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(rescuer(ahead).run_once().await.unwrap().requeued, 1);
    assert_eq!(state_of(&db, id).await.0, "available");
}

/// Issue 30, item 2: the nightly jobs of the orgs of one time zone no longer start in the same
/// minute. Each runs at the tick plus its own offset within `spread_secs` (a hash of its id),
/// the same offset every night; without a spread they all run at the tick.
#[tokio::test]
async fn fan_out_spreads_the_orgs_of_a_time_zone_over_the_window() {
    let db = TestDb::new().await;
    sqlx::query("INSERT INTO orgs (id, name, nightly_hour) SELECT gen_random_uuid(), 'org' || g, 2 FROM generate_series(1, 600) g")
        .execute(&db.pool)
        .await
        .unwrap();
    let tick = Utc.with_ymd_and_hms(2026, 11, 22, 2, 0, 0).unwrap();
    let entry = |kind: &str, spread_secs| CronEntry {
        kind: kind.into(),
        schedule: cron::Schedule::from_str("0 0 2 * * *").unwrap(),
        fan_out: Some(agentd::store::nightly::fan_out(
            agentd::catalog::FanOut::Orgs,
            spread_secs,
        )),
        priority: 0,
        max_attempts: 3,
    };
    let offsets = |kind: &'static str, tick: chrono::DateTime<Utc>| {
        let pool = db.pool.clone();
        async move {
            let rows: Vec<(String, f64)> = sqlx::query_as(
                "SELECT payload->>'org_id', extract(epoch FROM run_at - $2)::float8
                   FROM agentd_jobs WHERE kind = $1 AND payload->>'night' = ($2 AT TIME ZONE 'UTC')::date::text",
            )
            .bind(kind)
            .bind(tick)
            .fetch_all(&pool)
            .await
            .unwrap();
            rows.into_iter()
                .collect::<std::collections::HashMap<_, _>>()
        }
    };
    let spread = entry("nightly_spread", 3600);
    let inserted = agentd::queue::cron::enqueue_tick(&db.pool, &spread, tick)
        .await
        .unwrap();
    assert_eq!(inserted, 600);
    let first = offsets("nightly_spread", tick).await;
    assert_eq!(first.len(), 600);
    assert!(
        first.values().all(|s| (0.0..3600.0).contains(s)),
        "every org within the window after the tick"
    );
    let mut per_minute = std::collections::HashMap::new();
    for s in first.values() {
        *per_minute.entry((*s / 60.0) as i64).or_insert(0) += 1;
    }
    // 600 orgs over 60 minutes: 10 a minute on average.
    assert!(
        per_minute.len() >= 55,
        "spread over the hour: {} minutes used",
        per_minute.len()
    );
    assert!(
        per_minute.values().all(|n| *n <= 40),
        "no minute holds a crowd: {per_minute:?}"
    );
    // The next night: the same offset for each org.
    let next = tick + CDuration::days(1);
    agentd::queue::cron::enqueue_tick(&db.pool, &spread, next)
        .await
        .unwrap();
    assert_eq!(
        offsets("nightly_spread", next).await,
        first,
        "an org's offset is its own, night after night"
    );
    // Without a spread every org's job runs at the tick.
    agentd::queue::cron::enqueue_tick(&db.pool, &entry("nightly_flat", 0), tick)
        .await
        .unwrap();
    let flat = offsets("nightly_flat", tick).await;
    assert_eq!(flat.len(), 600);
    assert!(flat.values().all(|s| *s == 0.0));
    // The offset counts from the nightly hour, not from the tick: a tick five hours after it
    // (a worker started late) enqueues every org's job due at once.
    let late = tick + CDuration::hours(5);
    agentd::queue::cron::enqueue_tick(&db.pool, &entry("nightly_late", 3600), late)
        .await
        .unwrap();
    let caught_up = offsets("nightly_late", late).await;
    assert_eq!(caught_up.len(), 600);
    assert!(
        caught_up.values().all(|s| *s == 0.0),
        "caught up at the tick, not spread past it"
    );
}

/// Issue 30's job-file settings are checked at load: newcomer slots must leave the busy org a
/// slot (fewer than `queue.concurrency`), and a fan-out spread is at most a day. Each bad value
/// names the file and the key.
#[test]
fn bad_newcomer_slots_and_spread_name_the_file_and_key() {
    let tools = agentd::known_tool_names();
    let case = |file: &str, from: &str, to: &str, key: &str| {
        let dir = tempfile::tempdir().unwrap();
        for entry in std::fs::read_dir("jobs").unwrap() {
            let p = entry.unwrap().path();
            let mut text = std::fs::read_to_string(&p).unwrap();
            if p.file_name().unwrap() == file {
                assert!(text.contains(from), "{file} holds {from:?}");
                text = text.replace(from, to);
            }
            std::fs::write(dir.path().join(p.file_name().unwrap()), text).unwrap();
        }
        let err = match agentd::catalog::Catalog::load_dir(dir.path(), &tools) {
            Ok(_) => panic!("{file} with {to:?} was accepted"),
            Err(e) => e,
        };
        assert_eq!(err.key.as_deref(), Some(key), "{err:?}");
        assert!(err.file.ends_with(file), "{err:?}");
    };
    case(
        "auto_create.toml",
        "newcomer_slots = 0",
        "newcomer_slots = 8",
        "queue.newcomer_slots",
    );
    case(
        "proactive_suggestion.toml",
        "spread_secs = 3600",
        "spread_secs = 90000",
        "schedule.spread_secs",
    );
    // As shipped, both load.
    agentd::catalog::Catalog::load_dir(std::path::Path::new("jobs"), &tools).unwrap();
}
