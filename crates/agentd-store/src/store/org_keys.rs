//! SQL of the provider keys orgs bring (`org_provider_keys`, migration 0072): sealed keys only —
//! encrypting and decrypting is `llm::org_keys`'.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

/// A key encrypted for one org (by `llm::org_keys::Cipher`).
#[derive(Debug, Clone)]
pub struct Sealed {
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
        "INSERT INTO org_provider_keys (org_id, provider, nonce, ciphertext, last4, set_at)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (org_id) DO UPDATE SET provider = $2, nonce = $3, ciphertext = $4,
                                            last4 = $5, set_at = $6",
    )
    .bind(org_id)
    .bind(provider)
    .bind(&sealed.nonce)
    .bind(&sealed.ciphertext)
    .bind(last4)
    .bind(now)
    .execute(exec)
    .await?;
    Ok(())
}

/// The org's key, if it stored one.
pub async fn get<'e, E: PgExecutor<'e>>(exec: E, org_id: Uuid) -> sqlx::Result<Option<StoredKey>> {
    #[derive(sqlx::FromRow)]
    struct Row {
        provider: Option<String>,
        nonce: Vec<u8>,
        ciphertext: Vec<u8>,
        last4: String,
        set_at: DateTime<Utc>,
    }
    let row: Option<Row> = sqlx::query_as(
        "SELECT provider, nonce, ciphertext, last4, set_at FROM org_provider_keys WHERE org_id = $1",
    )
    .bind(org_id)
    .fetch_optional(exec)
    .await?;
    Ok(row.map(|r| StoredKey {
        provider: r.provider,
        sealed: Sealed {
            nonce: r.nonce,
            ciphertext: r.ciphertext,
        },
        last4: r.last4,
        set_at: r.set_at,
    }))
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
