//! One checkpointed step: a provider response, or one tool call with its policy decision, side
//! effects, audit row and checkpoint — all in one transaction.

use super::transcript::{ToolResultStep, Transcript, is_refinement};
use super::{Engine, RunError, RunSpec};
use crate::approvals::{self, ProposalOrigin};
use crate::catalog::PolicyDecision;
use crate::llm::{Block, CompletionResponse};
use crate::store::runs::{self, NewAudit};
use crate::tools::registry::CallError;
use crate::tools::{Registry, ToolError};
use serde_json::{Value, json};
use std::time::Instant;
use tracing::warn;
use uuid::Uuid;

/// Most characters of a tool result shown to the model.
const MAX_RESULT_CHARS: usize = 20_000;

/// Checkpoints a provider response: tool call ids are rewritten to be unique in the run
/// (servers reuse ids like `call_0` across rounds), tokens are added to the run and charged to
/// the org's budget, in one transaction.
pub(super) async fn checkpoint_response(
    engine: &Engine,
    spec: &RunSpec,
    run_id: Uuid,
    seq: i32,
    round: u32,
    mut resp: CompletionResponse,
    summary: bool,
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
    if let Some((used, limit)) =
        runs::charge_budget(&mut tx, spec.org_id, resp.usage.total() as i64, now).await?
    {
        warn!(org_id = %spec.org_id, used, limit, "org token budget is 80% used this month");
    }
    tx.commit().await?;
    metrics::counter!("agentd_tokens_total", "org" => spec.org_id.to_string(), "model" => resp.model.clone())
        .increment(resp.usage.total());
    Ok(())
}

struct Decided {
    category: &'static str,
    decision: &'static str,
    content: String,
    is_error: bool,
    outcome: Value,
}

impl Decided {
    fn error(category: &'static str, decision: &'static str, msg: String) -> Self {
        Self {
            category,
            decision,
            outcome: json!({"error": msg}),
            content: msg,
            is_error: true,
        }
    }
}

/// Executes one pending tool call and checkpoints its result.
pub(super) async fn execute_call(
    engine: &Engine,
    spec: &RunSpec,
    run_id: Uuid,
    seq: i32,
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
                let earlier = t.successes.get(name.as_str()).copied().unwrap_or(0);
                let decision = spec.policy.decide(name, tool.category());
                if decision == PolicyDecision::Auto
                    && is_refinement(name, earlier)
                    && t.refinements >= spec.caps.max_refinements
                {
                    Decided::error(
                        category,
                        "capped",
                        format!(
                            "not executed: the refinement limit of this run ({}) is reached; finish with what you have",
                            spec.caps.max_refinements
                        ),
                    )
                } else {
                    let mut ctx =
                        engine
                            .env
                            .ctx(&mut tx, spec.org_id, Some(run_id), actor.clone(), now);
                    ctx.document_id = spec.document_id;
                    ctx.night = spec.night;
                    ctx.max_suggestions = spec.max_suggestions;
                    match decision {
                        PolicyDecision::Deny => Decided::error(
                            category,
                            "denied",
                            format!(
                                "refused: the policy of this job denies `{name}` ({category} tools); do not call it again"
                            ),
                        ),
                        PolicyDecision::Propose => {
                            sqlx::query("SAVEPOINT tool_call")
                                .execute(&mut *ctx.conn)
                                .await?;
                            let origin = ProposalOrigin {
                                call_id: Some(call_id),
                                suggestion_id: None,
                                ttl: spec.approval_ttl,
                                repropose: true,
                                chain: spec.chain,
                            };
                            match approvals::propose(&mut ctx, tool.as_ref(), args, origin).await {
                                Ok(id) => {
                                    let v = json!({"status": "proposed_for_approval", "approval_id": id,
                                        "note": "a person decides; do not call this again"});
                                    Decided {
                                        category,
                                        decision: "proposed",
                                        content: v.to_string(),
                                        is_error: false,
                                        outcome: v,
                                    }
                                }
                                Err(ToolError::Db(e)) => return Err(e.into()),
                                Err(e) => {
                                    sqlx::query("ROLLBACK TO SAVEPOINT tool_call")
                                        .execute(&mut *ctx.conn)
                                        .await?;
                                    Decided::error(category, "error", e.to_string())
                                }
                            }
                        }
                        PolicyDecision::Auto => {
                            sqlx::query("SAVEPOINT tool_call")
                                .execute(&mut *ctx.conn)
                                .await?;
                            match registry.execute(&mut ctx, name, args).await {
                                Ok(mut v) => {
                                    if name == "create_suggestion" {
                                        propose_suggested_action(
                                            &mut ctx, &registry, spec, call_id, args, &mut v,
                                        )
                                        .await?;
                                    }
                                    Decided {
                                        category,
                                        decision: "auto_approved",
                                        content: truncate(v.to_string()),
                                        is_error: false,
                                        outcome: v,
                                    }
                                }
                                Err(CallError::Tool(ToolError::Db(e))) => return Err(e.into()),
                                Err(e) => {
                                    // Undo the tool's partial writes; keep the audit and checkpoint.
                                    sqlx::query("ROLLBACK TO SAVEPOINT tool_call")
                                        .execute(&mut *ctx.conn)
                                        .await?;
                                    let mut d =
                                        Decided::error(category, "auto_approved", e.to_string());
                                    d.decision = "auto_approved";
                                    d
                                }
                            }
                        }
                    }
                }
            }
        }
    } else {
        let offered = spec.policy.allow.join(", ");
        Decided::error(
            "unknown",
            "error",
            format!("unknown tool `{name}`; the tools you can call are: {offered}"),
        )
    };
    // Tools that call a model themselves (run_extraction) report their usage: it counts
    // against the run's token cap and the org's budget like the loop's own calls.
    let (tin, tout) = (
        decided.outcome["usage"]["input_tokens"]
            .as_i64()
            .unwrap_or(0),
        decided.outcome["usage"]["output_tokens"]
            .as_i64()
            .unwrap_or(0),
    );
    if tin + tout > 0 {
        runs::add_tokens(&mut tx, run_id, tin, tout).await?;
        if let Some((used, limit)) =
            runs::charge_budget(&mut tx, spec.org_id, tin + tout, now).await?
        {
            warn!(org_id = %spec.org_id, used, limit, "org token budget is 80% used this month");
        }
    }
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
            tokens: (tin + tout).min(i32::MAX as i64) as i32,
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
    metrics::counter!("agentd_tool_calls_total", "tool" => name.clone(), "decision" => decided.decision).increment(1);
    Ok(())
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

