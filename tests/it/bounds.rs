//! Bounds (issue 12, item 7): durations in the config and job files are checked (exit 2 naming
//! the file and key, no panic, no run capped at once), a checkpoint of an unknown format
//! version fails its run with a clear error, and rescued jobs back off like failed ones.

use crate::common;
use agentd::clock::{SharedClock, SystemClock};
use agentd::documents::add_document;
use agentd::queue::backoff::Backoff;
use agentd::queue::maintenance::Rescuer;
use agentd::queue::store::{self, RescueBackoff};
use agentd::queue::{NewJob, enqueue};
use chrono::{Duration as CDuration, Utc};
use common::{TestDb, wait_until};
use serde_json::json;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

const INVOICE: &str =
    "Invoice Number: INV-77\nInvoice Date: 2026-11-02\nTotal Due: 1,250.00\nCustomer: Blue Fox\n";

fn agentd(db: &TestDb, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_agentd"));
    c.args(args)
        .env("DATABASE_URL", &db.url)
        .env("AGENTD_HTTP__ADDR", "")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run agentd")
}

#[tokio::test]
async fn overflowing_durations_in_the_config_exit_2_naming_the_key() {
    let db = TestDb::new().await;
    for (var, key) in [
        ("AGENTD_WORKER__LEASE_SECS", "worker.lease_secs"),
        (
            "AGENTD_RETENTION__FINISHED_AFTER_HOURS",
            "retention.finished_after_hours",
        ),
        (
            "AGENTD_LLM__REQUEST_TIMEOUT_SECS",
            "llm.request_timeout_secs",
        ),
        (
            "AGENTD_WORKER__SHUTDOWN_GRACE_SECS",
            "worker.shutdown_grace_secs",
        ),
    ] {
        let o = agentd(&db, &["status"], &[(var, "9223372036854775807")]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{var}: {err}");
        assert!(
            err.contains(var) && err.contains(&format!("{key} must be at most")),
            "{var}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[tokio::test]
async fn overflowing_durations_in_job_files_exit_2_naming_file_and_key() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    for (kind, body) in agentd::catalog::BUILTIN {
        std::fs::write(dir.path().join(format!("{kind}.toml")), body).unwrap();
    }
    let dir_s = dir.path().display().to_string();
    let cases = [
        (
            "auto_create",
            "approval_ttl_secs = 14400",
            "approval_ttl_secs = 10000000000000",
            "agent.approval_ttl_secs must be at most 3153600000",
        ),
        (
            "auto_create",
            "deadline_secs = 120",
            "deadline_secs = 18446744073709551615",
            "agent.deadline_secs must be at most",
        ),
        (
            "proactive_suggestion",
            "backoff_max_ms = 600000",
            "backoff_max_ms = 18446744073709551615",
            "queue.backoff_max_ms must be at most",
        ),
        (
            "approval_expiry",
            "timeout_secs = 120",
            "timeout_secs = 9999999999999",
            "queue.timeout_secs must be at most",
        ),
        (
            "approval_expiry",
            "retention_days = 30",
            "retention_days = 4000000000",
            "sweep.retention_days must be at most 36500",
        ),
    ];
    for (kind, from, to, expected) in cases {
        let path = dir.path().join(format!("{kind}.toml"));
        let original = std::fs::read_to_string(&path).unwrap();
        assert!(original.contains(from), "{kind}.toml has {from}");
        std::fs::write(&path, original.replace(from, to)).unwrap();
        let o = agentd(&db, &["status"], &[("AGENTD_WORKER__JOBS_DIR", &dir_s)]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{to}: {err}");
        assert!(
            err.contains(&format!("{kind}.toml")) && err.contains(expected),
            "expected {expected:?} in: {err}"
        );
        std::fs::write(&path, original).unwrap();
    }
    // The longest allowed values load and start nothing capped.
    let path = dir.path().join("auto_create.toml");
    let original = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        original
            .replace(
                "approval_ttl_secs = 14400",
                "approval_ttl_secs = 3153600000",
            )
            .replace("deadline_secs = 120", "deadline_secs = 3153600000"),
    )
    .unwrap();
    let o = agentd(&db, &["status"], &[("AGENTD_WORKER__JOBS_DIR", &dir_s)]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[tokio::test]
async fn a_checkpoint_of_an_unknown_version_fails_the_run_with_a_clear_error() {
    let db = TestDb::new().await;
    let app = common::app(&db, Arc::new(SystemClock) as SharedClock);
    let org = agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id;
    let (doc, job) = add_document(&app, org, "inv.txt", "Total: 5\n", true)
        .await
        .unwrap();
    // A run of this job, checkpointed by a future agentd with a format this build cannot read.
    let run = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO agent_runs (id, org_id, kind, subject, job_id, provider, model, status, started_at)
         VALUES ($1, $2, 'auto_create', $3::text, $4, 'offline', 'm', 'running', now())",
    )
    .bind(run)
    .bind(org)
    .bind(doc)
    .bind(job.unwrap())
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO agent_steps (run_id, seq, kind, payload)
         VALUES ($1, 0, 'llm_response', '{\"v\": 99, \"response\": {\"parts\": []}}')",
    )
    .bind(run)
    .execute(&db.pool)
    .await
    .unwrap();
    let (w, stop) = common::start_worker(&app, "auto_create", None).await;
    wait_until(30, "the document failed", || async {
        let s: String =
            sqlx::query_scalar("SELECT auto_create_status FROM documents WHERE id = $1")
                .bind(doc)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        s == "failed"
    })
    .await;
    stop.cancel();
    w.join().await;
    let (status, error): (String, String) =
        sqlx::query_as("SELECT status, error FROM agent_runs WHERE id = $1")
            .bind(run)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(status, "failed");
    assert!(
        error.contains("checkpoint 0 (llm_response)")
            && error.contains("format version 99, this build reads version 1"),
        "{error}"
    );
    let job_state: String = sqlx::query_scalar("SELECT state FROM agentd_jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        job_state, "dead",
        "not retried: the checkpoint stays unreadable"
    );
    // What this build writes carries its version.
    let (w, stop) = common::start_worker(&app, "auto_create", None).await;
    let (doc2, _) = add_document(&app, org, "b.txt", INVOICE, true)
        .await
        .unwrap();
    wait_until(60, "the second document is proposed", || async {
        let s: String =
            sqlx::query_scalar("SELECT auto_create_status FROM documents WHERE id = $1")
                .bind(doc2)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        s == "proposed"
    })
    .await;
    stop.cancel();
    w.join().await;
    let unversioned: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM agent_steps WHERE run_id <> $1 AND payload->'v' IS DISTINCT FROM '1'::jsonb",
    )
    .bind(run)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(unversioned, 0);
}

#[tokio::test]
async fn rescued_jobs_back_off_like_failed_ones() {
    let db = TestDb::new().await;
    let id = enqueue(&db.pool, &NewJob::new("t", json!({})).max_attempts(5))
        .await
        .unwrap()
        .unwrap();
    let backoff = RescueBackoff {
        per_kind: vec![(
            "t".into(),
            Backoff {
                base: Duration::from_secs(10),
                max: Duration::from_secs(15),
            },
        )],
        ..Default::default()
    };
    let mut now = Utc::now();
    // expected delay window per lost attempt: [base*2^(n-1)/2, base*2^(n-1)] capped at max
    for (attempt, lo, hi) in [(1, 5, 10), (2, 7, 15), (3, 7, 15)] {
        let claimed = store::claim(
            &db.pool,
            &["t".to_string()],
            1,
            "w",
            now,
            CDuration::seconds(30),
        )
        .await
        .unwrap();
        assert_eq!(claimed[0].attempt, attempt);
        now += CDuration::seconds(31);
        let r = store::rescue_expired_with(&db.pool, now, 10, &backoff)
            .await
            .unwrap();
        assert_eq!(r.requeued, 1);
        let run_at: chrono::DateTime<Utc> =
            sqlx::query_scalar("SELECT run_at FROM agentd_jobs WHERE id = $1")
                .bind(id)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        let delay = (run_at - now).num_milliseconds();
        assert!(
            delay >= lo * 1000 && delay <= hi * 1000,
            "attempt {attempt}: delay {delay} ms not in [{lo}, {hi}] s"
        );
        assert!(
            store::claim(
                &db.pool,
                &["t".to_string()],
                1,
                "w",
                now,
                CDuration::seconds(30)
            )
            .await
            .unwrap()
            .is_empty(),
            "not claimable before its backoff"
        );
        now = run_at;
    }
    // The worker's rescuer uses the job files' policies.
    let app = common::app(&db, Arc::new(SystemClock) as SharedClock);
    let rescuer = Rescuer {
        pool: db.pool.clone(),
        clock: app.clock.clone(),
        interval: Duration::from_secs(1),
        batch: 10,
        backoff: RescueBackoff::from_catalog(&app.catalog),
    };
    let past = Utc::now() - CDuration::seconds(120);
    let ac = enqueue(
        &db.pool,
        &NewJob::new("auto_create", json!({})).run_at(past),
    )
    .await
    .unwrap()
    .unwrap();
    store::claim(
        &db.pool,
        &["auto_create".to_string()],
        1,
        "w",
        past,
        CDuration::seconds(30),
    )
    .await
    .unwrap();
    let before = Utc::now();
    assert_eq!(rescuer.run_once().await.unwrap().requeued, 1);
    let run_at: chrono::DateTime<Utc> =
        sqlx::query_scalar("SELECT run_at FROM agentd_jobs WHERE id = $1")
            .bind(ac)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    // auto_create.toml: backoff_base_ms = 2000 → the first rescue waits 1–2 s.
    assert!(
        run_at >= before + CDuration::milliseconds(1000),
        "{run_at} vs {before}"
    );
}

#[tokio::test]
async fn the_longest_allowed_deadline_does_not_cap_a_run() {
    let db = TestDb::new().await;
    let tools = agentd::known_tool_names();
    let mut catalog = agentd::catalog::Catalog::builtin(&tools).unwrap();
    let text = agentd::catalog::BUILTIN
        .iter()
        .find(|(k, _)| *k == "auto_create")
        .unwrap()
        .1
        .replace("deadline_secs = 120", "deadline_secs = 3153600000")
        .replace(
            "approval_ttl_secs = 14400",
            "approval_ttl_secs = 3153600000",
        );
    let spec =
        agentd::catalog::parse("jobs/auto_create.toml", "auto_create", &text, &tools).unwrap();
    assert_eq!(spec.agent.deadline_secs, 3_153_600_000);
    catalog.kinds.insert("auto_create".into(), spec);
    let mut app = agentd::app::App::new(
        db.pool.clone(),
        Arc::new(SystemClock) as SharedClock,
        common::test_config(),
        catalog,
    );
    app.provider = Arc::new(agentd::llm::offline::OfflineProvider::default());
    let org = agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id;
    let (doc, _) = add_document(&app, org, "inv.txt", INVOICE, true)
        .await
        .unwrap();
    let (w, stop) = common::start_worker(&app, "auto_create", None).await;
    wait_until(60, "the document reaches a final status", || async {
        let s: String =
            sqlx::query_scalar("SELECT auto_create_status FROM documents WHERE id = $1")
                .bind(doc)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        s != "queued" && s != "running"
    })
    .await;
    stop.cancel();
    w.join().await;
    let (status, stop_reason): (String, Option<String>) =
        sqlx::query_as("SELECT status, stop_reason FROM agent_runs WHERE subject = $1::text")
            .bind(doc)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        (status.as_str(), stop_reason.as_deref()),
        ("succeeded", Some("completed")),
        "a 100-year deadline is not hit at once"
    );
}
