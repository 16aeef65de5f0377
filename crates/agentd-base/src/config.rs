//! Service settings: `config/default.toml` (built into the binary), an optional file given with
//! `--config`, then `AGENTD_<SECTION>__<KEY>` environment overrides; validated at start. Errors
//! name the source, the key and the fix.

mod choices;
mod cidr;
mod duration;
mod invalid;
mod layering;
mod otel;
mod prices;
mod providers;
pub use choices::{
    AUTO_PREFETCH_WINDOW, LogFormat, OtlpProtocol, Prefetch, PrefetchSetting, ProviderChoice,
};
pub use cidr::Cidr;
pub use duration::{MAX_DURATION_SECS, TimeUnit, duration_at_most};
pub use invalid::{Invalid, at_least};
pub use otel::OtelConfig;
pub use prices::{ModelPrice, NanoUsd, Prices, TokenCounts, cost, format_usd, price_of};
pub use providers::{ProviderEntry, ProviderKind, decode_org_key, env_var};

use layering::{merge, parse_env_value, priced_models};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The defaults shipped in the repository, also compiled in so the binary runs anywhere.
pub const DEFAULT_TOML: &str = include_str!("../../../config/default.toml");

/// A configuration error a person can act on (the service's settings or a job file,
/// [`crate::catalog::CatalogError`]): where, which key, what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ConfigError {
    /// The file (or environment variable) the bad value came from.
    pub file: String,
    /// The key with the bad value, when one is to blame (not for unreadable files).
    pub key: Option<String>,
    /// What is wrong and, where possible, how to fix it.
    pub message: String,
}

impl ConfigError {
    pub(crate) fn new(file: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            file: file.into(),
            key: None,
            message: message.into(),
        }
    }

    pub(crate) fn invalid(file: impl Into<String>, e: Invalid) -> Self {
        Self {
            file: file.into(),
            key: Some(e.key),
            message: e.message,
        }
    }
}

/// The `[otel]` key a standard OpenTelemetry variable sets, if `name` is one.
fn otel_key(name: &str) -> Option<&'static str> {
    otel::STANDARD_VARIABLES
        .iter()
        .find(|(var, _)| *var == name)
        .map(|(_, key)| *key)
}

/// All service settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub database: DatabaseConfig,
    pub worker: WorkerConfig,
    pub retention: RetentionConfig,
    pub http: HttpConfig,
    /// `agentd serve`'s API: request timeout and concurrency (review L11).
    #[serde(default)]
    pub api: ApiConfig,
    pub llm: LlmConfig,
    pub log: LogConfig,
    /// Redaction of personal data before the provider (`crates/agentd-store/src/pii`).
    #[serde(default)]
    pub pii: PiiConfig,
    /// Webhook deliveries (`crates/agentd-worker/src/webhooks`).
    #[serde(default)]
    pub webhooks: WebhooksConfig,
    /// Trace export over OTLP (`crates/agentd-base/src/telemetry`).
    #[serde(default)]
    pub otel: OtelConfig,
}

/// `agentd serve`'s API listener (review L11).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    /// A request that has not been answered after this long (its body read, its handler done)
    /// gets 503; an event stream counts until its headers are sent.
    pub request_timeout_secs: u64,
    /// Requests handled at once; one more is refused at once with 503 and `Retry-After`.
    pub max_concurrent_requests: u32,
    /// A connection whose request head (request line and headers) has not fully arrived this
    /// long after the server started waiting for it is closed: a client trickling headers, or
    /// an idle keep-alive connection (review S5).
    pub header_read_timeout_secs: u64,
    /// Requests a minute one API key may make (0 = no limit); past it, 429 with `Retry-After`.
    #[serde(default = "default_requests_per_minute_per_key")]
    pub requests_per_minute_per_key: u32,
    /// Requests a minute all of one org's keys may make together (0 = no limit).
    #[serde(default = "default_requests_per_minute_per_org")]
    pub requests_per_minute_per_org: u32,
    /// Requests a minute one key may make that enqueue model runs: uploads, `POST /v1/jobs`,
    /// refines (0 = no limit).
    #[serde(default = "default_runs_per_minute_per_key")]
    pub runs_per_minute_per_key: u32,
    /// How many `agentd serve` processes share the traffic: each rate above is divided by it,
    /// so the fleet's total is the configured rate (the limits are kept per process).
    #[serde(default = "default_serve_processes")]
    pub serve_processes: u32,
    /// Uploads (`POST /v1/documents`, each body up to 4 MiB + 64 KiB, held while it is parsed)
    /// handled at once; one more gets 503 with `Retry-After` before its body is read (review D8).
    #[serde(default = "default_max_concurrent_uploads")]
    pub max_concurrent_uploads: u32,
    /// Unknown bearer tokens a minute one source address (an IPv6 one by its /64) may have
    /// looked up (0 = no limit); past it, 429 with `Retry-After` before a query, except for keys
    /// that source used successfully lately (review D8). Divided by `serve_processes` too.
    #[serde(default = "default_refused_per_minute_per_source")]
    pub refused_per_minute_per_source: u32,
}

fn default_max_concurrent_uploads() -> u32 {
    32
}
fn default_refused_per_minute_per_source() -> u32 {
    60
}

