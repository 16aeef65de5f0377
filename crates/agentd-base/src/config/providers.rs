//! `[[llm.providers]]`: the model providers, each an entry with a kind, an endpoint, a key,
//! the models it serves and its limits; `llm.fallback` the order they are tried in. A config
//! without entries keeps working as before: its `llm.provider` / `base_url` / `api_key` become
//! a one-entry list ([`super::LlmConfig::provider_entries`]). What a chain of entries does
//! with them is `llm::chain`'s.

use super::Invalid;
pub use super::choices::ProviderKind;
use serde::Deserialize;

/// One `[[llm.providers]]` entry. `Debug` hides the key.
#[derive(Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProviderEntry {
    /// The entry's name: stored with every call it answers (`provider_calls.provider`), named by
    /// `llm.fallback` and by an org's key. Letters, digits, `-`, `_`, `.`; unique.
    pub name: String,
    pub kind: ProviderKind,
    /// The API base (`…/v1` for OpenAI-compatible servers); empty: the kind's public endpoint.
    #[serde(default)]
    pub base_url: String,
    /// The operator's key, written in the file (prefer `api_key_env`).
    #[serde(default)]
    pub api_key: String,
    /// The environment variable holding the key (e.g. `OPENAI_API_KEY`), read at start.
    #[serde(default)]
    pub api_key_env: String,
    /// The models this entry serves; empty: any model asked of it.
    #[serde(default)]
    pub models: Vec<String>,
    /// Requests per minute toward this endpoint across the fleet (0: none; `llm::limits`).
    #[serde(default)]
    pub requests_per_minute: u32,
    /// Estimated tokens per minute toward this endpoint across the fleet (0: none).
    #[serde(default)]
    pub tokens_per_minute: u64,
    /// The longest one attempt may take; absent: `llm.request_timeout_secs`.
    #[serde(default)]
    pub request_timeout_secs: Option<u64>,
    /// Extra attempts inside the adapter (timeouts, broken streams); absent: `llm.max_retries`.
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// Stream answers; absent: `llm.stream`.
    #[serde(default)]
    pub stream: Option<bool>,
}

impl std::fmt::Debug for ProviderEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderEntry")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("base_url", &self.base_url)
            .field(
                "api_key",
                &if self.api_key.is_empty() {
                    ""
                } else {
                    "[redacted]"
                },
            )
            .field("api_key_env", &self.api_key_env)
            .field("models", &self.models)
            .finish_non_exhaustive()
    }
}

impl ProviderEntry {
    /// Whether this entry is asked for `model`.
    pub fn serves(&self, model: &str) -> bool {
        self.models.is_empty() || self.models.iter().any(|m| m == model)
    }

    /// Whether calls to this entry carry a key (an org may bring its own for it).
    pub fn takes_key(&self) -> bool {
        matches!(self.kind, ProviderKind::OpenAi | ProviderKind::Anthropic)
    }

    /// The key: `api_key`, else the variable `api_key_env` names (`env` reads it).
    pub fn key(&self, env: impl Fn(&str) -> Option<String>) -> String {
        if !self.api_key.is_empty() {
            return self.api_key.clone();
        }
        if self.api_key_env.is_empty() {
            return String::new();
        }
        env(&self.api_key_env).unwrap_or_default()
    }
}

