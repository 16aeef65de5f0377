//! Time-based retention of runs, suggestions, events, audit rows and provider calls (review
//! #10, `agentd::store::history`): what is older than its table's retention is deleted in batches;
//! what a running run, a pending approval, a pending suggestion or a waiting job still needs
//! stays; 0 keeps everything; the append-only tables keep their last 30 days whatever is set.

use crate::common;
use agentd::clock::{ManualClock, SharedClock};
use agentd::store::history::{HistoryDays, HistoryRetention, Purged};
use chrono::{DateTime, Duration, Utc};
use common::TestDb;
use sqlx::PgPool;
use uuid::Uuid;

fn ago(now: DateTime<Utc>, days: i64) -> DateTime<Utc> {
    now - Duration::days(days)
}

async fn run(
    pool: &PgPool,
    org: Uuid,
    status: &str,
    finished: Option<DateTime<Utc>>,
    job: Option<i64>,
) -> Uuid {
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO agent_runs (id, org_id, kind, subject, job_id, provider, model, status,
                                 started_at, finished_at)
         VALUES ($1, $2, 'auto_create', $1::text, $3, 'offline', 'm', $4,
                 coalesce($5, now()) - interval '1 minute', $5)",
    )
    .bind(id)
    .bind(org)
    .bind(job)
    .bind(status)
    .bind(finished)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO agent_steps (run_id, seq, kind, payload)
         VALUES ($1, 1, 'llm_response', '{\"text\": \"hello\"}')",
    )
    .bind(id)
    .execute(pool)
    .await
    .unwrap();
    // The run's `run.started` (migration 0104's trigger) is not one of the events this test
    // ages: the events below are the only ones it counts.
    sqlx::query("DELETE FROM agentd_events WHERE subject_id = $1")
        .bind(id)
        .execute(pool)
        .await
        .unwrap();
    id
}

async fn approval(pool: &PgPool, org: Uuid, run: Option<Uuid>, suggestion: Option<Uuid>) {
    sqlx::query(
        "INSERT INTO pending_approvals (id, org_id, run_id, suggestion_id, tool, args, snapshot,
                                        snapshot_hash, created_at, expires_at, chain_id)
         VALUES ($1, $2, $3, $4, 'update_document', '{}', '{}', 'h', now(),
                 now() + interval '1 day', $1)",
    )
    .bind(Uuid::new_v4())
    .bind(org)
    .bind(run)
    .bind(suggestion)
    .execute(pool)
    .await
    .unwrap();
}

async fn suggestion(
    pool: &PgPool,
    org: Uuid,
    status: &str,
    created: DateTime<Utc>,
    changed: Option<DateTime<Utc>>,
    run: Option<Uuid>,
) -> Uuid {
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO suggestions (id, org_id, kind, subject, night, title, message, status,
                                  run_id, created_at, status_changed_at)
         VALUES ($1, $2, 'tidy', $1::text, $3::date, 't', 'm', $4, $5, $3, $6)",
    )
    .bind(id)
    .bind(org)
    .bind(created)
    .bind(status)
    .bind(run)
    .bind(changed)
    .execute(pool)
    .await
    .unwrap();
    id
}

async fn event(pool: &PgPool, org: Uuid, at: DateTime<Utc>) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO agentd_events (org_id, type, occurred_at) VALUES ($1, 'run.finished', $2)
         RETURNING id",
    )
    .bind(org)
    .bind(at)
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn job(pool: &PgPool, kind: &str, payload: serde_json::Value) -> i64 {
    sqlx::query_scalar("INSERT INTO agentd_jobs (kind, payload) VALUES ($1, $2) RETURNING id")
        .bind(kind)
        .bind(payload)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn audit(pool: &PgPool, org: Uuid, run: Option<Uuid>, at: DateTime<Utc>) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO audit_events (org_id, run_id, actor, tool, category, decision, created_at)
         VALUES ($1, $2, 'agent', 'get_document', 'read', 'auto_approved', $3) RETURNING id",
    )
    .bind(org)
    .bind(run)
    .bind(at)
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn provider_call(pool: &PgPool, org: Uuid, run: Option<Uuid>, at: DateTime<Utc>) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO provider_calls (org_id, run_id, provider, model, outcome, created_at)
         VALUES ($1, $2, 'offline', 'm', 'answered', $3) RETURNING id",
    )
    .bind(org)
    .bind(run)
    .bind(at)
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn exists(pool: &PgPool, table: &str, id: &str) -> bool {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT EXISTS (SELECT 1 FROM {table} WHERE id::text = $1)"
    )))
    .bind(id)
    .fetch_one(pool)
    .await
    .unwrap()
}