fn default_requests_per_minute_per_key() -> u32 {
    1200
}
fn default_requests_per_minute_per_org() -> u32 {
    3000
}
fn default_runs_per_minute_per_key() -> u32 {
    120
}
fn default_serve_processes() -> u32 {
    1
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            request_timeout_secs: 60,
            max_concurrent_requests: 512,
            header_read_timeout_secs: 10,
            requests_per_minute_per_key: default_requests_per_minute_per_key(),
            requests_per_minute_per_org: default_requests_per_minute_per_org(),
            runs_per_minute_per_key: default_runs_per_minute_per_key(),
            serve_processes: default_serve_processes(),
            max_concurrent_uploads: default_max_concurrent_uploads(),
            refused_per_minute_per_source: default_refused_per_minute_per_source(),
        }
    }
}

/// Webhook deliveries.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebhooksConfig {
    /// True: webhook URLs may reach loopback, link-local, private, unspecified and multicast
    /// addresses (the built-in classes and the port list of `webhooks/guard.rs` are off;
    /// `denied_cidrs` still apply).
    pub allow_private_networks: bool,
    /// Networks refused at registration and at every delivery besides the built-in classes,
    /// whatever `allow_private_networks` says (review D12): `a.b.c.d/n`, `x:y::/n` or one
    /// address. IPv6 forms of an IPv4 address are checked as that address.
    pub denied_cidrs: Vec<String>,
    /// The ports a webhook URL may name (its scheme's port when it names none) while the guard
    /// is on (`allow_private_networks = false`); empty: any port (review D12).
    pub allowed_ports: Vec<u16>,
}

impl Default for WebhooksConfig {
    fn default() -> Self {
        Self {
            allow_private_networks: false,
            denied_cidrs: Vec::new(),
            allowed_ports: vec![80, 443],
        }
    }
}

impl WebhooksConfig {
    /// `denied_cidrs` parsed (a config that passed [`Config::validate`] has no bad one; one
    /// that did not is skipped here, never panicked on).
    pub fn denied(&self) -> Vec<Cidr> {
        self.denied_cidrs
            .iter()
            .filter_map(|c| Cidr::parse(c).ok())
            .collect()
    }

    /// Every entry of `denied_cidrs` a network, at most [`MAX_DENIED_CIDRS`] of them; every
    /// port of `allowed_ports` 1–65535.
    fn validate(&self) -> Result<(), Invalid> {
        if self.denied_cidrs.len() > MAX_DENIED_CIDRS {
            return Err(Invalid::new(
                "webhooks.denied_cidrs",
                format!(
                    "webhooks.denied_cidrs may hold at most {MAX_DENIED_CIDRS} networks (got {}); join neighbouring ones",
                    self.denied_cidrs.len()
                ),
            ));
        }
        for (i, c) in self.denied_cidrs.iter().enumerate() {
            if let Err(m) = Cidr::parse(c) {
                let key = format!("webhooks.denied_cidrs[{i}]");
                return Err(Invalid::new(key.clone(), format!("{key}: {m}")));
            }
        }
        if let Some(i) = self.allowed_ports.iter().position(|p| *p == 0) {
            let key = format!("webhooks.allowed_ports[{i}]");
            return Err(Invalid::new(
                key.clone(),
                format!("{key} must be a port, 1–65535 (got 0; an empty list allows any port)"),
            ));
        }
        Ok(())
    }
}

/// Most entries `webhooks.denied_cidrs` may hold (each delivery checks every one).
pub const MAX_DENIED_CIDRS: usize = 1024;

/// The redaction boundary.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PiiConfig {
    /// Off: no org is redacted, whatever its own switch says.
    pub enabled: bool,
    /// Extra national-id patterns (regular expressions).
    pub national_id_patterns: Vec<String>,
}

impl Default for PiiConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            national_id_patterns: Vec::new(),
        }
    }
}

/// Where the database is. `Debug` hides the passwords of its URLs (review #22).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseConfig {
    /// Explicit URL; empty means DATABASE_URL, then `local_url`, then a private cluster.
    pub url: String,
    pub local_url: String,
    pub max_connections: u32,
    pub private_dir: String,
    pub private_port: u16,
    /// `lock_timeout` of agentd's sessions (0 = wait forever): a statement queued behind a
    /// lock (a migration, a long transaction) fails instead of stalling heartbeats and claims.
    #[serde(default = "default_lock_timeout_ms")]
    pub lock_timeout_ms: u64,
    /// `idle_in_transaction_session_timeout` of agentd's sessions (0 = off): a session left
    /// idle inside a transaction (e.g. waiting on a model) is ended by the server and releases
    /// its locks and its hold on the xmin horizon.
    #[serde(default = "default_idle_in_transaction_timeout_ms")]
    pub idle_in_transaction_timeout_ms: u64,
    /// `statement_timeout` of agentd's sessions (0 = off). `agentd serve` with 0 uses
    /// `api.request_timeout_secs`: a statement of a request never outlives the request, so a
    /// costly read that a client abandoned stops loading the database (review D1). Workers
    /// keep 0 (a sweep's batch is a long statement by design).
    #[serde(default)]
    pub statement_timeout_ms: u64,
    /// `url` points at a pooler in transaction mode (PgBouncer): no session state, no
    /// prepared statements across transactions (see `db::pooling`).
    #[serde(default)]
    pub transaction_pooling: bool,
    /// A direct connection (not through the pooler) for LISTEN and migrations; empty: `url`.
    #[serde(default)]
    pub listen_url: String,
    /// How long a starting process waits, retrying with backoff, for a database that does not
    /// answer yet (nothing listening, a server starting up or shutting down, a restart) before
    /// it exits 1 (0: no wait). A worker started during a PostgreSQL restart waits for it
    /// instead of exiting (issue 47, item 4).
    #[serde(default = "default_connect_wait_secs")]
    pub connect_wait_secs: u64,
}

