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

/// An audit row to append.
#[derive(Debug, Clone)]
pub struct NewAudit<'a> {
    pub org_id: Uuid,
    pub run_id: Option<Uuid>,
    pub call_id: Option<&'a str>,
    pub actor: &'a str,
    pub tool: &'a str,
    pub category: &'a str,
    pub decision: &'a str,
    pub args: Option<&'a Value>,
    pub outcome: Option<&'a Value>,
    pub is_error: bool,
    pub duration_ms: i32,
    pub tokens: i32,
    pub now: DateTime<Utc>,
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
        category: &'a str,
        decision: &'a str,
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
            outcome: None,
            is_error: false,
            duration_ms: 0,
            tokens: 0,
            now,
        }
    }
}

/// The columns of an appended audit row, in the order [`audit_arguments`] binds them (a macro,
/// so statements can `concat!` it).
macro_rules! audit_columns {
    () => {
        "org_id, run_id, call_id, actor, tool, category, decision, args, outcome, is_error, duration_ms, tokens, created_at"
    };
}
pub(crate) use audit_columns;

/// The values of `a` for [`audit_columns`], as the first 13 parameters (`$1`..`$13`) of a
/// statement; more can be bound after them.
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
    args.add(a.category)?;
    args.add(a.decision)?;
    // Model output may hold NUL characters, which PostgreSQL text and jsonb cannot store.
    // The trail proves without copying: redacted arguments, a summary + SHA-256 of the result.
    args.add(
        a.args
            .map(|v| super::documents::clean_json(&crate::pii::audit::redact_args(v))),
    )?;
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
        concat!(
            "INSERT INTO audit_events (",
            audit_columns!(),
            ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) RETURNING id"
        ),
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
