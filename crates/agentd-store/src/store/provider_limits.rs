//! The fleet-wide provider buckets (`agentd_provider_limits`, migration 0055). The arithmetic
//! lives in the migration's functions (`agentd_provider_take`, `agentd_provider_block`) so one
//! round trip takes a grant under the row lock; see `llm::limits` for the rules.

use serde::Serialize;
use sqlx::PgPool;

/// Creates the row of `key`, or updates its limits to the configured ones.
pub async fn ensure(pool: &PgPool, key: &str, rpm: u32, tpm: u64) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO agentd_provider_limits (key, requests_per_minute, tokens_per_minute, request_level, token_level, refilled_at)
         VALUES ($1, $2, $3, 1, 0, clock_timestamp())
         ON CONFLICT (key) DO UPDATE SET requests_per_minute = EXCLUDED.requests_per_minute,
                                         tokens_per_minute = EXCLUDED.tokens_per_minute",
    )
    .bind(key)
    .bind(rpm as i32)
    .bind(tpm as i64)
    .execute(pool)
    .await?;
    Ok(())
}

/// Takes one request costing `cost` tokens: `(granted, seconds to wait before asking again)`.
pub async fn take(pool: &PgPool, key: &str, cost: f64) -> sqlx::Result<(bool, f64)> {
    sqlx::query_as("SELECT ok, wait_secs FROM agentd_provider_take($1, $2)")
        .bind(key)
        .bind(cost)
        .fetch_one(pool)
        .await
}

/// [`take`] for a call of `org` (its key, `''` for none), which may take only `share` (0–1] of
/// the rate while another org waits (`agentd_provider_take_org`, migration 0077).
pub async fn take_for_org(
    pool: &PgPool,
    key: &str,
    org: &str,
    cost: f64,
    share: f64,
) -> sqlx::Result<(bool, f64)> {
    sqlx::query_as("SELECT ok, wait_secs FROM agentd_provider_take_org($1, $2, $3, $4)")
        .bind(key)
        .bind(org)
        .bind(cost)
        .bind(share)
        .fetch_one(pool)
        .await
}

/// A 429 from `key`: blocks it for everyone for `secs`.
pub async fn block(pool: &PgPool, key: &str, secs: f64) -> sqlx::Result<()> {
    sqlx::query("SELECT agentd_provider_block($1, $2)")
        .bind(key)
        .bind(secs)
        .execute(pool)
        .await?;
    Ok(())
}

/// One endpoint's limits and counters (for `agentd status` and `/metrics`).
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct LimitRow {
    pub key: String,
    pub requests_per_minute: i32,
    pub tokens_per_minute: i64,
    pub granted: i64,
    pub throttled: i64,
    pub rate_limited: i64,
    /// Seconds until the endpoint may be called again after a 429 (0: not blocked).
    pub blocked_secs: f64,
}

/// Every endpoint with limits.
pub async fn list(pool: &PgPool) -> sqlx::Result<Vec<LimitRow>> {
    sqlx::query_as(
        "SELECT key, requests_per_minute, tokens_per_minute, granted, throttled, rate_limited,
                greatest(0, extract(epoch FROM coalesce(blocked_until, now()) - now()))::float8 AS blocked_secs
           FROM agentd_provider_limits ORDER BY key",
    )
    .fetch_all(pool)
    .await
}
