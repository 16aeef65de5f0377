//! Budget reservation around every provider call (the loop's, a tool's, an approval's): reserve
//! an estimate before the call, atomically against the org's monthly limit, and settle with the
//! real usage when the answer is checkpointed. Concurrent runs therefore cannot overshoot the
//! limit by more than the amount by which real calls exceed their estimates.

use super::{Block, CompletionRequest, CompletionResponse, Usage};
use crate::config::Prices;
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

/// What `usage` adds to a run: its tokens, cache reads and writes, and their cost at `prices`
/// for the first of `models` with a price (the model asked for, then the one that answered;
/// `config::prices::cost`), or, none priced, its tokens as unpriced.
pub fn charge(prices: &Prices, models: &[&str], usage: &Usage) -> Counters {
    let t = usage.priced();
    let cost = crate::config::cost(prices, models, &t);
    let tokens = usage.total_i64();
    Counters {
        input_tokens: t.input as i64,
        output_tokens: t.output as i64,
        cache_read_tokens: t.cache_read as i64,
        cache_write_tokens: t.cache_write as i64,
        cost_nano_usd: Some(cost.map_or(0, |c| c.0)),
        unpriced_tokens: if cost.is_some() { 0 } else { tokens },
        ..Counters::default()
    }
}

/// What the answer `resp` to a request for `asked` adds to its run ([`charge`]). An answer of
/// the offline heuristic costs nothing: no provider was called, so the price of the model it
/// stands in for (`llm.model`) would be a made-up figure.
pub fn charge_answer(prices: &Prices, asked: &str, resp: &CompletionResponse) -> Counters {
    if resp.model.starts_with(super::offline::ANSWER_MODEL_PREFIX) {
        return Counters {
            cost_nano_usd: Some(0),
            unpriced_tokens: 0,
            ..charge(&Prices::new(), &[], &resp.usage)
        };
    }
    charge(prices, &[asked, &resp.model], &resp.usage)
}

/// Checkpoints a model's answer `resp` as `row` of run `run_id`: `add` (its [`charge`], and
/// the rounds it counts) added to the run's counters and the reservation replaced with its tokens on `org_id`'s
/// budget, in one statement, its own transaction (one round trip), committed with `flush`
/// (`agent_loop::checkpoint_settled`). Above 80 % of the budget the month's threshold flags and
/// events follow in a short transaction of their own (a crash between the two leaves them to
/// the org's next charge: the flags say whether they were sent). The tokens (and their cost)
/// are counted by `asked`, the model the request named — the configured one — never the
/// string the server answered with, which would make the label's values unbounded (review
/// D16). Returns the run's token total and the org's budget after the charge.
pub async fn checkpoint_answer(
    pool: &PgPool,
    org_id: Uuid,
    (run_id, row): (Uuid, &StepRow),
    (asked, resp, add): (&str, &CompletionResponse, Counters),
    r: &Reservation,
    now: DateTime<Utc>,
    flush: Flush,
) -> sqlx::Result<Settled> {
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
    metrics::counter!("agentd_tokens_total", "model" => asked.to_string())
        .increment(resp.usage.total());
    if let Some(n) = add.cost_nano_usd.filter(|n| *n > 0) {
        metrics::counter!("agentd_llm_cost_nano_usd_total", "model" => asked.to_string())
            .increment(n as u64);
    }
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

#[cfg(test)]
mod offline_costs_nothing {
    use super::*;
    use crate::{FinishReason, Message, Role};

    #[test]
    fn an_offline_answer_costs_nothing_and_a_providers_is_priced() {
        let mut prices = Prices::new();
        prices.insert(
            "gpt-4o-mini".into(),
            crate::config::ModelPrice {
                input_cents_per_mtok: 15.0,
                output_cents_per_mtok: 60.0,
                cached_input_cents_per_mtok: None,
                cache_write_cents_per_mtok: None,
            },
        );
        let answer = |model: &str| CompletionResponse {
            message: Message {
                role: Role::Assistant,
                content: Vec::new(),
            },
            usage: Usage {
                input_tokens: 1_000_000,
                output_tokens: 0,
                ..Usage::default()
            },
            finish: FinishReason::EndTurn,
            model: model.into(),
        };
        let offline_model = format!("{}gpt-4o-mini", crate::offline::ANSWER_MODEL_PREFIX);
        let offline = charge_answer(&prices, "gpt-4o-mini", &answer(&offline_model));
        assert_eq!(
            (
                offline.cost_nano_usd,
                offline.unpriced_tokens,
                offline.input_tokens
            ),
            (Some(0), 0, 1_000_000),
            "tokens counted, nothing priced"
        );
        let real = charge_answer(&prices, "gpt-4o-mini", &answer("gpt-4o-mini-2024-07-18"));
        assert_eq!(real.cost_nano_usd, Some(150_000_000), "15 cents a million");
    }
}
