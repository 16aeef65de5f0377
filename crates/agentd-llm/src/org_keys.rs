//! Provider keys an org brings (`PUT /v1/settings/provider-key`, `agentd orgs set-key`):
//! checked, encrypted at rest with AES-256-GCM under the operator's key
//! (`llm.org_key_encryption_key`, 32 random bytes in base64), the org's id bound in as
//! associated data (a row copied to another org does not decrypt), and used only for that
//! org's calls ([`provider_for_org`]). The raw key is never returned, logged or stored: rows
//! hold the ciphertext, the nonce and the last 4 characters; [`OrgKey`]'s `Debug` redacts.

use super::{LlmError, SharedProvider};
pub use crate::store::org_keys::Sealed;
use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use sqlx::PgPool;
use uuid::Uuid;

/// Shortest and longest key accepted (OpenAI's and Anthropic's keys are 40–200 characters).
pub const KEY_CHARS: std::ops::RangeInclusive<usize> = 20..=512;

/// A provider key in the clear, in memory only. `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct OrgKey(String);

impl std::fmt::Debug for OrgKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OrgKey([redacted])")
    }
}

impl OrgKey {
    /// `raw` if it can be a provider key: 20–512 printable ASCII characters without spaces
    /// (what an HTTP `Authorization` header can carry). The error says what is wrong, never
    /// what the value was.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let k = raw.trim();
        let n = k.chars().count();
        if !KEY_CHARS.contains(&n) {
            return Err(format!(
                "must be a provider API key of {}–{} characters (got {n})",
                KEY_CHARS.start(),
                KEY_CHARS.end()
            ));
        }
        if !k.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            return Err(
                "must be printable ASCII without spaces or control characters (as issued by \
                 the provider)"
                    .into(),
            );
        }
        Ok(Self(k.to_string()))
    }

    /// The key, to put in a request header.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The last 4 characters (what `GET /v1/settings/provider-key` shows).
    pub fn last4(&self) -> String {
        let n = self.0.chars().count();
        self.0.chars().skip(n.saturating_sub(4)).collect()
    }
}

/// The operator's encryption key. `Debug` never shows it.
#[derive(Clone)]
pub struct Cipher {
    aead: Aes256Gcm,
}

impl std::fmt::Debug for Cipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cipher([redacted])")
    }
}

impl Cipher {
    /// The cipher of `llm.org_key_encryption_key` (32 bytes in standard base64).
    pub fn from_base64(b64: &str) -> Result<Self, String> {
        let bytes = crate::config::decode_org_key(b64)?;
        let aead = Aes256Gcm::new_from_slice(&bytes)
            .map_err(|_| "llm.org_key_encryption_key must be 32 bytes".to_string())?;
        Ok(Self { aead })
    }

    /// The cipher the config asks for, if it names a key (checked by `Config::validate`).
    pub fn from_config(c: &crate::config::LlmConfig) -> Option<std::sync::Arc<Self>> {
        let k = &c.org_key_encryption_key;
        (!k.is_empty())
            .then(|| Self::from_base64(k).ok())
            .flatten()
            .map(std::sync::Arc::new)
    }

    /// `key` encrypted for `org` (a fresh random nonce each time).
    pub fn seal(&self, org: Uuid, key: &OrgKey) -> Result<Sealed, String> {
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let ciphertext = self
            .aead
            .encrypt(
                &nonce,
                Payload {
                    msg: key.0.as_bytes(),
                    aad: org.as_bytes(),
                },
            )
            .map_err(|_| "the key could not be encrypted".to_string())?;
        Ok(Sealed {
            nonce: nonce.to_vec(),
            ciphertext,
        })
    }

