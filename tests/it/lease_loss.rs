//! A worker that lost its lease stops (issue 12, item 5): failing heartbeats past the lease
//! cancel the in-flight provider call; a stale attempt's terminal writes
//! (fail the run, mark the document failed, record the proposal) change nothing.

use crate::common;
use agentd::app::App;
use agentd::clock::{SharedClock, SystemClock};
use agentd::documents::add_document;
use agentd::jobs::auto_create::AutoCreate;
use agentd::llm::scripted::{ScriptedProvider, Turn};
use agentd::llm::{CompletionRequest, CompletionResponse, LlmError, LlmProvider};
use agentd::queue::store;
use agentd::queue::worker::{JobContext, JobHandler};
use common::{TestDb, wait_until};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const INVOICE: &str =
    "Invoice Number: INV-77\nInvoice Date: 2026-11-02\nTotal Due: 1,250.00\nCustomer: Blue Fox\n";

/// A provider whose calls never answer; counts calls entered and calls dropped unanswered.
#[derive(Default)]
struct Hangs {
    entered: AtomicUsize,
    dropped: Arc<AtomicUsize>,
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

async fn org(db: &TestDb) -> Uuid {
    agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id
}

async fn one(db: &TestDb, sql: &str, id: impl ToString) -> String {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .bind(id.to_string())
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// Every heartbeat (a lease extension of the same running attempt) fails; claims, acks and
/// rescues still work.
const BLOCK_HEARTBEATS: &str = "
CREATE FUNCTION test_block_heartbeat() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state = 'running' AND NEW.state = 'running' AND OLD.attempt = NEW.attempt
       AND NEW.lease_expires_at IS DISTINCT FROM OLD.lease_expires_at THEN
        RAISE EXCEPTION 'heartbeat blocked by the test';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER test_block_heartbeat BEFORE UPDATE ON agentd_jobs
    FOR EACH ROW EXECUTE FUNCTION test_block_heartbeat();";

async fn failing_heartbeats_cancel_the_provider_call() {
    let db = TestDb::new().await;
    let config = common::test_config();
    let mut app = common::app_with(&db, Arc::new(SystemClock) as SharedClock, config);
    let hangs = Arc::new(Hangs::default());
    app.provider = hangs.clone();
    let org = org(&db).await;
    let (doc, job) = add_document(&app, org, "inv.txt", INVOICE, true)
        .await
        .unwrap();
    let job = job.unwrap();
    let (w, stop) = common::start_worker(&app, "auto_create", None).await;
    wait_until(30, "the slow provider call started", || async {
        hangs.entered.load(Ordering::SeqCst) == 1
    })
    .await;
    sqlx::raw_sql(BLOCK_HEARTBEATS)
        .execute(&db.pool)
        .await
        .unwrap();
    // Lease 4 s, heartbeat 1 s: once the lease may expire before the next heartbeat, the
    // worker gives the attempt up and the provider call is dropped.
    wait_until(30, "the provider call was cancelled", || async {
        hangs.dropped.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(
        one(
            &db,
            "SELECT state FROM agentd_jobs WHERE id = $1::int8",
            job
        )
        .await,
        "running",
        "the worker wrote nothing: the rescuer decides once the lease expired ({})",
        one(
            &db,
            "SELECT last_error FROM agentd_jobs WHERE id = $1::int8",
            job
        )
        .await
    );
    assert_eq!(
        one(&db, "SELECT status FROM agent_runs WHERE subject = $1", doc).await,
        "running",
        "the run stays resumable from its checkpoint"
    );
    // Heartbeats work again: the rescuer re-queues the expired lease and a new attempt resumes.
    sqlx::raw_sql("DROP TRIGGER test_block_heartbeat ON agentd_jobs")
        .execute(&db.pool)
        .await
        .unwrap();
    wait_until(30, "a second attempt calls the provider", || async {
        hangs.entered.load(Ordering::SeqCst) == 2
    })
    .await;
    assert_eq!(
        one(
            &db,
            "SELECT attempt::text FROM agentd_jobs WHERE id = $1::int8",
            job
        )
        .await,
        "2"
    );
    stop.cancel();
    w.join().await;
}

#[tokio::test]
async fn failing_heartbeats_cancel_the_provider_call_under_apalis() {
    failing_heartbeats_cancel_the_provider_call().await;
}

/// Claims the job as the "stale" worker, then lets another worker take it over.
async fn claim_then_lose(app: &App) -> JobContext {
    let claimed = store::claim(
        &app.pool,
        &["auto_create".to_string()],
        1,
        "stale-worker",
        app.clock.now(),
        chrono::Duration::seconds(30),
    )
    .await
    .unwrap()
    .pop()
    .unwrap();
    sqlx::query(
        "UPDATE agentd_jobs SET attempt = attempt + 1, locked_by = 'other-worker' WHERE id = $1",
    )
    .bind(claimed.id)
    .execute(&app.pool)
    .await
    .unwrap();
    JobContext {
        job: claimed,
        cancel: CancellationToken::new(),
    }
}

#[tokio::test]
async fn a_stale_attempt_cannot_fail_the_run_or_the_document() {
    let db = TestDb::new().await;
    let mut app = common::app(&db, Arc::new(SystemClock) as SharedClock);
    app.provider = Arc::new(ScriptedProvider::new(vec![Turn::Error {
        message: "model refused".into(),
        retryable: false,
    }]));
    let org = org(&db).await;
    let (doc, _) = add_document(&app, org, "inv.txt", INVOICE, true)
        .await
        .unwrap();
    let ctx = claim_then_lose(&app).await;
    let err = AutoCreate { app: app.clone() }
        .handle(ctx)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no longer owns the job"), "{err}");
    assert_eq!(
        one(&db, "SELECT status FROM agent_runs WHERE subject = $1", doc).await,
        "running",
        "the stale worker did not fail the run"
    );
    assert_eq!(
        one(
            &db,
            "SELECT auto_create_status FROM documents WHERE id = $1::uuid",
            doc
        )
        .await,
        "running",
        "nor the document"
    );
}

#[tokio::test]
async fn a_stale_attempt_cannot_record_a_proposal() {
    let db = TestDb::new().await;
    let app = common::app(&db, Arc::new(SystemClock) as SharedClock);
    let org = org(&db).await;
    let (doc, _) = add_document(&app, org, "inv.txt", INVOICE, true)
        .await
        .unwrap();
    let ctx = claim_then_lose(&app).await;
    let err = AutoCreate { app: app.clone() }
        .handle(ctx)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no longer owns the job"), "{err}");
    let (status, schema): (String, Option<Uuid>) = sqlx::query_as(
        "SELECT auto_create_status, proposed_schema_id FROM documents WHERE id = $1",
    )
    .bind(doc)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (status.as_str(), schema),
        ("running", None),
        "no proposal recorded"
    );
}
