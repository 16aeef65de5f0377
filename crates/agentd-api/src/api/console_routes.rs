//! The routes the web console needs beside the others: who the key is (`GET /v1/me`), the
//! queue view (`GET /v1/queue`, admin: the org's depth and throughput per kind over a window,
//! and the fleet's workers, breakers and provider limits without naming hosts), retrying a dead
//! job (`POST /v1/jobs/{id}/retry`, admin) and the run list (`GET /v1/runs`). All org-scoped
//! like every route.

use super::auth::Role;
use super::auth::{Admin, Scoped};
use super::error::{ApiResult, Problem, ok};
use super::extract::{Id, Page, Paged, Params, page_params, query_param, state};
use crate::queue::JobState;
use crate::store::console_reads::{self, Bucket, KindSeries, Retry};
use crate::store::states::RunStatus;
use crate::store::status::{ReadyAge, StateCount};
use crate::store::{orgs, runs::RunRow, status};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;
use utoipa::openapi::path::{Parameter, ParameterIn};
use uuid::Uuid;

/// Dead jobs the queue view lists.
const DEAD_SHOWN: i64 = 50;

/// Who the key is.
#[derive(Debug, Serialize, ToSchema)]
pub struct Me {
    pub org_id: Uuid,
    pub org_name: Option<String>,
    pub key_id: Uuid,
    pub role: Role,
}

/// The caller's key: org, key id and role (what the console may offer).
#[utoipa::path(get, path = "/v1/me", tag = "console", operation_id = "getMe",
    responses((status = 200, body = Me, description = "The key's org and role")))]
pub async fn me(req: Scoped) -> ApiResult {
    let caller = req.caller;
    let org = orgs::find(&req.app.pool, &caller.org_id.to_string()).await?;
    ok(&Me {
        org_id: caller.org_id,
        org_name: org.map(|o| o.name),
        key_id: caller.key_id,
        role: caller.role,
    })
}

/// The queue view of `GET /v1/queue`.
#[derive(Debug, Serialize, ToSchema)]
pub struct QueueView {
    pub now: DateTime<Utc>,
    /// Jobs by kind and state.
    pub depth: Vec<StateCount>,
    /// Ready jobs per kind, with the oldest one's age.
    pub ready: Vec<ReadyAge>,
    /// The oldest ready job's age over every kind (none: nothing is ready).
    pub oldest_ready_secs: Option<f64>,
    /// The width of a `throughput` bucket.
    pub bucket_secs: i64,
    /// Finished jobs per bucket over the last hour, oldest first.
    pub throughput: Vec<Bucket>,
    /// The newest dead jobs (at most 50).
    pub dead: Vec<DeadJob>,
    /// The job kinds of this server (what may be paused).
    pub kinds: Vec<String>,
    /// The kinds the org paused: their jobs are not claimed until resumed.
    pub paused: Vec<crate::queue::pause::PausedKind>,
    /// The window of `series` (`?window=`), in seconds.
    pub window_secs: i64,
    /// The width of a `series` point's bucket (`window_secs / 12`).
    pub series_bucket_secs: i64,
    /// Per kind over the window, 12 points oldest first: depth (ready, running, dead) at each
    /// point and the jobs that succeeded or went dead in the bucket ending there. Derived from
    /// the job rows (see docs/console.md); kinds with nothing in the window are left out.
    pub series: Vec<KindSeries>,
    /// The fleet's live workers (every org's jobs run on them): what they serve, their last
    /// heartbeat and their provider breakers. Hosts and processes are not named (review L8).
    pub workers: Vec<WorkerView>,
    /// The fleet-wide limits of each provider endpoint and what they granted and held back.
    pub provider_limits: Vec<ProviderLimit>,
}

/// A live worker as the queue view shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct WorkerView {
    /// A stable name for the worker (`w-` and 8 hex digits of a hash of its id): its host and
    /// process stay with operators (`agentd status`).
    pub name: String,
    /// The job kinds it serves.
    pub kinds: Vec<String>,
    pub started_at: DateTime<Utc>,
    /// Its last heartbeat.
    pub seen_at: DateTime<Utc>,
    /// Counted as live until then.
    pub expires_at: DateTime<Utc>,
    /// Its provider entries' circuit breakers at its last heartbeat.
    pub breakers: Vec<BreakerView>,
    /// True when the worker wrote breakers this server cannot read (a newer worker).
    pub breakers_unreadable: bool,
}

