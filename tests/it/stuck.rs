//! Nothing stays stuck (issue 12, item 6): the reconciler ends runs and documents whose job is
//! dead, cancelled or gone; `jobs cancel` ends the run; a finished job does not bind its unique
//! key; at most one run per document at a time.

use crate::common;
use agentd::app::App;
use agentd::clock::{SharedClock, SystemClock};
use agentd::documents::add_document;
use agentd::jobs::reconcile::Reconciler;
use agentd::llm::{CompletionRequest, CompletionResponse, LlmError, LlmProvider};
use agentd::queue::{NewJob, enqueue, store};
use common::{TestDb, wait_until};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use uuid::Uuid;

const INVOICE: &str =
    "Invoice Number: INV-77\nInvoice Date: 2026-11-02\nTotal Due: 1,250.00\nCustomer: Blue Fox\n";

/// A provider that panics on every call (a bug in the model adapter, say).
struct Panics;

#[async_trait::async_trait]
impl LlmProvider for Panics {
    fn name(&self) -> &str {
        "panics"
    }
    async fn complete(&self, _req: CompletionRequest) -> Result<CompletionResponse, LlmError> {
        panic!("adapter bug: index out of range");
    }
}

/// A provider whose calls never answer (a slow model); counts calls entered and calls whose
/// future was dropped before answering (cancelled by the caller).
#[derive(Default)]
pub struct Hangs {
    pub entered: AtomicUsize,
    pub dropped: Arc<AtomicUsize>,
}

struct DropCount(Arc<AtomicUsize>);
impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl LlmProvider for Hangs {
    fn name(&self) -> &str {
        "hangs"
    }
    async fn complete(&self, _req: CompletionRequest) -> Result<CompletionResponse, LlmError> {
        self.entered.fetch_add(1, Ordering::SeqCst);
        let _guard = DropCount(self.dropped.clone());
        std::future::pending::<()>().await;
        unreachable!()
    }
}

fn app(db: &TestDb) -> App {
    common::app(db, Arc::new(SystemClock) as SharedClock)
}

async fn org(db: &TestDb, name: &str) -> Uuid {
    agentd::store::orgs::ensure(&db.pool, name)
        .await
        .unwrap()
        .id
}

