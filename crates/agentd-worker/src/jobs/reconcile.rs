//! The reconciler: a maintenance unit (like the rescuer) that ends what nothing will finish.
//!
//! A run is `running` while its job may still drive it. Once the job is dead (out of attempts:
//! a timeout, a panic or a crash on the last attempt, a rescue past `max_attempts`), cancelled,
//! finished without finishing the run, or gone (retention), nothing will ever touch the run or
//! its document again. The reconciler marks such runs `failed` (or `cancelled`) and such
//! documents `failed` (a refine's: back to the status it had, `refine_requests`), each with the
//! reason taken from the job, so an operator sees why and a re-enqueue can start over. It never
//! touches a run or document whose job is waiting or running: that job will finish it. A run
//! `waiting` for the decisions on its proposals has no job until the last decision enqueues its
//! resume job (migration 0107); once that job is cancelled, dead or gone without resuming it, the
//! run is ended the same way.
//!
//! `jobs cancel` ends the run and the document in the same transaction as the cancel
//! ([`super::cancel`]); the reconciler catches everything else.

use crate::clock::SharedClock;
use crate::kinds::{AutoCreate, JobKind};
use crate::queue::QueueError;
use crate::store::states::RunStatus;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::warn;
use uuid::Uuid;

/// What one pass ended.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct ReconcileReport {
    /// Runs marked `failed` (job dead, gone, or finished without the run).
    pub runs_failed: u64,
    /// Runs marked `cancelled` (job cancelled).
    pub runs_cancelled: u64,
    /// Documents whose auto-create was `queued`/`running` with no job left, now `failed`.
    pub documents_failed: u64,
    /// Proposed artifacts removed from ended auto_create runs (`cleanup_on_failure`).
    pub artifacts_removed: u64,
}

/// Ends runs and documents whose job will never finish them.
pub struct Reconciler {
    pub pool: PgPool,
    pub clock: SharedClock,
    pub interval: Duration,
    /// Rows per statement (a pass loops until a statement ends fewer).
    pub batch: u32,
    /// Remove the proposed artifacts of an ended auto_create run (the job file's
    /// `agent.cleanup_on_failure`, the same cleanup the handler does when it gives up).
    pub cleanup_auto_create: bool,
}

/// A run the reconciler ended.
#[derive(Debug, sqlx::FromRow)]
struct EndedRun {
    id: Uuid,
    org_id: Uuid,
    kind: String,
    status: RunStatus,
}

impl Reconciler {
    /// One pass: ends every orphaned run, then every orphaned document.
    pub async fn run_once(&self) -> Result<ReconcileReport, QueueError> {
        let now = self.clock.now();
        let mut report = ReconcileReport::default();
        loop {
            let ended = end_runs(&self.pool, now, self.batch).await?;
            for r in &ended {
                if r.status == RunStatus::Cancelled {
                    report.runs_cancelled += 1;
                } else {
                    report.runs_failed += 1;
                }
                if self.cleanup_auto_create && r.kind == AutoCreate::NAME {
                    let mut conn = self.pool.acquire().await?;
                    report.artifacts_removed +=
                        crate::store::auto_create::remove_proposed(&mut conn, r.org_id, r.id)
                            .await?;
                }
            }
            if ended.len() < self.batch as usize {
                break;
            }
        }
        let end = || end_documents(&self.pool, now, self.batch);
        report.documents_failed = crate::queue::maintenance::drain(self.batch, end).await?;
        if report != ReconcileReport::default() {
            warn!(
                runs_failed = report.runs_failed,
                runs_cancelled = report.runs_cancelled,
                documents_failed = report.documents_failed,
                artifacts_removed = report.artifacts_removed,
                "reconciler ended runs and documents whose job will never finish them"
            );
            metrics::counter!("agentd_reconciled_total")
                .increment(report.runs_failed + report.runs_cancelled + report.documents_failed);
        }
        Ok(report)
    }

    /// Runs until `stop`.
    pub async fn run(self, stop: CancellationToken) {
        let interval = self.interval;
        crate::queue::maintenance::every(interval, stop, "reconcile", || self.run_once()).await
    }
}

/// Why a job will not finish its run, as stored on the run (`j` is the job, NULL when gone).
const RUN_REASON: &str = "CASE WHEN e.job_state IS NULL THEN 'job ' || e.job_id || ' no longer exists; nothing will finish this run'
            WHEN e.job_state = 'cancelled' THEN 'job ' || e.job_id || ' was cancelled'
            WHEN e.job_state = 'dead' THEN 'job ' || e.job_id || ' is dead after attempt ' || e.attempt || ': '
                 || COALESCE(e.last_error, 'no error recorded')
            ELSE 'job ' || e.job_id || ' ended ' || e.job_state || ' without finishing this run' END";

