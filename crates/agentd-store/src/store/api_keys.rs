//! SQL for the HTTP API's own tables: API keys (hashed), Idempotency-Key replays, and the org
//! settings the API edits (the monthly token budget in `org_budgets`).

use super::sql;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

/// A key as listed (never the secret: only its prefix).
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct ApiKeyRow {
    pub id: Uuid,
    pub org_id: Uuid,
    pub org_name: String,
    pub role: String,
    pub key_prefix: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// Who a live key belongs to.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct KeyOwner {
    pub key_id: Uuid,
    pub org_id: Uuid,
    pub role: String,
    /// The org's own API rates (org settings, migration 0097; null: the service's).
    pub requests_per_minute: Option<i32>,
    pub runs_per_minute: Option<i32>,
}

/// Stores a new key by its hash.
pub async fn insert_key<'e, E: PgExecutor<'e>>(
    exec: E,
    id: Uuid,
    org_id: Uuid,
    role: &str,
    key_hash: &str,
    key_prefix: &str,
    now: DateTime<Utc>,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO api_keys (id, org_id, role, key_hash, key_prefix, created_at)
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(id)
    .bind(org_id)
    .bind(role)
    .bind(key_hash)
    .bind(key_prefix)
    .bind(now)
    .execute(exec)
    .await?;
    Ok(())
}

/// The owner of an unrevoked key of an active org with this hash.
pub async fn find_live<'e, E: PgExecutor<'e>>(
    exec: E,
    key_hash: &str,
) -> sqlx::Result<Option<KeyOwner>> {
    sqlx::query_as(
        "SELECT k.id AS key_id, k.org_id, k.role, o.requests_per_minute, o.runs_per_minute
           FROM api_keys k JOIN orgs o ON o.id = k.org_id
          WHERE k.key_hash = $1 AND k.revoked_at IS NULL AND o.active",
    )
    .bind(key_hash)
    .fetch_optional(exec)
    .await
}

/// Whether key `key_id` of `org_id` is still unrevoked and its org active (an open event
/// stream asks this again and again).
pub async fn is_live<'e, E: PgExecutor<'e>>(
    exec: E,
    key_id: Uuid,
    org_id: Uuid,
) -> sqlx::Result<bool> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM api_keys k JOIN orgs o ON o.id = k.org_id
                         WHERE k.id = $1 AND k.org_id = $2 AND k.revoked_at IS NULL AND o.active)",
    )
    .bind(key_id)
    .bind(org_id)
    .fetch_one(exec)
    .await
}

/// Every key (optionally of one org), newest first.
pub async fn list_keys<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Option<Uuid>,
) -> sqlx::Result<Vec<ApiKeyRow>> {
    sqlx::query_as(
        "SELECT k.id, k.org_id, o.name AS org_name, k.role, k.key_prefix, k.created_at, k.revoked_at
           FROM api_keys k JOIN orgs o ON o.id = k.org_id
          WHERE $1::uuid IS NULL OR k.org_id = $1
          ORDER BY k.created_at DESC, k.id DESC",
    )
    .bind(org_id)
    .fetch_all(exec)
    .await
}

/// Revokes a key (of `org_id` only, when given); false if no such key or already revoked.
pub async fn revoke_key<'e, E: PgExecutor<'e>>(
    exec: E,
    id: Uuid,
    org_id: Option<Uuid>,
    now: DateTime<Utc>,
) -> sqlx::Result<bool> {
    let done = sqlx::query(
        "UPDATE api_keys SET revoked_at = $2
          WHERE id = $1 AND revoked_at IS NULL AND ($3::uuid IS NULL OR org_id = $3)",
    )
    .bind(id)
    .bind(now)
    .bind(org_id)
    .execute(exec)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// Creates an org with this name; None if the name is taken.
pub async fn create_org<'e, E: PgExecutor<'e>>(exec: E, name: &str) -> sqlx::Result<Option<Uuid>> {
    sqlx::query_scalar(
        "INSERT INTO orgs (id, name) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING RETURNING id",
    )
    .bind(Uuid::now_v7())
    .bind(name)
    .fetch_optional(exec)
    .await
}

/// A stored Idempotency-Key answer.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct IdempotentAnswer {
    pub request_hash: String,
    pub route: String,
    pub status: i16,
    pub response: Value,
}

/// Claims `(org, key)` for a request in the caller's transaction. None: claimed now (the
/// caller does the work and calls [`finish_idempotent`] before commit). Some: an earlier
/// request with this key committed (a concurrent one is waited for by the unique index).
pub async fn claim_idempotent(
    conn: &mut PgConnection,
    org_id: Uuid,
    key: &str,
    route: &str,
    request_hash: &str,
    now: DateTime<Utc>,
) -> sqlx::Result<Option<IdempotentAnswer>> {
    let claimed: Option<i32> = sqlx::query_scalar(
        "INSERT INTO api_idempotency (org_id, key, route, request_hash, status, response, created_at)
         VALUES ($1, $2, $3, $4, 0, 'null'::jsonb, $5)
         ON CONFLICT (org_id, key) DO NOTHING RETURNING 1",
    )
    .bind(org_id)
    .bind(key)
    .bind(route)
    .bind(request_hash)
    .bind(now)
    .fetch_optional(&mut *conn)
    .await?;
    if claimed.is_some() {
        return Ok(None);
    }
    let earlier = "SELECT request_hash, route, status, response FROM api_idempotency
                    WHERE org_id = $1 AND key = $2";
    super::sql::bound(earlier, org_id, key)
        .fetch_optional(conn)
        .await
}

/// Records the answer of a claimed key (same transaction as the work).
pub async fn finish_idempotent(
    conn: &mut PgConnection,
    org_id: Uuid,
    key: &str,
    status: i16,
    response: &Value,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE api_idempotency SET status = $3, response = $4 WHERE org_id = $1 AND key = $2",
    )
    .bind(org_id)
    .bind(key)
    .bind(status)
    .bind(response)
    .execute(conn)
    .await?;
    Ok(())
}

/// Removes the org's budget (unlimited); false if it had none.
pub async fn clear_budget<'e, E: PgExecutor<'e>>(exec: E, org_id: Uuid) -> sqlx::Result<bool> {
    let done = sql::execute(exec, "DELETE FROM org_budgets WHERE org_id = $1", org_id).await?;
    Ok(done > 0)
}

/// Deletes an org with everything it owns, and its queued jobs (the API benchmark's cleanup).
pub async fn delete_org_with_jobs(pool: &sqlx::PgPool, org_id: Uuid) -> sqlx::Result<()> {
    let mut tx = pool.begin().await?;
    sql::execute(
        &mut *tx,
        "DELETE FROM agentd_jobs WHERE payload->>'org_id' = $1::text",
        org_id,
    )
    .await?;
    sql::execute(&mut *tx, "DELETE FROM orgs WHERE id = $1", org_id).await?;
    tx.commit().await
}

/// Deletes Idempotency-Key answers recorded before `cutoff`; returns how many.
pub async fn purge_idempotency<'e, E: PgExecutor<'e>>(
    exec: E,
    cutoff: DateTime<Utc>,
) -> sqlx::Result<u64> {
    sql::execute(
        exec,
        "DELETE FROM api_idempotency WHERE created_at < $1",
        cutoff,
    )
    .await
}
