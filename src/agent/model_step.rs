//! A tool call that asks a model itself (run_extraction), with no transaction open while the
//! model answers: the inputs are read in a short transaction, the model is called with no
//! connection held (its estimate reserved on the org budget), the answer is checkpointed as a
//! `tool_model` step and charged to the run and the org in one short transaction, then it is
//! validated and applied in the step transaction that also writes the audit row and the
//! tool_result. A crash after the call resumes from the checkpointed answer.

use super::step::{Decided, bounded_error, run_ctx};
use super::{Engine, RunError, RunSpec, budget};
use crate::llm::CompletionResponse;
use crate::store::agent_loop::Flush;
use crate::store::budget::Reservation;
use crate::store::runs::{self, AuditDecision, StepKind, StepRow};
use crate::tools::{Tool, ToolError};
use serde_json::{Value, json};
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
    let cat = tool.category().as_str();
    let model_call_id = format!("{call_id}#model");
    let now = engine.clock.now();
    let checkpointed = runs::step_for_call(&mut tx, run_id, &model_call_id).await?;
    let mut written = None;
    let (state, answer) = match checkpointed.as_ref().and_then(decode) {
        Some(found) => found,
        None => {
            let mut ctx = run_ctx(engine, spec, &mut tx, run_id, now);
            let prepared = tool.prepare(&mut ctx, args).await;
            drop(ctx);
            // Nothing was written: end the transaction before the model is asked.
            tx.rollback().await?;
            let call = match prepared {
                Some(Ok(c)) => c,
                Some(Err(ToolError::Db(e))) => return Err(e.into()),
                Some(Err(e)) => {
                    let tx = engine.pool.begin().await?;
                    return Ok((
                        Decided::error(cat, AuditDecision::AutoApproved, e.to_string()),
                        0,
                        tx,
                        None,
                    ));
                }
                None => {
                    let tx = engine.pool.begin().await?;
                    let msg = format!("`{}` cannot run here", tool.name());
                    return Ok((Decided::error(cat, AuditDecision::Error, msg), 0, tx, None));
                }
            };
            let reservation =
                budget::reserve(&engine.pool, spec.org_id, &call.request, now).await?;
            if matches!(reservation, Reservation::Refused { .. }) {
                let tx = engine.pool.begin().await?;
                let msg = "not executed: the organisation's monthly token budget cannot hold \
                           this model call; finish with what you have"
                    .to_string();
                return Ok((Decided::error(cat, AuditDecision::Capped, msg), 0, tx, None));
            }
            let input_estimate = crate::llm::tokens::request(&call.request) as i64;
            let result = engine.env.provider.complete(call.request).await;
            match result {
                Ok(resp) => {
                    written = checkpoint(
                        engine,
                        spec,
                        (run_id, seq),
                        &model_call_id,
                        &call.state,
                        &resp,
                        &reservation,
                    )
                    .await
                    .map(Some)?;
                    (call.state, resp)
                }
                Err(e) => {
                    // A failure after the model generated spent the input: charge its estimate
                    // (it counts as a failed extraction answer); otherwise nothing was spent.
                    let spent = if e.after_generation() {
                        input_estimate
                    } else {
                        0
                    };
                    if spent > 0 {
                        let mut tx = engine.pool.begin().await?;
                        runs::add_tokens(&mut tx, run_id, spent, 0).await?;
                        budget::settle(&mut tx, spec.org_id, &reservation, spent, now).await?;
                        tx.commit().await?;
                    } else {
                        budget::release(&engine.pool, &reservation).await;
                    }
                    let tx = engine.pool.begin().await?;
                    let msg = format!("provider error: the extraction model failed: {e}");
                    return Ok((
                        Decided::error(cat, AuditDecision::AutoApproved, msg),
                        spent,
                        tx,
                        None,
                    ));
                }
            }
        }
    };
    let tokens = answer.usage.total_i64();
    let usage = json!({"input_tokens": answer.usage.input_tokens,
                       "output_tokens": answer.usage.output_tokens});
    let mut tx = engine.pool.begin().await?;
    let mut ctx = run_ctx(engine, spec, &mut tx, run_id, engine.clock.now());
    // A rejected answer's partial writes are undone; the audit row and checkpoint stay.
    let applied = ctx
        .savepoint(async |c| tool.apply(c, args, (&state, &answer)).await)
        .await?;
    drop(ctx);
    let decided = match applied {
        Ok(mut v) => {
            v["usage"] = usage;
            Decided {
                category: cat,
                decision: AuditDecision::AutoApproved,
                content: v.to_string(),
                is_error: false,
                outcome: v,
            }
        }
        Err(ToolError::Db(e)) => return Err(e.into()),
        Err(e) => {
            let mut d = Decided::error(
                cat,
                AuditDecision::AutoApproved,
                bounded_error(&e.to_string()),
            );
            d.outcome["usage"] = usage;
            d
        }
    };
    Ok((decided, tokens, tx, written))
}

/// The checkpointed `(state, answer)` of a `tool_model` step.
fn decode(payload: &Value) -> Option<(Value, CompletionResponse)> {
    let resp = serde_json::from_value(payload.get("response")?.clone()).ok()?;
    Some((payload.get("state")?.clone(), resp))
}

/// Stores the answer as a `tool_model` step and charges its usage to the run and the org
/// (settling the reservation), in one short transaction.
async fn checkpoint(
    engine: &Engine,
    spec: &RunSpec,
    (run_id, seq): (Uuid, i32),
    model_call_id: &str,
    state: &Value,
    resp: &CompletionResponse,
    reservation: &Reservation,
) -> Result<StepRow, RunError> {
    let now = engine.clock.now();
    let payload = json!({"state": state, "response": resp});
    let row = StepRow::written(seq, StepKind::ToolModel, Some(model_call_id), &payload, now);
    budget::checkpoint_answer(
        &engine.pool,
        spec.org_id,
        (run_id, &row),
        (resp, 0),
        reservation,
        now,
        Flush::Durable,
    )
    .await?;
    Ok(row)
}
