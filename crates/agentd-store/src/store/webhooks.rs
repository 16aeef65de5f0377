//! SQL for webhook subscriptions (`agentd_webhooks`, migration 0042), org-scoped: another org's
//! id is "not found". The secret is written here and read only by the delivery job.

use super::sql;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgExecutor;
use uuid::Uuid;

/// A subscription as the API shows it (never the secret).
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct WebhookRow {
    pub id: Uuid,
    pub org_id: Uuid,
    pub url: String,
    #[schema(value_type = Vec<super::events::EventType>)]
    pub events: Vec<String>,
    pub max_attempts: i32,
    pub created_at: DateTime<Utc>,
    /// Deliveries that failed in a row (0: the last one succeeded, or none was made).
    pub consecutive_failures: i32,
    /// Since when the receiver fails (its breaker opened, migration 0067); none: healthy.
    pub failing_since: Option<DateTime<Utc>>,
    /// New deliveries wait until then (the breaker is open).
    pub open_until: Option<DateTime<Utc>>,
}

/// A subscription to store.
pub struct NewWebhook<'a> {
    pub org_id: Uuid,
    pub url: &'a str,
    pub events: &'a [String],
    pub secret: &'a str,
    pub max_attempts: i32,
    pub priority: i16,
    pub now: DateTime<Utc>,
}

/// Stores a subscription; returns it.
pub async fn insert<'e, E: PgExecutor<'e>>(
    exec: E,
    w: &NewWebhook<'_>,
) -> sqlx::Result<WebhookRow> {
    sqlx::query_as(
        "INSERT INTO agentd_webhooks (id, org_id, url, events, secret, max_attempts, priority, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         RETURNING id, org_id, url, events, max_attempts, created_at, consecutive_failures,
                   failing_since, open_until",
    )
    .bind(Uuid::now_v7())
    .bind(w.org_id)
    .bind(w.url)
    .bind(w.events)
    .bind(w.secret)
    .bind(w.max_attempts)
    .bind(w.priority)
    .bind(w.now)
    .fetch_one(exec)
    .await
}

/// The org's subscriptions, oldest first.
pub async fn list<'e, E: PgExecutor<'e>>(exec: E, org_id: Uuid) -> sqlx::Result<Vec<WebhookRow>> {
    sqlx::query_as(
        "SELECT id, org_id, url, events, max_attempts, created_at, consecutive_failures,
                failing_since, open_until
           FROM agentd_webhooks WHERE org_id = $1 ORDER BY created_at, id",
    )
    .bind(org_id)
    .fetch_all(exec)
    .await
}

/// How many subscriptions the org has.
pub async fn count<'e, E: PgExecutor<'e>>(exec: E, org_id: Uuid) -> sqlx::Result<i64> {
    let count = "SELECT count(*) FROM agentd_webhooks WHERE org_id = $1";
    sqlx::query_scalar(count).bind(org_id).fetch_one(exec).await
}

/// Deletes a subscription of the org; false when the org has none with this id. Deliveries
/// already queued for it end without sending.
pub async fn delete<'e, E: PgExecutor<'e>>(exec: E, org_id: Uuid, id: Uuid) -> sqlx::Result<bool> {
    let delete = "DELETE FROM agentd_webhooks WHERE org_id = $1 AND id = $2";
    Ok(sql::affected(exec, delete, org_id, id).await? == 1)
}

/// Where and how to send: `(url, secret, open_until)` of the org's subscription `id`
/// (`open_until`: its breaker is open until then, see migration 0067).
pub async fn target<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    id: Uuid,
) -> sqlx::Result<Option<(String, String, Option<DateTime<Utc>>)>> {
    let target =
        "SELECT url, secret, open_until FROM agentd_webhooks WHERE org_id = $1 AND id = $2";
    sql::bound(target, org_id, id).fetch_optional(exec).await
}

/// A delivery to subscription `id` landed: its breaker closes (no write when it was closed).
pub async fn delivered<'e, E: PgExecutor<'e>>(exec: E, id: Uuid) -> sqlx::Result<bool> {
    let r = sqlx::query(
        "UPDATE agentd_webhooks SET consecutive_failures = 0, failing_since = NULL, open_until = NULL
          WHERE id = $1 AND (consecutive_failures <> 0 OR open_until IS NOT NULL)",
    )
    .bind(id)
    .execute(exec)
    .await?;
    Ok(r.rows_affected() > 0)
}

/// A delivery to subscription `id` failed at `now`. From the `threshold`-th failure in a row
/// the breaker opens: `open_until` = now + 30 s × 2^(failures − threshold), at most an hour, and
/// the subscription's waiting deliveries are pushed to it, in one statement. Returns
/// `open_until` when open.
pub async fn failed<'e, E: PgExecutor<'e>>(
    exec: E,
    id: Uuid,
    now: DateTime<Utc>,
    threshold: i32,
) -> sqlx::Result<Option<DateTime<Utc>>> {
    sqlx::query_scalar(
        "WITH w AS (
           UPDATE agentd_webhooks
              SET consecutive_failures = consecutive_failures + 1,
                  failing_since = CASE WHEN consecutive_failures + 1 >= $3
                                       THEN coalesce(failing_since, $2) END,
                  open_until = CASE WHEN consecutive_failures + 1 >= $3
                                    THEN $2 + make_interval(secs => least(3600, 30 * power(2, least(consecutive_failures + 1 - $3, 12))))
                               END
            WHERE id = $1
           RETURNING open_until),
         pushed AS (
           UPDATE agentd_jobs j SET run_at = w.open_until
             FROM w
            WHERE w.open_until IS NOT NULL AND j.kind = 'webhook_delivery'
              AND j.state = 'available' AND j.payload->>'webhook_id' = $1::text
              AND j.run_at < w.open_until)
         SELECT open_until FROM w",
    )
    .bind(id)
    .bind(now)
    .bind(threshold)
    .fetch_optional(exec)
    .await
    .map(Option::flatten)
}