/// A process environment variable, if set and not blank.
pub fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Checks the entries (their keys are `llm.providers[i].…`), the fallback order, that
/// `llm.model` and `llm.extraction_model` have an entry, the breaker settings and the org-key
/// encryption key.
pub(super) fn validate(llm: &super::LlmConfig) -> Result<(), Invalid> {
    let bad = |key: String, message: String| Err(Invalid::new(key, message));
    if !llm.providers.is_empty() {
        // The single-endpoint keys and the entries would both say where calls go.
        for (key, set) in [
            ("llm.base_url", !llm.base_url.is_empty()),
            ("llm.api_key", !llm.api_key.is_empty()),
            ("llm.provider", llm.provider != super::ProviderChoice::Auto),
        ] {
            if set {
                return bad(
                    key.into(),
                    format!(
                        "{key} cannot be set beside [[llm.providers]]: give each entry its \
                         kind, base_url and api_key / api_key_env, and remove {key}"
                    ),
                );
            }
        }
    }
    let mut names: Vec<&str> = Vec::new();
    for (i, e) in llm.providers.iter().enumerate() {
        let at = format!("llm.providers[{i}]");
        let name_ok = !e.name.is_empty()
            && e.name.len() <= 64
            && e.name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !name_ok {
            return bad(
                format!("{at}.name"),
                format!(
                    "{at}.name must be 1–64 letters, digits, '-', '_' or '.' (got {:?})",
                    e.name
                ),
            );
        }
        if names.contains(&e.name.as_str()) {
            return bad(
                format!("{at}.name"),
                format!("{at}.name {:?} is used by an earlier entry", e.name),
            );
        }
        names.push(&e.name);
        if !e.api_key.is_empty() && !e.api_key_env.is_empty() {
            return bad(
                format!("{at}.api_key_env"),
                format!("{at}: give api_key or api_key_env, not both"),
            );
        }
        match e.kind {
            ProviderKind::Offline => {
                for (k, v) in [("base_url", &e.base_url), ("api_key", &e.api_key)] {
                    if !v.is_empty() {
                        return bad(
                            format!("{at}.{k}"),
                            format!("{at}.{k}: an offline entry calls no endpoint; remove it"),
                        );
                    }
                }
            }
            ProviderKind::OpenAi | ProviderKind::Anthropic => {
                let url_ok = e.base_url.is_empty()
                    || reqwest::Url::parse(e.base_url.trim())
                        .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.has_host());
                if !url_ok {
                    return bad(
                        format!("{at}.base_url"),
                        format!(
                            "{at}.base_url must be an http(s) URL such as \
                             https://api.openai.com/v1 (got {:?})",
                            e.base_url
                        ),
                    );
                }
                if !e.api_key_env.is_empty() && env_var(&e.api_key_env).is_none() {
                    return bad(
                        format!("{at}.api_key_env"),
                        format!(
                            "{at}.api_key_env names {}, which is not set in the environment",
                            e.api_key_env
                        ),
                    );
                }
            }
        }
        if let Some(m) = e.models.iter().find(|m| m.trim().is_empty()) {
            return bad(
                format!("{at}.models"),
                format!("{at}.models holds an empty name ({m:?})"),
            );
        }
        if let Some(t) = e.request_timeout_secs {
            super::at_least(&format!("{at}.request_timeout_secs"), t, 1)?;
            super::duration_at_most(
                &format!("{at}.request_timeout_secs"),
                t,
                super::TimeUnit::Secs,
            )?;
        }
    }
    let entries = llm.provider_entries();
    let known: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
    for (i, f) in llm.fallback.iter().enumerate() {
        if !known.contains(&f.as_str()) {
            return bad(
                format!("llm.fallback[{i}]"),
                format!(
                    "llm.fallback[{i}] names {f:?}, which is no provider entry (entries: {})",
                    known.join(", ")
                ),
            );
        }
        if llm.fallback.iter().take(i).any(|g| g == f) {
            return bad(
                format!("llm.fallback[{i}]"),
                format!("llm.fallback[{i}]: {f:?} is listed twice"),
            );
        }
    }
    for (key, model) in [
        ("llm.model", &llm.model),
        ("llm.extraction_model", &llm.extraction_model),
    ] {
        if !model.is_empty() && !entries.iter().any(|e| e.serves(model)) {
            return bad(
                key.into(),
                format!(
                    "{key} is {model:?}, which no provider entry serves (add it to an entry's \
                     models, or leave that entry's models empty)"
                ),
            );
        }
    }
    if !(1..=100).contains(&llm.org_share_percent) {
        return bad(
            "llm.org_share_percent".into(),
            format!(
                "llm.org_share_percent must be between 1 and 100 (100: no per-org share), not {}",
                llm.org_share_percent
            ),
        );
    }
    super::at_least("llm.breaker_failures", llm.breaker_failures.into(), 1)?;
    super::at_least("llm.breaker_cooldown_secs", llm.breaker_cooldown_secs, 1)?;
    super::duration_at_most(
        "llm.breaker_cooldown_secs",
        llm.breaker_cooldown_secs,
        super::TimeUnit::Secs,
    )?;
    if !llm.org_key_encryption_key.is_empty()
        && let Err(m) = decode_org_key(&llm.org_key_encryption_key)
    {
        return bad("llm.org_key_encryption_key".into(), m);
    }
    let previous = &llm.org_key_previous_encryption_keys;
    if !previous.is_empty() && llm.org_key_encryption_key.is_empty() {
        return bad(
            "llm.org_key_previous_encryption_keys".into(),
            "llm.org_key_previous_encryption_keys needs llm.org_key_encryption_key: the \
             current key, which new rows are encrypted with and `agentd orgs rekey` moves \
             the old rows to"
                .into(),
        );
    }
    for (i, k) in previous.iter().enumerate() {
        let key = format!("llm.org_key_previous_encryption_keys[{i}]");
        if let Err(m) = decode_org_key(k) {
            return bad(key.clone(), m.replace("llm.org_key_encryption_key", &key));
        }
    }
    Ok(())
}

