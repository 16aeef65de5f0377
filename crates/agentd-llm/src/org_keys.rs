//! Provider keys an org brings (`PUT /v1/settings/provider-key`, `agentd orgs set-key`):
//! checked, encrypted at rest with AES-256-GCM under the operator's master key
//! (`llm.org_key_encryption_key`, 32 random bytes in base64), and used only for that org's
//! calls ([`provider_for_org`]). The raw key is never returned, logged or stored: rows hold
//! the ciphertext, the nonce, the id of the master key that sealed it and the last 4
//! characters; [`OrgKey`]'s `Debug` redacts. Webhook signing secrets are sealed the same way
//! ([`Cipher::seal_webhook_secret`]).
//!
//! Review D9: each row names its master key ([`KeyId`], migration 0102), and its associated
//! data binds the org, the provider entry (a webhook secret: the subscription) and that key
//! id, so a ciphertext copied to another org or entry does not decrypt. The master key
//! rotates: the new one becomes `llm.org_key_encryption_key`, the old ones are listed in
//! `llm.org_key_previous_encryption_keys` (read, never written with), [`rekey`] (`agentd orgs
//! rekey`) seals every row again under the current one, and then the old ones can go —
//! [`check_startup`] refuses to start while a row needs a key that is not configured.

use super::{LlmError, SharedProvider};
pub use crate::store::org_keys::Sealed;
use crate::store::webhooks::StoredSecret;
use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use sha2::{Digest, Sha256};
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

/// Which master key sealed a row: the first 8 bytes of SHA-256 over a label and the key, in
/// hex (16 characters). It names a key without revealing anything of it (a 256-bit random key
/// is not found from its hash), and needs no numbering in the config: the operator lists keys,
/// each row finds its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyId(String);

impl KeyId {
    fn of(key: &[u8]) -> Self {
        let digest = Sha256::new()
            .chain_update(b"agentd master key id v1\0")
            .chain_update(key)
            .finalize();
        Self(digest.iter().take(8).map(|b| format!("{b:02x}")).collect())
    }

    /// As stored (`org_provider_keys.key_id`, `agentd_webhooks.secret_key_id`).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One master key.
#[derive(Clone)]
struct MasterKey {
    id: KeyId,
    aead: Aes256Gcm,
}

impl MasterKey {
    fn from_base64(b64: &str) -> Result<Self, String> {
        let bytes = crate::config::decode_org_key(b64)?;
        let aead = Aes256Gcm::new_from_slice(&bytes)
            .map_err(|_| "llm.org_key_encryption_key must be 32 bytes".to_string())?;
        Ok(Self {
            id: KeyId::of(&bytes),
            aead,
        })
    }

    fn seal(&self, msg: &[u8], aad: &[u8]) -> Result<Sealed, String> {
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let ciphertext = self
            .aead
            .encrypt(&nonce, Payload { msg, aad })
            .map_err(|_| "the value could not be encrypted".to_string())?;
        Ok(Sealed {
            key_id: Some(self.id.0.clone()),
            nonce: nonce.to_vec(),
            ciphertext,
        })
    }

    fn open(&self, sealed: &Sealed, aad: &[u8]) -> Option<Vec<u8>> {
        let nonce: [u8; 12] = sealed.nonce.as_slice().try_into().ok()?;
        self.aead
            .decrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: &sealed.ciphertext,
                    aad,
                },
            )
            .ok()
    }
}

/// What a sealed value is bound to: its associated data.
enum Bound<'a> {
    /// An org's provider key for an entry (`None`: the first entry that takes a key).
    OrgKey {
        org: Uuid,
        provider: Option<&'a str>,
    },
    /// A webhook subscription's signing secret.
    WebhookSecret { org: Uuid, webhook: Uuid },
}

impl Bound<'_> {
    /// The associated data under master key `key`: a label per kind of value, then fixed-size
    /// fields, the provider's name last (after a byte saying whether there is one), so no two
    /// bindings have the same bytes.
    fn aad(&self, key: &KeyId) -> Vec<u8> {
        let mut aad = Vec::with_capacity(96);
        match self {
            Bound::OrgKey { org, provider } => {
                aad.extend_from_slice(b"agentd org provider key v1\0");
                aad.extend_from_slice(org.as_bytes());
                aad.extend_from_slice(key.0.as_bytes());
                match provider {
                    None => aad.push(0),
                    Some(p) => {
                        aad.push(1);
                        aad.extend_from_slice(p.as_bytes());
                    }
                }
            }
            Bound::WebhookSecret { org, webhook } => {
                aad.extend_from_slice(b"agentd webhook secret v1\0");
                aad.extend_from_slice(org.as_bytes());
                aad.extend_from_slice(webhook.as_bytes());
                aad.extend_from_slice(key.0.as_bytes());
            }
        }
        aad
    }
}

