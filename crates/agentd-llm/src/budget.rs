//! Budget reservation around every provider call (the loop's, a tool's, an approval's): reserve
//! an estimate before the call, atomically against the org's monthly limit, and settle with the
//! real usage when the answer is checkpointed. Concurrent runs therefore cannot overshoot the
//! limit by more than the amount by which real calls exceed their estimates.

use super::{Block, CompletionRequest, CompletionResponse};
use crate::store::agent_loop::{self, Counters, Flush, Settle, Settled};
use crate::store::budget::{self as store, Reservation};
use crate::store::runs::{self, StepRow};
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use tracing::warn;
use uuid::Uuid;

/// A reservation not settled within this time (its caller crashed) stops counting.
pub const RESERVATION_TTL_SECS: i64 = 15 * 60;

/// Output tokens assumed when a request sets no `max_tokens`.
const DEFAULT_OUTPUT_TOKENS: u32 = 4096;

/// Upper estimate of a call's tokens: one token per 3 characters of everything sent, plus the
/// request's output limit. Real usage above the estimate is the only way past the limit.
pub fn estimate(req: &CompletionRequest) -> i64 {
    let mut chars = 0usize;
    for m in &req.messages {
        for b in &m.content {
            chars += match b {
                Block::Text { text } => text.len(),
                Block::ToolUse {
                    name, arguments, ..
                } => name.len() + arguments.len(),
                Block::ToolResult { content, .. } => content.len(),
            };
        }
    }
    for t in &req.tools {
        chars += t.name.len() + t.description.len() + t.parameters.to_string().len();
    }
    if let Some(rf) = &req.response_format {
        chars += rf.to_string().len();
    }
    let output = req.max_tokens.unwrap_or(DEFAULT_OUTPUT_TOKENS);
    (chars / 3) as i64 + i64::from(output)
}

/// Reserves the estimate of `req` for `org_id`.
pub async fn reserve(
    pool: &PgPool,
    org_id: Uuid,
    req: &CompletionRequest,
    now: DateTime<Utc>,
) -> sqlx::Result<Reservation> {
    let r = store::reserve(
        pool,
        org_id,
        estimate(req),
        now,
        chrono::Duration::seconds(RESERVATION_TTL_SECS),
    )
    .await?;
    if let Reservation::Refused {
        used,
        reserved,
        limit,
    } = r
    {
        warn!(%org_id, used, reserved, limit, "org budget cannot hold another call; provider call refused");
    }
    Ok(r)
}

/// Replaces the reservation with the real usage: drops it and charges `tokens` to the org, in
/// the caller's transaction (the one that checkpoints the answer).
pub async fn settle(
    conn: &mut PgConnection,
    org_id: Uuid,
    r: &Reservation,
    tokens: i64,
    now: DateTime<Utc>,
) -> sqlx::Result<()> {
    store::release(&mut *conn, r).await?;
    if let Some((used, limit)) = runs::charge_budget(conn, org_id, tokens, now).await? {
        warn!(%org_id, used, limit, "org token budget is 80% used this month");
    }
    Ok(())
}

/// Checkpoints a model's answer `resp` as `row` of run `run_id`: its tokens (and `rounds` more
/// rounds) added to the run's counters and the reservation replaced with them on `org_id`'s
/// budget, in one statement, its own transaction (one round trip), committed with `flush`
/// (`agent_loop::checkpoint_settled`). Above 80 % of the budget the month's threshold flags and
/// events follow in a short transaction of their own (a crash between the two leaves them to
/// the org's next charge: the flags say whether they were sent). The tokens are counted by
/// model. Returns the run's token total and the org's budget after the charge.
pub async fn checkpoint_answer(
    pool: &PgPool,
    org_id: Uuid,
    (run_id, row): (Uuid, &StepRow),
    (resp, rounds): (&CompletionResponse, i32),
    r: &Reservation,
    now: DateTime<Utc>,
    flush: Flush,
) -> sqlx::Result<Settled> {
    let (input_tokens, output_tokens) = resp.usage.split_i64();
    let add = Counters {
        rounds,
        input_tokens,
        output_tokens,
        ..Counters::default()
    };
    let reservation = match r {
        Reservation::Held { id, .. } => Some(*id),
        _ => None,
    };
    let settle = Settle {
        org_id,
        reservation,
        tokens: resp.usage.total_i64(),
        now,
    };
    let mut conn = pool.acquire().await?;
    let settled =
        agent_loop::checkpoint_settled(&mut conn, run_id, row, add, settle, flush).await?;
    if let Some(b) = settled.budget
        && runs::past_warning(b.tokens_used, b.monthly_limit)
    {
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        let warned =
            runs::after_charge(&mut tx, org_id, b.tokens_used, b.monthly_limit, now).await?;
        tx.commit().await?;
        if let Some((used, limit)) = warned {
            warn!(%org_id, used, limit, "org token budget is 80% used this month");
        }
    }
    metrics::counter!("agentd_tokens_total", "model" => resp.model.clone())
        .increment(resp.usage.total());
    Ok(settled)
}

/// Drops a reservation whose call failed with nothing to charge (best effort: an undropped
/// reservation expires by itself).
pub async fn release(pool: &PgPool, r: &Reservation) {
    if let Reservation::Held { .. } = r
        && let Ok(mut conn) = pool.acquire().await
        && let Err(e) = store::release(&mut conn, r).await
    {
        warn!(error = %e, "could not drop a budget reservation; it expires by itself");
    }
}
