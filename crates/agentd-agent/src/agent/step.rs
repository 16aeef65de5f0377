//! One checkpointed step: a provider response, or one tool call with its policy decision, side
//! effects, audit row and checkpoint — all in one transaction. A tool that calls a model itself
//! (run_extraction) is split so that no transaction is open while the model answers (see
//! [`super::model_step`]).

use super::decide::{Plan, may_write, plan, refused};
use super::model_step;
use super::step_conn::StepConn;
use super::transcript::{ToolCall, ToolResultStep, Transcript};
use super::{BudgetSeen, Engine, RunError, RunSpec, Written, budget};
use crate::approvals::{self, ProposalOrigin};
use crate::llm::schema_output::Unconstrained;
use crate::llm::{Block, CompletionResponse};
use crate::store::agent_loop::{self, Counters, Flush};
use crate::store::budget::Reservation;
pub use crate::store::documents::bounded_error;
use crate::store::runs::{AuditCategory, AuditDecision, NewAudit, StepKind, StepRow};
use crate::tools::registry::CallError;
use crate::tools::{Registry, Tool, ToolCtx, ToolError};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sqlx::PgConnection;
use std::time::Instant;
use uuid::Uuid;

/// Most characters of a tool result shown to the model.
const MAX_RESULT_CHARS: usize = 20_000;

/// Checkpoints a provider response: tool call ids are rewritten to be unique in the run
/// (servers reuse ids like `call_0` across rounds), tokens are added to the run and the
/// reservation is settled with them on the org's budget, in one transaction.
///
/// `room` is how many calls the run may still make (`max_tool_calls` minus those made): calls
/// past `room` (past the first, when there is no room: it is refused as capped) are dropped
/// before the answer is stored, with one audit row saying how many — a model or server that
/// writes thousands of calls in one answer costs one row, not thousands (review N14). A forced
/// summary (`summary`) keeps no call at all, and says so the same way (review #24).
/// `unconstrained`: the round went without its constrained format (the run asks with plain
/// tool calls from then on; an answer that ignored the format is kept as a record, charged, and
/// not shown to the model: `Transcript::from_steps`).
#[allow(clippy::too_many_arguments)]
pub(super) async fn checkpoint_response(
    engine: &Engine,
    spec: &RunSpec,
    run_id: Uuid,
    (seq, round): (i32, u32),
    mut resp: CompletionResponse,
    (summary, unconstrained): (bool, Option<Unconstrained>),
    reservation: &Reservation,
    room: u32,
) -> Result<Written, RunError> {
    let keep = if summary { 0 } else { (room as usize).max(1) };
    let dropped = drop_calls_past(&mut resp, keep);
    let mut i = 0;
    for b in resp.message.content.iter_mut() {
        if let Block::ToolUse { id, .. } = b {
            *id = format!("r{}.{}", round + 1, i);
            i += 1;
        }
    }
    let now = engine.clock.now();
    // The step that follows (a tool result, a nudge, the run's end) commits durably within
    // milliseconds and flushes this one with it; only a crash of the database server in between
    // loses the answer, and the call is made again (ARCHITECTURE.md, "The step engine").
    let mut payload = json!({"response": resp, "summary": summary});
    if let Some(why) = unconstrained {
        payload["unconstrained"] = json!(why.as_str());
    }
    let row = StepRow::written(seq, StepKind::LlmResponse, None, &payload, now);
    let add = Counters {
        rounds: 1,
        ..budget::charge_answer(&engine.env.prices, &spec.model, &resp)
    };
    let settled = budget::checkpoint_answer(
        &engine.pool,
        spec.org_id,
        (run_id, &row),
        (spec.model.as_str(), &resp, add),
        reservation,
        now,
        Flush::Unflushed,
    )
    .await?;
    if dropped > 0 {
        let actor = format!("agent:{}", spec.kind);
        let args = json!({"dropped": dropped, "kept": keep, "round": round + 1});
        crate::store::runs::insert_audit(
            &engine.pool,
            &NewAudit {
                args: Some(&args),
                is_error: true,
                ..NewAudit::new(
                    spec.org_id,
                    Some(run_id),
                    &actor,
                    "dropped_calls",
                    AuditCategory::Cap,
                    AuditDecision::Capped,
                    now,
                )
            },
        )
        .await?;
        tracing::warn!(%run_id, dropped, kept = keep, "an answer had more tool calls than the run may make; the rest were dropped");
    }
    Ok(Written {
        steps: vec![row],
        tokens: Some(settled.run_tokens),
        budget: Some(BudgetSeen::after(settled.budget, now)),
        charged: true,
    })
}