async fn doc_state(db: &TestDb, doc: Uuid) -> (String, Option<String>) {
    sqlx::query_as("SELECT auto_create_status, auto_create_error FROM documents WHERE id = $1")
        .bind(doc)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

async fn runs_of(db: &TestDb, doc: Uuid) -> Vec<(String, Option<String>)> {
    sqlx::query_as(
        "SELECT status, error FROM agent_runs WHERE subject = $1::text ORDER BY started_at, id",
    )
    .bind(doc)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

async fn job_state(db: &TestDb, id: i64) -> (String, Option<String>) {
    sqlx::query_as("SELECT state, last_error FROM agentd_jobs WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_job_that_dies_on_its_last_attempt_is_reconciled_and_can_be_enqueued_again() {
    let db = TestDb::new().await;
    // The worker's own reconciler (every `rescue_interval_secs`, 1 s in tests) would end the run
    // as soon as the job is dead, racing the assertions below that the panic left it running:
    // this test runs the reconciler's pass itself, so the worker's waits an hour after its
    // first pass (made at start, while the job is still waiting).
    let mut config = common::test_config();
    config.worker.rescue_interval_secs = 3600;
    let mut app = common::app_with(&db, Arc::new(SystemClock) as SharedClock, config);
    app.provider = Arc::new(Panics);
    let org = org(&db, "acme").await;
    let (doc, job) = add_document(&app, org, "inv.txt", INVOICE, true)
        .await
        .unwrap();
    let job = job.unwrap();
    sqlx::query("UPDATE agentd_jobs SET max_attempts = 1 WHERE id = $1")
        .bind(job)
        .execute(&db.pool)
        .await
        .unwrap();

    let (w, stop) = common::start_worker(&app, "auto_create", None).await;
    wait_until(30, "the job is dead", || async {
        job_state(&db, job).await.0 == "dead"
    })
    .await;
    stop.cancel();
    w.join().await;
    // The panic skipped the handler's own failure path: the document and the run are stuck.
    assert_eq!(doc_state(&db, doc).await.0, "running");
    assert_eq!(runs_of(&db, doc).await[0].0, "running");

    let rec = Reconciler {
        pool: db.pool.clone(),
        clock: app.clock.clone(),
        interval: Duration::from_secs(1),
        batch: 10,
        cleanup_auto_create: true,
    };
    let report = rec.run_once().await.unwrap();
    assert_eq!(
        (report.runs_failed, report.documents_failed),
        (1, 1),
        "{report:?}"
    );
    let (status, error) = doc_state(&db, doc).await;
    assert_eq!(status, "failed");
    let error = error.unwrap();
    assert!(
        error.contains(&format!("auto_create job {job} is dead")) && error.contains("adapter bug"),
        "{error}"
    );
    let runs = runs_of(&db, doc).await;
    assert_eq!(runs[0].0, "failed");
    assert!(
        runs[0]
            .1
            .as_deref()
            .unwrap()
            .contains("is dead after attempt 1"),
        "{runs:?}"
    );
    assert_eq!(
        rec.run_once().await.unwrap(),
        Default::default(),
        "a second pass finds nothing"
    );

    // The dead job no longer binds `auto_create:{doc}`: a re-enqueue runs and proposes.
    let again = enqueue(
        &db.pool,
        &NewJob::new("auto_create", json!({"org_id": org, "document_id": doc}))
            .unique_key(format!("auto_create:{doc}")),
    )
    .await
    .unwrap();
    assert!(again.is_some(), "the dead job's key does not block");
    let app = self::app(&db);
    let (w, stop) = common::start_worker(&app, "auto_create", None).await;
    wait_until(60, "the document is proposed", || async {
        doc_state(&db, doc).await.0 == "proposed"
    })
    .await;
    stop.cancel();
    w.join().await;
    // While a job with the key waits, the key still binds.
    let first = enqueue(&db.pool, &NewJob::new("t", json!({})).unique_key("k"))
        .await
        .unwrap();
    assert!(first.is_some());
    let dup = enqueue(&db.pool, &NewJob::new("t", json!({})).unique_key("k"))
        .await
        .unwrap();
    assert!(dup.is_none());
}

#[tokio::test]
async fn a_run_whose_job_is_gone_is_failed_and_a_document_without_a_job_too() {
    let db = TestDb::new().await;
    let app = app(&db);
    let org = org(&db, "acme").await;
    let (doc, job) = add_document(&app, org, "inv.txt", INVOICE, true)
        .await
        .unwrap();
    let job = job.unwrap();
    let run = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO agent_runs (id, org_id, kind, subject, job_id, provider, model, status, started_at)
         VALUES ($1, $2, 'auto_create', $3::text, $4, 'offline', 'm', 'running', now())",
    )
    .bind(run)
    .bind(org)
    .bind(doc)
    .bind(job)
    .execute(&db.pool)
    .await
    .unwrap();
    let rec = Reconciler::for_app(&app);
    assert_eq!(
        rec.run_once().await.unwrap(),
        Default::default(),
        "the job is waiting: nothing to end"
    );
    // Retention (or an operator) deleted the job.
    sqlx::query("DELETE FROM agentd_jobs WHERE id = $1")
        .bind(job)
        .execute(&db.pool)
        .await
        .unwrap();
    let report = rec.run_once().await.unwrap();
    assert_eq!((report.runs_failed, report.documents_failed), (1, 1));
    let runs = runs_of(&db, doc).await;
    assert!(
        runs[0].1.as_deref().unwrap().contains("no longer exists"),
        "{runs:?}"
    );
    let (status, error) = doc_state(&db, doc).await;
    assert_eq!(status, "failed");
    assert!(error.unwrap().contains("no auto_create job"));
}

#[tokio::test]
async fn jobs_cancel_ends_the_run_and_the_document_and_stops_the_provider_call() {
    let db = TestDb::new().await;
    let mut app = app(&db);
    let hangs = Arc::new(Hangs::default());
    app.provider = hangs.clone();
    let org = org(&db, "acme").await;
    let (doc, job) = add_document(&app, org, "inv.txt", INVOICE, true)
        .await
        .unwrap();
    let job = job.unwrap();
    let (w, stop) = common::start_worker(&app, "auto_create", None).await;
    wait_until(30, "the provider call started", || async {
        hangs.entered.load(Ordering::SeqCst) == 1
    })
    .await;
    let now = app.clock.now();
    let mut conn = db.pool.acquire().await.unwrap();
    assert!(
        agentd::jobs::cancel::cancel(&mut conn, job, now)
            .await
            .unwrap()
    );
    drop(conn);
    let runs = runs_of(&db, doc).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].0, "cancelled");
    assert!(runs[0].1.as_deref().unwrap().contains("was cancelled"));
    let (status, error) = doc_state(&db, doc).await;
    assert_eq!(status, "failed");
    assert_eq!(
        error.as_deref(),
        Some(format!("auto_create job {job} was cancelled").as_str())
    );
    // The worker sees the lease gone at its next heartbeat and drops the provider call.
    wait_until(30, "the provider call was cancelled", || async {
        hangs.dropped.load(Ordering::SeqCst) == 1
    })
    .await;
    stop.cancel();
    w.join().await;
    assert_eq!(job_state(&db, job).await.0, "cancelled");
    assert_eq!(runs_of(&db, doc).await[0].0, "cancelled");
}

