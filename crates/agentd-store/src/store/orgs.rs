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
