//! SQL of forks (issue 50, item 2): a new run made from the first N checkpoints of a stored one
//! (copied with their loop marks, never run again), what the reviewer asked of it
//! (`run_forks`, migration 0109), and its adoption. The parent run is only read.

use super::runs::RunRow;
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

/// What a fork is made of.
pub struct NewFork<'a> {
    pub org_id: Uuid,
    pub parent_id: Uuid,
    /// The fork's id.
    pub id: Uuid,
    /// Checkpoints copied: the parent's steps and marks with `seq < from_step`.
    pub from_step: i32,
    /// The `run_fork` job that drives the live part.
    pub job_id: i64,
    /// The model the fork asks (the request's, else the parent's).
    pub model: &'a str,
    /// The provider the fork's calls go to (as `agent_runs.provider` names it).
    pub provider: &'a str,
    /// The model asked for, as the request named it (`None`: the kind's).
    pub requested_model: Option<&'a str>,
    /// A reviewer's words for the fork's live part (a person's words: kept here only).
    pub instructions: Option<&'a str>,
    /// Who asked (`key <id>`, `cli`).
    pub requested_by: &'a str,
    pub now: DateTime<Utc>,
}

/// What the reviewer asked of a fork (`run_forks`).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ForkRow {
    pub run_id: Uuid,
    pub org_id: Uuid,
    pub model: Option<String>,
    pub instructions: Option<String>,
    pub requested_by: String,
    pub created_at: DateTime<Utc>,
    /// When its proposal replaced its document's (auto_create forks only).
    pub adopted_at: Option<DateTime<Utc>>,
}

/// How many checkpoints run `run_id` has (its steps and loop marks share one sequence from 0).
pub async fn step_count<'e, E: PgExecutor<'e>>(exec: E, run_id: Uuid) -> sqlx::Result<i32> {
    sqlx::query_scalar(
        "SELECT COALESCE(max(seq), -1) + 1 FROM (SELECT seq FROM agent_steps WHERE run_id = $1
                UNION ALL SELECT seq FROM agent_loop_marks WHERE run_id = $1) s",
    )
    .bind(run_id)
    .fetch_one(exec)
    .await
}

/// Makes fork `f` in the caller's transaction: the run (status `running`, its parent and step
/// recorded), the parent's checkpoints and marks before `f.from_step` copied as they are, and
/// its `run_forks` row. `None`: the org has no run `f.parent_id`.
pub async fn create(conn: &mut PgConnection, f: &NewFork<'_>) -> sqlx::Result<Option<RunRow>> {
    let run: Option<RunRow> = sqlx::query_as(include_str!("sql/run_fork_create.sql"))
        .bind(f.org_id)
        .bind(f.parent_id)
        .bind(f.id)
        .bind(f.from_step)
        .bind(f.job_id)
        .bind(f.model)
        .bind(f.provider)
        .bind(f.now)
        .fetch_optional(&mut *conn)
        .await?;
    let Some(run) = run else {
        return Ok(None);
    };
    sqlx::query(
        "INSERT INTO agent_steps (run_id, seq, kind, call_id, payload, created_at)
         SELECT $2, seq, kind, call_id, payload, created_at FROM agent_steps
          WHERE run_id = $1 AND seq < $3",
    )
    .bind(f.parent_id)
    .bind(f.id)
    .bind(f.from_step)
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "INSERT INTO agent_loop_marks (run_id, seq, kind, payload, created_at)
         SELECT $2, seq, kind, payload, created_at FROM agent_loop_marks
          WHERE run_id = $1 AND seq < $3",
    )
    .bind(f.parent_id)
    .bind(f.id)
    .bind(f.from_step)
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "INSERT INTO run_forks (run_id, org_id, model, instructions, requested_by, created_at)
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(f.id)
    .bind(f.org_id)
    .bind(f.requested_model)
    .bind(f.instructions)
    .bind(f.requested_by)
    .bind(f.now)
    .execute(&mut *conn)
    .await?;
    Ok(Some(run))
}

/// The fork row of run `run_id` of `org_id`, if the run is a fork.
pub async fn get<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    run_id: Uuid,
) -> sqlx::Result<Option<ForkRow>> {
    sqlx::query_as("SELECT * FROM run_forks WHERE org_id = $1 AND run_id = $2")
        .bind(org_id)
        .bind(run_id)
        .fetch_optional(exec)
        .await
}

/// Records that fork `run_id`'s proposal replaced its document's; `false` if it already had.
pub async fn set_adopted<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    run_id: Uuid,
    now: DateTime<Utc>,
) -> sqlx::Result<bool> {
    let n = sqlx::query(
        "UPDATE run_forks SET adopted_at = $3
          WHERE org_id = $1 AND run_id = $2 AND adopted_at IS NULL",
    )
    .bind(org_id)
    .bind(run_id)
    .bind(now)
    .execute(exec)
    .await?
    .rows_affected();
    Ok(n == 1)
}