/// The operator's master keys: the current one, which seals, and the previous ones, which
/// only open. `Debug` never shows a key.
#[derive(Clone)]
pub struct Cipher {
    current: MasterKey,
    previous: Vec<MasterKey>,
}

impl std::fmt::Debug for Cipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cipher")
            .field("current", &self.current.id)
            .field(
                "previous",
                &self.previous.iter().map(|k| &k.id).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Cipher {
    /// The cipher of one master key, `llm.org_key_encryption_key` (32 bytes in standard
    /// base64).
    pub fn from_base64(b64: &str) -> Result<Self, String> {
        Self::with_previous(b64, &[])
    }

    /// The cipher of `current` and the `previous` keys it may still open rows of (a previous
    /// key equal to the current one is dropped).
    pub fn with_previous(current: &str, previous: &[String]) -> Result<Self, String> {
        let current = MasterKey::from_base64(current)?;
        let mut keys: Vec<MasterKey> = Vec::new();
        for (i, k) in previous.iter().enumerate() {
            let k = MasterKey::from_base64(k).map_err(|m| {
                m.replace(
                    "llm.org_key_encryption_key",
                    &format!("llm.org_key_previous_encryption_keys[{i}]"),
                )
            })?;
            if k.id != current.id && keys.iter().all(|o| o.id != k.id) {
                keys.push(k);
            }
        }
        Ok(Self {
            current,
            previous: keys,
        })
    }

    /// The cipher the config asks for, if it names a key (checked by `Config::validate`).
    pub fn from_config(c: &crate::config::LlmConfig) -> Option<std::sync::Arc<Self>> {
        let k = &c.org_key_encryption_key;
        (!k.is_empty())
            .then(|| Self::with_previous(k, &c.org_key_previous_encryption_keys).ok())
            .flatten()
            .map(std::sync::Arc::new)
    }

    /// The id of the key new rows are sealed with.
    pub fn current_id(&self) -> &KeyId {
        &self.current.id
    }

    /// Whether a row sealed under `id` can be opened.
    pub fn knows(&self, id: &str) -> bool {
        self.key(id).is_some()
    }

    fn key(&self, id: &str) -> Option<&MasterKey> {
        std::iter::once(&self.current)
            .chain(&self.previous)
            .find(|k| k.id.0 == id)
    }

    fn seal_bound(&self, msg: &[u8], bound: &Bound<'_>) -> Result<Sealed, String> {
        self.current.seal(msg, &bound.aad(&self.current.id))
    }

    /// The plaintext of `sealed` for `bound`; `what` names the value in the error.
    fn open_bound(
        &self,
        sealed: &Sealed,
        bound: &Bound<'_>,
        what: &str,
    ) -> Result<Vec<u8>, String> {
        if sealed.nonce.len() != 12 {
            return Err(format!("the stored {what}'s nonce is not 12 bytes"));
        }
        let opened = match (&sealed.key_id, bound) {
            (Some(id), _) => {
                let key = self.key(id).ok_or_else(|| {
                    format!(
                        "the {what} is encrypted with master key {id}, which is neither \
                         llm.org_key_encryption_key nor one of \
                         llm.org_key_previous_encryption_keys"
                    )
                })?;
                key.open(sealed, &bound.aad(&key.id))
            }
            // Sealed before key ids (migration 0102): the org id alone was the associated
            // data, under whichever key was configured then.
            (None, Bound::OrgKey { org, .. }) => std::iter::once(&self.current)
                .chain(&self.previous)
                .find_map(|k| k.open(sealed, org.as_bytes())),
            (None, Bound::WebhookSecret { .. }) => None,
        };
        opened.ok_or_else(|| {
            format!(
                "the {what} cannot be decrypted with the configured master keys (is it another \
                 org's or entry's, or was the encryption key changed without listing the old \
                 one in llm.org_key_previous_encryption_keys?)"
            )
        })
    }

    /// `key` encrypted for `org`'s entry `provider` (a fresh random nonce each time).
    pub fn seal(&self, org: Uuid, provider: Option<&str>, key: &OrgKey) -> Result<Sealed, String> {
        self.seal_bound(key.0.as_bytes(), &Bound::OrgKey { org, provider })
            .map_err(|_| "the key could not be encrypted".to_string())
    }

    /// The key `sealed` holds for `org`'s entry `provider`, or why it cannot be read (another
    /// master key, another org's or entry's row).
    pub fn open(
        &self,
        org: Uuid,
        provider: Option<&str>,
        sealed: &Sealed,
    ) -> Result<OrgKey, String> {
        let plain = self
            .open_bound(
                sealed,
                &Bound::OrgKey { org, provider },
                "org's provider key",
            )
            .map_err(|m| format!("{m}; the org must set its key again"))?;
        String::from_utf8(plain)
            .map(OrgKey)
            .map_err(|_| "the decrypted key is not UTF-8".into())
    }

    /// Webhook `webhook`'s signing secret encrypted for `org`.
    pub fn seal_webhook_secret(
        &self,
        org: Uuid,
        webhook: Uuid,
        secret: &str,
    ) -> Result<Sealed, String> {
        self.seal_bound(secret.as_bytes(), &Bound::WebhookSecret { org, webhook })
    }

    /// The signing secret of webhook `webhook` of `org` as stored: a clear one as it is, a
    /// sealed one decrypted (never logged: the caller signs with it).
    pub fn open_webhook_secret(
        cipher: Option<&Self>,
        org: Uuid,
        webhook: Uuid,
        stored: &StoredSecret,
    ) -> Result<String, String> {
        match stored {
            StoredSecret::Clear(s) => Ok(s.clone()),
            StoredSecret::Sealed(sealed) => {
                let cipher = cipher.ok_or_else(|| {
                    "the webhook's secret is encrypted but llm.org_key_encryption_key is not set"
                        .to_string()
                })?;
                let plain = cipher.open_bound(
                    sealed,
                    &Bound::WebhookSecret { org, webhook },
                    "webhook's secret",
                )?;
                String::from_utf8(plain).map_err(|_| "the decrypted secret is not UTF-8".into())
            }
        }
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
            let key = cipher
                .open(org_id, row.provider.as_deref(), &row.sealed)
                .map_err(unusable)?;
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
    let sealed = cipher
        .seal(org, provider, &key)
        .map_err(SetKeyError::Unavailable)?;
    crate::store::org_keys::put(exec, org, provider, &sealed, &key.last4(), now).await?;
    tracing::info!(org_id = %org, "an org stored its own provider key");
    Ok(())
}

/// Why [`check_startup`] refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum StartupCheckError {
    /// Rows are encrypted and nothing can decrypt them: the operator's configuration is wrong.
    #[error(
        "{0} org provider key(s) or webhook secret(s) are stored encrypted, but \
         llm.org_key_encryption_key is not set: set it (AGENTD_LLM__ORG_KEY_ENCRYPTION_KEY) to \
         the key they were stored with"
    )]
    KeysWithoutCipher(i64),
    /// Rows are sealed under a master key the config no longer lists (removed before
    /// `agentd orgs rekey` moved them).
    #[error(
        "{rows} org provider key(s) or webhook secret(s) are encrypted with master key {key_id}, \
         which is neither llm.org_key_encryption_key nor one of \
         llm.org_key_previous_encryption_keys: list that key again (and run `agentd orgs \
         rekey` before removing it)"
    )]
    UnknownKey { key_id: String, rows: i64 },
    /// The database did not answer, after retries: not the configuration's fault.
    #[error("could not read org_provider_keys and agentd_webhooks: {0}")]
    Database(#[source] sqlx::Error),
}

