//! Approving an action that calls a model (run_extraction): the model phase of
//! [`crate::tools::model_phase`] (the protocol the loop shares), with no transaction open while
//! the model answers. The inputs are read with the approval locked and the transaction ends; the
//! call's usage is charged to the org and to the approval's run; a last transaction re-locks the
//! approval, re-checks that it is still pending with the arguments the call was prepared from
//! (their hash, carried through the two phases: another reviewer's edit may commit while the
//! model answers, security review D14) and an unchanged snapshot, and applies the answer on a
//! savepoint. Arguments that differ end the approval `stale`: the answer was made from
//! arguments it no longer holds. Two people approving at once may both pay for a call; at
//! most one applies it.

use super::{DecideError, DecideOutcome, Recorded, ToolEnv, changed_snapshot, record, unchanged};
use crate::clock::SharedClock;
use crate::llm::org_keys::ScopeError;
use crate::llm::traced::Traced;
use crate::store::approvals::{self as store, ApprovalRow, ApprovalStatus};
use crate::store::runs::AuditDecision;
use crate::tools::model_phase::{self, ChargeTo, Phase};
use crate::tools::{Tool, ToolError};
use serde_json::{Value, json};
use sqlx::{PgPool, Postgres, Transaction};

/// Approves `row` (pending, unexpired, snapshot unchanged, locked in `tx`) for a model tool.
pub(super) async fn approve(
    pool: &PgPool,
    clock: &SharedClock,
    env: &ToolEnv,
    mut tx: Transaction<'static, Postgres>,
    row: ApprovalRow,
    tool: &dyn Tool,
    actor: &str,
) -> Result<DecideOutcome, DecideError> {
    let now = clock.now();
    // What the call is prepared from; phase 2 applies the answer only to these arguments (D14).
    let prepared_hash = args_hash(&row.action.args);
    let mut ctx = env.ctx(&mut tx, row.org_id, row.run_id, actor.to_string(), now);
    let prepared = tool.prepare(&mut ctx, &row.action.args).await;
    drop(ctx);
    let call = match prepared {
        Some(Ok(c)) => c,
        Some(Err(ToolError::Db(e))) => return Err(e.into()),
        Some(Err(e)) => {
            return failed(tx, &row, actor, json!({"error": e.to_string()}), 0, now).await;
        }
        None => {
            let result = json!({"error": format!("`{}` prepares no model call", row.action.tool)});
            return failed(tx, &row, actor, result, 0, now).await;
        }
    };
    // Release the approval's locks before the model is asked. Committed, not rolled back: an
    // approval with edited arguments holds its edit (arguments, hash, the `edited` audit row),
    // and the call below was prepared from those arguments — the re-check after the call and
    // the record then name the arguments that actually ran (review N4). Without an edit nothing
    // was written and the commit ends a read-only transaction.
    tx.commit().await?;
    // Behind the redaction boundary like a run's own calls (an in-memory symbol table).
    // Scoped to the org like a run's calls (its key, the provider-call audit). A key that cannot
    // be used fails the call after the budget check, like a provider's refusal.
    let provider = match crate::llm::org_keys::provider_for_org(
        &env.provider,
        pool,
        env.org_key_cipher.as_deref(),
        row.org_id,
        row.run_id,
    )
    .await
    {
        Err(ScopeError::Db(e)) => return Err(e.into()),
        Err(ScopeError::Unusable(e)) => Err(e),
        Ok(scoped) => Ok(crate::llm::redacting::provider_for_decision(
            &env.pii,
            pool,
            row.org_id,
            Traced::wrap(scoped),
        )
        .await?),
    };
    let charge_to = ChargeTo::Run(row.run_id);
    let (answer, tokens) = match model_phase::call(
        (pool, clock, &env.prices),
        row.org_id,
        charge_to,
        call,
        provider,
    )
    .await?
    {
        Phase::Refused { used, limit } => return Err(DecideError::Budget(row.id, used, limit)),
        Phase::Answered { state, answer, .. } => {
            let tokens = answer.usage.total_i64();
            (Ok((state, answer)), tokens)
        }
        Phase::Failed { error, spent } => (Err(error), spent),
    };
    let now = clock.now();
    let mut tx = pool.begin().await?;
    let row = store::lock(&mut tx, row.id, Some(row.org_id))
        .await?
        .ok_or(DecideError::NotFound(row.id))?;
    if !row.status.is_pending() {
        // Decided by someone else while the model answered (its tokens are charged anyway).
        return Ok(unchanged(&row));
    }
    // Another reviewer's edit committed while the model answered: the answer is of other
    // arguments than the approval now holds (hashes only: the arguments hold real values, D3).
    let now_hash = args_hash(&row.action.args);
    let edited_meanwhile = (now_hash != prepared_hash).then(|| {
        json!({"arguments": {
            "before_hash": prepared_hash,
            "after_hash": now_hash,
            "why": "the arguments were edited while the model answered the call prepared from them",
        }})
    });
    let changes = match edited_meanwhile {
        Some(c) => Some(c),
        None => changed_snapshot(&mut tx, env, &row, actor, now).await?,
    };
    if let Some(changes) = changes {
        let result = json!({"changes": changes});
        let stale = ApprovalStatus::Stale;
        let mut out = finish(
            tx,
            &row,
            stale,
            AuditDecision::Stale,
            actor,
            Some(result),
            tokens,
            now,
        )
        .await?;
        out.changes = Some(changes);
        return Ok(out);
    }
    let (state, answer) = match answer {
        Ok(a) => a,
        Err(e) => {
            let result =
                json!({"error": format!("provider error: the extraction model failed: {e}")});
            return failed(tx, &row, actor, result, tokens, now).await;
        }
    };
    let mut ctx = env.ctx(&mut tx, row.org_id, row.run_id, actor.to_string(), now);
    let applied = model_phase::apply(&mut ctx, tool, &row.action.args, (&state, &answer)).await?;
    drop(ctx);
    match applied {
        Ok(v) => {
            let executed = ApprovalStatus::Executed;
            finish(
                tx,
                &row,
                executed,
                AuditDecision::HumanApproved,
                actor,
                Some(v),
                tokens,
                now,
            )
            .await
        }
        Err(rejected) => {
            let result = json!({"error": rejected.error.to_string(), "usage": rejected.usage});
            failed(tx, &row, actor, result, tokens, now).await
        }
    }
}