/// One provider entry's circuit breaker on a worker.
#[derive(Debug, Serialize, ToSchema)]
pub struct BreakerView {
    /// The provider entry (`llm.providers[].name`).
    pub provider: String,
    /// `closed` (calls go), `open` (calls skip the entry until `until`) or `half-open` (a probe
    /// may go or is out).
    #[schema(pattern = "^(closed|open|half-open)$")]
    pub state: String,
    /// Since when it is in that state (null: closed since the worker started).
    pub since: Option<DateTime<Utc>>,
    /// While open: when a probe may go.
    pub until: Option<DateTime<Utc>>,
    /// While closed: failures in a row so far.
    pub failures: u32,
}

/// A provider endpoint's fleet-wide limits (`agentd_provider_limits`).
#[derive(Debug, Serialize, ToSchema)]
pub struct ProviderLimit {
    /// A stable name for the endpoint (`e-` and 8 hex digits of a hash of its base URL): its
    /// address stays with operators (`agentd status`; review D11).
    pub name: String,
    pub requests_per_minute: i32,
    pub tokens_per_minute: i64,
    /// Requests let through so far.
    pub granted: i64,
    /// Requests that had to wait for the rate.
    pub throttled: i64,
    /// 429 answers the endpoint gave.
    pub rate_limited: i64,
    /// Seconds until the endpoint may be called again after a 429 (0: not blocked).
    pub blocked_secs: f64,
}

/// `prefix-` and 8 hex digits of the SHA-256 of `id`: a stable name for a fleet's worker or
/// endpoint that says nothing of its host (review L8, D11: those stay with operators).
fn opaque_name(prefix: &str, id: &str) -> String {
    use sha2::Digest;
    let hash = sha2::Sha256::digest(id.as_bytes());
    let hex: String = hash.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("{prefix}-{hex}")
}

impl WorkerView {
    fn of(w: crate::store::workers::Worker) -> Self {
        let name = opaque_name("w", &w.id);
        let snapshots =
            serde_json::from_value::<Vec<crate::llm::chain::breaker::Snapshot>>(w.breakers);
        let breakers_unreadable = snapshots.is_err();
        let breakers = snapshots
            .unwrap_or_default()
            .into_iter()
            .map(|b| BreakerView {
                provider: b.provider,
                state: b.state.as_str().to_string(),
                since: b.since,
                until: b.until,
                failures: b.failures,
            })
            .collect();
        WorkerView {
            name,
            kinds: w.kinds,
            started_at: w.started_at,
            seen_at: w.seen_at,
            expires_at: w.expires_at,
            breakers,
            breakers_unreadable,
        }
    }
}

/// Query of `GET /v1/queue`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueQuery {
    /// The window of `series`: `1h` (default), `6h` or `24h`.
    pub window: Option<String>,
}

/// The windows `?window=` takes, with their length in seconds.
const WINDOWS: [(&str, i64); 3] = [("1h", 3600), ("6h", 6 * 3600), ("24h", 24 * 3600)];

impl QueueQuery {
    /// The window in seconds (400 naming `window` for another value).
    fn window_secs(&self) -> Result<i64, Problem> {
        let Some(w) = self.window.as_deref() else {
            return Ok(WINDOWS[0].1);
        };
        WINDOWS
            .iter()
            .find(|(name, _)| *name == w)
            .map(|(_, secs)| *secs)
            .ok_or_else(|| {
                let names: Vec<_> = WINDOWS.iter().map(|(n, _)| *n).collect();
                Problem::bad_request(
                    "window",
                    format!("window must be one of {} (got {w:?})", names.join(", ")),
                )
            })
    }
}

/// In the OpenAPI document: `window`, one of [`WINDOWS`].
impl utoipa::IntoParams for QueueQuery {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        let window = ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(WINDOWS.iter().map(|(n, _)| *n)))
            .default(Some(WINDOWS[0].0.into()));
        vec![query_param(
            "window",
            "The window of `series`: the last hour (default), 6 or 24 hours",
            window.into(),
        )]
    }
}

/// A dead job of the queue view.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeadJob {
    pub id: i64,
    pub kind: String,
    pub attempt: i32,
    pub max_attempts: i32,
    pub last_error: Option<String>,
    pub finished_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// The answer to a retry.
