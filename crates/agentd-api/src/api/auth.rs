//! API keys and roles. A key is `agentd_` + 64 hex characters of randomness; only its SHA-256
//! is stored. `Authorization: Bearer KEY` decides the org and the role; the key itself never
//! reaches a log line (the request log names the key's id).

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
use std::marker::PhantomData;
use std::time::Instant;
use uuid::Uuid;

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
            Some(token) => match api_keys::find_live(&s.app.pool, &hash_key(token)).await {
                Ok(owner) => owner,
                Err(e) => return Problem::internal(e).into_response(),
            },
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
