//! Per-org settings: what they mean, how a change is validated and applied. One path for the
//! CLI (`agentd orgs set ORG key=value …`) and the API (`PATCH /v1/settings`): a [`Patch`] is
//! checked key by key, and a bad value is a [`SettingError`] naming the key (exit 2 /
//! problem+json with `field`). The monthly token limit the budget code enforces is the smaller
//! of `monthly_token_budget` and the tokens `cost_cap_cents` buys at the org's model's price
//! (`llm.prices`, the table every cost agentd shows comes from: cents per million tokens; the
//! highest of its input, output, cache-read and cache-write prices, so the cap holds whatever
//! the mix).

use crate::config::Config;
use crate::store::org_settings::{self as store, ByokFallback, OrgSettings};
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

pub use crate::config::ModelPrice;

/// Longest approval TTL an org may set (30 days).
pub const MAX_APPROVAL_TTL_SECS: i64 = 30 * 24 * 3600;
/// Shortest approval TTL (one minute).
pub const MIN_APPROVAL_TTL_SECS: i64 = 60;

/// A change of settings: absent keys stay; a present `null` clears the optional ones.
/// `SettingsPatch` in the OpenAPI document (the class a generated client names after it).
#[derive(Debug, Default, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = SettingsPatch)]
pub struct Patch {
    /// Tokens per calendar month (UTC), ≥ 0; null: unlimited.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, minimum = 0)]
    pub monthly_token_budget: Option<Option<i64>>,
    /// Most the org's model calls may cost per month, in cents (≥ 0); null: no cap. The model
    /// needs a price in `llm.prices`.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, minimum = 0)]
    pub cost_cap_cents: Option<Option<i64>>,
    /// The model of the org's runs (1–200 characters, not only spaces, no NUL); null: the job
    /// file's / `llm.model`.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 200, pattern = r"^[^\u0000]*[^\u0000\s][^\u0000]*$")]
    pub model: Option<Option<String>>,
    /// Auto-create on uploads (false: documents are `skipped`).
    pub auto_create: Option<bool>,
    /// IANA time zone, e.g. `Europe/Berlin`.
    #[schema(value_type = Option<Timezone>)]
    pub timezone: Option<String>,
    /// Local hour (0–23) from which the nightly job runs on each local date.
    #[schema(minimum = 0, maximum = 23)]
    pub nightly_hour: Option<i64>,
    /// How long approvals wait (60 s – 30 days); null: the job file's `approval_ttl_secs`.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, minimum = 60, maximum = 2592000)]
    pub approval_ttl_secs: Option<Option<i64>>,
    /// Re-propose expired approvals whose data did not change, once, on the next working day.
    pub repropose_expired: Option<bool>,
    /// With the org's own provider key: `none` (the default), its calls go only to the entry
    /// the key is for; `operator`, the operator's entries (and keys) serve them when that
    /// entry fails or does not serve the model.
    pub byok_fallback: Option<ByokFallback>,
    /// API requests a minute of all the org's keys together (1–1,000,000); null: the service's
    /// `api.requests_per_minute_per_org`. Set by the operator: an org key gets 422.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 1000000)]
    pub requests_per_minute: Option<Option<i64>>,
    /// Requests a minute that enqueue model runs (uploads with auto-create, `POST /v1/jobs`,
    /// refines), per key of the org (1–1,000,000); null: the service's
    /// `api.runs_per_minute_per_key`. Set by the operator: an org key gets 422.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 1000000)]
    pub runs_per_minute: Option<Option<i64>>,
}

/// Highest API rate an org may be given (requests a minute).
pub const MAX_RATE_PER_MINUTE: i64 = 1_000_000;

impl Patch {
    /// The keys the patch sets or clears (what an audit row of the change names).
    pub fn keys(&self) -> Vec<&'static str> {
        [
            ("monthly_token_budget", self.monthly_token_budget.is_some()),
            ("cost_cap_cents", self.cost_cap_cents.is_some()),
            ("model", self.model.is_some()),
            (AUTO_CREATE, self.auto_create.is_some()),
            ("timezone", self.timezone.is_some()),
            ("nightly_hour", self.nightly_hour.is_some()),
            ("approval_ttl_secs", self.approval_ttl_secs.is_some()),
            ("repropose_expired", self.repropose_expired.is_some()),
            ("byok_fallback", self.byok_fallback.is_some()),
            ("requests_per_minute", self.requests_per_minute.is_some()),
            ("runs_per_minute", self.runs_per_minute.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, set)| set.then_some(k))
        .collect()
    }
}

