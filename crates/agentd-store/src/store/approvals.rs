//! SQL for pending approvals. "Now" is always a parameter.

pub use super::states::ApprovalStatus;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

/// The chain of re-proposals an approval belongs to: the first approval's id, and how many
/// re-proposals led to this one (a chain stops at the sweep's `max_reproposals`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Chain {
    #[sqlx(rename = "chain_id")]
    #[serde(rename = "chain_id")]
    pub id: Uuid,
    #[sqlx(rename = "chain_depth")]
    #[serde(rename = "chain_depth")]
    pub depth: i32,
}

impl Chain {
    /// The chain the approval `id` starts.
    pub fn start(id: Uuid) -> Chain {
        Chain { id, depth: 0 }
    }

    /// The chain of a re-proposal of this approval.
    pub fn next(self) -> Chain {
        Chain {
            id: self.id,
            depth: self.depth + 1,
        }
    }
}

/// What an approval runs when it is approved: a tool and its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct ApprovalAction {
    pub tool: String,
    #[schema(value_type = Object)]
    pub args: Value,
}

/// An approval row.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct ApprovalRow {
    pub id: Uuid,
    pub org_id: Uuid,
    pub run_id: Option<Uuid>,
    pub suggestion_id: Option<Uuid>,
    pub call_id: Option<String>,
    #[serde(flatten)]
    #[sqlx(flatten)]
    pub action: ApprovalAction,
    pub snapshot: Value,
    pub snapshot_hash: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub status: ApprovalStatus,
    pub decided_by: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
    pub result: Option<Value>,
    pub repropose: bool,
    #[serde(flatten)]
    #[sqlx(flatten)]
    pub chain: Chain,
    /// Why the agent proposed it.
    pub rationale: Option<String>,
    /// One line in words.
    pub summary: Option<String>,
    /// A rejection's reason.
    pub decision_reason: Option<String>,
    /// Approved with arguments a person changed.
    pub edited: bool,
    pub expiring_notified_at: Option<DateTime<Utc>>,
    /// An expired approval re-proposed unchanged: the new approval.
    pub reproposed_as: Option<Uuid>,
}

/// A new pending approval.
pub struct NewApproval<'a> {
    pub id: Uuid,
    pub org_id: Uuid,
    pub run_id: Option<Uuid>,
    pub suggestion_id: Option<Uuid>,
    pub call_id: Option<&'a str>,
    pub tool: &'a str,
    pub args: &'a Value,
    pub snapshot: &'a Value,
    pub snapshot_hash: &'a str,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub repropose: bool,
    pub chain: Chain,
    pub rationale: Option<&'a str>,
    pub summary: Option<&'a str>,
    /// `documents.version` the snapshot was read from (tools whose snapshot is a document row).
    pub document_version: Option<i64>,
}

/// Inserts a pending approval; the same `(run_id, call_id)` twice returns the first one's id.
pub async fn insert(conn: &mut PgConnection, a: &NewApproval<'_>) -> sqlx::Result<Uuid> {
    let id: Option<Uuid> = sqlx::query_scalar(
        "INSERT INTO pending_approvals (id, org_id, run_id, suggestion_id, call_id, tool, args, snapshot,
            snapshot_hash, created_at, expires_at, repropose, chain_id, chain_depth, rationale, summary,
            document_version)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
         ON CONFLICT (run_id, call_id) DO NOTHING RETURNING id",
    )
    .bind(a.id)
    .bind(a.org_id)
    .bind(a.run_id)
    .bind(a.suggestion_id)
    .bind(a.call_id)
    .bind(a.tool)
    .bind(a.args)
    .bind(a.snapshot)
    .bind(a.snapshot_hash)
    .bind(a.created_at)
    .bind(a.expires_at)
    .bind(a.repropose)
    .bind(a.chain.id)
    .bind(a.chain.depth)
    .bind(a.rationale.map(super::documents::clean_text))
    .bind(a.summary.map(super::documents::clean_text))
    .bind(a.document_version)
    .fetch_optional(&mut *conn)
    .await?;
    match id {
        Some(id) => Ok(id),
        None => {
            sqlx::query_scalar(
                "SELECT id FROM pending_approvals WHERE run_id = $1 AND call_id = $2",
            )
            .bind(a.run_id)
            .bind(a.call_id)
            .fetch_one(conn)
            .await
        }
    }
}

