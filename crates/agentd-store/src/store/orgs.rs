//! SQL for organisations.

use serde::Serialize;
use sqlx::PgExecutor;
use uuid::Uuid;

/// An org.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct OrgRow {
    pub id: Uuid,
    pub name: String,
    pub active: bool,
}

/// The org with this id or name.
pub async fn find<'e, E: PgExecutor<'e>>(
    exec: E,
    id_or_name: &str,
) -> sqlx::Result<Option<OrgRow>> {
    let id = Uuid::parse_str(id_or_name).ok();
    sqlx::query_as("SELECT id, name, active FROM orgs WHERE id = $1 OR ($1 IS NULL AND name = $2)")
        .bind(id)
        .bind(id_or_name)
        .fetch_optional(exec)
        .await
}

/// Creates an org (or returns the one with this name).
pub async fn ensure<'e, E: PgExecutor<'e>>(exec: E, name: &str) -> sqlx::Result<OrgRow> {
    sqlx::query_as(
        "INSERT INTO orgs (id, name) VALUES ($1, $2)
         ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name
         RETURNING id, name, active",
    )
    .bind(Uuid::now_v7())
    .bind(name)
    .fetch_one(exec)
    .await
}

/// Marks org `id` active or not: an inactive org's keys are refused, the nightly cron skips it
/// and its jobs do nothing (`agentd eval` leaves its org so; review D17). False when no org has
/// that id.
pub async fn set_active<'e, E: PgExecutor<'e>>(
    exec: E,
    id: Uuid,
    active: bool,
) -> sqlx::Result<bool> {
    let done = sqlx::query("UPDATE orgs SET active = $2 WHERE id = $1")
        .bind(id)
        .bind(active)
        .execute(exec)
        .await?;
    Ok(done.rows_affected() == 1)
}