/// `Timezone` in the OpenAPI document: one of the IANA names chrono-tz knows (every one of them
/// PostgreSQL knows too). A named schema, so a nullable field refers to one enum (`oneOf` with
/// `null`) and a client generator makes one type of it, not one per JSON type.
pub struct Timezone;

impl utoipa::PartialSchema for Timezone {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::extensions::ExtensionsBuilder;
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        let names = chrono_tz::TZ_VARIANTS.iter().map(|t| t.name());
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some("IANA time zone, e.g. `Europe/Berlin`."))
            .enum_values(Some(names.clone()))
            // Generators derive a constant's name from its value, and `GMT+0` and `GMT0` become
            // one name (openapi-python-client refuses the document): each gets its own.
            .extensions(Some(
                ExtensionsBuilder::new()
                    .add(
                        "x-enum-varnames",
                        names.map(enum_varname).collect::<Vec<_>>(),
                    )
                    .build(),
            ))
            .into()
    }
}

impl utoipa::ToSchema for Timezone {}

/// A time zone's constant name for generators: `Etc/GMT+5` → `ETC_GMT_PLUS_5`, `Etc/GMT-5` →
/// `ETC_GMT_MINUS_5`, `America/Port-au-Prince` → `AMERICA_PORT_AU_PRINCE`.
fn enum_varname(name: &str) -> String {
    let mut out = String::new();
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '+' => out.push_str("_PLUS_"),
            '-' if chars.peek().is_some_and(char::is_ascii_digit) => out.push_str("_MINUS_"),
            c if c.is_ascii_alphanumeric() => out.push(c.to_ascii_uppercase()),
            _ => out.push('_'),
        }
    }
    let words: Vec<&str> = out.split('_').filter(|w| !w.is_empty()).collect();
    words.join("_")
}

fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// The setting that turns uploads' auto-create on or off.
const AUTO_CREATE: &str = "auto_create"; // not a job kind: the org setting named after it

/// The keys and what each takes (for `orgs set` and error messages).
pub const KEYS: [(&str, &str); 11] = [
    ("monthly_token_budget", "integer ≥ 0 or null"),
    ("cost_cap_cents", "integer ≥ 0 or null"),
    ("model", "model name or null"),
    (AUTO_CREATE, "true or false"),
    ("timezone", "IANA time zone"),
    ("nightly_hour", "0–23"),
    ("approval_ttl_secs", "60–2592000 or null"),
    ("repropose_expired", "true or false"),
    ("byok_fallback", "none or operator"),
    ("requests_per_minute", "1–1000000 or null"),
    ("runs_per_minute", "1–1000000 or null"),
];

/// A bad setting: the key and what is wrong.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SettingError {
    pub field: String,
    pub message: String,
}

fn err(field: &str, message: impl Into<String>) -> SettingError {
    SettingError {
        field: field.into(),
        message: message.into(),
    }
}

/// `key=value` pairs (CLI) as a patch: values are typed by key (`null` clears).
pub fn parse_pairs(pairs: &[String]) -> Result<Patch, SettingError> {
    let mut map = serde_json::Map::new();
    for pair in pairs {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(err(pair, "expected key=value"));
        };
        let (k, v) = (k.trim(), v.trim());
        let Some((_, takes)) = KEYS.iter().find(|(name, _)| *name == k) else {
            return Err(err(
                k,
                format!(
                    "unknown setting (known: {})",
                    KEYS.map(|(n, _)| n).join(", ")
                ),
            ));
        };
        let value = match (k, v) {
            ("byok_fallback", _) if ByokFallback::ALL.iter().any(|b| b.as_str() == v) => json!(v),
            ("byok_fallback", _) => return Err(err(k, format!("must be {takes} (got {v:?})"))),
            (_, "null") => Value::Null,
            ("model" | "timezone", _) => json!(v),
            (AUTO_CREATE | "repropose_expired", "true" | "on" | "yes") => json!(true),
            (AUTO_CREATE | "repropose_expired", "false" | "off" | "no") => json!(false),
            (AUTO_CREATE | "repropose_expired", _) => {
                return Err(err(k, format!("must be {takes} (got {v:?})")));
            }
            _ => json!(
                v.replace('_', "")
                    .parse::<i64>()
                    .map_err(|_| err(k, format!("must be {takes} (got {v:?})")))?
            ),
        };
        if map.insert(k.to_string(), value).is_some() {
            return Err(err(k, "given twice"));
        }
    }
    serde_json::from_value(Value::Object(map)).map_err(|e| err("settings", e.to_string()))
}