/// Removes every tool call of `resp` after the first `keep`; returns how many went.
pub(crate) fn drop_calls_past(resp: &mut CompletionResponse, keep: usize) -> usize {
    let mut seen = 0usize;
    let before = resp.message.content.len();
    resp.message.content.retain(|b| {
        if matches!(b, Block::ToolUse { .. }) {
            seen += 1;
            seen <= keep
        } else {
            true
        }
    });
    before - resp.message.content.len()
}

/// What happened to a call: recorded on the audit row and the tool_result checkpoint.
pub(super) struct Decided {
    pub category: AuditCategory,
    pub decision: AuditDecision,
    pub content: String,
    pub is_error: bool,
    pub outcome: Value,
}

impl Decided {
    /// An error result (NUL removed, truncated).
    pub fn error(category: AuditCategory, decision: AuditDecision, msg: String) -> Self {
        let msg = bounded_error(&msg);
        Self {
            category,
            decision,
            outcome: json!({"error": msg}),
            content: msg,
            is_error: true,
        }
    }

    fn ok(category: AuditCategory, decision: AuditDecision, v: Value) -> Self {
        Self {
            category,
            decision,
            content: truncate(v.to_string()),
            is_error: false,
            outcome: v,
        }
    }
}

/// A tool context for this run, with its subject.
pub(super) fn run_ctx<'c>(
    engine: &Engine,
    spec: &RunSpec,
    conn: &'c mut PgConnection,
    run_id: Uuid,
    now: chrono::DateTime<chrono::Utc>,
) -> ToolCtx<'c> {
    let mut ctx = engine.env.ctx(
        conn,
        spec.org_id,
        Some(run_id),
        format!("agent:{}", spec.kind),
        now,
    );
    ctx.document_id = spec.document_id;
    ctx.night = spec.night;
    ctx.max_suggestions = spec.max_suggestions;
    let revisable = crate::tools::scope::Revisable::of(&spec.start);
    ctx.subject = engine
        .env
        .subject_policy
        .subject(spec.document_id, revisable);
    ctx
}

