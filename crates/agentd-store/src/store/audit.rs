//! SQL for the audit trail (`audit_events`): a row for every tool call, decision and loop
//! event, with redacted arguments and a summary of the outcome.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::error::BoxDynError;
use sqlx::postgres::PgArguments;
use sqlx::{Arguments, PgExecutor};
use uuid::Uuid;

/// An audit row (`AuditEvent` in the OpenAPI document).
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
#[schema(as = AuditEvent)]
pub struct AuditRow {
    pub id: i64,
    pub org_id: Uuid,
    pub run_id: Option<Uuid>,
    pub call_id: Option<String>,
    /// `agent:<kind>` for a run's calls; a person or key for decisions.
    pub actor: String,
    pub tool: String,
    /// The tool's category (read, write, …), or `approval` for a decision.
    pub category: String,
    /// auto_approved, proposed, denied, error, capped; a decision's approved, rejected, …
    pub decision: String,
    /// The arguments, with personal data redacted.
    #[schema(value_type = Option<Object>)]
    pub args: Option<Value>,
    /// A summary of the result, or the error.
    #[schema(value_type = Option<Object>)]
    pub outcome: Option<Value>,
    pub is_error: bool,
    pub duration_ms: i32,
    pub tokens: i32,
    pub created_at: DateTime<Utc>,
}

/// What an audit row records was decided. The names are a stable format: stored in
/// `audit_events.decision` (its CHECK lists them, migration 0073), shown by the API and the
/// console, and repeated in the `tool_result` checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditDecision {
    /// A call ran without approval.
    AutoApproved,
    /// A call became an approval.
    Proposed,
    /// The policy refused a call.
    Denied,
    /// A person (or the approval model) approved, or rejected, an approval.
    HumanApproved,
    HumanRejected,
    /// An approval expired, or went stale (what it is about changed).
    Expired,
    Stale,
    /// A call (or an approval's execution) failed.
    Error,
    /// A cap refused a call or ended the run.
    Capped,
    /// The loop nudged the model; refused a repeated call.
    Nudged,
    Repeated,
    /// A person edited an approval's arguments.
    Edited,
    /// A person asked for a refine.
    Requested,
    /// An admin's act through the API or the CLI (category `admin`, review D5).
    Performed,
}

impl AuditDecision {
    pub const ALL: [AuditDecision; 14] = [
        AuditDecision::AutoApproved,
        AuditDecision::Proposed,
        AuditDecision::Denied,
        AuditDecision::HumanApproved,
        AuditDecision::HumanRejected,
        AuditDecision::Expired,
        AuditDecision::Stale,
        AuditDecision::Error,
        AuditDecision::Capped,
        AuditDecision::Nudged,
        AuditDecision::Repeated,
        AuditDecision::Edited,
        AuditDecision::Requested,
        AuditDecision::Performed,
    ];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditDecision::AutoApproved => "auto_approved",
            AuditDecision::Proposed => "proposed",
            AuditDecision::Denied => "denied",
            AuditDecision::HumanApproved => "human_approved",
            AuditDecision::HumanRejected => "human_rejected",
            AuditDecision::Expired => "expired",
            AuditDecision::Stale => "stale",
            AuditDecision::Error => "error",
            AuditDecision::Capped => "capped",
            AuditDecision::Nudged => "nudged",
            AuditDecision::Repeated => "repeated",
            AuditDecision::Edited => "edited",
            AuditDecision::Requested => "requested",
            AuditDecision::Performed => "performed",
        }
    }
}

impl PartialEq<AuditDecision> for String {
    fn eq(&self, other: &AuditDecision) -> bool {
        self == other.as_str()
    }
}

/// What an audit row is about. The names are a stable format: stored in
/// `audit_events.category` (no CHECK constrains it) and shown by the API and the console.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditCategory {
    /// A call of a tool of that category (`tools::Category`).
    Read,
    Write,
    Destructive,
    /// A call of a tool the run does not have.
    Unknown,
    /// A person's (or the sweep's) step on an approval.
    Approval,
    /// A cap refused a call or ended the run.
    Cap,
    /// The repeat guard refused a call.
    Guard,
    /// The loop itself (a nudge).
    Loop,
    /// A request or decision about a document (a refine; accepting or rejecting a proposal).
    Document,
    /// An admin's act on the org: keys, the provider key, webhooks, settings, the queue.
    Admin,
}

impl AuditCategory {
    pub const ALL: [AuditCategory; 10] = [
        AuditCategory::Read,
        AuditCategory::Write,
        AuditCategory::Destructive,
        AuditCategory::Unknown,
        AuditCategory::Approval,
        AuditCategory::Cap,
        AuditCategory::Guard,
        AuditCategory::Loop,
        AuditCategory::Document,
        AuditCategory::Admin,
    ];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditCategory::Read => "read",
            AuditCategory::Write => "write",
            AuditCategory::Destructive => "destructive",
            AuditCategory::Unknown => "unknown",
            AuditCategory::Approval => "approval",
            AuditCategory::Cap => "cap",
            AuditCategory::Guard => "guard",
            AuditCategory::Loop => "loop",
            AuditCategory::Document => "document",
            AuditCategory::Admin => "admin",
        }
    }
}