/// The monthly token limit to enforce for `s` (None: unlimited).
pub fn enforced_limit(config: &Config, s: &OrgSettings) -> Result<Option<i64>, SettingError> {
    let by_cost = match s.cost_cap_cents {
        None => None,
        Some(cents) => {
            let model = model_of(config, s);
            let price = crate::config::price_of(&config.llm.prices, &model).ok_or_else(|| {
                err(
                    "cost_cap_cents",
                    format!(
                        "the model {model:?} has no price in llm.prices, so a cost cap cannot be converted to tokens (priced: {})",
                        config.llm.prices.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                )
            })?;
            let per_mtok = price.max_cents_per_mtok();
            if per_mtok <= 0.0 {
                None
            } else {
                Some(((cents as f64) * 1_000_000.0 / per_mtok).floor() as i64)
            }
        }
    };
    Ok(match (s.token_budget, by_cost) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    })
}

/// The model the org's runs use.
pub fn model_of(config: &Config, s: &OrgSettings) -> String {
    s.model.clone().unwrap_or_else(|| config.llm.model.clone())
}

/// `v` for `key`, if it is ≥ 0 or null.
fn not_negative(key: &str, v: Option<i64>) -> Result<Option<i64>, SettingError> {
    match v {
        Some(n) if n < 0 => Err(err(key, format!("must be ≥ 0 or null (got {n})"))),
        v => Ok(v),
    }
}

/// `p` applied to `s`, each key validated.
pub fn merge(mut s: OrgSettings, p: &Patch) -> Result<OrgSettings, SettingError> {
    if let Some(v) = p.monthly_token_budget {
        s.token_budget = not_negative("monthly_token_budget", v)?;
    }
    if let Some(v) = p.cost_cap_cents {
        s.cost_cap_cents = not_negative("cost_cap_cents", v)?;
    }
    if let Some(m) = &p.model {
        if let Some(m) = m {
            let t = m.trim();
            if t.is_empty() || m.chars().count() > 200 || t.contains('\0') {
                return Err(err(
                    "model",
                    "must be a model name (1–200 characters) or null",
                ));
            }
        }
        s.model = m.as_ref().map(|m| m.trim().to_string());
    }
    if let Some(b) = p.auto_create {
        s.auto_create = b;
    }
    if let Some(tz) = &p.timezone {
        let tz = tz.trim();
        if tz.parse::<chrono_tz::Tz>().is_err() {
            return Err(err(
                "timezone",
                format!("must be an IANA time zone such as Europe/Berlin (got {tz:?})"),
            ));
        }
        s.timezone = tz.to_string();
    }
    if let Some(h) = p.nightly_hour {
        if !(0..=23).contains(&h) {
            return Err(err("nightly_hour", format!("must be 0–23 (got {h})")));
        }
        s.nightly_hour = h as i16;
    }
    if let Some(ttl) = p.approval_ttl_secs {
        if let Some(n) =
            ttl.filter(|n| !(MIN_APPROVAL_TTL_SECS..=MAX_APPROVAL_TTL_SECS).contains(n))
        {
            return Err(err(
                "approval_ttl_secs",
                format!(
                    "must be {MIN_APPROVAL_TTL_SECS}–{MAX_APPROVAL_TTL_SECS} seconds or null (got {n})"
                ),
            ));
        }
        s.approval_ttl_secs = ttl.map(|n| n as i32);
    }
    if let Some(b) = p.repropose_expired {
        s.repropose_expired = b;
    }
    if let Some(b) = p.byok_fallback {
        s.byok_fallback = b;
    }
    let rate = |key: &str, v: Option<i64>| match v {
        Some(n) if !(1..=MAX_RATE_PER_MINUTE).contains(&n) => Err(err(
            key,
            format!("must be 1–{MAX_RATE_PER_MINUTE} requests a minute or null (got {n})"),
        )),
        v => Ok(v.map(|n| n as i32)),
    };
    if let Some(v) = p.requests_per_minute {
        s.requests_per_minute = rate("requests_per_minute", v)?;
    }
    if let Some(v) = p.runs_per_minute {
        s.runs_per_minute = rate("runs_per_minute", v)?;
    }
    Ok(s)
}

