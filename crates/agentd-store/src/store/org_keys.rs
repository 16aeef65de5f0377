//! SQL of the provider keys orgs bring (`org_provider_keys`, migrations 0072 and 0102): sealed
//! keys only — encrypting and decrypting is `llm::org_keys`'.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

/// A key (or a webhook secret) encrypted for one org (by `llm::org_keys::Cipher`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// Which master key sealed it (`llm::org_keys::KeyId`, migration 0102); `None`: a row
    /// written before key ids, sealed with the org id alone as associated data.
    pub key_id: Option<String>,
    pub nonce: Vec<u8>,
    pub ciphertext: Vec<u8>,
}

/// A stored key.
#[derive(Debug, Clone)]
pub struct StoredKey {
    /// The entry it is for (`None`: the first entry that takes a key).
    pub provider: Option<String>,
    pub sealed: Sealed,
    pub last4: String,
    pub set_at: DateTime<Utc>,
}

/// Writes (or replaces: a rotation) the org's key.
pub async fn put<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    provider: Option<&str>,
    sealed: &Sealed,
    last4: &str,
    now: DateTime<Utc>,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO org_provider_keys (org_id, provider, nonce, ciphertext, last4, set_at, key_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (org_id) DO UPDATE SET provider = $2, nonce = $3, ciphertext = $4,
                                            last4 = $5, set_at = $6, key_id = $7",
    )
    .bind(org_id)
    .bind(provider)
    .bind(&sealed.nonce)
    .bind(&sealed.ciphertext)
    .bind(last4)
    .bind(now)
    .bind(&sealed.key_id)
    .execute(exec)
    .await?;
    Ok(())
}

#[derive(sqlx::FromRow)]
struct Row {
    org_id: Uuid,
    provider: Option<String>,
    key_id: Option<String>,
    nonce: Vec<u8>,
    ciphertext: Vec<u8>,
    last4: String,
    set_at: DateTime<Utc>,
}

impl Row {
    fn stored(self) -> StoredKey {
        StoredKey {
            provider: self.provider,
            sealed: Sealed {
                key_id: self.key_id,
                nonce: self.nonce,
                ciphertext: self.ciphertext,
            },
            last4: self.last4,
            set_at: self.set_at,
        }
    }
}

/// The org's key, if it stored one.
pub async fn get<'e, E: PgExecutor<'e>>(exec: E, org_id: Uuid) -> sqlx::Result<Option<StoredKey>> {
    let row: Option<Row> = sqlx::query_as(
        "SELECT org_id, provider, key_id, nonce, ciphertext, last4, set_at
           FROM org_provider_keys WHERE org_id = $1",
    )
    .bind(org_id)
    .fetch_optional(exec)
    .await?;
    Ok(row.map(Row::stored))
}

/// Every org's key not sealed under master key `key_id` (older keys, and rows from before key
/// ids), locked until the transaction ends: what `agentd orgs rekey` seals again.
pub async fn not_under(
    tx: &mut sqlx::PgConnection,
    key_id: &str,
) -> sqlx::Result<Vec<(Uuid, StoredKey)>> {
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT org_id, provider, key_id, nonce, ciphertext, last4, set_at
           FROM org_provider_keys WHERE key_id IS DISTINCT FROM $1
          ORDER BY org_id FOR UPDATE",
    )
    .bind(key_id)
    .fetch_all(tx)
    .await?;
    Ok(rows.into_iter().map(|r| (r.org_id, r.stored())).collect())
}

/// Replaces the org's sealed key with `sealed` (the same key under another master key): its
/// provider, `last4` and `set_at` stay. False when the org has no key any more.
pub async fn reseal<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    sealed: &Sealed,
) -> sqlx::Result<bool> {
    let r = sqlx::query(
        "UPDATE org_provider_keys SET key_id = $2, nonce = $3, ciphertext = $4 WHERE org_id = $1",
    )
    .bind(org_id)
    .bind(&sealed.key_id)
    .bind(&sealed.nonce)
    .bind(&sealed.ciphertext)
    .execute(exec)
    .await?;
    Ok(r.rows_affected() > 0)
}

/// How many keys each master key sealed (`None`: rows from before key ids), for the start-up
/// check.
pub async fn per_key_id<'e, E: PgExecutor<'e>>(
    exec: E,
) -> sqlx::Result<Vec<(Option<String>, i64)>> {
    sqlx::query_as("SELECT key_id, count(*) FROM org_provider_keys GROUP BY key_id ORDER BY key_id")
        .fetch_all(exec)
        .await
}

/// Removes the org's key; true if there was one.
pub async fn delete<'e, E: PgExecutor<'e>>(exec: E, org_id: Uuid) -> sqlx::Result<bool> {
    let r = sqlx::query("DELETE FROM org_provider_keys WHERE org_id = $1")
        .bind(org_id)
        .execute(exec)
        .await?;
    Ok(r.rows_affected() > 0)
}

/// How many orgs stored a key.
pub async fn count<'e, E: PgExecutor<'e>>(exec: E) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM org_provider_keys")
        .fetch_one(exec)
        .await
}