fn default_connect_wait_secs() -> u64 {
    60
}

/// Hides the password of a URL for logs and output: the one in the userinfo and a
/// `password=` query parameter (libpq accepts both; review #22).
pub fn redact(url: &str) -> String {
    let url = match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            match (url.get(..s + 3), url.get(s + 3..at), url.get(at..)) {
                (Some(scheme), Some(creds), Some(rest)) => match creds.split_once(':') {
                    Some((user, _)) => format!("{scheme}{user}:***{rest}"),
                    None => url.to_string(),
                },
                _ => url.to_string(),
            }
        }
        _ => url.to_string(),
    };
    match url.split_once('?') {
        None => url,
        Some((base, query)) => {
            let params: Vec<String> = query
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => p.to_string(),
                })
                .collect();
            format!("{base}?{}", params.join("&"))
        }
    }
}

impl std::fmt::Debug for DatabaseConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseConfig")
            .field("url", &redact(&self.url))
            .field("local_url", &redact(&self.local_url))
            .field("listen_url", &redact(&self.listen_url))
            .field("max_connections", &self.max_connections)
            .field("private_dir", &self.private_dir)
            .field("private_port", &self.private_port)
            .field("transaction_pooling", &self.transaction_pooling)
            .field("connect_wait_secs", &self.connect_wait_secs)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for LlmConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = if self.api_key.is_empty() {
            ""
        } else {
            "[redacted]"
        };
        f.debug_struct("LlmConfig")
            .field("provider", &self.provider)
            .field("base_url", &self.base_url)
            .field("api_key", &key)
            .field("model", &self.model)
            .field("extraction_model", &self.extraction_model)
            .field("stream", &self.stream)
            .field("max_output_tokens", &self.max_output_tokens)
            .field("providers", &self.providers)
            .field("fallback", &self.fallback)
            .field(
                "org_key_encryption_key",
                &if self.org_key_encryption_key.is_empty() {
                    ""
                } else {
                    "[redacted]"
                },
            )
            .field(
                "org_key_previous_encryption_keys",
                &format_args!("[{} redacted]", self.org_key_previous_encryption_keys.len()),
            )
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod debug_tests {
    #[test]
    fn debug_output_hides_the_secrets() {
        let mut c = crate::config::Config::defaults();
        c.llm.api_key = "sk-very-secret".into();
        c.llm.org_key_encryption_key = "sk-very-secret-too".into();
        c.llm.org_key_previous_encryption_keys = vec!["sk-very-secret-old".into()];
        let mut entry = c.llm.provider_entries().remove(0);
        entry.api_key = "sk-very-secret-entry".into();
        c.llm.providers = vec![entry];
        c.database.url = "postgres://u:pw-secret@h/db?password=pw-secret".into();
        let shown = format!("{c:?}");
        assert!(!shown.contains("sk-very-secret"), "{shown}");
        assert!(!shown.contains("pw-secret"), "{shown}");
    }
}

fn default_lock_timeout_ms() -> u64 {
    5_000
}

impl WorkerConfig {
    /// `prefetch`, checked by [`Config::validate`] (an invalid word reads as `"auto"` here).
    pub fn prefetch(&self) -> Prefetch {
        self.prefetch.parse().unwrap_or(Prefetch::Auto)
    }
}

fn default_idle_in_transaction_timeout_ms() -> u64 {
    60_000
}

/// Queue worker tuning.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerConfig {
    pub jobs_dir: String,
    /// Removed (issue 18): apalis is the only runtime. Accepted as `"apalis"` so existing
    /// configs keep working; anything else is an error.
    #[serde(default)]
    pub runtime: Option<String>,
    pub claim_batch: u32,
    /// Jobs claimed ahead of free slots into a local buffer: `"auto"` (sized by the measured
    /// job duration) or a count (0: none). See [`Prefetch`].
    pub prefetch: PrefetchSetting,
    pub poll_interval_ms: u64,
    pub lease_secs: u64,
    pub heartbeat_secs: u64,
    pub shutdown_grace_secs: u64,
    pub rescue_interval_secs: u64,
}

/// Deletion of finished jobs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionConfig {
    pub finished_after_hours: u64,
    pub batch: u32,
    pub interval_secs: u64,
    /// The retention unit vacuums `agentd_jobs` when it holds this many dead rows (and at least
    /// a tenth of its live rows); 0: never, left to autovacuum (`queue::vacuum`).
    #[serde(default = "default_vacuum_dead_rows")]
    pub vacuum_dead_rows: u64,
    /// Transcripts of finished runs are compacted (text removed) after this many days.
    #[serde(default = "default_transcripts_after_days")]
    pub transcripts_after_days: u64,
    /// History deleted after this many days (0: kept), in batches (`store::history`).
    #[serde(default = "default_runs_after_days")]
    pub runs_after_days: u64,
    #[serde(default = "default_events_after_days")]
    pub events_after_days: u64,
    #[serde(default = "default_runs_after_days")]
    pub suggestions_after_days: u64,
    #[serde(default = "default_audit_after_days")]
    pub audit_after_days: u64,
    #[serde(default = "default_audit_after_days")]
    pub provider_calls_after_days: u64,
}