/// Why a change was not applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("no org {0}")]
    NotFound(Uuid),
    #[error(transparent)]
    Invalid(#[from] SettingError),
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
}

/// Who changes an org's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetBy {
    /// The operator (`agentd orgs set`, the demo): any value that is valid.
    Operator,
    /// The org's own admin key (`PATCH /v1/settings`): the budget and the cost cap may only be
    /// lowered (the operator's limits are ceilings), its API rates are the operator's alone, and the model is one of
    /// [`crate::config::LlmConfig::allowed_org_models`] (review N13).
    OrgAdmin,
}

/// Refuses what an org admin may not change (see [`SetBy::OrgAdmin`]).
fn check_org_admin(
    config: &Config,
    cur: &OrgSettings,
    next: &OrgSettings,
) -> Result<(), SettingError> {
    let raised = |now: Option<i64>, then: Option<i64>| match (now, then) {
        (Some(a), Some(b)) => b > a,
        (Some(_), None) => true,
        (None, _) => false,
    };
    for (key, now, then) in [
        ("monthly_token_budget", cur.token_budget, next.token_budget),
        ("cost_cap_cents", cur.cost_cap_cents, next.cost_cap_cents),
    ] {
        if raised(now, then) {
            return Err(err(
                key,
                format!(
                    "may only be lowered with an org key (now {}); an operator raises or removes it with `agentd orgs set`",
                    now.map_or("unlimited".into(), |n| n.to_string())
                ),
            ));
        }
    }
    // The org's API rates are the operator's to set: an org admin who lowered them could not
    // lift them again, and one at 1 a minute would lock its own keys out.
    for (key, now, then) in [
        (
            "requests_per_minute",
            cur.requests_per_minute,
            next.requests_per_minute,
        ),
        ("runs_per_minute", cur.runs_per_minute, next.runs_per_minute),
    ] {
        if now != then {
            return Err(err(
                key,
                format!(
                    "is set by the operator (`agentd orgs set ORG {key}=N`); an org key cannot change it"
                ),
            ));
        }
    }
    if let Some(m) = &next.model
        && next.model != cur.model
    {
        let allowed = config.llm.allowed_org_models();
        if !allowed.contains(m) {
            return Err(err(
                "model",
                format!(
                    "{m:?} is not a model this service offers (one of: {}, or null)",
                    allowed.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// Validates `p` against the org's current settings and saves it with the enforced budget, in
/// one transaction (the org row locked). Nothing is written when a key is bad or `by` may not
/// make the change.
pub async fn apply(
    pool: &PgPool,
    config: &Config,
    org_id: Uuid,
    p: &Patch,
    now: chrono::DateTime<chrono::Utc>,
    by: SetBy,
) -> Result<OrgSettings, ApplyError> {
    let mut tx = pool.begin().await?;
    let next = apply_in(&mut tx, config, org_id, p, now, by).await?;
    tx.commit().await?;
    Ok(next)
}

/// [`apply`] in the caller's transaction (which also records who changed what).
pub async fn apply_in(
    tx: &mut PgConnection,
    config: &Config,
    org_id: Uuid,
    p: &Patch,
    now: chrono::DateTime<chrono::Utc>,
    by: SetBy,
) -> Result<OrgSettings, ApplyError> {
    let current = store::lock(&mut *tx, org_id)
        .await?
        .ok_or(ApplyError::NotFound(org_id))?;
    let next = merge(current.clone(), p)?;
    if by == SetBy::OrgAdmin {
        check_org_admin(config, &current, &next)?;
    }
    let limit = enforced_limit(config, &next)?;
    // The nightly fan-out converts in SQL: PostgreSQL must know the zone too.
    let known: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_timezone_names WHERE name = $1)")
            .bind(&next.timezone)
            .fetch_one(&mut *tx)
            .await?;
    if !known {
        return Err(err(
            "timezone",
            format!("PostgreSQL does not know the time zone {:?}", next.timezone),
        )
        .into());
    }
    store::save(&mut *tx, &next, limit, now).await?;
    Ok(next)
}

/// The org's time zone (UTC if the stored name no longer parses).
pub fn tz(s: &OrgSettings) -> chrono_tz::Tz {
    s.timezone.parse().unwrap_or(chrono_tz::UTC)
}
