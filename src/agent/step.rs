//! One checkpointed step: a provider response, or one tool call with its policy decision, side
//! effects, audit row and checkpoint — all in one transaction. A tool that calls a model itself
//! (run_extraction) is split so that no transaction is open while the model answers (see
//! [`super::model_step`]).

use super::model_step;
use super::transcript::{ToolResultStep, Transcript, is_refinement};
use super::{Engine, RunError, RunSpec, budget};
use crate::approvals::{self, ProposalOrigin};
use crate::catalog::PolicyDecision;
use crate::llm::{Block, CompletionResponse};
use crate::store::budget::Reservation;
pub use crate::store::documents::bounded_error;
use crate::store::runs::{self, NewAudit};
use crate::tools::registry::CallError;
use crate::tools::{Category, Registry, Tool, ToolCtx, ToolError, scope};
use serde_json::{Value, json};
use sqlx::PgConnection;
use std::time::Instant;
use uuid::Uuid;

/// Most characters of a tool result shown to the model.
const MAX_RESULT_CHARS: usize = 20_000;

/// Checkpoints a provider response: tool call ids are rewritten to be unique in the run
/// (servers reuse ids like `call_0` across rounds), tokens are added to the run and the
/// reservation is settled with them on the org's budget, in one transaction.
pub(super) async fn checkpoint_response(
    engine: &Engine,
    spec: &RunSpec,
    run_id: Uuid,
    (seq, round): (i32, u32),
    mut resp: CompletionResponse,
    summary: bool,
    reservation: &Reservation,
) -> Result<(), RunError> {
    let mut i = 0;
    for b in resp.message.content.iter_mut() {
        if let Block::ToolUse { id, .. } = b {
            *id = format!("r{}.{}", round + 1, i);
            i += 1;
        }
    }
    let now = engine.clock.now();
    let mut tx = engine.pool.begin().await?;
    let payload = json!({"response": resp, "summary": summary});
    runs::insert_step(&mut tx, run_id, seq, "llm_response", None, &payload, now).await?;
    runs::add_round(
        &mut tx,
        run_id,
        resp.usage.input_tokens as i64,
        resp.usage.output_tokens as i64,
    )
    .await?;
    budget::settle(
        &mut tx,
        spec.org_id,
        reservation,
        resp.usage.total() as i64,
        now,
    )
    .await?;
    tx.commit().await?;
    metrics::counter!("agentd_tokens_total", "org" => spec.org_id.to_string(), "model" => resp.model.clone())
        .increment(resp.usage.total());
    Ok(())
}

/// What happened to a call: recorded on the audit row and the tool_result checkpoint.
pub(super) struct Decided {
    pub category: &'static str,
    pub decision: &'static str,
    pub content: String,
    pub is_error: bool,
    pub outcome: Value,
}

impl Decided {
    /// An error result (NUL removed, truncated).
    pub fn error(category: &'static str, decision: &'static str, msg: String) -> Self {
        let msg = bounded_error(&msg);
        Self {
            category,
            decision,
            outcome: json!({"error": msg}),
            content: msg,
            is_error: true,
        }
    }

    fn ok(category: &'static str, decision: &'static str, v: Value) -> Self {
        Self {
            category,
            decision,
            content: truncate(v.to_string()),
            is_error: false,
            outcome: v,
        }
    }
}

/// What the policy, the subject and the caps make of a valid call.
enum Plan {
    Done(Decided),
    /// Store as a pending approval (with the off-subject reason, if that is why).
    Propose(Option<String>),
    Auto,
    /// Auto, through prepare → model call → checkpoint → apply.
    Model,
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
    ctx.subject = engine.env.subject_policy.subject(spec.document_id);
    ctx
}

