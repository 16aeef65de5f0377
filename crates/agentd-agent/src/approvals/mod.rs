//! Pending approvals: actions the policy set to `propose` wait here for a person. Each carries a
//! snapshot of the data it depends on and `snapshot_hash` = SHA-256 of the RFC 8785 (JCS)
//! canonical JSON of `{tool, args, data}`. Deciding re-reads the snapshot with the subject rows
//! locked: changed data → `stale`, nothing executed. States:
//! `pending → executed | rejected | expired | stale | failed`.

mod edit;
pub mod expiring;
pub mod follow_up;
mod model_decide;
pub mod notify;
pub mod summary;
pub mod sweep;
mod view;

use crate::clock::SharedClock;
use crate::llm::SharedProvider;
use crate::store::approvals::{self as store, ApprovalRow, ApprovalStatus, Chain, NewApproval};
use crate::store::runs::{self, AuditDecision, NewAudit};
use crate::tools::{Registry, Snapshot, Tool, ToolCtx, ToolError};
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sqlx::{PgConnection, PgPool};
use std::sync::Arc;
use uuid::Uuid;

pub use follow_up::propose_follow_up;
pub use sweep::{SweepReport, Sweeper};
pub use view::{ApprovalAction, ApprovalDecision, ApprovalView, view};

/// What tools need besides the connection: shared by the loop, decisions and the sweep.
#[derive(Clone)]
pub struct ToolEnv {
    pub registry: Arc<Registry>,
    pub provider: SharedProvider,
    pub model: String,
    pub excerpt_chars: usize,
    /// The kind's rules for calls outside a run's subject.
    pub subject_policy: crate::tools::scope::SubjectPolicy,
    /// Paid-for failed answers of a tool's own model call (run_extraction) allowed per run.
    pub max_failed_extractions: u32,
    /// The redaction boundary for model calls made outside a run (a person approving).
    pub pii: crate::pii::PiiSettings,
    /// Decrypts the provider keys orgs bring (`llm.org_key_encryption_key`; `None`: not set).
    pub org_key_cipher: Option<Arc<crate::llm::org_keys::Cipher>>,
    /// `llm.prices`: what each model call costs (charged with its tokens).
    pub prices: Arc<crate::config::Prices>,
}

impl ToolEnv {
    /// A context for `org_id` on `conn`.
    pub fn ctx<'c>(
        &self,
        conn: &'c mut PgConnection,
        org_id: Uuid,
        run_id: Option<Uuid>,
        actor: String,
        now: chrono::DateTime<chrono::Utc>,
    ) -> ToolCtx<'c> {
        ToolCtx {
            org_id,
            run_id,
            actor,
            conn,
            provider: self.provider.clone(),
            model: self.model.clone(),
            excerpt_chars: self.excerpt_chars,
            now,
            document_id: None,
            night: None,
            max_suggestions: None,
            subject: Default::default(),
        }
    }
}

/// SHA-256 (hex) of the JCS canonical form of `{tool, args, data}`: stable across key order and
/// number formatting.
pub fn snapshot_hash(tool: &str, args: &Value, data: &Value) -> String {
    let canonical = serde_jcs::to_vec(&json!({"tool": tool, "args": args, "data": data}))
        .expect("JSON values always canonicalise");
    hex::encode(Sha256::digest(canonical))
}

/// The document an approval of `tool(args)` depends on, if its snapshot is that document's
/// row ([`Snapshot::DocumentRow`]): its approvals record the row's version, and the sweep
/// re-validates them set-based. `delete_document`'s is not: its snapshot covers the document's
/// extractions too (review #14b: a deletion approved after a new extraction would remove one
/// nobody saw), which the row's version does not follow, so the sweep re-checks it through the
/// tool.
pub(crate) fn document_target(tool: &dyn Tool, args: &Value) -> Option<Uuid> {
    if tool.snapshot_kind() != Snapshot::DocumentRow {
        return None;
    }
    tool.document(args)
}

/// Where a proposal comes from.
#[derive(Debug, Clone, Copy)]
pub struct ProposalOrigin<'a> {
    pub call_id: Option<&'a str>,
    pub suggestion_id: Option<Uuid>,
    pub ttl: chrono::Duration,
    pub repropose: bool,
    /// The chain of a re-proposal; `None` starts one.
    pub chain: Option<Chain>,
    /// Why the agent proposes it (the model's text of that turn, a suggestion's message).
    pub rationale: Option<&'a str>,
}

