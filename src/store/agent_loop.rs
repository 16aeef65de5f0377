//! SQL of the loop's own records (issue 11): estimated token counts on runs (a provider that
//! sent no usage, a call that failed after the model generated), and loop marks (a nudge, the
//! cap that ends a run) that share the run's step sequence.

use super::runs::StepRow;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

/// Records a loop mark (`nudge` or `cap`) at step `seq` of the run.
pub async fn insert_mark(
    conn: &mut PgConnection,
    run_id: Uuid,
    seq: i32,
    kind: &str,
    payload: &Value,
    now: DateTime<Utc>,
) -> Result<StepRow, sqlx::Error> {
    // As read back: marks carry no version and no call id.
    let row = StepRow {
        seq,
        kind: kind.to_string(),
        call_id: None,
        payload: payload.clone(),
        created_at: chrono::SubsecRound::trunc_subsecs(now, 6),
    };
    sqlx::query(
        "INSERT INTO agent_loop_marks (run_id, seq, kind, payload, created_at) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(run_id)
    .bind(seq)
    .bind(kind)
    .bind(payload)
    .bind(row.created_at)
    .execute(conn)
    .await?;
    Ok(row)
}

/// The run's checkpoints and loop marks, in step order.
pub async fn steps_and_marks(
    pool: &sqlx::PgPool,
    run_id: Uuid,
) -> Result<Vec<StepRow>, sqlx::Error> {
    let mut steps = super::runs::steps(pool, run_id).await?;
    let marks: Vec<StepRow> = sqlx::query_as(
        "SELECT seq, kind, NULL::text AS call_id, payload, created_at FROM agent_loop_marks WHERE run_id = $1",
    )
    .bind(run_id)
    .fetch_all(pool)
    .await?;
    if !marks.is_empty() {
        steps.extend(marks);
        steps.sort_by_key(|s| s.seq);
    }
    Ok(steps)
}

/// Marks the run's token counts as including estimates.
pub async fn mark_estimated<'e, E: PgExecutor<'e>>(
    exec: E,
    run_id: Uuid,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE agent_runs SET tokens_estimated = true WHERE id = $1 AND NOT tokens_estimated",
    )
    .bind(run_id)
    .execute(exec)
    .await?;
    Ok(())
}

/// True if the run's token counts include estimates.
pub async fn is_estimated<'e, E: PgExecutor<'e>>(
    exec: E,
    run_id: Uuid,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT tokens_estimated FROM agent_runs WHERE id = $1")
        .bind(run_id)
        .fetch_one(exec)
        .await
}

/// Charges the estimated input of a failed call to the run and its org, marked estimated.
/// Returns `Some((used, limit))` when the org's use first crosses 80% of its budget.
pub async fn charge_failed_call(
    conn: &mut PgConnection,
    org_id: Uuid,
    run_id: Uuid,
    input_tokens: i64,
    now: DateTime<Utc>,
) -> Result<Option<(i64, i64)>, sqlx::Error> {
    super::runs::add_tokens(&mut *conn, run_id, input_tokens, 0).await?;
    mark_estimated(&mut *conn, run_id).await?;
    super::runs::charge_budget(conn, org_id, input_tokens, now).await
}