fn default_vacuum_dead_rows() -> u64 {
    50_000
}

fn default_runs_after_days() -> u64 {
    90
}

fn default_events_after_days() -> u64 {
    30
}

fn default_audit_after_days() -> u64 {
    400
}

fn default_transcripts_after_days() -> u64 {
    30
}

/// The operator's HTTP endpoints.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    pub addr: String,
}

/// The LLM provider. `Debug` hides the API key (review #22).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmConfig {
    pub provider: ProviderChoice,
    pub base_url: String,
    pub api_key: String,
    /// Prices per model (cents per million tokens: input, output, cache reads and writes): what
    /// runs, documents and orgs are shown to cost, and what a cost cap buys (`prices`). A file
    /// or the environment sets models over the built-in list prices, one by one.
    #[serde(default)]
    pub prices: Prices,
    /// The models whose price a file or the environment set (not only the built-in list
    /// prices): the models an org may choose when `org_models` is empty.
    #[serde(skip)]
    pub operator_priced: Vec<String>,
    pub model: String,
    /// The model run_extraction asks (empty: `model`). Never chosen by the agent.
    #[serde(default)]
    pub extraction_model: String,
    pub request_timeout_secs: u64,
    pub max_retries: u32,
    pub stream: bool,
    /// Delay added to every offline-provider call (mimics model latency).
    pub offline_latency_ms: u64,
    /// Send `tool_choice: "required"` before a run's goal is met (servers that reject it: false).
    pub tool_choice_required: bool,
    /// Most output tokens one call may generate (`max_completion_tokens`).
    pub max_output_tokens: u32,
    /// The model's context window in tokens: a larger request is compacted or refused.
    pub context_window_tokens: u64,
    /// Most bytes of one streamed answer before the call fails (a runaway model).
    pub max_stream_bytes: usize,
    /// Most bytes of one raw response body, JSON or SSE, before the call fails (a hostile or
    /// broken server; review N15).
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: usize,
    /// Guided mode: `job` (the job file's `agent.guided`), `on` or `off` for every kind.
    pub guided: String,
    /// Offer tool schemas in OpenAI's strict form, with `"strict": true` (see `tools::strict`).
    pub strict_tools: bool,
    /// In rounds that require a tool call, also send a `response_format` JSON Schema that only
    /// a call of an offered tool satisfies (`agent::constrain`): servers that constrain
    /// decoding to a schema (llama.cpp, vLLM, Ollama) then cannot produce anything else.
    /// `true`, `false` or `"auto"` (the default): on for an HTTP provider until its endpoint
    /// refuses a `response_format` or answers outside one with no tool call (it enforces
    /// neither), remembered per endpoint and model for the process (`llm::schema_output`).
    /// Either way the run goes on with plain tool calls; `true` tries every run again.
    #[serde(default)]
    pub constrained_calls: Constrained,
    /// Requests per minute toward the provider endpoint across every worker process (0: no
    /// limit); kept in the database (`llm::limits`).
    #[serde(default)]
    pub requests_per_minute: u32,
    /// Estimated tokens per minute toward the endpoint across the fleet (0: no limit).
    #[serde(default)]
    pub tokens_per_minute: u64,
    /// The share of an endpoint's fleet limits one org may take while other orgs' calls wait,
    /// in percent (1–100; 100: none). Alone an org has the whole rate (`llm::limits`).
    #[serde(default = "default_org_share_percent")]
    pub org_share_percent: u8,
    /// The models an org may choose (`PATCH /v1/settings` `model`); empty: the models a file
    /// or the environment priced in `prices` (not the built-in list prices), `model` and
    /// `extraction_model` (review N13).
    #[serde(default)]
    pub org_models: Vec<String>,
    /// The provider entries (`[[llm.providers]]`); empty: one entry made of `provider`,
    /// `base_url` and `api_key` ([`LlmConfig::provider_entries`]).
    #[serde(default)]
    pub providers: Vec<ProviderEntry>,
    /// The order entries are tried in when one fails (names); empty: the entries' order.
    /// Entries not named come after, in their order.
    #[serde(default)]
    pub fallback: Vec<String>,
    /// Consecutive failures (timeouts, 5xx, overload, 429 past its wait) that open an entry's
    /// circuit breaker: it is skipped until `breaker_cooldown_secs` pass, then probed.
    #[serde(default = "default_breaker_failures")]
    pub breaker_failures: u32,
    /// How long an open breaker skips its entry before one probe call is let through.
    #[serde(default = "default_breaker_cooldown_secs")]
    pub breaker_cooldown_secs: u64,
    /// The key org provider keys and webhook secrets are encrypted with (AES-256-GCM): 32
    /// random bytes in base64 (`openssl rand -base64 32`); empty: orgs cannot store a key and
    /// webhook secrets are stored as given. Never logged.
    #[serde(default)]
    pub org_key_encryption_key: String,
    /// Earlier values of `org_key_encryption_key` (review D9): rows they encrypted are still
    /// read, nothing new is encrypted with them, and `agentd orgs rekey` moves those rows to the
    /// current key, after which they can be removed. A list, or one string of keys separated by
    /// commas (`AGENTD_LLM__ORG_KEY_PREVIOUS_ENCRYPTION_KEYS`). Never logged.
    #[serde(default, deserialize_with = "providers::one_or_many")]
    pub org_key_previous_encryption_keys: Vec<String>,
}