fn retention(db: &TestDb, now: DateTime<Utc>, days: HistoryDays) -> HistoryRetention {
    HistoryRetention {
        pool: db.pool.clone(),
        clock: ManualClock::new(now) as SharedClock,
        days,
        batch: 2,
        interval: std::time::Duration::from_secs(60),
    }
}

#[tokio::test]
async fn old_history_is_deleted_in_batches_and_what_is_still_needed_stays() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let org = agentd::store::orgs::ensure(p, "acme").await.unwrap().id;
    let now = Utc::now();

    // Runs (retention 90 days).
    let mut old_runs = Vec::new();
    for _ in 0..3 {
        old_runs.push(run(p, org, "succeeded", Some(ago(now, 100)), None).await);
    }
    let failed = run(p, org, "failed", Some(ago(now, 95)), None).await;
    old_runs.push(failed);
    let running = run(p, org, "running", None, None).await;
    sqlx::query("UPDATE agent_runs SET started_at = $2 WHERE id = $1")
        .bind(running)
        .bind(ago(now, 200))
        .execute(p)
        .await
        .unwrap();
    let approved_later = run(p, org, "succeeded", Some(ago(now, 100)), None).await;
    approval(p, org, Some(approved_later), None).await;
    let suggested = run(p, org, "succeeded", Some(ago(now, 100)), None).await;
    suggestion(p, org, "shown", ago(now, 100), None, Some(suggested)).await;
    let waiting_job = job(p, "auto_create", serde_json::json!({"org_id": org})).await;
    let resumable = run(p, org, "failed", Some(ago(now, 100)), Some(waiting_job)).await;
    let young = run(p, org, "succeeded", Some(ago(now, 10)), None).await;

    // Suggestions (retention 90 days).
    let acted = suggestion(p, org, "acted", ago(now, 120), Some(ago(now, 119)), None).await;
    let expired = suggestion(p, org, "expired", ago(now, 100), Some(ago(now, 99)), None).await;
    let pending = suggestion(p, org, "pending", ago(now, 120), None, None).await;
    let dismissed_lately =
        suggestion(p, org, "dismissed", ago(now, 120), Some(ago(now, 5)), None).await;
    let awaiting = suggestion(p, org, "acted", ago(now, 120), Some(ago(now, 119)), None).await;
    approval(p, org, None, Some(awaiting)).await;
    let fresh = suggestion(p, org, "acted", ago(now, 20), Some(ago(now, 19)), None).await;

    // Events (retention 30 days): one still owed to a webhook receiver, and every later one.
    let gone: Vec<i64> = vec![
        event(p, org, ago(now, 60)).await,
        event(p, org, ago(now, 50)).await,
        event(p, org, ago(now, 45)).await,
    ];
    let owed = event(p, org, ago(now, 40)).await;
    job(
        p,
        "webhook_delivery",
        serde_json::json!({"org_id": org, "event_id": owed, "webhook_id": Uuid::new_v4()}),
    )
    .await;
    let after_owed = event(p, org, ago(now, 35)).await;
    let recent = event(p, org, ago(now, 5)).await;

    // Audit rows and provider calls (retention 10 days, but the database keeps 30).
    let old_audit = audit(p, org, Some(old_runs[0]), ago(now, 500)).await;
    let old_audit2 = audit(p, org, None, ago(now, 400)).await;
    let audit_of_running = audit(p, org, Some(running), ago(now, 190)).await;
    let audit_20_days = audit(p, org, None, ago(now, 20)).await;
    let old_call = provider_call(p, org, Some(old_runs[1]), ago(now, 500)).await;
    let call_of_running = provider_call(p, org, Some(running), ago(now, 190)).await;
    let call_20_days = provider_call(p, org, None, ago(now, 20)).await;

    // 0 keeps everything.
    let keep_all = retention(&db, now, HistoryDays::default());
    assert_eq!(keep_all.run_once().await.unwrap(), Purged::default());

    let days = HistoryDays {
        runs: 90,
        events: 30,
        suggestions: 90,
        audit: 10,
        provider_calls: 10,
    };
    let r = retention(&db, now, days);
    let purged = r.run_once().await.unwrap();
    assert_eq!(
        purged,
        Purged {
            runs: 4,
            events: 3,
            suggestions: 2,
            audit: 2,
            provider_calls: 1,
        }
    );
    for id in &old_runs {
        assert!(!exists(p, "agent_runs", &id.to_string()).await);
    }
    let steps: i64 = sqlx::query_scalar("SELECT count(*) FROM agent_steps WHERE run_id = ANY($1)")
        .bind(&old_runs)
        .fetch_one(p)
        .await
        .unwrap();
    assert_eq!(steps, 0, "transcripts go with their runs");
    for (id, what) in [
        (running, "a running run"),
        (approved_later, "a run a pending approval names"),
        (suggested, "a run a shown suggestion names"),
        (resumable, "a run whose job waits to resume it"),
        (young, "a run younger than the retention"),
    ] {
        assert!(
            exists(p, "agent_runs", &id.to_string()).await,
            "{what} stays"
        );
    }
    for id in [acted, expired] {
        assert!(!exists(p, "suggestions", &id.to_string()).await);
    }
    for (id, what) in [
        (pending, "a pending suggestion"),
        (dismissed_lately, "a dismissal the nightly run still reads"),
        (awaiting, "a suggestion a pending approval names"),
        (fresh, "a young suggestion"),
    ] {
        assert!(
            exists(p, "suggestions", &id.to_string()).await,
            "{what} stays"
        );
    }
    for id in &gone {
        assert!(!exists(p, "agentd_events", &id.to_string()).await);
    }
    for id in [owed, after_owed, recent] {
        assert!(exists(p, "agentd_events", &id.to_string()).await);
    }
    for id in [old_audit, old_audit2] {
        assert!(!exists(p, "audit_events", &id.to_string()).await);
    }
    for id in [audit_of_running, audit_20_days] {
        assert!(exists(p, "audit_events", &id.to_string()).await);
    }
    assert!(!exists(p, "provider_calls", &old_call.to_string()).await);
    for id in [call_of_running, call_20_days] {
        assert!(exists(p, "provider_calls", &id.to_string()).await);
    }

    // Nothing left to do; a day later the owed event's delivery is done and it goes too, with
    // the older ones behind it.
    assert_eq!(r.run_once().await.unwrap(), Purged::default());
    sqlx::query("UPDATE agentd_jobs SET state = 'succeeded', finished_at = now() WHERE kind = 'webhook_delivery'")
        .execute(p)
        .await
        .unwrap();
    let purged = r.run_once().await.unwrap();
    assert_eq!(purged.events, 2);
    assert!(exists(p, "agentd_events", &recent.to_string()).await);
}