/// Refuses to start a process that would read encrypted rows it cannot decrypt: an org key
/// or a sealed webhook secret and no `llm.org_key_encryption_key`, or a row sealed under a
/// master key the config does not list. Warns, with a key set, about rows `agentd orgs rekey`
/// would change: keys from before key ids (not yet bound to their entry), webhook secrets in
/// clear, rows under a previous key. A connection lost while it reads (a restarting or
/// terminated backend) is retried with backoff for about ten seconds before it is an error.
pub async fn check_startup(
    pool: &PgPool,
    cipher: Option<&Cipher>,
) -> Result<(), StartupCheckError> {
    use backon::{ExponentialBuilder, Retryable};
    let read = || async {
        let keys = crate::store::org_keys::per_key_id(pool).await?;
        let secrets = crate::store::webhooks::secrets_per_key_id(pool).await?;
        Ok::<_, sqlx::Error>((keys, secrets))
    };
    let (keys, secrets) = read
        .retry(
            ExponentialBuilder::default()
                .with_min_delay(std::time::Duration::from_millis(100))
                .with_max_delay(std::time::Duration::from_secs(2))
                .with_max_times(8),
        )
        .when(crate::db::is_connection_error)
        .await
        .map_err(StartupCheckError::Database)?;
    let in_clear: i64 = secrets
        .iter()
        .filter(|(id, _)| id.is_none())
        .map(|(_, n)| n)
        .sum();
    let legacy: i64 = keys
        .iter()
        .filter(|(id, _)| id.is_none())
        .map(|(_, n)| n)
        .sum();
    let mut sealed: Vec<(String, i64)> = Vec::new();
    for (id, n) in keys.iter().chain(&secrets) {
        if let Some(id) = id {
            match sealed.iter_mut().find(|(i, _)| i == id) {
                Some((_, total)) => *total += n,
                None => sealed.push((id.clone(), *n)),
            }
        }
    }
    let Some(cipher) = cipher else {
        let n = legacy + sealed.iter().map(|(_, n)| n).sum::<i64>();
        if n > 0 {
            return Err(StartupCheckError::KeysWithoutCipher(n));
        }
        return Ok(());
    };
    if let Some((key_id, rows)) = sealed.iter().find(|(id, _)| !cipher.knows(id)) {
        return Err(StartupCheckError::UnknownKey {
            key_id: key_id.clone(),
            rows: *rows,
        });
    }
    let previous: i64 = sealed
        .iter()
        .filter(|(id, _)| id != cipher.current_id().as_str())
        .map(|(_, n)| n)
        .sum();
    if legacy + in_clear + previous > 0 {
        tracing::warn!(
            org_keys_without_key_id = legacy,
            webhook_secrets_in_clear = in_clear,
            rows_under_previous_keys = previous,
            current_key_id = %cipher.current_id(),
            "stored secrets are not all sealed under the current master key: run `agentd orgs \
             rekey`"
        );
    }
    Ok(())
}