/// The share of an endpoint's rate one org may take while others wait, when the config says
/// nothing (`llm.org_share_percent`).
pub const DEFAULT_ORG_SHARE_PERCENT: u8 = 50;

fn default_org_share_percent() -> u8 {
    DEFAULT_ORG_SHARE_PERCENT
}

fn default_breaker_failures() -> u32 {
    3
}

fn default_breaker_cooldown_secs() -> u64 {
    30
}

/// `llm.constrained_calls`: `true`, `false` or `"auto"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Constrained {
    Off,
    On,
    /// On for a provider with an HTTP endpoint, until that endpoint refuses one.
    #[default]
    Auto,
}

impl<'de> Deserialize<'de> for Constrained {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Word(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bool(true) => Ok(Constrained::On),
            Raw::Bool(false) => Ok(Constrained::Off),
            Raw::Word(w) if w == "auto" => Ok(Constrained::Auto),
            Raw::Word(w) if w == "true" || w == "on" => Ok(Constrained::On),
            Raw::Word(w) if w == "false" || w == "off" => Ok(Constrained::Off),
            Raw::Word(w) => Err(serde::de::Error::custom(format!(
                "must be true, false or \"auto\" (got {w:?})"
            ))),
        }
    }
}

/// Default of `llm.max_response_bytes`: the raw body, JSON or SSE, of one answer.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 32 << 20;

fn default_max_response_bytes() -> usize {
    DEFAULT_MAX_RESPONSE_BYTES
}

/// Where Anthropic's SDKs send requests when `ANTHROPIC_BASE_URL` is unset.
pub const ANTHROPIC_DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// Where OpenAI's SDKs send requests when `OPENAI_BASE_URL` is unset.
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// `llm.model` of `config/default.toml` (an OpenAI model).
pub const DEFAULT_MODEL: &str = "gpt-4o-mini";
/// The model a provider picked by `ANTHROPIC_API_KEY` asks when `llm.model` was left at
/// [`DEFAULT_MODEL`].
pub const ANTHROPIC_DEFAULT_MODEL: &str = "claude-sonnet-4-5";

impl LlmConfig {
    /// `provider = "auto"` (the default) follows the keys a user already has, as the providers'
    /// SDKs read them (issue 46, item 3): `OPENAI_API_KEY` or `OPENAI_BASE_URL` (or `llm.api_key`
    /// / `llm.base_url`) → OpenAI; `ANTHROPIC_API_KEY` alone → Anthropic, asking
    /// [`ANTHROPIC_DEFAULT_MODEL`] unless `llm.model` names another model than the default;
    /// both → OpenAI (one model serves a run, and it is an OpenAI one unless set: choose with
    /// `llm.provider`, or list both in `[[llm.providers]]`; the start-up log says the other key
    /// is unused); none → offline. `[[llm.providers]]` and an explicit `provider` are left as
    /// they are. `env` reads one environment variable.
    pub fn follow_keys(&mut self, env: impl Fn(&str) -> Option<String>) {
        if self.provider != ProviderChoice::Auto || !self.providers.is_empty() {
            return;
        }
        let set = |v: &str| !v.trim().is_empty();
        let env_set = |k: &str| env(k).is_some_and(|v| set(&v));
        let openai = set(&self.api_key)
            || set(&self.base_url)
            || env_set("OPENAI_API_KEY")
            || env_set("OPENAI_BASE_URL");
        let anthropic = env_set("ANTHROPIC_API_KEY");
        if anthropic && !openai {
            self.provider = ProviderChoice::Anthropic;
            if self.model == DEFAULT_MODEL {
                self.model = ANTHROPIC_DEFAULT_MODEL.to_string();
            }
        }
    }

    /// What each entry will call, for the start-up log: `(name, kind, endpoint, key set)` in
    /// the order calls try them (the endpoint without credentials).
    pub fn endpoints(&self) -> Vec<(String, ProviderKind, String, bool)> {
        self.ordered_entries()
            .into_iter()
            .map(|e| {
                let endpoint = match (e.kind, e.base_url.trim()) {
                    (ProviderKind::Offline, _) => "in-process".to_string(),
                    (ProviderKind::OpenAi, "") => OPENAI_DEFAULT_BASE_URL.to_string(),
                    (ProviderKind::Anthropic, "") => ANTHROPIC_DEFAULT_BASE_URL.to_string(),
                    (_, url) => redact(url),
                };
                let key = !e.api_key.trim().is_empty()
                    || (!e.api_key_env.is_empty() && env_var(&e.api_key_env).is_some());
                (e.name, e.kind, endpoint, key)
            })
            .collect()
    }