#[derive(Debug, Serialize, ToSchema)]
pub struct RetriedJob {
    pub id: i64,
    /// `available`: it runs again.
    pub state: JobState,
}

/// The org's queue: depth by kind and state, ready jobs and the oldest one's age, finished
/// and failed jobs per 5-minute bucket over the last hour, depth and throughput per kind over
/// `window`, dead jobs with their last error, the server's kinds and the ones the org paused;
/// and the fleet's live workers (kinds, last heartbeat, breakers) and provider limits.
#[utoipa::path(get, path = "/v1/queue", tag = "console", operation_id = "getQueue",
    params(QueueQuery),
    responses((status = 200, body = QueueView, description = "The org's queue"),
        (status = 403, description = "The key's role is below admin")))]
pub async fn queue(req: Scoped<Admin>, Params(q): Params<QueueQuery>) -> ApiResult {
    let window_secs = q.window_secs()?;
    let (pool, org) = (&req.app.pool, req.org_id());
    let now = req.app.clock.now();
    let depth = status::job_counts(pool, Some(org)).await?;
    let ready = status::ready_ages(pool, Some(org), now).await?;
    let oldest = ready
        .iter()
        .filter_map(|r| r.oldest_ready_secs)
        .fold(None, |m: Option<f64>, a| Some(m.map_or(a, |m| m.max(a))));
    let buckets = console_reads::throughput(pool, org, now).await?;
    let dead = status::dead_jobs(pool, Some(org), DEAD_SHOWN).await?;
    let dead = dead
        .into_iter()
        .map(|j| DeadJob {
            id: j.id,
            kind: j.kind,
            attempt: j.attempt,
            max_attempts: j.max_attempts,
            last_error: j.last_error.as_deref().map(super::jobs::tenant_error),
            finished_at: j.finished_at,
            created_at: j.created_at,
        })
        .collect();
    let mut kinds: Vec<String> = req.app.catalog.kinds.keys().cloned().collect();
    kinds.sort();
    let paused = crate::queue::pause::paused(pool, Some(org)).await?;
    let series = console_reads::kind_series(pool, org, now, window_secs).await?;
    let workers = crate::store::workers::live(pool, now).await?;
    let limits = crate::store::provider_limits::list(pool).await?;
    ok(&QueueView {
        now,
        depth,
        ready,
        oldest_ready_secs: oldest,
        bucket_secs: console_reads::BUCKET_SECS,
        throughput: buckets,
        dead,
        kinds,
        paused,
        window_secs,
        series_bucket_secs: window_secs / console_reads::SERIES_POINTS,
        series,
        workers: workers.into_iter().map(WorkerView::of).collect(),
        provider_limits: limits
            .into_iter()
            .map(|l| ProviderLimit {
                name: opaque_name("e", &l.key),
                requests_per_minute: l.requests_per_minute,
                tokens_per_minute: l.tokens_per_minute,
                granted: l.granted,
                throttled: l.throttled,
                rate_limited: l.rate_limited,
                blocked_secs: l.blocked_secs,
            })
            .collect(),
    })
}

/// Retry a dead job of the org: `available` now, with a fresh attempt budget.
#[utoipa::path(post, path = "/v1/jobs/{id}/retry", tag = "jobs", operation_id = "retryJob",
    params(("id" = i64, Path, minimum = 1, description = "The job's number")),
    responses((status = 200, body = RetriedJob, description = "Available again"),
        (status = 403, description = "The key's role is below admin"),
        (status = 409, description = "Not dead (`state`), or its unique key is taken")))]
pub async fn retry(req: Scoped<Admin>, Id(id): Id<i64>) -> ApiResult {
    let mut conn = req.app.pool.acquire().await?;
    match console_reads::retry_dead(&mut conn, req.org_id(), id, req.app.clock.now()).await? {
        Retry::Done => ok(&RetriedJob {
            id,
            state: JobState::Available,
        }),
        Retry::NotFound => Err(Problem::not_found("job", id)),
        Retry::NotDead(state) => Err(Problem::conflict(format!(
            "job {id} is {state}; only dead jobs can be retried"
        ))
        .extra(json!({"state": state}))),
        Retry::UniqueKeyBusy => Err(Problem::conflict(format!(
            "job {id} cannot be retried: another job with its unique key is waiting or running"
        ))),
    }
}