/// A suggestion's `proposed_action {tool, args}` becomes a pending approval linked to the
/// suggestion, so the action waits for a person. Problems with the action are reported to the
/// model in the result (the suggestion itself stands).
async fn propose_suggested_action(
    ctx: &mut crate::tools::ToolCtx<'_>,
    registry: &Registry,
    spec: &RunSpec,
    call_id: &str,
    args: &Value,
    result: &mut Value,
) -> Result<(), RunError> {
    let Some(action) = args.get("proposed_action").filter(|a| a.is_object()) else {
        return Ok(());
    };
    if result["duplicate"].as_bool() == Some(true) {
        return Ok(());
    }
    let suggestion_id = result["suggestion_id"]
        .as_str()
        .and_then(|s| Uuid::parse_str(s).ok());
    let tool_name = action["tool"].as_str().unwrap_or_default();
    let action_args = action.get("args").cloned().unwrap_or_else(|| json!({}));
    let Some(tool) = registry.get(tool_name).cloned() else {
        result["proposed_action_error"] = json!(format!(
            "unknown tool `{tool_name}`: the action was not proposed"
        ));
        return Ok(());
    };
    if let Err(e) = Registry::validate(tool.as_ref(), &action_args) {
        result["proposed_action_error"] = json!(e.to_string());
        return Ok(());
    }
    let origin = ProposalOrigin {
        call_id: Some(&format!("{call_id}:action")),
        suggestion_id,
        ttl: spec.approval_ttl,
        repropose: true,
        chain: spec.chain,
    };
    sqlx::query("SAVEPOINT suggested_action")
        .execute(&mut *ctx.conn)
        .await?;
    match approvals::propose(ctx, tool.as_ref(), &action_args, origin).await {
        Ok(id) => result["approval_id"] = json!(id),
        Err(ToolError::Db(e)) => return Err(e.into()),
        Err(e) => {
            sqlx::query("ROLLBACK TO SAVEPOINT suggested_action")
                .execute(&mut *ctx.conn)
                .await?;
            result["proposed_action_error"] = json!(e.to_string());
        }
    }
    Ok(())
}