/// Executes one pending tool call and checkpoints its result.
pub(super) async fn execute_call(
    engine: &Engine,
    spec: &RunSpec,
    run_id: Uuid,
    seq: i32,
    call: &ToolCall,
    t: &Transcript,
    over_call_cap: bool,
) -> Result<Written, RunError> {
    let ToolCall {
        id: call_id,
        name,
        args: raw,
    } = call;
    let started = Instant::now();
    let now = engine.clock.now();
    let registry = engine.env.registry.clone();
    let args = registry.prepare_args(name, raw);
    let tool = registry
        .get(name)
        .filter(|_| spec.policy.allows(name))
        .cloned();
    let mut tokens = 0i64;
    let mut steps = Vec::new();
    let refusal = refused(spec, name, tool.as_ref(), &args, over_call_cap);
    // A refused call writes only its audit row and checkpoint.
    let writes = match &refusal {
        Err(_) => false,
        Ok((tool, _)) => may_write(spec, *tool),
    };
    let mut tx = StepConn::open(&engine.pool, writes).await?;
    let decided = match refusal {
        Err(d) => d,
        Ok((tool, args)) => {
            let mut ctx = run_ctx(engine, spec, &mut tx, run_id, now);
            match plan(engine, &mut ctx, spec, t, tool, args).await? {
                Plan::Done(d) => d,
                Plan::Propose(off) => {
                    debug_assert!(writes, "a proposal is written in a transaction");
                    let why = rationale(t, call_id);
                    let p = (call_id.as_str(), why.as_deref());
                    propose_call(&mut ctx, spec, p, tool, args, off).await?
                }
                Plan::Auto => {
                    match auto_call(&mut ctx, &registry, spec, call_id, tool, args).await? {
                        Ok(d) => d,
                        Err(d) => {
                            // The failed call's partial writes go; the transaction had only read
                            // before it, so a fresh one takes the audit row and the checkpoint.
                            drop(ctx);
                            tx = tx.undo(&engine.pool).await?;
                            d
                        }
                    }
                }
                Plan::Model => {
                    drop(ctx);
                    let tx0 = tx.into_tx(&engine.pool).await?;
                    let (d, used, next, model_row) =
                        model_step::run(engine, spec, (run_id, seq), call_id, tool, args, tx0)
                            .await?;
                    tx = next.into();
                    tokens = used;
                    steps.extend(model_row);
                    d
                }
            }
        }
    };
    let args_value = args.unwrap_or_else(|_| json!({"raw": raw}));
    let decision = decided.decision;
    let spent = (
        started.elapsed().as_millis().min(i32::MAX as u128) as i32,
        tokens.min(i32::MAX as i64) as i32,
    );
    // After the extraction model's own checkpoint, if it wrote one.
    let seq = steps.last().map_or(seq, |r: &StepRow| r.seq + 1);
    let call = (call_id.as_str(), name.as_str(), &args_value);
    let vault = engine.vault.as_deref();
    let mut written =
        finish_step(tx, vault, spec, (run_id, seq), call, decided, spent, now).await?;
    steps.append(&mut written.steps);
    written.steps = steps;
    // A model the tool asked was charged to the org: the next round reads its budget afresh.
    written.charged = tokens != 0;
    let label = tool_label(&registry, name);
    metrics::counter!("agentd_tool_calls_total", "tool" => label, "decision" => decision.as_str())
        .increment(1);
    Ok(written)
}

/// The `tool` label of a call to `name`: its name for a tool of the registry, `unknown` for a
/// name the model invented, so the label's values stay bounded (review D16).
pub(super) fn tool_label(registry: &Registry, name: &str) -> String {
    if registry.get(name).is_some() {
        name.to_string()
    } else {
        "unknown".to_string()
    }
}

/// The end of every tool step (executed, proposed, refused, repeated): the call's audit row,
/// its `tool_result` checkpoint at `seq` and the run's call counter, in `tx`, which it commits.
/// `call` is the call's id, tool name and arguments; `spent` the step's milliseconds and the
/// tokens of a model it asked.
#[expect(
    clippy::too_many_arguments,
    reason = "one commit of everything a step ends with: its audit row, checkpoint and counters"
)]
pub(super) async fn finish_step(
    mut tx: StepConn,
    vault: Option<&crate::pii::Vault>,
    spec: &RunSpec,
    (run_id, seq): (Uuid, i32),
    (call_id, name, args): (&str, &str, &Value),
    decided: Decided,
    (duration_ms, tokens): (i32, i32),
    now: DateTime<Utc>,
) -> Result<Written, RunError> {
    let actor = format!("agent:{}", spec.kind);
    // The arguments came back rehydrated: the run's table turns its known values back into the
    // tokens the model wrote before the audit's own rules run (review N10).
    let (args, outcome) = match vault {
        Some(v) => (v.redact_json(args), v.redact_json(&decided.outcome)),
        None => (args.clone(), decided.outcome.clone()),
    };
    let audit = NewAudit {
        org_id: spec.org_id,
        run_id: Some(run_id),
        call_id: Some(call_id),
        actor: &actor,
        tool: name,
        category: decided.category,
        decision: decided.decision,
        args: Some(&args),
        args_as: crate::store::runs::ArgsKept::Redacted,
        outcome: Some(&outcome),
        is_error: decided.is_error,
        duration_ms,
        tokens,
        now,
    };
    let step = ToolResultStep {
        call_id: call_id.to_string(),
        tool: name.to_string(),
        content: decided.content,
        is_error: decided.is_error,
        decision: decided.decision.as_str().to_string(),
    };
    // checked: strings, a bool and a `Value`: serialising to a `Value` cannot fail
    let payload = serde_json::to_value(&step).expect("step serializes");
    let row = StepRow::written(seq, StepKind::ToolResult, Some(call_id), &payload, now);
    let add = Counters {
        tool_calls: 1,
        ..Counters::default()
    };
    let tokens = agent_loop::checkpoint_audited(&mut tx, run_id, &row, add, &audit).await?;
    tx.commit().await?;
    Ok(Written {
        steps: vec![row],
        tokens: Some(tokens),
        ..Written::default()
    })
}

