//! API keys and roles. A key is `agentd_` + 64 hex characters of randomness; only its SHA-256
//! is stored. `Authorization: Bearer KEY` decides the org and the role; the key itself never
//! reaches a log line (the request log names the key's id).
//!
//! A refused token costs at most one database query in [`REFUSAL_TTL`] (review D8): its
//! SHA-256 — never the token — is remembered ([`Tokens`], bounded); and a source past
//! `api.refused_per_minute_per_source` refused tokens (`rate.rs`) gets 429 with `Retry-After`
//! for any token it has not used successfully lately, before a query. A key that worked from a
//! source is still looked up every time (a revocation takes effect at once), past the source's
//! refusals too, so clients sharing an address with a guesser (behind one proxy) keep working.

use super::ApiState;
use super::error::Problem;
use crate::app::App;
use crate::store::api_keys;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rand::RngCore;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::marker::PhantomData;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// How long a refused token's hash is remembered: the same token again within it is refused
/// without a query. A key can only go from refused to live when its org is made active again,
/// which then takes this long to reach a client that was refused.
pub const REFUSAL_TTL: Duration = Duration::from_secs(30);
/// How long a key that authenticated is exempt from its source's refusal limit.
const ACCEPTED_TTL: Duration = Duration::from_secs(600);
/// Most hashes each of the two maps holds; a full map forgets its expired entries (at most
/// once a second), and while it is still full remembers nothing new.
const MAX_REMEMBERED: usize = 50_000;

/// Hashes of tokens refused and accepted lately, with when (one map per process).
#[derive(Debug, Default)]
pub struct Tokens {
    refused: Mutex<Remembered>,
    accepted: Mutex<Remembered>,
}

#[derive(Debug, Default)]
struct Remembered {
    at: HashMap<String, Instant>,
    purged: Option<Instant>,
}

impl Remembered {
    fn fresh(&self, hash: &str, ttl: Duration, now: Instant) -> bool {
        self.at
            .get(hash)
            .is_some_and(|t| now.saturating_duration_since(*t) < ttl)
    }

    fn remember(&mut self, hash: &str, ttl: Duration, now: Instant) {
        if self.at.len() >= MAX_REMEMBERED && !self.at.contains_key(hash) {
            let due = self
                .purged
                .is_none_or(|p| now.saturating_duration_since(p) >= Duration::from_secs(1));
            if due {
                self.at
                    .retain(|_, t| now.saturating_duration_since(*t) < ttl);
                self.purged = Some(now);
            }
            if self.at.len() >= MAX_REMEMBERED {
                return;
            }
        }
        self.at.insert(hash.to_string(), now);
    }
}

fn locked(m: &Mutex<Remembered>) -> std::sync::MutexGuard<'_, Remembered> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Tokens {
    /// `hash` was refused within [`REFUSAL_TTL`].
    pub fn refused_lately(&self, hash: &str, now: Instant) -> bool {
        locked(&self.refused).fresh(hash, REFUSAL_TTL, now)
    }

    /// `hash` authenticated within [`ACCEPTED_TTL`].
    pub fn accepted_lately(&self, hash: &str, now: Instant) -> bool {
        locked(&self.accepted).fresh(hash, ACCEPTED_TTL, now)
    }

    pub fn refuse(&self, hash: &str, now: Instant) {
        locked(&self.refused).remember(hash, REFUSAL_TTL, now);
    }

    pub fn accept(&self, hash: &str, now: Instant) {
        locked(&self.accepted).remember(hash, ACCEPTED_TTL, now);
        locked(&self.refused).at.remove(hash);
    }
}

/// What a key may do; each role includes the ones before it.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Every GET.
    Reader,
    /// + create documents and jobs.
    Uploader,
    /// + decide approvals, accept/reject proposals.
    Reviewer,
    /// + settings.
    Admin,
}

impl Role {
    /// Every role, weakest first.
    pub const ALL: [Role; 4] = [Role::Reader, Role::Uploader, Role::Reviewer, Role::Admin];

    /// The role's name as stored and typed.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Reader => "reader",
            Role::Uploader => "uploader",
            Role::Reviewer => "reviewer",
            Role::Admin => "admin",
        }
    }

    /// Parses a role name.
    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// A new random key.
pub fn new_key() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("agentd_{}", hex::encode(bytes))
}

/// The stored form of a key: hex SHA-256.
pub fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// The part of a key shown by `keys list` (not enough to use it).
pub fn key_prefix(key: &str) -> String {
    key.chars().take(14).collect()
}

/// Creates a key for an org; returns `(key id, the key)` — the key is not stored.
pub async fn create_key<'e, E: sqlx::PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    role: Role,
    now: chrono::DateTime<chrono::Utc>,
) -> sqlx::Result<(Uuid, String)> {
    let key = new_key();
    let id = Uuid::now_v7();
    api_keys::insert_key(
        exec,
        id,
        org_id,
        role.as_str(),
        &hash_key(&key),
        &key_prefix(&key),
        now,
    )
    .await?;
    Ok((id, key))
}

/// The authenticated caller of a request.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    pub key_id: Uuid,
    /// Every query of the request is scoped to this org.
    pub org_id: Uuid,
    pub role: Role,
}

impl Caller {
    /// 403 unless the caller's role includes `need`.
    pub fn require(&self, need: Role) -> Result<(), Problem> {
        if self.role >= need {
            Ok(())
        } else {
            Err(Problem::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!(
                    "this key's role is {}; this needs {} or above",
                    self.role.as_str(),
                    need.as_str()
                ),
            ))
        }
    }
}

