//! An approval as people see it: the typed view the HTTP API answers with (and the OpenAPI
//! document describes), and `agentd approvals show --json` prints.

pub use crate::store::approvals::ApprovalAction;
use crate::store::approvals::{ApprovalRow, ApprovalStatus};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

/// An approval as people see it: each item of `GET /v1/approvals`, and `GET
/// /v1/approvals/{id}` with its history (`agentd approvals show --json` adds the org and the
/// re-proposal chain). `Approval` in the OpenAPI document.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(as = Approval)]
pub struct ApprovalView {
    pub id: Uuid,
    /// The run that proposed it (none: proposed outside a run, e.g. by a person's edit).
    pub run_id: Option<Uuid>,
    pub call_id: Option<String>,
    /// The suggestion whose action it is.
    pub suggestion_id: Option<Uuid>,
    /// What is executed when it is approved.
    pub action: ApprovalAction,
    /// The data the action touches, as read when it was proposed.
    #[schema(value_type = Object)]
    pub snapshot: Value,
    /// SHA-256 of the snapshot (JCS); `GET` sends it as the `ETag`, `approve` takes it as `If-Match`.
    pub snapshot_hash: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    /// `pending`, `executed`, `rejected`, `expired`, `stale` or `failed`.
    pub status: ApprovalStatus,
    /// Who decided and when; none while pending, or when the sweep ended it.
    pub decision: Option<ApprovalDecision>,
    /// `executed`/`failed`: the tool's result or error; `stale`: what changed; `expired`: why.
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
    /// Why the agent proposed it, in its words.
    pub rationale: Option<String>,
    /// The action in one line of words.
    pub summary: Option<String>,
    /// A rejection's reason.
    pub decision_reason: Option<String>,
    /// Approved with arguments a person changed.
    pub edited: bool,
    /// Expired and proposed again unchanged: the new approval.
    pub reproposed_as: Option<Uuid>,
}

/// Who decided an approval, and when.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ApprovalDecision {
    pub by: String,
    pub at: Option<DateTime<Utc>>,
}

/// The view of `r`.
pub fn view(r: &ApprovalRow) -> ApprovalView {
    ApprovalView {
        id: r.id,
        run_id: r.run_id,
        call_id: r.call_id.clone(),
        suggestion_id: r.suggestion_id,
        action: r.action.clone(),
        snapshot: r.snapshot.clone(),
        snapshot_hash: r.snapshot_hash.clone(),
        created_at: r.created_at,
        expires_at: r.expires_at,
        status: r.status,
        decision: r.decided_by.as_ref().map(|by| ApprovalDecision {
            by: by.clone(),
            at: r.decided_at,
        }),
        result: r.result.clone(),
        rationale: r.rationale.clone(),
        summary: r.summary.clone(),
        decision_reason: r.decision_reason.clone(),
        edited: r.edited,
        reproposed_as: r.reproposed_as,
    }
}