/// Stores a pending approval for `tool(args)` with its snapshot. Errors if the tool cannot be
/// proposed (no snapshot).
pub async fn propose(
    ctx: &mut ToolCtx<'_>,
    tool: &dyn Tool,
    args: &Value,
    origin: ProposalOrigin<'_>,
) -> Result<Uuid, ToolError> {
    let resolved = with_run_defaults(ctx, tool, args);
    let args = &resolved;
    // A person already said no to this very action: the model is told why (issue 33).
    if let Some(r) =
        crate::store::decisions::rejected_same(ctx.conn, ctx.org_id, tool.name(), args).await?
    {
        return Err(ToolError::Conflict(rejected_again(tool.name(), &r)));
    }
    let data = tool.snapshot(ctx, args).await.ok_or_else(|| {
        ToolError::Conflict(format!(
            "`{}` cannot be proposed for approval (it declares no snapshot)",
            tool.name()
        ))
    })??;
    let hash = snapshot_hash(tool.name(), args, &data);
    // The document row the snapshot was read from (the tool locked it): the sweep compares its
    // version instead of the snapshot while the row stays that version.
    let document_version = match document_target(tool, args) {
        Some(doc) => crate::store::documents::version(&mut *ctx.conn, ctx.org_id, doc).await?,
        None => None,
    };
    let id = Uuid::now_v7();
    // The org's TTL, if it set one, replaces the job file's.
    let ttl = crate::store::org_settings::get(&mut *ctx.conn, ctx.org_id)
        .await?
        .and_then(|s| s.approval_ttl_secs)
        .map(|secs| chrono::Duration::seconds(i64::from(secs)))
        .unwrap_or(origin.ttl);
    let line = summary::summarize(ctx.conn, ctx.org_id, tool, args).await?;
    let rationale = origin
        .rationale
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(|r| r.chars().take(2000).collect::<String>());
    let new = NewApproval {
        id,
        org_id: ctx.org_id,
        run_id: ctx.run_id,
        suggestion_id: origin.suggestion_id,
        call_id: origin.call_id,
        tool: tool.name(),
        args,
        snapshot: &data,
        snapshot_hash: &hash,
        created_at: ctx.now,
        expires_at: ctx.now + ttl,
        repropose: origin.repropose,
        chain: origin.chain.unwrap_or(Chain::start(id)),
        rationale: rationale.as_deref(),
        summary: Some(&line),
        document_version,
    };
    let inserted = store::insert(ctx.conn, &new).await?;
    if inserted == id {
        notify::created(ctx.conn, &new, ctx.now).await?;
    }
    Ok(inserted)
}

/// The refusal of a proposal a person rejected before: when, why, and what to do instead.
fn rejected_again(tool: &str, r: &crate::store::decisions::Rejection) -> String {
    let day = r
        .decided_at
        .map(|t| t.format("%Y-%m-%d").to_string())
        .unwrap_or_default();
    let reason = match r.decision_reason.as_deref().map(str::trim) {
        Some(why) if !why.is_empty() => {
            format!("\"{}\"", why.chars().take(500).collect::<String>())
        }
        _ => "no reason given".to_string(),
    };
    format!(
        "not proposed: a person rejected `{tool}` with these same arguments on {day} (approval \
         {}), reason: {reason}. Do not propose it again; propose something else, or other \
         arguments if the reason allows",
        r.id
    )
}

/// `args` as a decision outside the run must see them: a `document_id` the tool takes but the
/// model left out (it defaults to the run's document) is written in, since the person who
/// decides has no run; NUL is removed from strings (jsonb refuses it), so the hash computed now
/// matches the one recomputed from the stored arguments.
fn with_run_defaults(ctx: &ToolCtx<'_>, tool: &dyn Tool, args: &Value) -> Value {
    let mut args = crate::store::documents::clean_json(args);
    if let (Some(doc), Some(obj)) = (ctx.document_id, args.as_object_mut())
        && tool.parameters()["properties"].get("document_id").is_some()
        && obj.get("document_id").is_none_or(Value::is_null)
    {
        obj.insert("document_id".into(), json!(doc));
    }
    args
}

/// Approve or reject.
#[derive(Debug, Clone)]
pub enum Decision {
    Approve { by: String },
    Reject { by: String },
}

/// What a person adds to a decision: a rejection's reason, or edited arguments to approve
/// instead of the proposed ones (re-validated against the tool's schema and the approval's
/// subject, re-snapshotted and re-hashed, audited as `edited`).
#[derive(Debug, Clone, Default)]
pub struct DecisionExtra {
    pub reason: Option<String>,
    pub edited_args: Option<Value>,
}

/// The result of a decision.
#[derive(Debug, Clone, Serialize)]
pub struct DecideOutcome {
    pub approval_id: Uuid,
    /// The approval's state after the call.
    pub status: ApprovalStatus,
    /// True when this call changed the state (false: it was already decided).
    pub changed: bool,
    /// For `stale`: what changed, key by key (`before`/`after`).
    pub changes: Option<Value>,
    /// For `executed`/`failed`: the tool's result or error.
    pub result: Option<Value>,
}