/// `llm.org_key_previous_encryption_keys`: a list of strings, or one string of entries
/// separated by commas (what an environment variable holds; base64 has no comma). Blank
/// entries are dropped.
pub(super) fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        One(String),
        Many(Vec<String>),
    }
    let all = match Raw::deserialize(d)? {
        Raw::One(s) => s.split(',').map(str::to_string).collect(),
        Raw::Many(v) => v,
    };
    Ok(all
        .into_iter()
        .map(|k| k.trim().to_string())
        .filter(|k| !k.is_empty())
        .collect())
}

/// The bytes of `llm.org_key_encryption_key`: 32 in standard base64, or what is wrong with it.
pub fn decode_org_key(b64: &str) -> Result<Vec<u8>, String> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|_| {
            "llm.org_key_encryption_key must be 32 random bytes in base64 (generate one with \
             `openssl rand -base64 32`); it is not base64"
                .to_string()
        })?;
    if bytes.len() != 32 {
        return Err(format!(
            "llm.org_key_encryption_key must be 32 bytes in base64 (`openssl rand -base64 \
             32`); it decodes to {} bytes",
            bytes.len()
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn load(text: &str) -> Result<Config, crate::config::ConfigError> {
        Config::load_text(Some(("agentd.toml", text)), std::iter::empty())
    }

    /// Issue 46, item 3: `provider = "auto"` follows the keys in the environment.
    #[test]
    fn auto_follows_the_keys_a_user_has() {
        use crate::config::{ANTHROPIC_DEFAULT_MODEL, DEFAULT_MODEL, ProviderChoice as P};
        let follow = |toml: &str, env: &[(&str, &str)]| {
            let mut llm = load(toml).unwrap().llm;
            // Loading followed the process's keys: undo that, so only `env` counts here.
            if !toml.contains("provider") {
                llm.provider = P::Auto;
            }
            if !toml.contains("model") {
                llm.model = DEFAULT_MODEL.to_string();
            }
            llm.follow_keys(|k| {
                env.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            });
            (llm.provider, llm.model)
        };
        let (openai, anthropic) = (("OPENAI_API_KEY", "sk-o"), ("ANTHROPIC_API_KEY", "sk-ant"));
        let default = DEFAULT_MODEL.to_string();
        assert_eq!(follow("", &[]), (P::Auto, default.clone()), "none: offline");
        assert_eq!(follow("", &[openai]), (P::Auto, default.clone()), "openai");
        assert_eq!(
            follow("", &[("OPENAI_BASE_URL", "http://127.0.0.1:8089/v1")]),
            (P::Auto, default.clone()),
            "a local OpenAI-compatible server"
        );
        assert_eq!(
            follow("", &[anthropic]),
            (P::Anthropic, ANTHROPIC_DEFAULT_MODEL.to_string()),
            "anthropic alone, with its default model"
        );
        assert_eq!(
            follow("[llm]\nmodel = \"claude-opus-4-1\"\n", &[anthropic]),
            (P::Anthropic, "claude-opus-4-1".to_string()),
            "a model set on purpose stays"
        );
        assert_eq!(
            follow("", &[openai, anthropic]),
            (P::Auto, default.clone()),
            "both: openai (llm.provider chooses)"
        );
        assert_eq!(
            follow("[llm]\nprovider = \"openai\"\n", &[anthropic]).0,
            P::OpenAi,
            "an explicit provider is kept"
        );
        // Empty values are unset.
        assert_eq!(follow("", &[("ANTHROPIC_API_KEY", " ")]).0, P::Auto);
    }

    #[test]
    fn the_single_endpoint_keys_become_a_one_entry_list() {
        let c = load("[llm]\nbase_url = \"http://127.0.0.1:1/v1\"\napi_key = \"sk-x\"\n").unwrap();
        let e = c.llm.provider_entries();
        assert_eq!(e.len(), 1);
        assert_eq!(
            (
                e[0].name.as_str(),
                e[0].kind.as_str(),
                e[0].base_url.as_str()
            ),
            ("openai", "openai", "http://127.0.0.1:1/v1")
        );
        assert_eq!(e[0].api_key, "sk-x");
    }

    #[test]
    fn entries_are_read_in_fallback_order() {
        let c = load(
            "[llm]\nfallback = [\"b\", \"a\"]\n\
             [[llm.providers]]\nname = \"a\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n\
             [[llm.providers]]\nname = \"b\"\nkind = \"offline\"\n",
        )
        .unwrap();
        let names: Vec<String> = c
            .llm
            .ordered_entries()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, ["b", "a"]);
    }

    #[test]
    fn orgs_choose_only_models_an_entry_serves() {
        let c = load(
            "[llm]\nmodel = \"m1\"\norg_models = [\"m1\", \"m9\"]\n\
             [[llm.providers]]\nname = \"a\"\nkind = \"offline\"\nmodels = [\"m1\"]\n",
        )
        .unwrap();
        assert_eq!(c.llm.allowed_org_models(), ["m1"]);
    }

    #[test]
    fn bad_entries_name_file_key_and_problem() {
        for (text, key, words) in [
            (
                "[[llm.providers]]\nname = \"a\"\nkind = \"openai\"\nbas_url = \"x\"\n",
                "llm.providers[0].bas_url",
                "unknown field",
            ),
            (
                "[[llm.providers]]\nname = \"a\"\nkind = \"gemini\"\n",
                "llm.providers[0].kind",
                "one of openai, offline, anthropic",
            ),
            (
                "[[llm.providers]]\nname = \"a\"\nkind = \"openai\"\nbase_url = \"ftp://x\"\n",
                "llm.providers[0].base_url",
                "http(s) URL",
            ),
            (
                "[[llm.providers]]\nname = \"a\"\nkind = \"offline\"\n[[llm.providers]]\nname = \"a\"\nkind = \"offline\"\n",
                "llm.providers[1].name",
                "earlier entry",
            ),
            (
                "[llm]\nfallback = [\"z\"]\n[[llm.providers]]\nname = \"a\"\nkind = \"offline\"\n",
                "llm.fallback[0]",
                "no provider entry",
            ),
            (
                "[llm]\nbase_url = \"http://h/v1\"\n[[llm.providers]]\nname = \"a\"\nkind = \"offline\"\n",
                "llm.base_url",
                "cannot be set beside",
            ),
            (
                "[llm]\nmodel = \"m1\"\n[[llm.providers]]\nname = \"a\"\nkind = \"offline\"\nmodels = [\"m2\"]\n",
                "llm.model",
                "no provider entry serves",
            ),
            (
                "[llm]\norg_key_encryption_key = \"c2hvcnQ=\"\n",
                "llm.org_key_encryption_key",
                "32 bytes",
            ),
            (
                "[llm]\norg_key_previous_encryption_keys = [\"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\"]\n",
                "llm.org_key_previous_encryption_keys",
                "needs llm.org_key_encryption_key",
            ),
            (
                "[llm]\norg_key_encryption_key = \"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\"\norg_key_previous_encryption_keys = \"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=, c2hvcnQ=\"\n",
                "llm.org_key_previous_encryption_keys[1]",
                "llm.org_key_previous_encryption_keys[1] must be 32 bytes",
            ),
        ] {
            let e = load(text).unwrap_err();
            assert_eq!(e.file, "agentd.toml", "{text}");
            assert_eq!(e.key.as_deref(), Some(key), "{text}: {e}");
            assert!(e.message.contains(words), "{text}: {e}");
        }
    }

    #[test]
    fn previous_encryption_keys_come_from_a_list_or_one_comma_separated_variable() {
        const K1: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
        const K2: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";
        let env = [
            ("AGENTD_LLM__ORG_KEY_ENCRYPTION_KEY", K2),
            (
                "AGENTD_LLM__ORG_KEY_PREVIOUS_ENCRYPTION_KEYS",
                &*format!("{K1}, {K2},"),
            ),
        ];
        let env = env.into_iter().map(|(k, v)| (k.to_string(), v.to_string()));
        let c = Config::load_text(None, env).expect("valid");
        assert_eq!(c.llm.org_key_previous_encryption_keys, [K1, K2]);
        let c = load(&format!(
            "[llm]\norg_key_encryption_key = \"{K2}\"\norg_key_previous_encryption_keys = [\"{K1}\"]\n"
        ))
        .expect("valid");
        assert_eq!(c.llm.org_key_previous_encryption_keys, [K1]);
        assert!(
            !format!("{:?}", c.llm).contains(K1),
            "Debug hides the old keys"
        );
    }
}