/// An audit row to append.
#[derive(Debug, Clone)]
pub struct NewAudit<'a> {
    pub org_id: Uuid,
    pub run_id: Option<Uuid>,
    pub call_id: Option<&'a str>,
    pub actor: &'a str,
    pub tool: &'a str,
    pub category: AuditCategory,
    pub decision: AuditDecision,
    pub args: Option<&'a Value>,
    /// What the row keeps of `args`.
    pub args_as: ArgsKept,
    pub outcome: Option<&'a Value>,
    pub is_error: bool,
    pub duration_ms: i32,
    pub tokens: i32,
    pub now: DateTime<Utc>,
}

/// What an audit row keeps of a call's arguments.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ArgsKept {
    /// The arguments with personal values as tokens (the caller redacted them with the run's
    /// table where it has one; the audit's rules run again).
    #[default]
    Redacted,
    /// Their SHA-256 and top-level keys only ([`crate::pii::audit::digest`]): for arguments
    /// holding real values no table knows — an approval's, rehydrated to execute, and a
    /// reviewer's edit (review D3) — as the sweep writes them.
    Digest,
}

impl<'a> NewAudit<'a> {
    /// An audit row of `org_id` (and `run_id`, if a run's): `actor`'s `decision` on `tool`, of
    /// `category`; no call id, arguments or outcome, not an error, no time or tokens (the
    /// caller sets those it has).
    pub fn new(
        org_id: Uuid,
        run_id: Option<Uuid>,
        actor: &'a str,
        tool: &'a str,
        category: AuditCategory,
        decision: AuditDecision,
        now: DateTime<Utc>,
    ) -> Self {
        NewAudit {
            org_id,
            run_id,
            call_id: None,
            actor,
            tool,
            category,
            decision,
            args: None,
            args_as: ArgsKept::Redacted,
            outcome: None,
            is_error: false,
            duration_ms: 0,
            tokens: 0,
            now,
        }
    }
}

/// The values of `a` as the first 13 parameters (`$1`..`$13`) of a statement that appends an
/// audit row: `org_id, run_id, call_id, actor, tool, category, decision, args, outcome,
/// is_error, duration_ms, tokens, created_at`, in that order ([`insert_audit`],
/// `sql/agent_checkpoint_audited.sql`); more can be bound after them.
pub(crate) fn audit_arguments(a: &NewAudit<'_>) -> sqlx::Result<PgArguments> {
    let mut args = PgArguments::default();
    audit_values(&mut args, a).map_err(sqlx::Error::Encode)?;
    Ok(args)
}

fn audit_values(args: &mut PgArguments, a: &NewAudit<'_>) -> Result<(), BoxDynError> {
    args.add(a.org_id)?;
    args.add(a.run_id)?;
    args.add(a.call_id)?;
    args.add(a.actor)?;
    args.add(a.tool)?;
    args.add(a.category.as_str())?;
    args.add(a.decision.as_str())?;
    // Model output may hold NUL characters, which PostgreSQL text and jsonb cannot store.
    // The trail proves without copying: redacted arguments, a summary + SHA-256 of the result.
    args.add(a.args.map(|v| match a.args_as {
        ArgsKept::Redacted => super::documents::clean_json(&crate::pii::audit::redact_args(v)),
        ArgsKept::Digest => crate::pii::audit::digest(v),
    }))?;
    args.add(
        a.outcome
            .map(|v| super::documents::clean_json(&crate::pii::audit::summarise(v))),
    )?;
    args.add(a.is_error)?;
    args.add(a.duration_ms)?;
    args.add(a.tokens)?;
    args.add(a.now)
}

/// Appends an audit row.
pub async fn insert_audit<'e, E: PgExecutor<'e>>(exec: E, a: &NewAudit<'_>) -> sqlx::Result<i64> {
    sqlx::query_scalar_with(
        "INSERT INTO audit_events (org_id, run_id, call_id, actor, tool, category, decision, args,
                                   outcome, is_error, duration_ms, tokens, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
         RETURNING id",
        audit_arguments(a)?,
    )
    .fetch_one(exec)
    .await
}

/// The audit trail of a run.
pub async fn audit_for_run<'e, E: PgExecutor<'e>>(
    exec: E,
    run_id: Uuid,
) -> sqlx::Result<Vec<AuditRow>> {
    sqlx::query_as("SELECT * FROM audit_events WHERE run_id = $1 ORDER BY id")
        .bind(run_id)
        .fetch_all(exec)
        .await
}

#[cfg(test)]
mod tests {
    use super::AuditDecision;

    #[test]
    fn every_audit_decision_is_one_the_check_allows_and_none_is_missing() {
        // The last migration that sets `audit_events_decision_check`.
        let sql = include_str!("../../../../migrations/0093_admin_actions_audited.sql");
        let list = sql
            .rsplit_once("CHECK (decision IN (")
            .and_then(|(_, rest)| rest.split_once("))"))
            .map(|(list, _)| list)
            .unwrap_or_default();
        let mut checked: Vec<&str> = list
            .split(',')
            .map(|s| s.trim().trim_matches('\''))
            .filter(|s| !s.is_empty())
            .collect();
        checked.sort();
        let mut ours: Vec<&str> = AuditDecision::ALL.iter().map(|d| d.as_str()).collect();
        ours.sort();
        assert_eq!(ours, checked, "AuditDecision and the audit_events CHECK");
    }
}