    /// The Anthropic endpoint and key `llm.*` names: `llm.base_url`, else `ANTHROPIC_BASE_URL`,
    /// else [`ANTHROPIC_DEFAULT_BASE_URL`]; `llm.api_key`, else `ANTHROPIC_API_KEY`. `env`
    /// reads one environment variable.
    pub fn anthropic_endpoint(&self, env: impl Fn(&str) -> Option<String>) -> (String, String) {
        let set = |v: &str| Some(v.to_string()).filter(|v| !v.trim().is_empty());
        let env = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        let base_url = set(&self.base_url)
            .or_else(|| env("ANTHROPIC_BASE_URL"))
            .unwrap_or_else(|| ANTHROPIC_DEFAULT_BASE_URL.to_string());
        let api_key = set(&self.api_key)
            .or_else(|| env("ANTHROPIC_API_KEY"))
            .unwrap_or_default();
        (base_url, api_key)
    }

    /// The models an org may choose for its runs: `org_models`, else the priced models, `model`,
    /// `extraction_model` and the entries' `models` — in either case only those a provider
    /// entry serves (a model no entry serves would fail every run of the org).
    pub fn allowed_org_models(&self) -> Vec<String> {
        let entries = self.provider_entries();
        let mut m = self.offered_org_models();
        m.retain(|model| entries.iter().any(|e| e.serves(model)));
        m
    }

    fn offered_org_models(&self) -> Vec<String> {
        if !self.org_models.is_empty() {
            return self.org_models.clone();
        }
        // Not every model of the built-in list prices: a price is not an offer.
        let mut m: Vec<String> = self.operator_priced.clone();
        let named = self.providers.iter().flat_map(|e| e.models.iter());
        for own in [&self.model, &self.extraction_model]
            .into_iter()
            .chain(named)
        {
            if !own.is_empty() && !m.contains(own) {
                m.push(own.clone());
            }
        }
        m
    }

    /// The provider entries: `[[llm.providers]]`, or else the one entry the single-endpoint
    /// keys describe — `openai` when `provider = "openai"`, or `"auto"` with a key or base URL
    /// configured (here or in `OPENAI_API_KEY` / `OPENAI_BASE_URL`), else `offline` — so a
    /// config written before entries existed behaves as it did.
    pub fn provider_entries(&self) -> Vec<ProviderEntry> {
        if !self.providers.is_empty() {
            return self.providers.clone();
        }
        if self.provider == ProviderChoice::Anthropic {
            // As Anthropic's SDKs: the config's key and URL, else ANTHROPIC_API_KEY and
            // ANTHROPIC_BASE_URL (an empty URL is the public API).
            let (base_url, api_key) = self.anthropic_endpoint(env_var);
            return vec![ProviderEntry {
                name: ProviderKind::Anthropic.as_str().to_string(),
                kind: ProviderKind::Anthropic,
                base_url,
                api_key,
                api_key_env: String::new(),
                models: Vec::new(),
                requests_per_minute: self.requests_per_minute,
                tokens_per_minute: self.tokens_per_minute,
                request_timeout_secs: None,
                max_retries: None,
                stream: None,
            }];
        }
        let key = Some(self.api_key.clone())
            .filter(|k| !k.is_empty())
            .or_else(|| env_var("OPENAI_API_KEY"));
        let base = Some(self.base_url.clone())
            .filter(|u| !u.is_empty())
            .or_else(|| env_var("OPENAI_BASE_URL"));
        let openai = match self.provider {
            ProviderChoice::OpenAi => true,
            ProviderChoice::Offline | ProviderChoice::Anthropic => false,
            ProviderChoice::Auto => key.is_some() || base.is_some(),
        };
        let kind = if openai {
            ProviderKind::OpenAi
        } else {
            ProviderKind::Offline
        };
        vec![ProviderEntry {
            name: kind.as_str().to_string(),
            kind,
            base_url: if openai {
                base.unwrap_or_default()
            } else {
                String::new()
            },
            api_key: if openai {
                key.unwrap_or_default()
            } else {
                String::new()
            },
            api_key_env: String::new(),
            models: Vec::new(),
            requests_per_minute: self.requests_per_minute,
            tokens_per_minute: self.tokens_per_minute,
            request_timeout_secs: None,
            max_retries: None,
            stream: None,
        }]
    }

    /// [`LlmConfig::provider_entries`] in the order calls try them (`fallback` first).
    pub fn ordered_entries(&self) -> Vec<ProviderEntry> {
        let mut entries = self.provider_entries();
        let rank = |e: &ProviderEntry| {
            self.fallback
                .iter()
                .position(|n| *n == e.name)
                .unwrap_or(self.fallback.len())
        };
        // A stable sort: entries not named keep their order, after the named ones.
        entries.sort_by_key(rank);
        entries
    }
}

/// Logging.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    pub format: LogFormat,
}

impl Config {
    /// The built-in defaults, without file or environment overrides.
    pub fn defaults() -> Self {
        // checked: the built-in file, loaded by every test
        Self::load_from(None, std::iter::empty()).expect("built-in config/default.toml is valid")
    }

