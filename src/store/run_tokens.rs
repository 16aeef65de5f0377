//! SQL for estimated token counts on runs (a provider that sent no usage, a call that failed
//! after the model generated).

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

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