/// SHA-256 (hex) of the JCS canonical form of an approval's arguments.
fn args_hash(args: &Value) -> String {
    super::snapshot_hash("arguments", args, &Value::Null)
}

/// Ends the approval `failed` with `result` (the error).
async fn failed(
    tx: Transaction<'static, Postgres>,
    row: &ApprovalRow,
    actor: &str,
    result: Value,
    tokens: i64,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<DecideOutcome, DecideError> {
    let status = ApprovalStatus::Failed;
    finish(
        tx,
        row,
        status,
        AuditDecision::Error,
        actor,
        Some(result),
        tokens,
        now,
    )
    .await
}

#[allow(clippy::too_many_arguments)]
async fn finish(
    mut tx: Transaction<'static, Postgres>,
    row: &ApprovalRow,
    status: ApprovalStatus,
    decision: AuditDecision,
    actor: &str,
    result: Option<Value>,
    tokens: i64,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<DecideOutcome, DecideError> {
    let r = Recorded {
        status,
        decision,
        actor,
        result: result.as_ref(),
        tokens,
        now,
        reason: None,
    };
    record(&mut tx, row, r).await?;
    tx.commit().await?;
    metrics::counter!("agentd_approvals_decided_total", "status" => status.as_str()).increment(1);
    Ok(DecideOutcome {
        approval_id: row.id,
        status,
        changed: true,
        changes: None,
        result,
    })
}
