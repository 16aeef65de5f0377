//! The events an approval's life writes to the outbox (`store::events`), each on the connection
//! of the transaction that makes the change: `approval.created` when a proposal is stored,
//! `approval.expired` / `approval.stale` when it ends that way (by a person or the sweep), and
//! `approval.decided` for `executed`, `rejected` and `failed`. Payloads carry ids and states, never
//! the tool's arguments (they may hold personal data; readers fetch the approval by id).

use crate::store::approvals::{ApprovalRow, ApprovalStatus, NewApproval};
use crate::store::events::{self, EventType, NewEvent};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sqlx::PgConnection;

/// `approval.created` for the approval `a` just stored, once per approval.
pub async fn created(
    conn: &mut PgConnection,
    a: &NewApproval<'_>,
    now: DateTime<Utc>,
) -> sqlx::Result<()> {
    let payload = json!({
        "approval_id": a.id, "tool": a.tool, "run_id": a.run_id,
        "suggestion_id": a.suggestion_id, "expires_at": a.expires_at,
    });
    let key = format!("approval.created:{}", a.id);
    events::emit(
        conn,
        &NewEvent {
            org_id: a.org_id,
            kind: EventType::ApprovalCreated,
            subject_id: Some(a.id),
            occurred_at: now,
            payload: &payload,
            dedupe_key: Some(&key),
        },
    )
    .await?;
    Ok(())
}

/// The event type for an approval that reached `status`.
pub fn type_for(status: ApprovalStatus) -> EventType {
    match status {
        ApprovalStatus::Expired => EventType::ApprovalExpired,
        ApprovalStatus::Stale => EventType::ApprovalStale,
        _ => EventType::ApprovalDecided,
    }
}

fn payload(row: &ApprovalRow, status: &str, by: &str) -> Value {
    json!({"approval_id": row.id, "tool": row.action.tool, "status": status, "decided_by": by,
           "run_id": row.run_id, "suggestion_id": row.suggestion_id})
}

/// The event of one decision (`status` is the approval's new state).
pub async fn decided(
    conn: &mut PgConnection,
    row: &ApprovalRow,
    status: ApprovalStatus,
    by: &str,
    now: DateTime<Utc>,
) -> sqlx::Result<()> {
    let rows = [(row.org_id, row.id, payload(row, status.as_str(), by))];
    events::emit_many(conn, type_for(status), &rows, now).await?;
    Ok(())
}

/// The events of a sweep batch that moved `rows` to `status` (the sweep names it as text; an
/// unknown name is a decision, as before the states were types).
pub async fn swept(
    conn: &mut PgConnection,
    rows: &[(&ApprovalRow, Value)],
    status: &str,
    by: &str,
    now: DateTime<Utc>,
) -> sqlx::Result<()> {
    let rows: Vec<_> = rows
        .iter()
        .map(|(r, _)| (r.org_id, r.id, payload(r, status, by)))
        .collect();
    let kind = status.parse().map_or(EventType::ApprovalDecided, type_for);
    events::emit_many(conn, kind, &rows, now).await?;
    Ok(())
}