/// Why a decision could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    #[error("no approval with id {0}")]
    NotFound(Uuid),
    #[error("approval {0} names tool `{1}`, which this build does not have")]
    UnknownTool(Uuid, String),
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
    /// Edited arguments the tool refuses (its schema, or another subject); nothing changed.
    #[error("{0}")]
    InvalidEdit(String),
    /// The org's monthly token budget cannot hold the model call the action needs; the
    /// approval stays pending.
    #[error(
        "approval {0} needs a model call that the organisation's monthly token budget cannot hold (used {1} of {2}); it stays pending"
    )]
    Budget(Uuid, i64, i64),
    /// The approval's org is inactive (offboarded): approving would execute the action and may
    /// spend tokens on its behalf (review #25); the approval stays pending. Rejecting works.
    #[error(
        "approval {0} belongs to an inactive organisation: nothing was executed and it stays pending (reactivate the organisation, or reject it)"
    )]
    OrgInactive(Uuid),
}

/// Whether the org is active; a missing org reads as inactive.
async fn org_active(conn: &mut PgConnection, org_id: Uuid) -> sqlx::Result<bool> {
    let active: Option<bool> = sqlx::query_scalar("SELECT active FROM orgs WHERE id = $1")
        .bind(org_id)
        .fetch_optional(conn)
        .await?;
    Ok(active == Some(true))
}

/// Decides an approval: lock; not pending → its current state (never runs twice); past
/// `expires_at` → `expired`; approving for an inactive org → [`DecideError::OrgInactive`];
/// snapshot changed → `stale` (what changed is reported); else execute through the registry
/// as the approver → `executed` (or `failed`). All in one
/// transaction, except for a tool that calls a model (run_extraction): see [`model_decide`],
/// which holds no transaction while the model answers. `extra`: a reason or edited arguments.
pub async fn decide(
    pool: &PgPool,
    clock: &SharedClock,
    env: &ToolEnv,
    id: Uuid,
    org_id: Option<Uuid>,
    decision: Decision,
    extra: DecisionExtra,
) -> Result<DecideOutcome, DecideError> {
    let now = clock.now();
    let mut tx = pool.begin().await?;
    let mut row = store::lock(&mut tx, id, org_id)
        .await?
        .ok_or(DecideError::NotFound(id))?;
    if !row.status.is_pending() {
        return Ok(unchanged(&row));
    }
    let (by, approve) = match &decision {
        Decision::Approve { by } => (by.clone(), true),
        Decision::Reject { by } => (by.clone(), false),
    };
    let actor = format!("human:{by}");
    let mut outcome = DecideOutcome {
        approval_id: id,
        status: ApprovalStatus::Pending,
        changed: true,
        changes: None,
        result: None,
    };
    let (status, decision_name, result) = if !approve {
        (ApprovalStatus::Rejected, AuditDecision::HumanRejected, None)
    } else if now >= row.expires_at {
        (ApprovalStatus::Expired, AuditDecision::Expired, None)
    } else {
        if !org_active(&mut tx, row.org_id).await? {
            return Err(DecideError::OrgInactive(id));
        }
        let tool = env
            .registry
            .get(&row.action.tool)
            .cloned()
            .ok_or_else(|| DecideError::UnknownTool(id, row.action.tool.clone()))?;
        let changed = changed_snapshot(&mut tx, env, &row, &actor, now).await?;
        if changed.is_none()
            && let Some(args) = &extra.edited_args
        {
            row = edit::apply(&mut tx, env, row, tool.as_ref(), args, &actor, now).await?;
        }
        if let Some(changes) = changed {
            outcome.changes = Some(changes.clone());
            (
                ApprovalStatus::Stale,
                AuditDecision::Stale,
                Some(json!({"changes": changes})),
            )
        } else if tool.calls_model() {
            return model_decide::approve(pool, clock, env, tx, row, tool.as_ref(), &actor).await;
        } else {
            // On a savepoint: a refused call's partial writes are undone, its record stays.
            let mut ctx = env.ctx(&mut tx, row.org_id, row.run_id, actor.clone(), now);
            let (name, args) = (&row.action.tool, &row.action.args);
            let executed = ctx
                .savepoint(async |c| env.registry.execute(c, name, args).await)
                .await?;
            drop(ctx);
            match executed {
                Ok(v) => (
                    ApprovalStatus::Executed,
                    AuditDecision::HumanApproved,
                    Some(v),
                ),
                Err(crate::tools::registry::CallError::Tool(ToolError::Db(e))) => {
                    return Err(e.into());
                }
                Err(e) => (
                    ApprovalStatus::Failed,
                    AuditDecision::Error,
                    Some(json!({"error": e.to_string()})),
                ),
            }
        }
    };
    record(
        &mut tx,
        &row,
        Recorded {
            status,
            decision: decision_name,
            actor: &actor,
            result: result.as_ref(),
            tokens: 0,
            now,
            reason: if approve {
                None
            } else {
                extra.reason.as_deref()
            },
        },
    )
    .await?;
    tx.commit().await?;
    metrics::counter!("agentd_approvals_decided_total", "status" => status.as_str()).increment(1);
    outcome.status = status;
    outcome.result = result;
    Ok(outcome)
}