/// Query of `GET /v1/runs`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunsQuery {
    /// 1–200 (default 50).
    pub limit: Option<i64>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// running, succeeded, capped, failed or cancelled.
    pub status: Option<String>,
    /// Only runs of this job kind.
    pub kind: Option<String>,
    /// Only runs of this subject (a document id, or the night of a nightly run).
    pub subject: Option<String>,
    /// Only runs with this model.
    pub model: Option<String>,
}

/// Longest `subject` and `model` filter (longer ones name no run).
pub const MAX_FILTER_CHARS: usize = 200;

/// The org's runs, newest first: kind, subject, status, stop reason, rounds, tool calls,
/// tokens, timings. Filters by status, kind, subject (a document's runs) and model.
#[utoipa::path(get, path = "/v1/runs", tag = "runs", operation_id = "listRuns", params(RunsQuery),
    responses((status = 200, body = Paged<RunRow>, description = "A page of runs")))]
pub async fn runs(req: Scoped, Params(q): Params<RunsQuery>) -> ApiResult {
    let page = Page::new(q.limit, q.cursor.as_deref())?;
    let status = state(q.status.as_deref())?;
    let mut filters = Vec::new();
    if let Some(k) = &q.kind {
        known_kind(&req.app, "kind", k)?;
        filters.push(("kind", k.as_str()));
    }
    if let Some(s) = &q.subject {
        filters.push(("subject", text_filter("subject", s)?));
    }
    if let Some(m) = &q.model {
        filters.push(("model", text_filter("model", m)?));
    }
    let pool = &req.app.pool;
    let mut paged =
        Paged::<RunRow>::fetch_where(pool, req.org_id(), &page, status, &filters).await?;
    paged
        .items
        .iter_mut()
        .for_each(super::reads::run_for_tenant);
    ok(&paged)
}

/// 400 naming `field` unless `kind` is a job kind of this server (the kinds listed).
pub(super) fn known_kind(app: &crate::app::App, field: &str, kind: &str) -> Result<(), Problem> {
    if app.catalog.get(kind).is_some() {
        return Ok(());
    }
    let mut known: Vec<_> = app.catalog.kinds.keys().cloned().collect();
    known.sort();
    Err(Problem::bad_request(
        field,
        format!("{field} must be one of {} (got {kind:?})", known.join(", ")),
    ))
}

/// A text filter: 1–200 characters without NUL (400 naming `field` otherwise).
fn text_filter<'a>(field: &str, value: &'a str) -> Result<&'a str, Problem> {
    let n = value.chars().count();
    if n == 0 || n > MAX_FILTER_CHARS {
        return Err(Problem::bad_request(
            field,
            format!("{field} must be 1–{MAX_FILTER_CHARS} characters (got {n})"),
        ));
    }
    if value.contains('\0') {
        return Err(Problem::bad_request(
            field,
            format!("{field} must not contain NUL (\\u0000)"),
        ));
    }
    Ok(value)
}

/// A `subject` or `model` parameter in the OpenAPI document, as [`text_filter`] reads it.
fn text_param(name: &str, description: &str) -> Parameter {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    let text = ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(MAX_FILTER_CHARS))
        .pattern(Some("^[^\\u0000]+$"));
    query_param(name, description, text.into())
}

/// The job kinds of the built-in catalog as an enum (a `kind` parameter).
pub(super) fn kind_schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    let kinds = crate::catalog::BUILTIN.iter().map(|(k, _)| *k);
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(kinds))
        .into()
}

/// In the OpenAPI document: `limit`, `cursor`, `status` (a run status), `kind` (a job kind
/// of the built-in catalog), `subject` and `model`, as [`RunsQuery`] is read.
impl utoipa::IntoParams for RunsQuery {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        use utoipa::PartialSchema;
        let mut params = page_params();
        params.push(query_param(
            "status",
            "Only runs in this state",
            RunStatus::schema(),
        ));
        params.push(query_param(
            "kind",
            "Only runs of this job kind",
            kind_schema(),
        ));
        params.push(text_param(
            "subject",
            "Only runs of this subject: a document id (a document's runs), or the night of a nightly run",
        ));
        params.push(text_param("model", "Only runs with this model"));
        params
    }
}