#[tokio::test]
async fn two_forced_runs_on_one_document_cannot_run_at_once() {
    let db = TestDb::new().await;
    let mut app = app(&db);
    let hangs = Arc::new(Hangs::default());
    app.provider = hangs.clone();
    let org = org(&db, "acme").await;
    let (doc, _) = add_document(&app, org, "inv.txt", INVOICE, false)
        .await
        .unwrap();
    let forced = |tag: &str| {
        NewJob::new(
            "auto_create",
            json!({"org_id": org, "document_id": doc, "force": true}),
        )
        .unique_key(format!("auto_create:{doc}:{tag}"))
    };
    let a = enqueue(&db.pool, &forced("a")).await.unwrap().unwrap();
    let (w, stop) = common::start_worker(&app, "auto_create", Some(4)).await;
    wait_until(30, "the first run is in its provider call", || async {
        hangs.entered.load(Ordering::SeqCst) == 1
    })
    .await;
    let b = enqueue(&db.pool, &forced("b")).await.unwrap().unwrap();
    wait_until(30, "the second job is refused", || async {
        job_state(&db, b).await.0 == "dead"
    })
    .await;
    let (_, err) = job_state(&db, b).await;
    assert!(
        err.as_deref()
            .unwrap()
            .contains("already has a run in progress"),
        "{err:?}"
    );
    assert_eq!(job_state(&db, a).await.0, "running");
    assert_eq!(runs_of(&db, doc).await.len(), 1, "one run only");
    assert_eq!(hangs.entered.load(Ordering::SeqCst), 1);
    assert_eq!(
        doc_state(&db, doc).await.0,
        "running",
        "the refusal leaves the document to the run in progress"
    );
    stop.cancel();
    w.join().await;

    // The database refuses a second running run of one document whatever the code does.
    let insert = |id: Uuid| {
        sqlx::query(
            "INSERT INTO agent_runs (id, org_id, kind, subject, provider, model, status, started_at)
             VALUES ($1, $2, 'auto_create', $3::text, 'offline', 'm', 'running', now())",
        )
        .bind(id)
        .bind(org)
        .bind(doc)
        .execute(&db.pool)
    };
    sqlx::query("UPDATE agent_runs SET status = 'failed'")
        .execute(&db.pool)
        .await
        .unwrap();
    insert(Uuid::now_v7()).await.unwrap();
    let err = insert(Uuid::now_v7()).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("agent_runs_one_running_per_doc_idx"),
        "{err}"
    );
}

