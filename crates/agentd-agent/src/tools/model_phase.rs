//! The model phase of a tool that asks a model itself (run_extraction), one protocol for the
//! agent loop (`agent/model_step.rs`) and for a person approving such an action
//! (`approvals/model_decide.rs`). The caller reads the inputs ([`super::Tool::prepare`]) in a
//! short transaction and ends it; then [`call`] reserves the request's estimate on the org's
//! budget, asks the model with no transaction open, and charges what the call spent to the run
//! and the org (or releases the reservation) in one short transaction; the caller re-opens a
//! transaction and [`apply`]s the answer on a savepoint, so a rejected answer's partial writes
//! are undone while its audit row stays. Every call that reached the provider is charged once,
//! by the process that made it: two people approving at once may both pay, only the one that
//! still finds the approval pending applies.

use super::{ModelCall, Tool, ToolCtx, ToolError};
use crate::clock::SharedClock;
use crate::config::Prices;
use crate::llm::{CompletionResponse, LlmError, SharedProvider, budget};
use crate::store::agent_loop::Flush;
use crate::store::budget::Reservation;
use crate::store::runs::{self, StepKind, StepRow};
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

/// Where an answer's usage is charged besides the org's budget.
#[derive(Debug, Clone, Copy)]
pub enum ChargeTo<'a> {
    /// A run's step: the answer is stored as the run's `tool_model` checkpoint `seq` (call id
    /// `model_call_id`) in the statement that charges it, so a crash after the call resumes
    /// from the answer ([`checkpointed`]) instead of paying for it again.
    Checkpoint {
        run_id: Uuid,
        seq: i32,
        model_call_id: &'a str,
    },
    /// The run's counters only, if there is a run (an approval's call: its run has ended).
    Run(Option<Uuid>),
}

/// How the model phase ended.
#[derive(Debug)]
pub enum Phase {
    /// The org's monthly budget cannot hold the request's estimate: nothing was sent.
    Refused { used: i64, limit: i64 },
    /// The model answered; its usage is charged (and checkpointed, with
    /// [`ChargeTo::Checkpoint`]: `checkpoint` is the row written).
    Answered {
        /// The prepared call's state, for [`apply`].
        state: Value,
        answer: CompletionResponse,
        checkpoint: Option<StepRow>,
    },
    /// The call failed (or `provider` was unusable); `spent` tokens are charged: the input's
    /// estimate when the model had generated before failing, else 0.
    Failed { error: LlmError, spent: i64 },
}

/// Runs `call` on `provider` for `org_id` with no transaction open (see the module doc).
/// `provider` is `Err` when the org's provider cannot be used (its key): the call then fails
/// after the budget check, like a provider that refused it. What it spent is priced at
/// `prices`. Errors only for the database.
pub async fn call(
    (pool, clock, prices): (&PgPool, &SharedClock, &Prices),
    org_id: Uuid,
    charge_to: ChargeTo<'_>,
    call: ModelCall,
    provider: Result<SharedProvider, LlmError>,
) -> sqlx::Result<Phase> {
    let reservation = budget::reserve(pool, org_id, &call.request, clock.now()).await?;
    if let Reservation::Refused { used, limit, .. } = reservation {
        return Ok(Phase::Refused { used, limit });
    }
    let input_estimate = crate::llm::tokens::request(&call.request) as i64;
    let asked = call.request.model.clone();
    let answer = match provider {
        Ok(p) => p.complete(call.request).await,
        Err(e) => Err(e),
    };
    let now = clock.now();
    match answer {
        Ok(answer) => {
            let checkpoint = match charge_to {
                ChargeTo::Checkpoint {
                    run_id,
                    seq,
                    model_call_id,
                } => {
                    let payload = json!({"state": call.state, "response": answer});
                    let kind = StepKind::ToolModel;
                    let row = StepRow::written(seq, kind, Some(model_call_id), &payload, now);
                    let add = budget::charge_answer(prices, &asked, &answer);
                    let (step, used) = ((run_id, &row), (asked.as_str(), &answer, add));
                    budget::checkpoint_answer(
                        pool,
                        org_id,
                        step,
                        used,
                        &reservation,
                        now,
                        Flush::Durable,
                    )
                    .await?;
                    Some(row)
                }
                ChargeTo::Run(run_id) => {
                    let add = budget::charge_answer(prices, &asked, &answer);
                    charge(pool, org_id, run_id, &add, &reservation, now).await?;
                    None
                }
            };
            Ok(Phase::Answered {
                state: call.state,
                answer,
                checkpoint,
            })
        }
        Err(error) => {
            // Failed after the model generated: the input was spent and is charged (its
            // estimate); otherwise nothing was spent.
            let spent = if error.after_generation() {
                input_estimate
            } else {
                0
            };
            if spent > 0 {
                let run_id = match charge_to {
                    ChargeTo::Checkpoint { run_id, .. } => Some(run_id),
                    ChargeTo::Run(run_id) => run_id,
                };
                let usage = crate::llm::Usage {
                    input_tokens: spent as u64,
                    ..Default::default()
                };
                let add = budget::charge(prices, &[&asked], &usage);
                charge(pool, org_id, run_id, &add, &reservation, now).await?;
            } else {
                budget::release(pool, &reservation).await;
            }
            Ok(Phase::Failed { error, spent })
        }
    }
}

/// Adds `add` (tokens and their cost) to the run's counters (if a run) and settles the
/// reservation with its tokens on the org's budget, in one short transaction.
async fn charge(
    pool: &PgPool,
    org_id: Uuid,
    run_id: Option<Uuid>,
    add: &runs::Counters,
    reservation: &Reservation,
    now: chrono::DateTime<chrono::Utc>,
) -> sqlx::Result<()> {
    let mut tx = pool.begin().await?;
    if let Some(run) = run_id {
        runs::add_usage(&mut tx, run, add).await?;
    }
    budget::settle(&mut tx, org_id, reservation, add.tokens(), now).await?;
    tx.commit().await
}

/// The `(state, answer)` of a `tool_model` checkpoint written by [`call`]; `None` if the
/// payload is not one.
pub fn checkpointed(payload: &Value) -> Option<(Value, CompletionResponse)> {
    let answer = serde_json::from_value(payload.get("response")?.clone()).ok()?;
    Some((payload.get("state")?.clone(), answer))
}

/// An answer the tool refused: its error (never [`ToolError::Db`]) and the call's usage.
#[derive(Debug)]
pub struct Rejected {
    pub error: ToolError,
    /// `{"input_tokens", "output_tokens"}` of the answer (it was paid for).
    pub usage: Value,
}

/// Applies `answer` to `tool(args)` on a savepoint of `ctx`'s transaction: kept when the tool
/// accepts it (its result carries the call's `usage`), rolled back when it refuses it. A
/// database error is returned as the `Err`.
pub async fn apply(
    ctx: &mut ToolCtx<'_>,
    tool: &dyn Tool,
    args: &Value,
    (state, answer): (&Value, &CompletionResponse),
) -> sqlx::Result<Result<Value, Rejected>> {
    let usage = json!({"input_tokens": answer.usage.input_tokens,
                       "output_tokens": answer.usage.output_tokens});
    let applied = ctx
        .savepoint(async |c| tool.apply(c, args, (state, answer)).await)
        .await?;
    match applied {
        Ok(mut v) => {
            v["usage"] = usage;
            Ok(Ok(v))
        }
        Err(ToolError::Db(e)) => Err(e),
        Err(error) => Ok(Err(Rejected { error, usage })),
    }
}
