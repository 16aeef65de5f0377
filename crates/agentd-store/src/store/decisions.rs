//! SQL for what people decided (issue 33, item 3): the decided approvals (rejected with their
//! reason, expired, executed with their result, failed) and dismissed suggestions a run is
//! shown ([`recent`]), and the rejection a new proposal of the same action repeats
//! ([`rejected_same`], migration 0073). Nothing is copied: both read the approvals' and
//! suggestions' own rows, so what a run is shown is what the API shows.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

/// Whose decisions a run is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionScope {
    /// The whole org (the nightly run).
    Org,
    /// Decisions on one document (approvals whose arguments name it, suggestions about it).
    Document(Uuid),
    /// One chain of re-proposals (a re-proposal of an action on no document).
    Chain(Uuid),
}

/// One decision, as a run is shown it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Decided {
    /// `approval` or `suggestion`.
    pub source: String,
    pub id: Uuid,
    /// The approval's tool, or the suggestion's kind.
    pub action: String,
    /// The approval's arguments, or the suggestion's proposed action.
    pub args: Option<Value>,
    /// The approval's one line in words, or the suggestion's title.
    pub summary: Option<String>,
    /// `rejected`, `expired`, `executed`, `failed` or `dismissed`.
    pub outcome: String,
    /// A rejection's or a dismissal's reason.
    pub reason: Option<String>,
    /// An executed (or failed) approval's result.
    pub result: Option<Value>,
    pub decided_at: Option<DateTime<Utc>>,
}

/// The `limit` newest decisions in `scope` made since `since` (approvals proposed since then,
/// suggestions dismissed since then), newest first.
pub async fn recent(
    conn: &mut PgConnection,
    org_id: Uuid,
    scope: DecisionScope,
    since: DateTime<Utc>,
    limit: i64,
) -> sqlx::Result<Vec<Decided>> {
    let (document, chain) = match scope {
        DecisionScope::Org => (None, None),
        DecisionScope::Document(d) => (Some(d), None),
        DecisionScope::Chain(c) => (None, Some(c)),
    };
    // Each branch reads its org index (approvals by creation, dismissed suggestions by their
    // partial index); a chain has no suggestions.
    sqlx::query_as(
        "(SELECT 'approval' AS source, id, tool AS action, args, summary, status AS outcome,
                 decision_reason AS reason, result, decided_at
            FROM pending_approvals
           WHERE org_id = $1 AND created_at >= $2
             AND status IN ('rejected', 'expired', 'executed', 'failed')
             AND ($3::uuid IS NULL OR document_id = $3)
             AND ($4::uuid IS NULL OR chain_id = $4)
           ORDER BY decided_at DESC NULLS LAST LIMIT $5)
         UNION ALL
         (SELECT 'suggestion', id, kind, proposed_action, title, 'dismissed', status_reason,
                 NULL::jsonb, status_changed_at
            FROM suggestions
           WHERE org_id = $1 AND status = 'dismissed' AND status_changed_at >= $2
             AND ($3::uuid IS NULL OR document_id = $3) AND $4::uuid IS NULL
           ORDER BY status_changed_at DESC LIMIT $5)
         ORDER BY decided_at DESC NULLS LAST LIMIT $5",
    )
    .bind(org_id)
    .bind(since)
    .bind(document)
    .bind(chain)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// A rejection of the same action: the org's latest rejected approval of `tool` with exactly
/// `args` (as stored: compared as `jsonb`).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Rejection {
    pub id: Uuid,
    pub decision_reason: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
}

/// The org's latest rejection of `tool(args)`, if a person rejected that very action (decided
/// approvals are purged after the sweep's `retention_days`; so is this memory).
pub async fn rejected_same(
    conn: &mut PgConnection,
    org_id: Uuid,
    tool: &str,
    args: &Value,
) -> sqlx::Result<Option<Rejection>> {
    sqlx::query_as(
        "SELECT id, decision_reason, decided_at FROM pending_approvals
          WHERE org_id = $1 AND tool = $2 AND md5(args::text) = md5($3::jsonb::text)
            AND args = $3::jsonb AND status = 'rejected'
          ORDER BY decided_at DESC NULLS LAST LIMIT 1",
    )
    .bind(org_id)
    .bind(tool)
    .bind(args)
    .fetch_optional(conn)
    .await
}

/// Said first in the message that tells a waiting run's model what people decided on its
/// proposals (`agent.await_decisions`); the offline model recognises it.
pub const RUN_DECIDED: &str = "[decided]";

/// One of a run's approvals, decided (or expired), with the call that proposed it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RunDecision {
    /// The proposing call's id (`None`: a suggestion's action).
    pub call_id: Option<String>,
    #[sqlx(flatten)]
    pub decided: Decided,
}

/// The run's approvals that are no longer pending, other than `told`, oldest first (at most
/// `limit`).
pub async fn of_run(
    conn: &mut PgConnection,
    org_id: Uuid,
    run_id: Uuid,
    told: &[Uuid],
    limit: i64,
) -> sqlx::Result<Vec<RunDecision>> {
    sqlx::query_as(
        "SELECT call_id, 'approval' AS source, id, tool AS action, args, summary,
                status AS outcome, decision_reason AS reason, result, decided_at
           FROM pending_approvals
          WHERE org_id = $1 AND run_id = $2 AND status <> 'pending' AND NOT (id = ANY($3))
          ORDER BY created_at, id LIMIT $4",
    )
    .bind(org_id)
    .bind(run_id)
    .bind(told)
    .bind(limit)
    .fetch_all(conn)
    .await
}
