//! SQL for the later life of approvals (migration 0045): the `approval.expiring` notice and the
//! re-proposal of expired approvals. "Now" is always a parameter.

use super::approvals::ApprovalRow;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

/// Which decided approvals a sweep re-proposes (stale ones that asked, expired ones of orgs
/// that opted in), and how their jobs are queued.
#[derive(Debug, Clone, Copy)]
pub struct Reproposals<'a> {
    /// Decided since (a day before the sweep).
    pub since: DateTime<Utc>,
    /// Only these approvals (a sweep of named approvals).
    pub only: Option<&'a [Uuid]>,
    /// A chain of re-proposals stops at this depth.
    pub max_depth: i32,
    /// The re-proposal jobs' priority and attempts (the job file's).
    pub priority: i16,
    pub max_attempts: i32,
}

/// Marks pending approvals that expire within `notice` and were not noticed yet; returns
/// `(org, approval, payload)` of each, for `approval.expiring` in the same transaction.
pub async fn mark_expiring(
    conn: &mut PgConnection,
    now: DateTime<Utc>,
    notice: chrono::Duration,
    limit: i64,
) -> sqlx::Result<Vec<(Uuid, Uuid, Value)>> {
    /// org_id, id, tool, expires_at, run_id, suggestion_id.
    type Marked = (
        Uuid,
        Uuid,
        String,
        DateTime<Utc>,
        Option<Uuid>,
        Option<Uuid>,
    );
    let rows: Vec<Marked> = sqlx::query_as(
        "UPDATE pending_approvals SET expiring_notified_at = $1
              WHERE id = ANY(ARRAY(
                    SELECT id FROM pending_approvals
                     WHERE status = 'pending' AND expiring_notified_at IS NULL
                       AND expires_at > $1 AND expires_at <= $2
                     ORDER BY expires_at LIMIT $3 FOR UPDATE SKIP LOCKED))
                AND status = 'pending' AND expiring_notified_at IS NULL
          RETURNING org_id, id, tool, expires_at, run_id, suggestion_id",
    )
    .bind(now)
    .bind(now + notice)
    .bind(limit)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(org, id, tool, expires_at, run_id, suggestion_id)| {
            let payload = json!({"approval_id": id, "tool": tool, "expires_at": expires_at,
                                 "run_id": run_id, "suggestion_id": suggestion_id});
            (org, id, payload)
        })
        .collect())
}

/// An expired approval that may be re-proposed, with its org's time zone and nightly hour.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ExpiredCandidate {
    pub id: Uuid,
    pub org_id: Uuid,
    pub decided_at: DateTime<Utc>,
    pub timezone: String,
    pub nightly_hour: i16,
}

/// Approvals that expired since `since` in orgs that opted in (`repropose_expired`), not yet
/// re-proposed, below the chain cap (optionally only `ids`).
pub async fn expired_to_repropose<'e, E: PgExecutor<'e>>(
    exec: E,
    r: &Reproposals<'_>,
) -> sqlx::Result<Vec<ExpiredCandidate>> {
    sqlx::query_as(
        "SELECT p.id, p.org_id, p.decided_at, o.timezone, o.nightly_hour
           FROM pending_approvals p JOIN orgs o ON o.id = p.org_id
          WHERE p.status = 'expired' AND p.reproposed_as IS NULL AND p.decided_at >= $1
            AND p.chain_depth < $3 AND o.repropose_expired
            AND ($2::uuid[] IS NULL OR p.id = ANY($2))",
    )
    .bind(r.since)
    .bind(r.only)
    .bind(r.max_depth)
    .fetch_all(exec)
    .await
}

/// Locks an expired approval that was not re-proposed yet.
pub async fn lock_expired(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<ApprovalRow>> {
    sqlx::query_as(
        "SELECT * FROM pending_approvals
          WHERE id = $1 AND status = 'expired' AND reproposed_as IS NULL FOR UPDATE",
    )
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// Records that `id` was re-proposed as `new_id`.
pub async fn set_reproposed(conn: &mut PgConnection, id: Uuid, new_id: Uuid) -> sqlx::Result<()> {
    sqlx::query("UPDATE pending_approvals SET reproposed_as = $2 WHERE id = $1")
        .bind(id)
        .bind(new_id)
        .execute(conn)
        .await?;
    Ok(())
}