/// A role a route needs, as a type: [`Scoped<Admin>`](Scoped) in a handler's signature is its
/// role check.
pub trait Needs: Send + Sync + 'static {
    /// The weakest role allowed.
    const ROLE: Role;
}

macro_rules! needs {
    ($($(#[$doc:meta])* $name:ident => $role:ident;)*) => {$(
        $(#[$doc])*
        pub enum $name {}

        impl Needs for $name {
            const ROLE: Role = Role::$role;
        }
    )*};
}

needs! {
    /// Any live key (every GET).
    Reader => Reader;
    /// Creates documents and jobs.
    Uploader => Uploader;
    /// Decides approvals and proposals.
    Reviewer => Reviewer;
    /// Changes settings and webhooks, retries jobs.
    Admin => Admin;
}

/// What a `/v1` handler starts from: the app and a caller whose role includes `R`. Extracting
/// it is the role check (403 before the handler runs, before its body is read), so a handler
/// cannot forget it and its signature says who may call it; `org_id()` scopes every query. It
/// also refuses a query string on a route that reads none (400, `extract::no_stray_query`).
pub struct Scoped<R: Needs = Reader> {
    pub app: App,
    pub caller: Caller,
    role: PhantomData<R>,
}

impl<R: Needs> Scoped<R> {
    /// The caller's org: every read and write of the request is scoped to it.
    pub fn org_id(&self) -> Uuid {
        self.caller.org_id
    }
}

impl<R: Needs> FromRequestParts<ApiState> for Scoped<R> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, s: &ApiState) -> Result<Self, Problem> {
        let caller = Caller::from_request_parts(parts, s).await?;
        super::extract::no_stray_query(parts)?;
        caller.require(R::ROLE)?;
        Ok(Scoped {
            app: s.app.clone(),
            caller,
            role: PhantomData,
        })
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Caller>()
            .copied()
            .ok_or_else(unauthorized)
    }
}

fn unauthorized() -> Problem {
    Problem::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "send Authorization: Bearer <API key> (a live key; `agentd keys create` makes one)",
    )
}

/// Authenticates `/v1` requests (the OpenAPI document is public) and logs each request
/// without its headers.
pub async fn authenticate(State(s): State<ApiState>, mut req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let mut caller = None;
    if path != "/v1/openapi.json" {
        let token = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, rest) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
            })
            .filter(|t| !t.is_empty());
        let owner = match token {
            Some(token) => {
                let source = req
                    .extensions()
                    .get::<axum::extract::ConnectInfo<SocketAddr>>()
                    .map(|c| c.0.ip());
                match look_up(&s, &hash_key(token), source).await {
                    Ok(owner) => owner,
                    Err(refused) => return log(&method, &path, None, started, refused),
                }
            }
            None => None,
        };
        let Some(owner) = owner else {
            let refused = unauthorized().into_response();
            return log(&method, &path, None, started, refused);
        };
        let c = Caller {
            key_id: owner.key_id,
            org_id: owner.org_id,
            role: Role::parse(&owner.role).unwrap_or(Role::Reader),
        };
        let runs = super::rate::enqueues_runs(&method, &path);
        let rate = |r: Option<i32>| r.and_then(|r| u32::try_from(r).ok());
        let own = super::rate::OrgRates {
            requests_per_minute: rate(owner.requests_per_minute),
            runs_per_minute: rate(owner.runs_per_minute),
        };
        if let Err(limited) = s.limits.admit(&c, own, runs, Instant::now()) {
            let refused = Problem::rate_limited(&limited).into_response();
            return log(&method, &path, Some(c), started, refused);
        }
        req.extensions_mut().insert(c);
        caller = Some(c);
    }
    let res = next.run(req).await;
    log(&method, &path, caller, started, res)
}

/// The live key of `hash`, or `None` (refused): a hash refused lately, or one over the refusals
/// of `source` (429) that has not authenticated lately, is answered without a query.
async fn look_up(
    s: &ApiState,
    hash: &str,
    source: Option<IpAddr>,
) -> Result<Option<api_keys::KeyOwner>, Response> {
    let now = Instant::now();
    if s.tokens.refused_lately(hash, now) {
        return Ok(None);
    }
    if let Some(ip) = source
        && !s.tokens.accepted_lately(hash, now)
        && let Err(limited) = s.limits.may_look_up(ip, now)
    {
        return Err(Problem::rate_limited(&limited).into_response());
    }
    let owner = api_keys::find_live(&s.app.pool, hash)
        .await
        .map_err(|e| Problem::internal(e).into_response())?;
    match &owner {
        Some(_) => s.tokens.accept(hash, now),
        None => {
            s.tokens.refuse(hash, now);
            if let Some(ip) = source {
                s.limits.refused(ip, now);
            }
        }
    }
    Ok(owner)
}

fn log(
    method: &axum::http::Method,
    path: &str,
    caller: Option<Caller>,
    started: Instant,
    res: Response,
) -> Response {
    tracing::info!(
        %method,
        path,
        status = res.status().as_u16(),
        org_id = caller.map(|c| c.org_id.to_string()).unwrap_or_default(),
        key_id = caller.map(|c| c.key_id.to_string()).unwrap_or_default(),
        ms = started.elapsed().as_secs_f64() * 1000.0,
        "api request"
    );
    res
}
