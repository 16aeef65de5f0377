//! A tool call that asks a model itself (run_extraction), in the loop: the model phase of
//! [`crate::tools::model_phase`] (the protocol approvals share), with the answer checkpointed as
//! a `tool_model` step in the statement that charges it. The inputs are read in a short
//! transaction that ends before the model is asked; the answer is validated and applied in the
//! step transaction that also writes the audit row and the tool_result. A crash after the call
//! resumes from the checkpointed answer.

use super::step::{Decided, run_ctx};
use super::{Engine, RunError, RunSpec};
use crate::store::runs::{self, AuditCategory, AuditDecision, StepRow};
use crate::tools::model_phase::{self, ChargeTo, Phase};
use crate::tools::{Tool, ToolError};
use serde_json::Value;
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

/// What [`run`] hands back: the decision, the tokens the model used (already charged), the
/// transaction the caller finishes with the audit row and the tool_result, and the `tool_model`
/// checkpoint if this call wrote one (at `seq`).
type ModelStep = (
    Decided,
    i64,
    Transaction<'static, Postgres>,
    Option<StepRow>,
);

/// Runs `tool(args)` for `call_id`. Takes the (read-only so far) step transaction.
pub(super) async fn run(
    engine: &Engine,
    spec: &RunSpec,
    (run_id, seq): (Uuid, i32),
    call_id: &str,
    tool: &dyn Tool,
    args: &Value,
    mut tx: Transaction<'static, Postgres>,
) -> Result<ModelStep, RunError> {
    let cat = tool.category().into();
    let model_call_id = format!("{call_id}#model");
    let checkpointed = runs::step_for_call(&mut tx, run_id, &model_call_id).await?;
    let (state, answer, written) = match checkpointed.as_ref().and_then(model_phase::checkpointed) {
        Some((state, answer)) => (state, answer, None),
        None => {
            let mut ctx = run_ctx(engine, spec, &mut tx, run_id, engine.clock.now());
            let prepared = tool.prepare(&mut ctx, args).await;
            drop(ctx);
            // Nothing was written: end the transaction before the model is asked.
            tx.rollback().await?;
            let call = match prepared {
                Some(Ok(call)) => call,
                Some(Err(ToolError::Db(e))) => return Err(e.into()),
                Some(Err(e)) => {
                    let decision = AuditDecision::AutoApproved;
                    return failed(engine, cat, decision, e.to_string(), 0).await;
                }
                None => {
                    let msg = format!("`{}` cannot run here", tool.name());
                    return failed(engine, cat, AuditDecision::Error, msg, 0).await;
                }
            };
            let charge_to = ChargeTo::Checkpoint {
                run_id,
                seq,
                model_call_id: &model_call_id,
            };
            let provider = Ok(engine.env.provider.clone());
            let with = (&engine.pool, &engine.clock, &*engine.env.prices);
            match model_phase::call(with, spec.org_id, charge_to, call, provider).await? {
                Phase::Answered {
                    state,
                    answer,
                    checkpoint,
                } => (state, answer, checkpoint),
                Phase::Refused { .. } => {
                    let msg = "not executed: the organisation's monthly token budget cannot \
                               hold this model call; finish with what you have";
                    return failed(engine, cat, AuditDecision::Capped, msg.into(), 0).await;
                }
                Phase::Failed { error, spent } => {
                    let msg = format!("provider error: the extraction model failed: {error}");
                    let decision = AuditDecision::AutoApproved;
                    return failed(engine, cat, decision, msg, spent).await;
                }
            }
        }
    };
    let tokens = answer.usage.total_i64();
    let mut tx = engine.pool.begin().await?;
    let mut ctx = run_ctx(engine, spec, &mut tx, run_id, engine.clock.now());
    let applied = model_phase::apply(&mut ctx, tool, args, (&state, &answer)).await?;
    drop(ctx);
    let decision = AuditDecision::AutoApproved;
    let decided = match applied {
        Ok(v) => Decided {
            category: cat,
            decision,
            content: v.to_string(),
            is_error: false,
            outcome: v,
        },
        Err(rejected) => {
            let mut d = Decided::error(cat, decision, rejected.error.to_string());
            d.outcome["usage"] = rejected.usage;
            d
        }
    };
    Ok((decided, tokens, tx, written))
}

/// The step of a call that was not applied (`spent` tokens charged): its error, in a fresh
/// step transaction.
async fn failed(
    engine: &Engine,
    cat: AuditCategory,
    decision: AuditDecision,
    msg: String,
    spent: i64,
) -> Result<ModelStep, RunError> {
    let tx = engine.pool.begin().await?;
    Ok((Decided::error(cat, decision, msg), spent, tx, None))
}
