//! Approving an action that calls a model (run_extraction) with no transaction open while the
//! model answers: the inputs are read with the approval locked, the transaction ends, the model
//! is called (its estimate reserved on the org budget), the usage is charged to the org and to
//! the approval's run in a short transaction, and a last transaction re-locks the approval,
//! re-checks that it is still pending with an unchanged snapshot, and applies the answer.
//! Two people approving at once may both pay for a call; only one applies it.

use super::{DecideError, DecideOutcome, Recorded, ToolEnv, changed_snapshot, record, unchanged};
use crate::clock::SharedClock;
use crate::llm::budget;
use crate::store::approvals::{self as store, ApprovalRow, ApprovalStatus};
use crate::store::budget::Reservation;
use crate::store::runs::{self, AuditDecision};
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
    let reservation = budget::reserve(pool, row.org_id, &call.request, now).await?;
    if let Reservation::Refused { used, limit, .. } = reservation {
        return Err(DecideError::Budget(row.id, used, limit));
    }
    let input_estimate = crate::llm::tokens::request(&call.request) as i64;
    // Behind the redaction boundary like a run's own calls (an in-memory symbol table).
    // Scoped to the org like a run's calls (its key, the provider-call audit).
    let scoped = crate::llm::org_keys::provider_for_org(
        &env.provider,
        pool,
        env.org_key_cipher.as_deref(),
        row.org_id,
        row.run_id,
    )
    .await;
    let answer = match scoped {
        Err(crate::llm::org_keys::ScopeError::Db(e)) => {
            budget::release(pool, &reservation).await;
            return Err(e.into());
        }
        Err(crate::llm::org_keys::ScopeError::Unusable(e)) => Err(e),
        Ok(scoped) => {
            let provider = env
                .pii
                .provider_for_decision(pool, row.org_id, crate::llm::traced::Traced::wrap(scoped))
                .await?;
            provider.complete(call.request).await
        }
    };
    let mut tokens = 0;
    if let Ok(resp) = &answer {
        tokens = resp.usage.total_i64();
        let mut charge = pool.begin().await?;
        if let Some(run) = row.run_id {
            let (i, o) = resp.usage.split_i64();
            runs::add_tokens(&mut charge, run, i, o).await?;
        }
        budget::settle(&mut charge, row.org_id, &reservation, tokens, clock.now()).await?;
        charge.commit().await?;
    } else if answer.as_ref().is_err_and(|e| e.after_generation()) {
        // Failed after the model generated: the input was spent and is charged (estimated).
        tokens = input_estimate;
        let mut charge = pool.begin().await?;
        if let Some(run) = row.run_id {
            runs::add_tokens(&mut charge, run, tokens, 0).await?;
        }
        budget::settle(&mut charge, row.org_id, &reservation, tokens, clock.now()).await?;
        charge.commit().await?;
    } else {
        budget::release(pool, &reservation).await;
    }
    let now = clock.now();
    let mut tx = pool.begin().await?;
    let row = store::lock(&mut tx, row.id, Some(row.org_id))
        .await?
        .ok_or(DecideError::NotFound(row.id))?;
    if !row.status.is_pending() {
        // Decided by someone else while the model answered (its tokens are charged anyway).
        return Ok(unchanged(&row));
    }
    if let Some(changes) = changed_snapshot(&mut tx, env, &row, actor, now).await? {
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
    let resp = match answer {
        Ok(r) => r,
        Err(e) => {
            let result =
                json!({"error": format!("provider error: the extraction model failed: {e}")});
            return failed(tx, &row, actor, result, tokens, now).await;
        }
    };
    sqlx::query("SAVEPOINT approval_exec")
        .execute(&mut *tx)
        .await?;
    let mut ctx = env.ctx(&mut tx, row.org_id, row.run_id, actor.to_string(), now);
    let applied = tool
        .apply(&mut ctx, &row.action.args, (&call.state, &resp))
        .await;
    drop(ctx);
    let usage = json!({"input_tokens": resp.usage.input_tokens,
                       "output_tokens": resp.usage.output_tokens});
    match applied {
        Ok(mut v) => {
            v["usage"] = usage;
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
        Err(ToolError::Db(e)) => Err(e.into()),
        Err(e) => {
            sqlx::query("ROLLBACK TO SAVEPOINT approval_exec")
                .execute(&mut *tx)
                .await?;
            let result = json!({"error": e.to_string(), "usage": usage});
            failed(tx, &row, actor, result, tokens, now).await
        }
    }
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