#[tokio::test]
async fn a_finished_or_dead_cron_tick_is_not_enqueued_again() {
    use agentd::queue::cron::{CronEntry, Scheduler};
    let db = TestDb::new().await;
    let t = chrono::DateTime::parse_from_rfc3339("2026-11-22T10:30:00Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    let clock = agentd::clock::ManualClock::new(t);
    let entry = CronEntry {
        kind: "tick".into(),
        schedule: "0 0 * * * *".parse().unwrap(),
        fan_out: None,
        priority: 0,
        max_attempts: 1,
    };
    let s = Scheduler::new(db.pool.clone(), clock.clone(), vec![entry]);
    assert_eq!(s.run_once().await.unwrap()[0].inserted, 1);
    for state in ["succeeded", "dead", "cancelled"] {
        sqlx::query("UPDATE agentd_jobs SET state = $1, finished_at = now()")
            .bind(state)
            .execute(&db.pool)
            .await
            .unwrap();
        assert_eq!(
            s.run_once().await.unwrap()[0].inserted,
            0,
            "a {state} tick stays done"
        );
    }
    clock.advance(chrono::Duration::hours(1));
    assert_eq!(s.run_once().await.unwrap()[0].inserted, 1, "the next tick");
}

#[tokio::test]
async fn retrying_a_dead_job_whose_key_is_taken_again_is_refused_with_the_reason() {
    let db = TestDb::new().await;
    let old = enqueue(&db.pool, &NewJob::new("t", json!({})).unique_key("k"))
        .await
        .unwrap()
        .unwrap();
    sqlx::query("UPDATE agentd_jobs SET state = 'dead', finished_at = now() WHERE id = $1")
        .bind(old)
        .execute(&db.pool)
        .await
        .unwrap();
    let new = enqueue(&db.pool, &NewJob::new("t", json!({})).unique_key("k"))
        .await
        .unwrap();
    assert!(new.is_some(), "the dead job does not bind its key");
    let err = store::retry(&db.pool, old, chrono::Utc::now())
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("another job with its unique key is waiting or running"),
        "{err}"
    );
    assert_eq!(job_state(&db, old).await.0, "dead");
}

/// Rows every node of a `EXPLAIN (ANALYZE, FORMAT JSON)` plan produced, over all its loops.
fn rows_handled(node: &serde_json::Value) -> f64 {
    let own =
        node["Actual Rows"].as_f64().unwrap_or(0.0) * node["Actual Loops"].as_f64().unwrap_or(1.0);
    let below: f64 = node["Plans"]
        .as_array()
        .map(|plans| plans.iter().map(rows_handled).sum())
        .unwrap_or(0.0);
    own + below
}

#[tokio::test]
async fn ending_jobless_documents_reads_each_waiting_document_once_not_every_job_per_document() {
    let db = TestDb::new().await;
    let app = app(&db);
    let org = org(&db, "acme").await;
    // A fresh backlog nothing has analysed yet (autovacuum off or not yet run): 2,000 queued
    // documents, each with its waiting auto_create job, and one queued document without a job.
    const QUEUED: usize = 2000;
    let ids: Vec<Uuid> = sqlx::query_scalar(
        "INSERT INTO documents (id, org_id, name, text, metadata, created_at, updated_at, auto_create_status)
         SELECT gen_random_uuid(), $1, 'doc-' || n, 'Total: 1.00', '{}', now(), now(), 'queued'
           FROM generate_series(1, $2) n
         RETURNING id",
    )
    .bind(org)
    .bind(QUEUED as i32 + 1)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let (jobless, with_jobs) = ids.split_last().unwrap();
    let jobs: Vec<NewJob> = with_jobs
        .iter()
        .map(|d| NewJob::new("auto_create", json!({"org_id": org, "document_id": d})))
        .collect();
    agentd::queue::enqueue_many(&db.pool, &jobs).await.unwrap();

    let mut tx = db.pool.begin().await.unwrap();
    let plan: serde_json::Value = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "EXPLAIN (ANALYZE, FORMAT JSON) {}",
        agentd::jobs::reconcile::END_DOCUMENTS
    )))
    .bind(chrono::Utc::now())
    .bind(500_i64)
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    let handled = rows_handled(&plan[0]["Plan"]);
    // One probe per queued document: a few rows each. A nested loop over every waiting job
    // per document handles about QUEUED² / 2 (2,000,000) rows.
    assert!(
        handled < (20 * QUEUED) as f64,
        "the statement handled {handled} rows for {QUEUED} queued documents: {plan}"
    );

    let report = Reconciler::for_app(&app).run_once().await.unwrap();
    assert_eq!(
        report.documents_failed, 1,
        "only the document without a job"
    );
    assert_eq!(doc_state(&db, *jobless).await.0, "failed");
    assert_eq!(doc_state(&db, with_jobs[0]).await.0, "queued");
}