async fn plan(
    engine: &Engine,
    ctx: &mut ToolCtx<'_>,
    spec: &RunSpec,
    t: &Transcript,
    tool: &dyn Tool,
    args: &Value,
) -> Result<Plan, RunError> {
    let name = tool.name();
    let category = tool.category();
    let cat = category.as_str();
    let mut decision = spec.policy.decide(name, category);
    let mut off = None;
    match scope::check(ctx, tool, args).await {
        Ok(()) => {}
        Err(ToolError::Db(e)) => return Err(e.into()),
        Err(e) => {
            off = Some(e.to_string());
            let propose = engine.env.subject_policy.off_subject != PolicyDecision::Deny;
            decision = if category == Category::Read || decision == PolicyDecision::Deny || !propose
            {
                PolicyDecision::Deny
            } else {
                PolicyDecision::Propose
            };
        }
    }
    match decision {
        PolicyDecision::Deny => {
            let mut d = match &off {
                Some(reason) => Decided::error(
                    cat,
                    "denied",
                    format!("refused: {reason}; do not call it again for that"),
                ),
                None => Decided::error(
                    cat,
                    "denied",
                    format!(
                        "refused: the policy of this job denies `{name}` ({cat} tools); do not call it again"
                    ),
                ),
            };
            if off.is_some() {
                d.outcome["off_subject"] = json!(true);
            }
            Ok(Plan::Done(d))
        }
        PolicyDecision::Propose => Ok(Plan::Propose(off)),
        PolicyDecision::Auto => {
            let failed = if tool.calls_model() {
                let run = ctx.run_id.unwrap_or_default();
                runs::failed_model_answers(ctx.conn, run, name).await? as u32
            } else {
                0
            };
            let max_failed = engine.env.max_failed_extractions;
            if tool.calls_model() && failed >= max_failed {
                return Ok(Plan::Done(Decided::error(
                    cat,
                    "capped",
                    format!(
                        "not executed: the extraction model's answer failed {failed} time(s) in \
                         this run (max_failed_extractions = {max_failed}); finish with what you have"
                    ),
                )));
            }
            // A paid-for failed answer counts as a refinement like a successful redo.
            let earlier = t.successes.get(name).copied().unwrap_or(0) + failed;
            if is_refinement(name, earlier) && t.refinements + failed >= spec.caps.max_refinements {
                return Ok(Plan::Done(Decided::error(
                    cat,
                    "capped",
                    format!(
                        "not executed: the refinement limit of this run ({}) is reached; finish with what you have",
                        spec.caps.max_refinements
                    ),
                )));
            }
            Ok(if tool.calls_model() {
                Plan::Model
            } else {
                Plan::Auto
            })
        }
    }
}