    /// Defaults, then `file`, then the process environment.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load_from(file, std::env::vars())
    }

    /// Defaults, then `file`, then the given `AGENTD_*` variables (tests pass their own).
    pub fn load_from(
        file: Option<&Path>,
        env: impl Iterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let file = match file {
            None => None,
            Some(path) => {
                let name = path.display().to_string();
                let text = std::fs::read_to_string(path)
                    .map_err(|e| ConfigError::new(&name, format!("cannot read: {e}")))?;
                Some((name, text))
            }
        };
        Self::load_text(file.as_ref().map(|(n, t)| (n.as_str(), t.as_str())), env)
    }

    /// Defaults, then a file's `(name, text)`, then the given `AGENTD_*` variables.
    pub fn load_text(
        file: Option<(&str, &str)>,
        env: impl Iterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let mut table: toml::Table = DEFAULT_TOML
            .parse()
            .map_err(|e| ConfigError::new("config/default.toml", format!("{e}")))?;
        let mut source = "config/default.toml".to_string();
        let mut operator_priced = Vec::new();
        if let Some((name, text)) = file {
            let name = name.to_string();
            let over: toml::Table = text
                .parse()
                .map_err(|e| ConfigError::new(&name, format!("not valid TOML: {e}")))?;
            if let Some(prices) = over.get("llm").and_then(|l| l.get("prices")) {
                operator_priced.extend(priced_models("llm", "prices", prices));
            }
            merge(&mut table, over, &name)?;
            source = name;
        }
        let mut env_names = Vec::new();
        // The standard OpenTelemetry variables first, so `AGENTD_OTEL__*` overrides them.
        let (standard, own): (Vec<_>, Vec<_>) = env.partition(|(k, _)| otel_key(k).is_some());
        for (key, raw) in standard.into_iter().chain(own) {
            let (section, field) = match otel_key(&key) {
                Some(field) => ("otel".to_string(), field.to_string()),
                None => {
                    let Some(rest) = key.strip_prefix("AGENTD_") else {
                        continue;
                    };
                    let Some((section, field)) = rest.split_once("__") else {
                        continue;
                    };
                    (section.to_ascii_lowercase(), field.to_ascii_lowercase())
                }
            };
            let value = parse_env_value(&raw);
            let Some(toml::Value::Table(sec)) = table.get_mut(&section) else {
                return Err(ConfigError::new(
                    &key,
                    format!(
                        "unknown section `{section}` (known: database, worker, retention, http, api, llm, pii, log, webhooks, otel)"
                    ),
                ));
            };
            if !sec.contains_key(&field) {
                return Err(ConfigError::new(
                    &key,
                    format!("unknown key `{section}.{field}`"),
                ));
            }
            // Keep the type of the default: "8" for an integer key stays an integer, and a
            // string key keeps the raw text even when it looks like a number.
            let value = match (&sec[&field], value) {
                (toml::Value::String(_), _) => toml::Value::String(raw.clone()),
                (_, v) => v,
            };
            operator_priced.extend(priced_models(&section, &field, &value));
            layering::set(sec, &section, field, value);
            env_names.push(key);
        }
        if !env_names.is_empty() {
            source = format!("{source} + {}", env_names.join(", "));
        }
        // The path of a bad value (`llm.providers[1].kind`) is its key.
        let config: Config =
            serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
                let key = e.path().to_string();
                let message = e.inner().message().to_string();
                if key.is_empty() || key == "." {
                    return ConfigError::new(&source, message);
                }
                let message = if message.contains(&key) {
                    message
                } else {
                    format!("{key}: {message}")
                };
                ConfigError {
                    file: source.clone(),
                    key: Some(key),
                    message,
                }
            })?;
        let mut config = config;
        operator_priced.sort();
        operator_priced.dedup();
        config.llm.operator_priced = operator_priced;
        config.llm.follow_keys(env_var);
        config
            .validate()
            .map_err(|e| ConfigError::invalid(source, e))?;
        Ok(config)
    }

    /// Checks ranges and enumerations; the message names the key and the fix.
    pub fn validate(&self) -> Result<(), Invalid> {
        at_least(
            "database.max_connections",
            self.database.max_connections.into(),
            1,
        )?;
        at_least("worker.claim_batch", self.worker.claim_batch.into(), 1)?;
        self.worker
            .prefetch
            .parse()
            .map_err(|m| Invalid::new("worker.prefetch", m))?;
        at_least("worker.poll_interval_ms", self.worker.poll_interval_ms, 10)?;
        at_least("worker.lease_secs", self.worker.lease_secs, 2)?;
        at_least("worker.heartbeat_secs", self.worker.heartbeat_secs, 1)?;
        at_least("api.request_timeout_secs", self.api.request_timeout_secs, 1)?;
        at_least("api.serve_processes", self.api.serve_processes.into(), 1)?;
        at_least(
            "api.header_read_timeout_secs",
            self.api.header_read_timeout_secs,
            1,
        )?;
        at_least(
            "api.max_concurrent_requests",
            self.api.max_concurrent_requests.into(),
            1,
        )?;
        at_least(
            "api.max_concurrent_uploads",
            self.api.max_concurrent_uploads.into(),
            1,
        )?;
        for (key, value) in [
            ("database.lock_timeout_ms", self.database.lock_timeout_ms),
            (
                "database.idle_in_transaction_timeout_ms",
                self.database.idle_in_transaction_timeout_ms,
            ),
            (
                "database.statement_timeout_ms",
                self.database.statement_timeout_ms,
            ),
        ] {
            // PostgreSQL takes these in milliseconds as a 32-bit integer.
            if value > i32::MAX as u64 {
                return Err(Invalid::new(
                    key,
                    format!(
                        "{key} must be at most {} (about 24 days; 0 disables it; got {value})",
                        i32::MAX
                    ),
                ));
            }
        }
        for (key, value, unit) in [
            (
                "worker.poll_interval_ms",
                self.worker.poll_interval_ms,
                TimeUnit::Millis,
            ),
            ("worker.lease_secs", self.worker.lease_secs, TimeUnit::Secs),
            (
                "worker.heartbeat_secs",
                self.worker.heartbeat_secs,
                TimeUnit::Secs,
            ),
            (
                "worker.shutdown_grace_secs",
                self.worker.shutdown_grace_secs,
                TimeUnit::Secs,
            ),
            (
                "worker.rescue_interval_secs",
                self.worker.rescue_interval_secs,
                TimeUnit::Secs,
            ),
            (
                "retention.finished_after_hours",
                self.retention.finished_after_hours,
                TimeUnit::Hours,
            ),
            (
                "retention.interval_secs",
                self.retention.interval_secs,
                TimeUnit::Secs,
            ),
            (
                "llm.request_timeout_secs",
                self.llm.request_timeout_secs,
                TimeUnit::Secs,
            ),
            (
                "llm.offline_latency_ms",
                self.llm.offline_latency_ms,
                TimeUnit::Millis,
            ),
            (
                "api.header_read_timeout_secs",
                self.api.header_read_timeout_secs,
                TimeUnit::Secs,
            ),
        ] {
            duration_at_most(key, value, unit)?;
        }
        if self.worker.heartbeat_secs.saturating_mul(2) > self.worker.lease_secs {
            return Err(Invalid::new(
                "worker.heartbeat_secs",
                format!(
                    "worker.heartbeat_secs ({}) must be at most half of worker.lease_secs ({}) so a lease is renewed before it expires",
                    self.worker.heartbeat_secs, self.worker.lease_secs
                ),
            ));
        }
        at_least(
            "worker.rescue_interval_secs",
            self.worker.rescue_interval_secs,
            1,
        )?;
        at_least("retention.batch", self.retention.batch.into(), 1)?;
        if self.retention.transcripts_after_days > 36_500 {
            return Err(Invalid::new(
                "retention.transcripts_after_days",
                format!(
                    "retention.transcripts_after_days must be at most 36500 (got {})",
                    self.retention.transcripts_after_days
                ),
            ));
        }
        for (key, days) in [
            ("retention.runs_after_days", self.retention.runs_after_days),
            (
                "retention.events_after_days",
                self.retention.events_after_days,
            ),
            (
                "retention.suggestions_after_days",
                self.retention.suggestions_after_days,
            ),
            (
                "retention.audit_after_days",
                self.retention.audit_after_days,
            ),
            (
                "retention.provider_calls_after_days",
                self.retention.provider_calls_after_days,
            ),
        ] {
            if days > 36_500 {
                return Err(Invalid::new(
                    key,
                    format!("{key} must be at most 36500 (got {days}; 0 keeps everything)"),
                ));
            }
        }
        at_least("retention.interval_secs", self.retention.interval_secs, 1)?;
        at_least("llm.request_timeout_secs", self.llm.request_timeout_secs, 1)?;
        at_least(
            "llm.max_output_tokens",
            self.llm.max_output_tokens.into(),
            16,
        )?;
        at_least(
            "llm.context_window_tokens",
            self.llm.context_window_tokens,
            1024,
        )?;
        at_least(
            "llm.max_response_bytes",
            self.llm.max_response_bytes as u64,
            64 * 1024,
        )?;
        at_least(
            "llm.max_stream_bytes",
            self.llm.max_stream_bytes as u64,
            1024,
        )?;
        if !["job", "on", "off"].contains(&self.llm.guided.as_str()) {
            return Err(Invalid::new(
                "llm.guided",
                format!(
                    "llm.guided must be job, on or off (got {:?})",
                    self.llm.guided
                ),
            ));
        }
        if let Some(rt) = &self.worker.runtime
            && rt != "apalis"
        {
            return Err(Invalid::new(
                "worker.runtime",
                format!(
                    "worker.runtime: {rt:?} is no longer available: apalis is the only runtime \
                     (the native runtime was removed); remove the key or set it to \"apalis\""
                ),
            ));
        }
        if !self.http.addr.is_empty() && self.http.addr.parse::<std::net::SocketAddr>().is_err() {
            return Err(Invalid::new(
                "http.addr",
                format!(
                    "http.addr must be host:port, e.g. 127.0.0.1:9187, or empty to disable (got {:?})",
                    self.http.addr
                ),
            ));
        }
        self.otel.validate()?;
        providers::validate(&self.llm)?;
        for (model, price) in &self.llm.prices {
            price.check(&format!("llm.prices.{model:?}"))?;
        }
        self.webhooks.validate()?;
        for (i, p) in self.pii.national_id_patterns.iter().enumerate() {
            if let Err(e) = regex::Regex::new(p) {
                let key = format!("pii.national_id_patterns[{i}]");
                let message = format!("{key} is not a valid regular expression ({p:?}): {e}");
                return Err(Invalid::new(key, message));
            }
        }
        Ok(())
    }

    /// The directory holding `jobs/<kind>.toml`, if there is one to read.
    pub fn jobs_dir(&self) -> Option<PathBuf> {
        if !self.worker.jobs_dir.is_empty() {
            return Some(PathBuf::from(&self.worker.jobs_dir));
        }
        let local = PathBuf::from("jobs");
        local.is_dir().then_some(local)
    }
}
