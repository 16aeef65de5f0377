//! Paused kinds (issue 33, item 4; migration 0075): an org pauses a job kind and every worker's
//! claim leaves that org's ready jobs of the kind alone until it resumes; jobs already running
//! finish. The claims look a paused row up by primary key per org they visit
//! ([`paused_org`]), so pausing adds no scan to a claim.

use super::QueueError;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{Acquire, PgConnection, PgExecutor};
use uuid::Uuid;

/// A SQL condition: the org key `{org}` (an expression in [`super::fair::ORG_KEY`]'s form) has
/// paused the kind `{kind}`. One primary-key probe of `agentd_paused_kinds`.
pub fn paused_org(kind: &str, org: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM agentd_paused_kinds pk WHERE pk.kind = {kind} AND pk.org_key = {org})"
    )
}

/// A kind an org has paused.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct PausedKind {
    pub kind: String,
    pub org_id: Uuid,
    pub paused_at: DateTime<Utc>,
}

/// Pauses `kind` for `org` (again: nothing changes, the first pause's time is kept); returns
/// the pause.
pub async fn pause<'e>(
    exec: impl PgExecutor<'e>,
    org: Uuid,
    kind: &str,
    by: Option<Uuid>,
    now: DateTime<Utc>,
) -> Result<PausedKind, QueueError> {
    Ok(sqlx::query_as(
        "WITH ins AS (
            INSERT INTO agentd_paused_kinds (kind, org_id, paused_at, paused_by)
            VALUES ($1, $2, $3, $4) ON CONFLICT (kind, org_key) DO NOTHING
            RETURNING kind, org_id, paused_at)
         SELECT kind, org_id, paused_at FROM ins
         UNION ALL
         SELECT kind, org_id, paused_at FROM agentd_paused_kinds
          WHERE kind = $1 AND org_key = $2::text AND NOT EXISTS (SELECT 1 FROM ins)",
    )
    .bind(kind)
    .bind(org)
    .bind(now)
    .bind(by)
    .fetch_one(exec)
    .await?)
}

/// Resumes `kind` for `org` and wakes the workers (the NOTIFY of an enqueue, sent when `conn`'s
/// transaction commits); false if it was not paused.
pub async fn resume(conn: &mut PgConnection, org: Uuid, kind: &str) -> Result<bool, QueueError> {
    let mut tx = conn.begin().await?;
    let gone =
        sqlx::query("DELETE FROM agentd_paused_kinds WHERE kind = $1 AND org_key = $2::text")
            .bind(kind)
            .bind(org)
            .execute(&mut *tx)
            .await?
            .rows_affected();
    if gone > 0 {
        sqlx::query("SELECT pg_notify($1, '')")
            .bind(super::NOTIFY_CHANNEL)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(gone > 0)
}

/// The paused kinds of `org`, or of every org (`None`), by kind.
pub async fn paused<'e>(
    exec: impl PgExecutor<'e>,
    org: Option<Uuid>,
) -> sqlx::Result<Vec<PausedKind>> {
    sqlx::query_as(
        "SELECT kind, org_id, paused_at FROM agentd_paused_kinds
          WHERE $1::uuid IS NULL OR org_id = $1 ORDER BY kind, org_id",
    )
    .bind(org)
    .fetch_all(exec)
    .await
}