/// Locks and returns an approval (`org_id` given: only within that org).
pub async fn lock(
    conn: &mut PgConnection,
    id: Uuid,
    org_id: Option<Uuid>,
) -> sqlx::Result<Option<ApprovalRow>> {
    let lock = "SELECT * FROM pending_approvals
                 WHERE id = $1 AND ($2::uuid IS NULL OR org_id = $2) FOR UPDATE";
    sqlx::query_as(lock)
        .bind(id)
        .bind(org_id)
        .fetch_optional(conn)
        .await
}

/// Calls of a write or destructive tool that run `run_id` proposed or made (audited, not
/// refused or failed): what a re-proposal run has done.
pub async fn acted_by_run(
    conn: &mut sqlx::PgConnection,
    org_id: Uuid,
    run_id: Uuid,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM audit_events WHERE org_id = $1 AND run_id = $2 AND NOT is_error
            AND category IN ('write', 'destructive') AND decision IN ('proposed', 'auto_approved')",
    )
    .bind(org_id)
    .bind(run_id)
    .fetch_one(conn)
    .await
}

/// One approval.
pub async fn get<'e, E: PgExecutor<'e>>(exec: E, id: Uuid) -> sqlx::Result<Option<ApprovalRow>> {
    let get = "SELECT * FROM pending_approvals WHERE id = $1";
    sqlx::query_as(get).bind(id).fetch_optional(exec).await
}

/// Approvals, newest first.
pub async fn list<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Option<Uuid>,
    status: Option<ApprovalStatus>,
    limit: i64,
) -> sqlx::Result<Vec<ApprovalRow>> {
    sqlx::query_as(
        "SELECT * FROM pending_approvals
          WHERE ($1::uuid IS NULL OR org_id = $1) AND ($2::text IS NULL OR status = $2)
          ORDER BY created_at DESC, id LIMIT $3",
    )
    .bind(org_id)
    .bind(status)
    .bind(limit)
    .fetch_all(exec)
    .await
}

/// Records a decision on a locked, pending approval (`reason`: a rejection's).
pub async fn set_decision(
    conn: &mut PgConnection,
    id: Uuid,
    status: ApprovalStatus,
    by: &str,
    now: DateTime<Utc>,
    result: Option<&Value>,
    reason: Option<&str>,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE pending_approvals SET status = $2, decided_by = $3, decided_at = $4, result = $5,
                decision_reason = $6
          WHERE id = $1 AND status = 'pending'",
    )
    .bind(id)
    .bind(status)
    .bind(by)
    .bind(now)
    .bind(result.map(super::documents::clean_json))
    .bind(reason.map(super::documents::clean_text))
    .execute(conn)
    .await?;
    Ok(())
}

/// Replaces a locked, pending approval's action with edited arguments and their snapshot (its
/// document version is forgotten: the sweep compares the snapshot instead).
pub async fn set_edited(
    conn: &mut PgConnection,
    id: Uuid,
    args: &Value,
    snapshot: &Value,
    hash: &str,
    summary: &str,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE pending_approvals SET args = $2, snapshot = $3, snapshot_hash = $4, summary = $5,
                edited = true, document_version = NULL
          WHERE id = $1 AND status = 'pending'",
    )
    .bind(id)
    .bind(super::documents::clean_json(args))
    .bind(super::documents::clean_json(snapshot))
    .bind(hash)
    .bind(summary)
    .execute(conn)
    .await?;
    Ok(())
}

/// An approval's audit trail, oldest first: the run's row that proposed it (same run and
/// `call_id`) and every decision row (`call_id = 'approval:<id>'`: human or sweep).
pub async fn history<'e, E: PgExecutor<'e>>(
    exec: E,
    a: &ApprovalRow,
) -> sqlx::Result<Vec<crate::store::runs::AuditRow>> {
    // Two branches so each can use an index: decisions of a run-made approval carry its
    // run_id (audit_events_run_idx); a direct proposal has none and is found through its org.
    sqlx::query_as(
        "SELECT * FROM audit_events
          WHERE run_id = $2 AND (call_id = $3 OR call_id = 'approval:' || $1::text)
         UNION ALL
         SELECT * FROM audit_events
          WHERE $2::uuid IS NULL AND org_id = $4 AND call_id = 'approval:' || $1::text
         ORDER BY id",
    )
    .bind(a.id)
    .bind(a.run_id)
    .bind(a.call_id.as_deref())
    .bind(a.org_id)
    .fetch_all(exec)
    .await
}