/// The model's text of the turn that asked for `call_id`: why it proposes the call.
fn rationale(t: &Transcript, call_id: &str) -> Option<String> {
    t.messages
        .iter()
        .rev()
        .find(|m| {
            m.content
                .iter()
                .any(|b| matches!(b, crate::llm::Block::ToolUse { id, .. } if id == call_id))
        })
        .map(|m| m.joined_text())
        .filter(|s| !s.trim().is_empty())
}

async fn propose_call(
    ctx: &mut ToolCtx<'_>,
    spec: &RunSpec,
    (call_id, rationale): (&str, Option<&str>),
    tool: &dyn Tool,
    args: &Value,
    off: Option<String>,
) -> Result<Decided, RunError> {
    let category = tool.category().into();
    let origin = ProposalOrigin {
        call_id: Some(call_id),
        suggestion_id: None,
        ttl: spec.approval_ttl,
        repropose: true,
        chain: spec.chain,
        rationale,
    };
    let proposed = ctx
        .savepoint(async |c| approvals::propose(c, tool, args, origin).await)
        .await?;
    match proposed {
        Ok(id) => {
            let mut v = json!({"status": "proposed_for_approval", "approval_id": id,
                "note": "a person decides; do not call this again"});
            if let Some(reason) = off {
                v["off_subject"] = json!(reason);
            }
            Ok(Decided::ok(category, AuditDecision::Proposed, v))
        }
        Err(ToolError::Db(e)) => Err(e.into()),
        Err(e) => Ok(Decided::error(
            category,
            AuditDecision::Error,
            e.to_string(),
        )),
    }
}

/// Executes an auto-approved call and proposes its follow-up action. `Err`: the call failed
/// (an error result for the model) and whatever it wrote must be rolled back.
async fn auto_call(
    ctx: &mut ToolCtx<'_>,
    registry: &Registry,
    spec: &RunSpec,
    call_id: &str,
    tool: &dyn Tool,
    args: &Value,
) -> Result<Result<Decided, Decided>, RunError> {
    let category = tool.category().into();
    // No savepoint (two round trips a step): on an error the caller rolls the transaction back.
    let mut v = match registry.execute(ctx, tool.name(), args).await {
        Ok(v) => v,
        Err(CallError::Tool(ToolError::Db(e))) => return Err(e.into()),
        Err(e) => {
            return Ok(Err(Decided::error(
                category,
                AuditDecision::AutoApproved,
                e.to_string(),
            )));
        }
    };
    if let Some(f) = tool.follow_up(args, &v) {
        let action_call = format!("{call_id}:action");
        let origin = ProposalOrigin {
            call_id: Some(&action_call),
            suggestion_id: None,
            ttl: spec.approval_ttl,
            repropose: true,
            chain: spec.chain,
            rationale: f.rationale.as_deref(),
        };
        match approvals::propose_follow_up(ctx, registry, &spec.policy, &f, origin).await? {
            Ok(id) => v["approval_id"] = json!(id),
            Err(refused) => v["proposed_action_error"] = json!(bounded_error(&refused.to_string())),
        }
    }
    Ok(Ok(Decided::ok(category, AuditDecision::AutoApproved, v)))
}

fn truncate(s: String) -> String {
    if s.len() <= MAX_RESULT_CHARS {
        return s;
    }
    let end = (0..=MAX_RESULT_CHARS)
        .rev()
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}… [truncated]", s.get(..end).unwrap_or_default())
}
