//! SQL for pending approvals. "Now" is always a parameter.

pub use super::states::ApprovalStatus;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

/// An approval row.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct ApprovalRow {
    pub id: Uuid,
    pub org_id: Uuid,
    pub run_id: Option<Uuid>,
    pub suggestion_id: Option<Uuid>,
    pub call_id: Option<String>,
    pub tool: String,
    pub args: Value,
    pub snapshot: Value,
    pub snapshot_hash: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub status: ApprovalStatus,
    pub decided_by: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
    pub result: Option<Value>,
    pub repropose: bool,
    pub chain_id: Uuid,
    pub chain_depth: i32,
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
    pub chain_id: Uuid,
    pub chain_depth: i32,
    pub rationale: Option<&'a str>,
    pub summary: Option<&'a str>,
}

/// Inserts a pending approval; the same `(run_id, call_id)` twice returns the first one's id.
pub async fn insert(conn: &mut PgConnection, a: &NewApproval<'_>) -> Result<Uuid, sqlx::Error> {
    let id: Option<Uuid> = sqlx::query_scalar(
        "INSERT INTO pending_approvals (id, org_id, run_id, suggestion_id, call_id, tool, args, snapshot,
            snapshot_hash, created_at, expires_at, repropose, chain_id, chain_depth, rationale, summary)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
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
    .bind(a.chain_id)
    .bind(a.chain_depth)
    .bind(a.rationale.map(super::documents::clean_text))
    .bind(a.summary.map(super::documents::clean_text))
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
) -> Result<Option<ApprovalRow>, sqlx::Error> {
    let lock = "SELECT * FROM pending_approvals
                 WHERE id = $1 AND ($2::uuid IS NULL OR org_id = $2) FOR UPDATE";
    sqlx::query_as(lock)
        .bind(id)
        .bind(org_id)
        .fetch_optional(conn)
        .await
}

/// One approval.
pub async fn get<'e, E: PgExecutor<'e>>(
    exec: E,
    id: Uuid,
) -> Result<Option<ApprovalRow>, sqlx::Error> {
    let get = "SELECT * FROM pending_approvals WHERE id = $1";
    sqlx::query_as(get).bind(id).fetch_optional(exec).await
}

