//! What an operator does to the org's queue (issue 33, item 4), admin only like the retry of
//! one dead job: cancel a job (`POST /v1/jobs/{id}/cancel`) or a run's job
//! (`POST /v1/runs/{id}/cancel`), pause and resume a kind (`POST /v1/queue/{kind}/pause|resume`:
//! claims of the org's jobs of that kind stop on every worker, running ones finish), and retry
//! or cancel dead jobs in bulk (`POST /v1/jobs/dead/retry|cancel`, by kind and/or ids, at most
//! [`MAX_BULK`] a call).

use super::acts::{self, Act};
use super::auth::{Admin, Scoped};
use super::error::{ApiResult, Problem, ok};
use super::extract::{Id, JsonBody};
use crate::kinds::{self, JobKind};
use crate::queue::JobState;
use crate::queue::pause::{self, PausedKind};
use crate::store::console_reads::{self, DeadAction, DeadBatch};
use crate::store::{api_reads, runs};
use axum::extract::Path;
use axum::extract::rejection::PathRejection;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;
use uuid::Uuid;

/// Most dead jobs one bulk call changes (and most ids it names).
pub const MAX_BULK: usize = 1000;

/// The answer to a cancel.
#[derive(Debug, Serialize, ToSchema)]
pub struct CancelledJob {
    /// The job.
    pub id: i64,
    /// `cancelled`.
    pub state: JobState,
    /// The job's run, if it had one: `cancelled` too (a running attempt stops at its next step,
    /// when its worker's heartbeat finds the job no longer its own).
    pub run_id: Option<Uuid>,
}

/// Cancels the org's job `id` (waiting or running) and the run it drives.
async fn cancel_job(req: &Scoped<Admin>, id: i64) -> ApiResult {
    let (pool, org) = (&req.app.pool, req.org_id());
    let mut tx = pool.begin().await?;
    let job = api_reads::job(&mut *tx, org, id)
        .await?
        .ok_or_else(|| Problem::not_found("job", id))?;
    if !crate::jobs::cancel::cancel(&mut tx, id, req.app.clock.now()).await? {
        return Err(Problem::conflict(format!(
            "job {id} is {}; only a waiting or running job can be cancelled",
            job.state
        ))
        .extra(json!({"state": job.state})));
    }
    let run = runs::run_for_job(&mut *tx, id).await?;
    let about = json!({"job_id": id, "kind": job.kind, "run_id": run.as_ref().map(|r| r.id)});
    let (act, now) = (Act::CancelJob, req.app.clock.now());
    acts::record(
        &mut tx,
        &req.caller,
        act,
        run.as_ref().map(|r| r.id),
        about,
        now,
    )
    .await?;
    tx.commit().await?;
    ok(&CancelledJob {
        id,
        state: JobState::Cancelled,
        run_id: run.map(|r| r.id),
    })
}

/// Cancel a job of the org: a waiting one never runs; a running one is fenced out (its outcome
/// is dropped), stops at its next step and its run ends `cancelled`.
#[utoipa::path(post, path = "/v1/jobs/{id}/cancel", tag = "jobs", operation_id = "cancelJob",
    params(("id" = i64, Path, minimum = 1, description = "The job's number")),
    responses((status = 200, body = CancelledJob, description = "Cancelled"),
        (status = 403, description = "The key's role is below admin"),
        (status = 409, description = "The job already finished (`state`)")))]
pub async fn cancel(req: Scoped<Admin>, Id(id): Id<i64>) -> ApiResult {
    cancel_job(&req, id).await
}

/// Cancel a run of the org: its job is cancelled (see `cancelJob`).
#[utoipa::path(post, path = "/v1/runs/{id}/cancel", tag = "runs", operation_id = "cancelRun",
    params(("id" = uuid::Uuid, Path, description = "The run's id")),
    responses((status = 200, body = CancelledJob, description = "Cancelled"),
        (status = 403, description = "The key's role is below admin"),
        (status = 409, description = "The run is not running, or has no job waiting or running")))]
pub async fn cancel_run(req: Scoped<Admin>, Id(id): Id) -> ApiResult {
    let run = runs::get_run(&req.app.pool, id)
        .await?
        .filter(|r| r.org_id == req.org_id())
        .ok_or_else(|| Problem::not_found("run", id))?;
    let status = run.status;
    match run.job_id {
        Some(job) if status == crate::store::states::RunStatus::Running => {
            cancel_job(&req, job).await
        }
        _ => Err(
            Problem::conflict(format!("run {id} is {status} and has no job to cancel"))
                .extra(json!({"run_status": status})),
        ),
    }
}