    /// The key `sealed` holds for `org`, or why it cannot be read (another encryption key,
    /// another org's row).
    pub fn open(&self, org: Uuid, sealed: &Sealed) -> Result<OrgKey, String> {
        let nonce: [u8; 12] = sealed
            .nonce
            .as_slice()
            .try_into()
            .map_err(|_| "the stored nonce is not 12 bytes".to_string())?;
        let plain = self
            .aead
            .decrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: &sealed.ciphertext,
                    aad: org.as_bytes(),
                },
            )
            .map_err(|_| {
                "the org's provider key cannot be decrypted with llm.org_key_encryption_key \
                 (was the encryption key changed?); the org must set its key again"
                    .to_string()
            })?;
        String::from_utf8(plain)
            .map(OrgKey)
            .map_err(|_| "the decrypted key is not UTF-8".into())
    }
}

/// What a call made for one org and run is scoped by: where its audit rows go, the org's own
/// key if it brought one (for `entry`, or the first keyed entry when `None`), and whether calls
/// with that key may fall back to the operator's entries (`orgs.byok_fallback`, review D2).
#[derive(Debug, Clone)]
pub struct CallScope {
    pub pool: PgPool,
    pub org_id: Uuid,
    pub run_id: Option<Uuid>,
    pub org_key: Option<(OrgKey, Option<String>)>,
    pub byok_fallback: ByokFallback,
}

pub use crate::store::org_settings::ByokFallback;

/// Why an org's calls cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum ScopeError {
    #[error(transparent)]
    Db(#[from] sqlx::Error),
    /// The stored key cannot be used: the org's runs fail with this reason (not retried).
    #[error("{0}")]
    Unusable(LlmError),
}

/// The provider `base` scoped to `org_id` (and `run_id`): its calls audited per provider
/// (`provider_calls`) and made with the org's own key where it stored one — then only to the
/// entry the key is for, unless the org set `byok_fallback = operator`. A provider that is not
/// a chain of entries (a test's scripted or offline one) is returned as it is.
pub async fn provider_for_org(
    base: &SharedProvider,
    pool: &PgPool,
    cipher: Option<&Cipher>,
    org_id: Uuid,
    run_id: Option<Uuid>,
) -> Result<SharedProvider, ScopeError> {
    if !base.scopable() {
        return Ok(base.clone());
    }
    let org_key = match crate::store::org_keys::get(pool, org_id).await? {
        None => None,
        Some(row) => {
            let unusable = |m: String| ScopeError::Unusable(LlmError::new("org-key", m, false));
            let cipher = cipher.ok_or_else(|| {
                unusable(
                    "the org stored a provider key but llm.org_key_encryption_key is not set"
                        .into(),
                )
            })?;
            let key = cipher.open(org_id, &row.sealed).map_err(unusable)?;
            Some((key, row.provider))
        }
    };
    // Only a keyed org's calls are confined; an org gone meanwhile keeps the default (none).
    let byok_fallback = match org_key {
        None => ByokFallback::default(),
        Some(_) => crate::store::org_settings::get(pool, org_id)
            .await?
            .map(|s| s.byok_fallback)
            .unwrap_or_default(),
    };
    let scope = CallScope {
        pool: pool.clone(),
        org_id,
        run_id,
        org_key,
        byok_fallback,
    };
    base.scoped(scope)
        .map_err(ScopeError::Unusable)
        .map(|p| p.unwrap_or_else(|| base.clone()))
}

