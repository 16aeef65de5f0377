//! SQL for the redaction boundary's switches (the symbol table itself is in `pii::Vault`).

use super::sql;
use sqlx::PgExecutor;
use uuid::Uuid;

/// Whether the org has redaction on (unknown orgs: on).
pub async fn org_redacts<'e, E: PgExecutor<'e>>(exec: E, org_id: Uuid) -> sqlx::Result<bool> {
    let v: Option<bool> = sqlx::query_scalar("SELECT redact_pii FROM orgs WHERE id = $1")
        .bind(org_id)
        .fetch_optional(exec)
        .await?;
    Ok(v.unwrap_or(true))
}

/// Turns an org's redaction on or off.
pub async fn set_org_redacts<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    on: bool,
) -> sqlx::Result<bool> {
    let r = sqlx::query("UPDATE orgs SET redact_pii = $2 WHERE id = $1")
        .bind(org_id)
        .bind(on)
        .execute(exec)
        .await?;
    Ok(r.rows_affected() == 1)
}

/// Records on the run that its provider calls were redacted.
pub async fn mark_run_redacted<'e, E: PgExecutor<'e>>(exec: E, run_id: Uuid) -> sqlx::Result<()> {
    sql::execute(
        exec,
        "UPDATE agent_runs SET pii_redacted = true WHERE id = $1 AND NOT pii_redacted",
        run_id,
    )
    .await?;
    Ok(())
}
