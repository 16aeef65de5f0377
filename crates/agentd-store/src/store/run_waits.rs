//! SQL of a run that waits for the decisions on its proposals (issue 50, item 1; migration
//! 0107): the run's pending approvals, the wait (status `waiting`, the job that resumes it) and
//! its end. The resume job itself is enqueued by the trigger `agentd_resume_waiting_run` in the
//! transaction of the last decision or expiry, whichever path makes it.

use super::runs::RunRow;
use crate::queue::NewJob;
use crate::store::states::RunStatus;
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

/// Locks the run's row and returns its status (`None`: no such run).
pub async fn lock_run(conn: &mut PgConnection, run_id: Uuid) -> sqlx::Result<Option<RunStatus>> {
    sqlx::query_scalar("SELECT status FROM agent_runs WHERE id = $1 FOR UPDATE")
        .bind(run_id)
        .fetch_optional(conn)
        .await
}

/// The run's pending approvals, read `FOR SHARE`: a decision committing meanwhile is waited for
/// and its approval left out, and one deciding after this read waits for this transaction (so
/// its trigger finds the run waiting).
pub async fn pending_of_run(conn: &mut PgConnection, run_id: Uuid) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar(
        "SELECT id FROM pending_approvals WHERE run_id = $1 AND status = 'pending'
          ORDER BY created_at, id FOR SHARE",
    )
    .bind(run_id)
    .fetch_all(conn)
    .await
}

/// A wait about to begin.
#[derive(Debug)]
pub struct Wait<'a> {
    pub run_id: Uuid,
    pub org_id: Uuid,
    /// The run's `waiting` mark.
    pub seq: i32,
    pub since: DateTime<Utc>,
    /// The job driving the run now (its retry finds the run handed on: [`handed_on`]).
    pub waited_job: Option<i64>,
    /// The job that resumes the run, as its kind built it (its unique key set).
    pub resume: &'a NewJob,
}

/// Marks the running run `waiting` and keeps the job that resumes it (replacing an earlier
/// wait's). False when the run was not running.
pub async fn begin(conn: &mut PgConnection, w: &Wait<'_>) -> sqlx::Result<bool> {
    let moved = sqlx::query(
        "UPDATE agent_runs SET status = 'waiting' WHERE id = $1 AND status = 'running'",
    )
    .bind(w.run_id)
    .execute(&mut *conn)
    .await?;
    if moved.rows_affected() != 1 {
        return Ok(false);
    }
    sqlx::query(
        "INSERT INTO agent_run_waits (run_id, org_id, seq, since, waited_job, kind, payload,
                                      priority, max_attempts, unique_key, job_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, NULL)
         ON CONFLICT (run_id) DO UPDATE
            SET seq = EXCLUDED.seq, since = EXCLUDED.since, waited_job = EXCLUDED.waited_job,
                kind = EXCLUDED.kind, payload = EXCLUDED.payload, priority = EXCLUDED.priority,
                max_attempts = EXCLUDED.max_attempts, unique_key = EXCLUDED.unique_key,
                job_id = NULL",
    )
    .bind(w.run_id)
    .bind(w.org_id)
    .bind(w.seq)
    .bind(w.since)
    .bind(w.waited_job)
    .bind(&w.resume.kind)
    .bind(&w.resume.payload)
    .bind(w.resume.priority)
    .bind(w.resume.max_attempts)
    .bind(&w.resume.unique_key)
    .execute(conn)
    .await?;
    Ok(true)
}

/// Ends the run's wait: `waiting` → `running` (its resume job drives it now).
pub async fn end(conn: &mut PgConnection, run_id: Uuid) -> sqlx::Result<()> {
    sqlx::query("UPDATE agent_runs SET status = 'running' WHERE id = $1 AND status = 'waiting'")
        .bind(run_id)
        .execute(conn)
        .await?;
    Ok(())
}

/// The run job `job_id` drove until the run began to wait, once another job (its resume) took
/// it over: a retry of `job_id` (killed before its ack) has nothing left to do.
pub async fn handed_on<'e, E: PgExecutor<'e>>(
    exec: E,
    job_id: i64,
) -> sqlx::Result<Option<RunRow>> {
    sqlx::query_as(
        "SELECT r.* FROM agent_run_waits w JOIN agent_runs r ON r.id = w.run_id
          WHERE w.waited_job = $1 AND r.job_id IS DISTINCT FROM $1",
    )
    .bind(job_id)
    .fetch_optional(exec)
    .await
}

/// The resume job enqueued for the run's wait, if any (tests, the demo).
pub async fn resume_job<'e, E: PgExecutor<'e>>(exec: E, run_id: Uuid) -> sqlx::Result<Option<i64>> {
    Ok(
        sqlx::query_scalar::<_, Option<i64>>(
            "SELECT job_id FROM agent_run_waits WHERE run_id = $1",
        )
        .bind(run_id)
        .fetch_optional(exec)
        .await?
        .flatten(),
    )
}