/// The `{kind}` of a queue route: a kind of this server's job files (400 naming `kind`).
fn known_kind(
    req: &Scoped<Admin>,
    kind: Result<Path<String>, PathRejection>,
) -> Result<String, Problem> {
    let Path(kind) = kind.map_err(|e| Problem::bad_request("kind", e.body_text()))?;
    if req.app.catalog.get(&kind).is_some() {
        return Ok(kind);
    }
    let mut known: Vec<_> = req.app.catalog.kinds.keys().cloned().collect();
    known.sort();
    Err(Problem::bad_request(
        "kind",
        format!("kind must be one of {} (got {kind:?})", known.join(", ")),
    ))
}

/// A kind's pause state for the org.
#[derive(Debug, Serialize, ToSchema)]
pub struct KindPause {
    pub kind: String,
    /// True while claims of the org's jobs of this kind are stopped.
    pub paused: bool,
    /// Since when (none: not paused).
    pub paused_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// Pause a kind for the org: no worker claims the org's jobs of this kind until it is resumed;
/// running jobs finish. Pausing a paused kind changes nothing.
#[utoipa::path(post, path = "/v1/queue/{kind}/pause", tag = "console", operation_id = "pauseQueue",
    params(KindParam),
    responses((status = 200, body = KindPause, description = "Paused"),
        (status = 403, description = "The key's role is below admin")))]
pub async fn pause_kind(
    req: Scoped<Admin>,
    kind: Result<Path<String>, PathRejection>,
) -> ApiResult {
    let kind = known_kind(&req, kind)?;
    let now = req.app.clock.now();
    let mut tx = req.app.pool.begin().await?;
    let p: PausedKind =
        pause::pause(&mut *tx, req.org_id(), &kind, Some(req.caller.key_id), now).await?;
    let about = json!({"kind": kind});
    acts::record(&mut tx, &req.caller, Act::PauseQueue, None, about, now).await?;
    tx.commit().await?;
    ok(&KindPause {
        kind,
        paused: true,
        paused_at: Some(p.paused_at),
    })
}

/// Resume a paused kind for the org: its jobs are claimed again (workers are woken).
#[utoipa::path(post, path = "/v1/queue/{kind}/resume", tag = "console", operation_id = "resumeQueue",
    params(KindParam),
    responses((status = 200, body = KindPause, description = "Not paused (resumed, or was not paused)"),
        (status = 403, description = "The key's role is below admin")))]
pub async fn resume_kind(
    req: Scoped<Admin>,
    kind: Result<Path<String>, PathRejection>,
) -> ApiResult {
    let kind = known_kind(&req, kind)?;
    let mut tx = req.app.pool.begin().await?;
    if pause::resume(&mut tx, req.org_id(), &kind).await? {
        let (about, now) = (json!({"kind": kind}), req.app.clock.now());
        acts::record(&mut tx, &req.caller, Act::ResumeQueue, None, about, now).await?;
    }
    tx.commit().await?;
    ok(&KindPause {
        kind,
        paused: false,
        paused_at: None,
    })
}

/// A whole number as JSON may write it: `7` or `7.0` (JSON Schema's `integer` takes both; a
/// fraction or a number past `i64` is refused naming the field).
#[derive(Debug, Clone, Copy)]
pub struct Whole(pub i64);

impl<'de> Deserialize<'de> for Whole {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = serde_json::Number::deserialize(d)?;
        if let Some(i) = n.as_i64() {
            return Ok(Whole(i));
        }
        // Past 2^53 a float is not the number written (`-9223372036854775809` reads as
        // i64::MIN): only floats that are exactly whole numbers are taken.
        const EXACT: f64 = 9_007_199_254_740_992.0;
        match n.as_f64() {
            // checked: |f| < 2^53, so the cast is exact.
            Some(f) if f.fract() == 0.0 && f.abs() < EXACT => Ok(Whole(f as i64)),
            _ => Err(serde::de::Error::custom(format!(
                "expected a whole number, got {n}"
            ))),
        }
    }
}

/// A job kind of the built-in catalog, as the OpenAPI document declares it (`nullable`: in a
/// body where it may be left out).
fn kind_schema(nullable: bool) -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    // A nullable kind lists null among its values too: an enum without it refuses null
    // whatever the type says, and the server takes null as absent.
    let mut kinds: Vec<serde_json::Value> = crate::catalog::BUILTIN
        .iter()
        .map(|(k, _)| serde_json::Value::from(*k))
        .collect();
    let types = match nullable {
        true => {
            kinds.push(serde_json::Value::Null);
            SchemaType::from_iter([Type::String, Type::Null])
        }
        false => SchemaType::new(Type::String),
    };
    ObjectBuilder::new()
        .schema_type(types)
        .enum_values(Some(kinds))
        .description(Some("A job kind of this server"))
        .build()
}

fn optional_kind() -> utoipa::openapi::Object {
    kind_schema(true)
}

/// The `{kind}` path parameter in the OpenAPI document.
pub struct KindParam;