/// Executes one pending tool call and checkpoints its result.
pub(super) async fn execute_call(
    engine: &Engine,
    spec: &RunSpec,
    run_id: Uuid,
    _seq: i32,
    call: &(String, String, String),
    t: &Transcript,
    over_call_cap: bool,
) -> Result<(), RunError> {
    let (call_id, name, raw) = call;
    let started = Instant::now();
    let now = engine.clock.now();
    let actor = format!("agent:{}", spec.kind);
    let mut tx = engine.pool.begin().await?;
    let registry = engine.env.registry.clone();
    let args = registry.prepare_args(name, raw);
    let tool = registry
        .get(name)
        .filter(|_| spec.policy.allows(name))
        .cloned();
    let mut tokens = 0i64;
    let decided = if over_call_cap {
        Decided::error(
            "cap",
            "capped",
            format!(
                "not executed: the tool call limit of this run ({}) is reached",
                spec.caps.max_tool_calls
            ),
        )
    } else if let Some(tool) = tool {
        let category = tool.category().as_str();
        match args
            .as_ref()
            .map_err(|e| e.to_string())
            .and_then(|a| Registry::validate(tool.as_ref(), a).map_err(|e| e.to_string()))
        {
            Err(msg) => Decided::error(
                category,
                "error",
                format!("{msg}. Fix the arguments and call `{name}` again."),
            ),
            Ok(()) => {
                let args = args.as_ref().expect("validated");
                let mut ctx = run_ctx(engine, spec, &mut tx, run_id, now);
                match plan(engine, &mut ctx, spec, t, tool.as_ref(), args).await? {
                    Plan::Done(d) => d,
                    Plan::Propose(off) => {
                        let why = rationale(t, call_id);
                        let p = (call_id.as_str(), why.as_deref());
                        propose_call(&mut ctx, spec, p, tool.as_ref(), args, off).await?
                    }
                    Plan::Auto => {
                        auto_call(&mut ctx, &registry, spec, call_id, tool.as_ref(), args).await?
                    }
                    Plan::Model => {
                        let (d, used, next) =
                            model_step::run(engine, spec, run_id, call_id, tool.as_ref(), args, tx)
                                .await?;
                        tx = next;
                        tokens = used;
                        d
                    }
                }
            }
        }
    } else {
        let offered = spec.policy.allow.join(", ");
        Decided::error(
            "unknown",
            "error",
            format!(
                "unknown tool `{}`; the tools you can call are: {offered}",
                bounded_error(&name.chars().take(100).collect::<String>())
            ),
        )
    };
    let args_value = args.unwrap_or_else(|_| json!({"raw": raw}));
    runs::insert_audit(
        &mut *tx,
        &NewAudit {
            org_id: spec.org_id,
            run_id: Some(run_id),
            call_id: Some(call_id),
            actor: &actor,
            tool: name,
            category: decided.category,
            decision: decided.decision,
            args: Some(&args_value),
            outcome: Some(&decided.outcome),
            is_error: decided.is_error,
            duration_ms: started.elapsed().as_millis().min(i32::MAX as u128) as i32,
            tokens: tokens.min(i32::MAX as i64) as i32,
            now,
        },
    )
    .await?;
    let step = ToolResultStep {
        call_id: call_id.clone(),
        tool: name.clone(),
        content: decided.content,
        is_error: decided.is_error,
        decision: decided.decision.to_string(),
    };
    let seq = runs::next_seq(&mut tx, run_id).await?;
    runs::insert_step(
        &mut tx,
        run_id,
        seq,
        "tool_result",
        Some(call_id),
        &serde_json::to_value(&step).expect("step serializes"),
        now,
    )
    .await?;
    runs::add_tool_call(&mut tx, run_id).await?;
    tx.commit().await?;
    // Model-invented names share one label, so metric cardinality stays bounded.
    let label = if registry.get(name).is_some() {
        name.clone()
    } else {
        "unknown".to_string()
    };
    metrics::counter!("agentd_tool_calls_total", "tool" => label, "decision" => decided.decision)
        .increment(1);
    Ok(())
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
    let category = tool.category().as_str();
    sqlx::query("SAVEPOINT tool_call")
        .execute(&mut *ctx.conn)
        .await?;
    let origin = ProposalOrigin {
        call_id: Some(call_id),
        suggestion_id: None,
        ttl: spec.approval_ttl,
        repropose: true,
        chain: spec.chain,
        rationale,
    };
    match approvals::propose(ctx, tool, args, origin).await {
        Ok(id) => {
            let mut v = json!({"status": "proposed_for_approval", "approval_id": id,
                "note": "a person decides; do not call this again"});
            if let Some(reason) = off {
                v["off_subject"] = json!(reason);
            }
            Ok(Decided::ok(category, "proposed", v))
        }
        Err(ToolError::Db(e)) => Err(e.into()),
        Err(e) => {
            sqlx::query("ROLLBACK TO SAVEPOINT tool_call")
                .execute(&mut *ctx.conn)
                .await?;
            Ok(Decided::error(category, "error", e.to_string()))
        }
    }
}

async fn auto_call(
    ctx: &mut ToolCtx<'_>,
    registry: &Registry,
    spec: &RunSpec,
    call_id: &str,
    tool: &dyn Tool,
    args: &Value,
) -> Result<Decided, RunError> {
    let category = tool.category().as_str();
    sqlx::query("SAVEPOINT tool_call")
        .execute(&mut *ctx.conn)
        .await?;
    match registry.execute(ctx, tool.name(), args).await {
        Ok(mut v) => {
            if let Some(f) = tool.follow_up(args, &v) {
                let action_call = format!("{call_id}:action");
                let origin = ProposalOrigin {
                    call_id: Some(&action_call),
                    suggestion_id: None,
                    ttl: spec.approval_ttl,
                    repropose: true,
                    chain: spec.chain,
                    // A suggestion's action: the suggestion says why.
                    rationale: args.get("message").and_then(Value::as_str),
                };
                match approvals::propose_follow_up(ctx, registry, &spec.policy, &f, origin).await? {
                    Ok(id) => v["approval_id"] = json!(id),
                    Err(reason) => v["proposed_action_error"] = json!(bounded_error(&reason)),
                }
            }
            Ok(Decided::ok(category, "auto_approved", v))
        }
        Err(CallError::Tool(ToolError::Db(e))) => Err(e.into()),
        Err(e) => {
            // Undo the tool's partial writes; keep the audit and checkpoint.
            sqlx::query("ROLLBACK TO SAVEPOINT tool_call")
                .execute(&mut *ctx.conn)
                .await?;
            Ok(Decided::error(category, "auto_approved", e.to_string()))
        }
    }
}

fn truncate(s: String) -> String {
    if s.len() <= MAX_RESULT_CHARS {
        return s;
    }
    let mut end = MAX_RESULT_CHARS;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [truncated]", &s[..end])
}