async fn end_runs(
    pool: &PgPool,
    now: DateTime<Utc>,
    limit: u32,
) -> Result<Vec<EndedRun>, QueueError> {
    let sql = format!(
        "WITH running AS (
            SELECT r.id AS run_id, r.job_id, j.state AS job_state, j.attempt, j.last_error
              FROM agent_runs r LEFT JOIN agentd_jobs j ON j.id = r.job_id
             WHERE r.status = 'running' AND r.job_id IS NOT NULL
               AND (j.id IS NULL OR j.state IN ('dead', 'cancelled', 'succeeded'))
             ORDER BY r.job_id
             LIMIT $2
             FOR UPDATE OF r SKIP LOCKED),
         -- A waiting run whose resume job was enqueued (migration 0107) and will not resume it:
         -- cancelled, dead before the run started, gone, or ended leaving it waiting.
         waiting AS (
            SELECT r.id AS run_id, r.job_id, j.state AS job_state, j.attempt, j.last_error
              FROM agent_run_waits w
              JOIN agent_runs r ON r.id = w.run_id AND r.job_id = w.job_id
              LEFT JOIN agentd_jobs j ON j.id = w.job_id
             WHERE w.job_id IS NOT NULL AND r.status = 'waiting'
               AND (j.id IS NULL OR j.state IN ('dead', 'cancelled', 'succeeded'))
             ORDER BY w.job_id
             LIMIT $2
             FOR UPDATE OF r SKIP LOCKED),
         e AS (SELECT * FROM running UNION ALL SELECT * FROM waiting)
         UPDATE agent_runs r
            SET status = CASE WHEN e.job_state = 'cancelled' THEN 'cancelled' ELSE 'failed' END,
                stop_reason = CASE WHEN e.job_state = 'cancelled' THEN 'cancelled' ELSE 'error' END,
                error = left({RUN_REASON}, 4000),
                finished_at = $1
           FROM e
          WHERE r.id = e.run_id AND r.status IN ('running', 'waiting')
      RETURNING r.id, r.org_id, r.kind, r.status"
    );
    Ok(sqlx::query_as::<_, EndedRun>(sqlx::AssertSqlSafe(sql))
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?)
}

/// Ends documents `queued`/`running` for auto-create with no auto_create job waiting or running
/// (`$1`: now, `$2`: at most this many): `failed`, or for a refine the status the document had
/// when it was asked (`refine_requests`, D13). The waiting or running job is looked up per
/// document by a scalar subquery, one probe of `agentd_jobs_auto_create_doc_idx` each: as `NOT EXISTS`
/// the planner may make it an anti join, and on a table without statistics (a fresh backlog,
/// autovacuum off or not yet run) it chose a nested loop over every waiting job materialised —
/// documents × jobs rows, 1–6 s a pass with 6,000 queued documents (`agentd bench fairness`).
/// Public for the test that counts the rows it reads.
pub const END_DOCUMENTS: &str = "WITH s AS (
            SELECT d.id, j.id AS job_id, j.state AS job_state, j.attempt, j.last_error
              FROM documents d
              LEFT JOIN LATERAL (
                   SELECT id, state, attempt, last_error FROM agentd_jobs
                    WHERE kind = 'auto_create' AND payload->>'document_id' = d.id::text
                    ORDER BY id DESC LIMIT 1) j ON true
             WHERE d.auto_create_status IN ('queued', 'running')
               AND (SELECT a.id FROM agentd_jobs a
                     WHERE a.kind = 'auto_create' AND a.payload->>'document_id' = d.id::text
                       AND a.state IN ('available', 'running')
                     LIMIT 1) IS NULL
             LIMIT $2
             FOR UPDATE OF d SKIP LOCKED)
         UPDATE documents d
            SET auto_create_status = COALESCE((SELECT r.prior_status FROM refine_requests r
                                                WHERE r.job_id = s.job_id AND r.document_id = d.id), 'failed'),
                updated_at = $1,
                auto_create_error = left(CASE
                    WHEN s.job_id IS NULL THEN 'no auto_create job is waiting or running for this document'
                    WHEN s.job_state = 'cancelled' THEN 'auto_create job ' || s.job_id || ' was cancelled'
                    WHEN s.job_state = 'dead' THEN 'auto_create job ' || s.job_id || ' is dead after attempt '
                         || s.attempt || ': ' || COALESCE(s.last_error, 'no error recorded')
                    ELSE 'auto_create job ' || s.job_id || ' ended ' || s.job_state
                         || ' without finishing this document' END, 4000)
           FROM s
          WHERE d.id = s.id AND d.auto_create_status IN ('queued', 'running')";

/// Documents `queued`/`running` for auto-create with no auto_create job waiting or running.
async fn end_documents(pool: &PgPool, now: DateTime<Utc>, limit: u32) -> Result<u64, QueueError> {
    let done = sqlx::query(END_DOCUMENTS)
        .bind(now)
        .bind(i64::from(limit))
        .execute(pool)
        .await?;
    Ok(done.rows_affected())
}

impl Reconciler {
    /// The reconciler a worker process runs: every `worker.rescue_interval_secs`, with the
    /// auto_create job file's `cleanup_on_failure`.
    pub fn for_app(app: &crate::app::App) -> Self {
        Self {
            pool: app.pool.clone(),
            clock: app.clock.clone(),
            interval: Duration::from_secs(app.config.worker.rescue_interval_secs),
            batch: 500,
            cleanup_auto_create: app
                .catalog
                .get(AutoCreate::NAME)
                .is_some_and(|s| s.agent.cleanup_on_failure),
        }
    }
}

/// Another job's auto_create run of `document_id` that is still running and whose job is
/// waiting or running (so it will go on): `(run id, job id)`. A second run must not start.
pub async fn other_active_run<'e, E: sqlx::PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    document_id: Uuid,
    job_id: i64,
) -> sqlx::Result<Option<(Uuid, i64)>> {
    sqlx::query_as(
        "SELECT r.id, r.job_id FROM agent_runs r JOIN agentd_jobs j ON j.id = r.job_id
          WHERE r.org_id = $1 AND r.kind = 'auto_create' AND r.subject = $2::text
            AND r.status = 'running' AND r.job_id <> $3
            AND j.state IN ('available', 'running')
          LIMIT 1",
    )
    .bind(org_id)
    .bind(document_id)
    .bind(job_id)
    .fetch_optional(exec)
    .await
}