impl utoipa::IntoParams for KindParam {
    fn into_params(
        _: impl Fn() -> Option<utoipa::openapi::path::ParameterIn>,
    ) -> Vec<utoipa::openapi::path::Parameter> {
        use utoipa::openapi::Required;
        use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
        vec![
            ParameterBuilder::new()
                .name("kind")
                .parameter_in(ParameterIn::Path)
                .required(Required::True)
                .description(Some("A job kind of this server"))
                .schema(Some(kind_schema(false)))
                .build(),
        ]
    }
}

/// Which dead jobs a bulk call acts on: of `kind`, among `ids`, both, or (neither) any of the
/// org's — at most `limit` a call either way.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"kind": kinds::AutoCreate::NAME, "limit": 100}))]
pub struct DeadJobs {
    /// Only dead jobs of this kind.
    #[schema(schema_with = optional_kind)]
    pub kind: Option<String>,
    /// Only these dead jobs of the org (1–1000; ids of other orgs or jobs not dead are left).
    #[schema(value_type = Option<Vec<i64>>, min_items = 1, max_items = 1000)]
    pub ids: Option<Vec<Whole>>,
    /// Most jobs changed by this call, 1–1000 (default 1000); `more` says whether others match.
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 1000)]
    pub limit: Option<Whole>,
}

/// [`DeadJobs`] checked: what [`console_reads::on_dead`] takes.
struct Picked {
    kind: Option<String>,
    ids: Option<Vec<i64>>,
    limit: i64,
}

impl DeadJobs {
    /// The kind, ids and limit, checked (422 naming the field).
    fn checked(self, app: &crate::app::App) -> Result<Picked, Problem> {
        if let Some(k) = &self.kind
            && app.catalog.get(k).is_none()
        {
            let mut known: Vec<_> = app.catalog.kinds.keys().cloned().collect();
            known.sort();
            return Err(Problem::invalid(
                "kind",
                format!("kind must be one of {} (got {k:?})", known.join(", ")),
            ));
        }
        if let Some(ids) = &self.ids
            && (ids.is_empty() || ids.len() > MAX_BULK)
        {
            return Err(Problem::invalid(
                "ids",
                format!("ids must name 1–{MAX_BULK} jobs (got {})", ids.len()),
            ));
        }
        let limit = self.limit.map_or(MAX_BULK as i64, |w| w.0);
        if !(1..=MAX_BULK as i64).contains(&limit) {
            return Err(Problem::invalid(
                "limit",
                format!("limit must be 1–{MAX_BULK} (got {limit})"),
            ));
        }
        let ids = self.ids.map(|ids| ids.into_iter().map(|w| w.0).collect());
        Ok(Picked {
            kind: self.kind,
            ids,
            limit,
        })
    }
}

async fn on_dead(req: Scoped<Admin>, body: DeadJobs, action: DeadAction) -> ApiResult {
    let Picked { kind, ids, limit } = body.checked(&req.app)?;
    let mut tx = req.app.pool.begin().await?;
    let now = req.app.clock.now();
    let done = console_reads::on_dead(
        &mut tx,
        req.org_id(),
        action,
        kind.as_deref(),
        ids.as_deref(),
        limit,
        now,
    )
    .await
    .map_err(|e| match e {
        sqlx::Error::Database(d) if d.is_unique_violation() => Problem::conflict(
            "a job with the unique key of one of these was enqueued meanwhile; nothing was retried, try again",
        ),
        e => e.into(),
    })?;
    let act = match action {
        DeadAction::Retry => Act::RetryDeadJobs,
        DeadAction::Cancel => Act::CancelDeadJobs,
    };
    let about = json!({"kind": kind, "ids": ids, "limit": limit, "done": &done});
    acts::record(&mut tx, &req.caller, act, None, about, now).await?;
    tx.commit().await?;
    ok(&done)
}

/// Retry the org's dead jobs in bulk: `available` now with a fresh attempt budget; a job whose
/// unique key a waiting or running job holds stays dead (`skipped`).
#[utoipa::path(post, path = "/v1/jobs/dead/retry", tag = "jobs", operation_id = "retryDeadJobs",
    request_body = DeadJobs,
    responses((status = 200, body = DeadBatch, description = "The jobs retried and skipped"),
        (status = 403, description = "The key's role is below admin"),
        (status = 409, description = "A job with one of their unique keys was enqueued meanwhile; nothing changed")))]
pub async fn retry_dead(req: Scoped<Admin>, JsonBody(body): JsonBody<DeadJobs>) -> ApiResult {
    on_dead(req, body, DeadAction::Retry).await
}

/// Cancel the org's dead jobs in bulk: `cancelled`, no longer counted dead, never run again.
#[utoipa::path(post, path = "/v1/jobs/dead/cancel", tag = "jobs", operation_id = "cancelDeadJobs",
    request_body = DeadJobs,
    responses((status = 200, body = DeadBatch, description = "The jobs cancelled"),
        (status = 403, description = "The key's role is below admin")))]
pub async fn cancel_dead(req: Scoped<Admin>, JsonBody(body): JsonBody<DeadJobs>) -> ApiResult {
    on_dead(req, body, DeadAction::Cancel).await
}
