//! SQL for webhook subscriptions (`agentd_webhooks`, migration 0042), org-scoped: another org's
//! id is "not found". The secret is written here and read only by the delivery job and by
//! `agentd orgs rekey`: sealed under the master key when the server has one (migration 0103,
//! `llm::org_keys`), else as given.

use super::org_keys::Sealed;
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

/// A subscription's secret as stored. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub enum StoredSecret {
    /// As given: a server without `llm.org_key_encryption_key`, or a row from before
    /// migration 0103 not yet re-keyed.
    Clear(String),
    /// Sealed by `llm::org_keys::Cipher::seal_webhook_secret` for the org and subscription.
    Sealed(Sealed),
}

impl std::fmt::Debug for StoredSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoredSecret::Clear(_) => f.write_str("Clear([redacted])"),
            StoredSecret::Sealed(s) => f.debug_tuple("Sealed").field(&s.key_id).finish(),
        }
    }
}

impl StoredSecret {
    fn of(
        secret: Option<String>,
        key_id: Option<String>,
        nonce: Option<Vec<u8>>,
        ciphertext: Option<Vec<u8>>,
    ) -> Self {
        match (secret, key_id, nonce, ciphertext) {
            (_, Some(key_id), Some(nonce), Some(ciphertext)) => StoredSecret::Sealed(Sealed {
                key_id: Some(key_id),
                nonce,
                ciphertext,
            }),
            // Migration 0103's CHECK: no sealed columns means a clear secret.
            (secret, ..) => StoredSecret::Clear(secret.unwrap_or_default()),
        }
    }
}

/// Stores a subscription with its secret as given (a server without a master key; tests and
/// benches); returns it.
pub async fn insert<'e, E: PgExecutor<'e>>(
    exec: E,
    w: &NewWebhook<'_>,
) -> sqlx::Result<WebhookRow> {
    insert_as(exec, Uuid::now_v7(), w, None).await
}

/// Stores a subscription under `id`; its secret is `sealed` when given (sealed for `id` by
/// `llm::org_keys`: `w.secret` is then not stored), else `w.secret` as given. Returns it.
pub async fn insert_as<'e, E: PgExecutor<'e>>(
    exec: E,
    id: Uuid,
    w: &NewWebhook<'_>,
    sealed: Option<&Sealed>,
) -> sqlx::Result<WebhookRow> {
    sqlx::query_as(
        "INSERT INTO agentd_webhooks (id, org_id, url, events, secret, max_attempts, priority,
                                      created_at, secret_key_id, secret_nonce, secret_ciphertext)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
         RETURNING id, org_id, url, events, max_attempts, created_at, consecutive_failures,
                   failing_since, open_until",
    )
    .bind(id)
    .bind(w.org_id)
    .bind(w.url)
    .bind(w.events)
    .bind(sealed.is_none().then_some(w.secret))
    .bind(w.max_attempts)
    .bind(w.priority)
    .bind(w.now)
    .bind(sealed.and_then(|s| s.key_id.as_deref()))
    .bind(sealed.map(|s| &s.nonce))
    .bind(sealed.map(|s| &s.ciphertext))
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

#[derive(sqlx::FromRow)]
struct SecretRow {
    id: Uuid,
    org_id: Uuid,
    secret: Option<String>,
    secret_key_id: Option<String>,
    secret_nonce: Option<Vec<u8>>,
    secret_ciphertext: Option<Vec<u8>>,
}

impl SecretRow {
    fn stored(self) -> StoredSecret {
        StoredSecret::of(
            self.secret,
            self.secret_key_id,
            self.secret_nonce,
            self.secret_ciphertext,
        )
    }
}

/// Where and how to send: `(url, secret, open_until)` of the org's subscription `id`
/// (`open_until`: its breaker is open until then, see migration 0067).
pub async fn target<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    id: Uuid,
) -> sqlx::Result<Option<(String, StoredSecret, Option<DateTime<Utc>>)>> {
    #[derive(sqlx::FromRow)]
    struct Target {
        url: String,
        #[sqlx(flatten)]
        secret: SecretRow,
        open_until: Option<DateTime<Utc>>,
    }
    let target = "SELECT url, id, org_id, secret, secret_key_id, secret_nonce, secret_ciphertext,
                         open_until
                    FROM agentd_webhooks WHERE org_id = $1 AND id = $2";
    let row: Option<Target> = sql::bound(target, org_id, id).fetch_optional(exec).await?;
    Ok(row.map(|t| (t.url, t.secret.stored(), t.open_until)))
}

/// A subscription's stored secret, for `agentd orgs rekey`.
#[derive(Debug)]
pub struct SecretOf {
    pub id: Uuid,
    pub org_id: Uuid,
    pub secret: StoredSecret,
}

/// Every subscription whose secret is not sealed under master key `key_id` (in clear, or
/// under an older key), locked until the transaction ends: what `agentd orgs rekey` seals.
pub async fn secrets_not_under(
    tx: &mut sqlx::PgConnection,
    key_id: &str,
) -> sqlx::Result<Vec<SecretOf>> {
    let rows: Vec<SecretRow> = sqlx::query_as(
        "SELECT id, org_id, secret, secret_key_id, secret_nonce, secret_ciphertext
           FROM agentd_webhooks WHERE secret_key_id IS DISTINCT FROM $1
          ORDER BY id FOR UPDATE",
    )
    .bind(key_id)
    .fetch_all(tx)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| SecretOf {
            id: r.id,
            org_id: r.org_id,
            secret: r.stored(),
        })
        .collect())
}

/// Seals subscription `id`'s secret: `sealed` replaces what was stored (the clear column is
/// emptied). False when the subscription is gone.
pub async fn reseal_secret<'e, E: PgExecutor<'e>>(
    exec: E,
    id: Uuid,
    sealed: &Sealed,
) -> sqlx::Result<bool> {
    let r = sqlx::query(
        "UPDATE agentd_webhooks
            SET secret = NULL, secret_key_id = $2, secret_nonce = $3, secret_ciphertext = $4
          WHERE id = $1",
    )
    .bind(id)
    .bind(&sealed.key_id)
    .bind(&sealed.nonce)
    .bind(&sealed.ciphertext)
    .execute(exec)
    .await?;
    Ok(r.rows_affected() > 0)
}

/// How many secrets each master key sealed (`None`: secrets in clear), for the start-up check.
pub async fn secrets_per_key_id<'e, E: PgExecutor<'e>>(
    exec: E,
) -> sqlx::Result<Vec<(Option<String>, i64)>> {
    sqlx::query_as(
        "SELECT secret_key_id, count(*) FROM agentd_webhooks GROUP BY secret_key_id
          ORDER BY secret_key_id",
    )
    .fetch_all(exec)
    .await
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