/// Why a key was not stored.
#[derive(Debug, thiserror::Error)]
pub enum SetKeyError {
    /// A bad input: the field (`key`, `provider`) and what is wrong (never the key's value).
    #[error("{field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
    /// The server cannot hold org keys (no encryption key, no entry that takes a key).
    #[error("{0}")]
    Unavailable(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Checks `raw` (and `provider`, an entry that takes a key), encrypts it for `org` and stores
/// it, replacing the key before (one path for the API and `agentd orgs set-key`).
pub async fn set_key<'e, E: sqlx::PgExecutor<'e>>(
    exec: E,
    llm: &crate::config::LlmConfig,
    org: Uuid,
    raw: &str,
    provider: Option<&str>,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), SetKeyError> {
    let key = OrgKey::parse(raw).map_err(|m| SetKeyError::Invalid {
        field: "key",
        message: format!("key {m}"),
    })?;
    let keyed: Vec<String> = llm
        .provider_entries()
        .into_iter()
        .filter(|e| e.takes_key())
        .map(|e| e.name)
        .collect();
    if keyed.is_empty() {
        return Err(SetKeyError::Unavailable(
            "no provider entry of this server takes a key (all are offline)".into(),
        ));
    }
    if let Some(p) = provider
        && !keyed.iter().any(|k| k == p)
    {
        return Err(SetKeyError::Invalid {
            field: "provider",
            message: format!(
                "provider must name an entry that takes a key (one of: {})",
                keyed.join(", ")
            ),
        });
    }
    let cipher = Cipher::from_config(llm).ok_or_else(|| {
        SetKeyError::Unavailable(
            "this server stores no org provider keys: the operator has not set \
             llm.org_key_encryption_key"
                .into(),
        )
    })?;
    let sealed = cipher.seal(org, &key).map_err(SetKeyError::Unavailable)?;
    crate::store::org_keys::put(exec, org, provider, &sealed, &key.last4(), now).await?;
    tracing::info!(org_id = %org, "an org stored its own provider key");
    Ok(())
}

/// Why [`check_startup`] refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum StartupCheckError {
    /// Keys are stored and nothing can decrypt them: the operator's configuration is wrong.
    #[error(
        "{0} org(s) stored a provider key, but llm.org_key_encryption_key is not set: set it \
         (AGENTD_LLM__ORG_KEY_ENCRYPTION_KEY) to the key they were stored with"
    )]
    KeysWithoutCipher(i64),
    /// The database did not answer, after retries: not the configuration's fault.
    #[error("could not read org_provider_keys: {0}")]
    Database(#[source] sqlx::Error),
}

/// Refuses to start a process that would read org keys it cannot decrypt: a stored key and no
/// `llm.org_key_encryption_key`. A connection lost while it reads (a restarting or
/// terminated backend) is retried with backoff for about ten seconds before it is an error.
pub async fn check_startup(
    pool: &PgPool,
    cipher: Option<&Cipher>,
) -> Result<(), StartupCheckError> {
    use backon::{ExponentialBuilder, Retryable};
    if cipher.is_some() {
        return Ok(());
    }
    let n = (|| crate::store::org_keys::count(pool))
        .retry(
            ExponentialBuilder::default()
                .with_min_delay(std::time::Duration::from_millis(100))
                .with_max_delay(std::time::Duration::from_secs(2))
                .with_max_times(8),
        )
        .when(crate::db::is_connection_error)
        .await
        .map_err(StartupCheckError::Database)?;
    if n > 0 {
        return Err(StartupCheckError::KeysWithoutCipher(n));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const B64: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

    #[test]
    fn a_sealed_key_opens_for_its_org_only_and_debug_hides_it() {
        let c = Cipher::from_base64(B64).unwrap();
        let key = OrgKey::parse("  sk-org-0123456789abcdefXYZ\n").unwrap();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let sealed = c.seal(a, &key).unwrap();
        assert!(
            !String::from_utf8_lossy(&sealed.ciphertext).contains("sk-org"),
            "encrypted"
        );
        assert_eq!(c.open(a, &sealed).unwrap(), key);
        assert!(c.open(b, &sealed).is_err(), "bound to its org");
        assert_eq!(key.last4(), "fXYZ");
        assert!(!format!("{key:?} {c:?}").contains("sk-org"));
    }

    #[test]
    fn malformed_keys_and_encryption_keys_are_refused() {
        assert!(OrgKey::parse("short").is_err());
        assert!(OrgKey::parse("sk-has a space-0123456789").is_err());
        assert!(OrgKey::parse("sk-ünïcode-0123456789abc").is_err());
        assert!(Cipher::from_base64("not base64!").is_err());
        assert!(
            Cipher::from_base64("c2hvcnQ=")
                .unwrap_err()
                .contains("32 bytes")
        );
    }
}