/// What [`rekey`] sealed again under the current master key.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Rekeyed {
    /// The current master key's id, which every row is now sealed under.
    pub key_id: String,
    /// Org provider keys sealed again (from a previous key, or from before key ids).
    pub org_keys: u64,
    /// Webhook secrets sealed (from clear, or from a previous key).
    pub webhook_secrets: u64,
}

/// Why [`rekey`] changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum RekeyError {
    /// A row no configured key opens; nothing was changed.
    #[error("org {org}'s provider key: {message}")]
    OrgKey { org: Uuid, message: String },
    /// A webhook secret no configured key opens; nothing was changed.
    #[error("webhook {webhook} of org {org}: {message}")]
    WebhookSecret {
        org: Uuid,
        webhook: Uuid,
        message: String,
    },
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Seals every org provider key and webhook secret that is not under the current master key
/// again under it (`agentd orgs rekey`), in one transaction with the rows locked: all of them
/// or, when one cannot be opened, none. After it, no row needs a previous key, and
/// `llm.org_key_previous_encryption_keys` can be emptied. Running it again changes nothing.
pub async fn rekey(pool: &PgPool, cipher: &Cipher) -> Result<Rekeyed, RekeyError> {
    let current = cipher.current_id().as_str();
    let mut done = Rekeyed {
        key_id: current.to_string(),
        org_keys: 0,
        webhook_secrets: 0,
    };
    let mut tx = pool.begin().await?;
    for (org, row) in crate::store::org_keys::not_under(&mut tx, current).await? {
        let provider = row.provider.as_deref();
        let bad = |message: String| RekeyError::OrgKey { org, message };
        let key = cipher.open(org, provider, &row.sealed).map_err(bad)?;
        let sealed = cipher.seal(org, provider, &key).map_err(bad)?;
        if crate::store::org_keys::reseal(&mut *tx, org, &sealed).await? {
            done.org_keys += 1;
        }
    }
    for w in crate::store::webhooks::secrets_not_under(&mut tx, current).await? {
        let (org, webhook) = (w.org_id, w.id);
        let bad = |message: String| RekeyError::WebhookSecret {
            org,
            webhook,
            message,
        };
        let secret =
            Cipher::open_webhook_secret(Some(cipher), org, webhook, &w.secret).map_err(bad)?;
        let sealed = cipher
            .seal_webhook_secret(org, webhook, &secret)
            .map_err(bad)?;
        if crate::store::webhooks::reseal_secret(&mut *tx, webhook, &sealed).await? {
            done.webhook_secrets += 1;
        }
    }
    tx.commit().await?;
    tracing::info!(
        key_id = %done.key_id,
        org_keys = done.org_keys,
        webhook_secrets = done.webhook_secrets,
        "stored secrets sealed again under the current master key"
    );
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    const B64: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

    const B64_2: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";

    #[test]
    fn a_sealed_key_opens_for_its_org_and_entry_only_and_debug_hides_it() {
        let c = Cipher::from_base64(B64).unwrap();
        let key = OrgKey::parse("  sk-org-0123456789abcdefXYZ\n").unwrap();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let sealed = c.seal(a, Some("primary"), &key).unwrap();
        assert!(
            !String::from_utf8_lossy(&sealed.ciphertext).contains("sk-org"),
            "encrypted"
        );
        assert_eq!(sealed.key_id.as_deref(), Some(c.current_id().as_str()));
        assert_eq!(c.open(a, Some("primary"), &sealed).unwrap(), key);
        assert!(
            c.open(b, Some("primary"), &sealed).is_err(),
            "bound to its org"
        );
        assert!(
            c.open(a, Some("other"), &sealed).is_err(),
            "bound to its entry"
        );
        assert!(c.open(a, None, &sealed).is_err(), "bound to its entry");
        let unnamed = c.seal(a, None, &key).unwrap();
        assert_eq!(c.open(a, None, &unnamed).unwrap(), key);
        assert!(
            c.open(a, Some(""), &unnamed).is_err(),
            "no entry is not an empty name"
        );
        assert_eq!(key.last4(), "fXYZ");
        assert!(!format!("{key:?} {c:?}").contains("sk-org"));
        assert!(!format!("{c:?}").contains(B64), "{c:?}");
    }

    #[test]
    fn a_row_of_a_previous_key_opens_and_a_key_not_listed_is_named() {
        let old = Cipher::from_base64(B64).unwrap();
        let new = Cipher::with_previous(B64_2, &[B64.to_string()]).unwrap();
        let only_new = Cipher::from_base64(B64_2).unwrap();
        assert_ne!(old.current_id(), new.current_id());
        assert_eq!(old.current_id().as_str().len(), 16);
        let key = OrgKey::parse("sk-org-0123456789abcdefXYZ").unwrap();
        let org = Uuid::new_v4();
        let sealed = old.seal(org, None, &key).unwrap();
        assert_eq!(
            new.open(org, None, &sealed).unwrap(),
            key,
            "the old key still opens"
        );
        assert!(new.knows(old.current_id().as_str()));
        let resealed = new.seal(org, None, &key).unwrap();
        assert_eq!(resealed.key_id.as_deref(), Some(new.current_id().as_str()));
        assert_eq!(only_new.open(org, None, &resealed).unwrap(), key);
        let e = only_new.open(org, None, &sealed).unwrap_err();
        assert!(e.contains(old.current_id().as_str()), "{e}");
        // A row from before key ids (the org id alone as associated data) opens with any
        // listed key.
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let legacy = Sealed {
            key_id: None,
            nonce: nonce.to_vec(),
            ciphertext: old
                .current
                .aead
                .encrypt(
                    &nonce,
                    Payload {
                        msg: key.expose().as_bytes(),
                        aad: org.as_bytes(),
                    },
                )
                .unwrap(),
        };
        assert_eq!(new.open(org, Some("any"), &legacy).unwrap(), key);
        assert!(only_new.open(org, None, &legacy).is_err());
    }

    #[test]
    fn a_webhook_secret_opens_for_its_subscription_only() {
        let c = Cipher::from_base64(B64).unwrap();
        let (org, hook) = (Uuid::new_v4(), Uuid::new_v4());
        let sealed = c
            .seal_webhook_secret(org, hook, "s3cret-s3cret-s3cret")
            .unwrap();
        let stored = StoredSecret::Sealed(sealed.clone());
        assert_eq!(
            Cipher::open_webhook_secret(Some(&c), org, hook, &stored).unwrap(),
            "s3cret-s3cret-s3cret"
        );
        assert!(Cipher::open_webhook_secret(Some(&c), org, Uuid::new_v4(), &stored).is_err());
        assert!(Cipher::open_webhook_secret(Some(&c), Uuid::new_v4(), hook, &stored).is_err());
        assert!(Cipher::open_webhook_secret(None, org, hook, &stored).is_err());
        // The same bytes sealed as an org key do not open as a secret, nor the other way.
        assert!(c.open(org, None, &sealed).is_err());
        let clear = StoredSecret::Clear("in-clear-0123456789".into());
        assert_eq!(
            Cipher::open_webhook_secret(None, org, hook, &clear).unwrap(),
            "in-clear-0123456789"
        );
        assert!(!format!("{clear:?} {stored:?}").contains("s3cret"));
        assert!(!format!("{clear:?}").contains("in-clear"));
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