/// Approvals, newest first.
pub async fn list<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Option<Uuid>,
    status: Option<ApprovalStatus>,
    limit: i64,
) -> Result<Vec<ApprovalRow>, sqlx::Error> {
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
) -> Result<(), sqlx::Error> {
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

/// Replaces a locked, pending approval's action with edited arguments and their snapshot.
pub async fn set_edited(
    conn: &mut PgConnection,
    id: Uuid,
    args: &Value,
    snapshot: &Value,
    hash: &str,
    summary: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE pending_approvals SET args = $2, snapshot = $3, snapshot_hash = $4, summary = $5,
                edited = true
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

/// A batch of pending approvals: past their TTL (`expired_only`) or not yet, after `after` in id
/// order. With `lock` the rows are locked and rows locked by another sweeper are skipped; without
/// it they are only read (the sweep's pass over live approvals: most stay unchanged, and locking
/// them would write every row).
pub async fn pending_batch(
    conn: &mut PgConnection,
    now: DateTime<Utc>,
    expired_only: bool,
    after: Uuid,
    only: Option<&[Uuid]>,
    limit: i64,
    lock: bool,
) -> Result<Vec<ApprovalRow>, sqlx::Error> {
    macro_rules! batch {
        ($lock:literal) => {
            concat!(
                "SELECT * FROM pending_approvals
                  WHERE status = 'pending'
                    AND (CASE WHEN $2 THEN expires_at <= $1 ELSE expires_at > $1 END)
                    AND id > $3
                    AND ($4::uuid[] IS NULL OR id = ANY($4))
                  ORDER BY id LIMIT $5",
                $lock
            )
        };
    }
    let sql = if lock {
        batch!(" FOR UPDATE SKIP LOCKED")
    } else {
        batch!("")
    };
    sqlx::query_as(sql)
        .bind(now)
        .bind(expired_only)
        .bind(after)
        .bind(only)
        .bind(limit)
        .fetch_all(conn)
        .await
}

/// Sets `status` on many pending approvals in one statement, with per-row results, and writes
/// their audit rows (decision = status) in a second statement. `rows` keeps only the approvals
/// this call decided: one decided meanwhile (no longer pending) gets no second decision, audit
/// row or event.
pub async fn decide_many(
    conn: &mut PgConnection,
    rows: &mut Vec<(&ApprovalRow, Value)>,
    status: &str,
    by: &str,
    now: DateTime<Utc>,
) -> Result<u64, sqlx::Error> {
    if rows.is_empty() {
        return Ok(0);
    }
    let ids: Vec<Uuid> = rows.iter().map(|(r, _)| r.id).collect();
    let results: Vec<Value> = rows.iter().map(|(_, v)| v.clone()).collect();
    let done: Vec<Uuid> = sqlx::query_scalar(
        "UPDATE pending_approvals p SET status = $2, decided_by = $3, decided_at = $4, result = d.result
           FROM unnest($1::uuid[], $5::jsonb[]) AS d(id, result)
          WHERE p.id = d.id AND p.status = 'pending'
         RETURNING p.id",
    )
    .bind(&ids)
    .bind(status)
    .bind(by)
    .bind(now)
    .bind(&results)
    .fetch_all(&mut *conn)
    .await?;
    if done.len() < rows.len() {
        let done: std::collections::HashSet<Uuid> = done.iter().copied().collect();
        rows.retain(|(r, _)| done.contains(&r.id));
    }
    let ids: Vec<Uuid> = rows.iter().map(|(r, _)| r.id).collect();
    let results: Vec<Value> = rows.iter().map(|(_, v)| v.clone()).collect();
    let orgs: Vec<Uuid> = rows.iter().map(|(r, _)| r.org_id).collect();
    let runs: Vec<Option<Uuid>> = rows.iter().map(|(r, _)| r.run_id).collect();
    let tools: Vec<&str> = rows.iter().map(|(r, _)| r.tool.as_str()).collect();
    let args: Vec<&Value> = rows.iter().map(|(r, _)| &r.args).collect();
    sqlx::query(
        "INSERT INTO audit_events (org_id, run_id, call_id, actor, tool, category, decision, args, outcome, created_at)
         SELECT o, r, 'approval:' || i, $6, t, 'approval', $7, a, res, $8
           FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::jsonb[], $9::jsonb[]) AS x(o, r, i, t, a, res)",
    )
    .bind(&orgs)
    .bind(&runs)
    .bind(&ids)
    .bind(&tools)
    .bind(&args)
    .bind(by)
    .bind(status)
    .bind(now)
    .bind(&results)
    .execute(&mut *conn)
    .await?;
    Ok(rows.len() as u64)
}

/// Stale approvals that asked for a re-proposal, below the chain cap, decided since `since`
/// (by the sweep or by a person), optionally only `ids`.
pub async fn stale_to_repropose<'e, E: PgExecutor<'e>>(
    exec: E,
    since: DateTime<Utc>,
    ids: Option<&[Uuid]>,
    max_depth: i32,
) -> Result<Vec<ApprovalRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT * FROM pending_approvals
          WHERE status = 'stale' AND repropose AND chain_depth < $3 AND decided_at >= $1
            AND ($2::uuid[] IS NULL OR id = ANY($2))",
    )
    .bind(since)
    .bind(ids)
    .bind(max_depth)
    .fetch_all(exec)
    .await
}

/// Deletes up to `limit` decided approvals decided before `cutoff` (audit rows stay).
pub async fn purge_decided<'e, E: PgExecutor<'e>>(
    exec: E,
    cutoff: DateTime<Utc>,
    limit: i64,
) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(
        "DELETE FROM pending_approvals WHERE id = ANY(ARRAY(
            SELECT id FROM pending_approvals WHERE status <> 'pending' AND decided_at < $1 LIMIT $2))",
    )
    .bind(cutoff)
    .bind(limit)
    .execute(exec)
    .await?;
    Ok(done.rows_affected())
}

/// An approval's audit trail, oldest first: the run's row that proposed it (same run and
/// `call_id`) and every decision row (`call_id = 'approval:<id>'`: human or sweep).
pub async fn history<'e, E: PgExecutor<'e>>(
    exec: E,
    a: &ApprovalRow,
) -> Result<Vec<crate::store::runs::AuditRow>, sqlx::Error> {
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
