//! SQL of the provider-call audit (`provider_calls`, migration 0072): one row per attempt a
//! chain of providers makes for an org, naming the entry and the model that answered or failed.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use std::time::Duration;
use uuid::Uuid;

/// One attempt, as the chain saw it.
#[derive(Debug)]
pub struct Attempt<'a> {
    pub provider: &'a str,
    pub org_key: bool,
    /// The model that answered (as the server reported it), or the one asked for.
    pub model: String,
    pub answered: bool,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub duration: Duration,
    /// The failure's message (bounded when stored).
    pub error: Option<String>,
}

/// Appends one attempt.
pub async fn record<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    run_id: Option<Uuid>,
    a: &Attempt<'_>,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO provider_calls (org_id, run_id, provider, model, outcome, org_key,
                                     input_tokens, output_tokens, duration_ms, error)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )
    .bind(org_id)
    .bind(run_id)
    .bind(a.provider)
    .bind(super::documents::bounded_error(&a.model))
    .bind(if a.answered { "answered" } else { "failed" })
    .bind(a.org_key)
    .bind(a.input_tokens)
    .bind(a.output_tokens)
    .bind(i32::try_from(a.duration.as_millis()).unwrap_or(i32::MAX))
    .bind(a.error.as_deref().map(super::documents::bounded_error))
    .execute(exec)
    .await?;
    Ok(())
}

/// A recorded attempt (`GET /v1/runs/{id}` does not show these yet; `agentd runs show` and
/// tests read them).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct CallRow {
    pub provider: String,
    pub model: String,
    pub outcome: String,
    pub org_key: bool,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub error: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// The attempts of a run, in order.
pub async fn for_run<'e, E: PgExecutor<'e>>(exec: E, run_id: Uuid) -> sqlx::Result<Vec<CallRow>> {
    sqlx::query_as(
        "SELECT provider, model, outcome, org_key, input_tokens, output_tokens, error, created_at
           FROM provider_calls WHERE run_id = $1 ORDER BY id",
    )
    .bind(run_id)
    .fetch_all(exec)
    .await
}