/// The outcome of a call that found the approval already decided.
fn unchanged(row: &ApprovalRow) -> DecideOutcome {
    DecideOutcome {
        approval_id: row.id,
        status: row.status,
        changed: false,
        changes: None,
        result: row.result.clone(),
    }
}

/// Re-reads the approval's snapshot with its rows locked: `Some(changes)` when it differs
/// from the stored one.
async fn changed_snapshot(
    conn: &mut PgConnection,
    env: &ToolEnv,
    row: &ApprovalRow,
    actor: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Option<Value>, DecideError> {
    let tool = env
        .registry
        .get(&row.action.tool)
        .cloned()
        .ok_or_else(|| DecideError::UnknownTool(row.id, row.action.tool.clone()))?;
    let mut ctx = env.ctx(conn, row.org_id, row.run_id, actor.to_string(), now);
    let current = match tool.snapshot(&mut ctx, &row.action.args).await {
        Some(Ok(v)) => v,
        Some(Err(ToolError::Db(e))) => return Err(e.into()),
        Some(Err(e)) => json!({"error": e.to_string()}),
        None => Value::Null,
    };
    if snapshot_hash(&row.action.tool, &row.action.args, &current) == row.snapshot_hash {
        return Ok(None);
    }
    Ok(Some(diff(&row.snapshot, &current)))
}

/// What a decision records.
struct Recorded<'a> {
    status: ApprovalStatus,
    decision: AuditDecision,
    actor: &'a str,
    result: Option<&'a Value>,
    tokens: i64,
    now: chrono::DateTime<chrono::Utc>,
    /// A rejection's reason.
    reason: Option<&'a str>,
}

/// Sets the approval's state and appends its audit row; an executed approval marks its
/// suggestion `acted`.
async fn record(conn: &mut PgConnection, row: &ApprovalRow, r: Recorded<'_>) -> sqlx::Result<()> {
    store::set_decision(conn, row.id, r.status, r.actor, r.now, r.result, r.reason).await?;
    notify::decided(conn, row, r.status, r.actor, r.now).await?;
    if r.status == ApprovalStatus::Executed
        && let Some(s) = row.suggestion_id
    {
        crate::store::suggestions::mark_acted(conn, row.org_id, s, r.actor, r.now).await?;
    }
    let outcome = match (r.reason, r.result) {
        (Some(reason), None) => Some(json!({"reason": reason})),
        (_, res) => res.cloned(),
    };
    let call_id = format!("approval:{}", row.id);
    let audit = NewAudit {
        outcome: outcome.as_ref(),
        is_error: r.status == ApprovalStatus::Failed,
        tokens: r.tokens.min(i32::MAX as i64) as i32,
        ..decision_audit(row, &call_id, r.actor, r.decision, r.now)
    };
    runs::insert_audit(&mut *conn, &audit).await?;
    Ok(())
}

/// The audit row of a person's (or the sweep's) step on `row`: `call_id` is
/// `approval:<id>`, the category `approval`, the arguments the approval's as a digest (they
/// hold the real values the approval executes with, review D3).
fn decision_audit<'a>(
    row: &'a ApprovalRow,
    call_id: &'a str,
    actor: &'a str,
    decision: AuditDecision,
    now: chrono::DateTime<chrono::Utc>,
) -> NewAudit<'a> {
    NewAudit {
        call_id: Some(call_id),
        args: Some(&row.action.args),
        args_as: runs::ArgsKept::Digest,
        ..NewAudit::new(
            row.org_id,
            row.run_id,
            actor,
            &row.action.tool,
            runs::AuditCategory::Approval,
            decision,
            now,
        )
    }
}

/// Top-level keys whose values differ: `{key: {before, after}}` (whole values when not objects).
pub fn diff(before: &Value, after: &Value) -> Value {
    match (before, after) {
        (Value::Object(a), Value::Object(b)) => {
            let mut out = serde_json::Map::new();
            for k in a.keys().chain(b.keys()) {
                if out.contains_key(k) {
                    continue;
                }
                let (x, y) = (a.get(k), b.get(k));
                if x != y {
                    out.insert(k.clone(), json!({"before": x, "after": y}));
                }
            }
            Value::Object(out)
        }
        _ => json!({"before": before, "after": after}),
    }
}