#[tokio::test]
async fn audit_rows_and_provider_calls_stay_append_only_outside_the_purge() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let org = agentd::store::orgs::ensure(p, "acme").await.unwrap().id;
    let now = Utc::now();
    audit(p, org, None, ago(now, 500)).await;
    provider_call(p, org, None, ago(now, 500)).await;
    for sql in [
        "DELETE FROM audit_events",
        "DELETE FROM provider_calls",
        "UPDATE audit_events SET tool = 'x'",
        "TRUNCATE audit_events",
    ] {
        let e = sqlx::raw_sql(sql).execute(p).await.unwrap_err();
        assert!(e.to_string().contains("append-only"), "{sql}: {e}");
    }
    // Even the owner's purge keeps the last 30 days, whatever cutoff it is given.
    audit(p, org, None, ago(now, 3)).await;
    let n: i64 = sqlx::query_scalar(
        "SELECT agentd_purge_history('audit_events', now() + interval '1 day', 100)",
    )
    .fetch_one(p)
    .await
    .unwrap();
    assert_eq!(n, 1);
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_events")
        .fetch_one(p)
        .await
        .unwrap();
    assert_eq!(left, 1);
    let e = sqlx::query("SELECT agentd_purge_history('documents', now(), 100)")
        .execute(p)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("unknown table"), "{e}");
    // The purge's permission ends with its call.
    let e = sqlx::raw_sql("DELETE FROM audit_events")
        .execute(p)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("append-only"), "{e}");
}
