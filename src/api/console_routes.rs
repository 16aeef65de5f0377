//! The routes the web console needs beside the others: who the key is (`GET /v1/me`), the
//! queue view (`GET /v1/queue`, admin), retrying a dead job (`POST /v1/jobs/{id}/retry`,
//! admin) and the run list (`GET /v1/runs`). All org-scoped like every route.

use super::auth::{Admin, Scoped};
use super::error::{ApiResult, Problem, ok};
use super::extract::{Id, Page, Paged, Params, state};
use crate::store::console_reads::{self, Retry};
use crate::store::{orgs, runs::RunRow, status};
use serde::Deserialize;
use serde_json::json;
use utoipa::IntoParams;

/// Dead jobs the queue view lists.
const DEAD_SHOWN: i64 = 50;

/// The caller's key: org, key id and role (what the console may offer).
#[utoipa::path(get, path = "/v1/me", tag = "console",
    responses((status = 200, body = Object)))]
pub async fn me(req: Scoped) -> ApiResult {
    let caller = req.caller;
    let org = orgs::find(&req.app.pool, &caller.org_id.to_string()).await?;
    let org_name = org.map(|o| o.name);
    ok(&json!({
        "org_id": caller.org_id, "org_name": org_name, "key_id": caller.key_id,
        "role": caller.role.as_str(),
    }))
}

/// The org's queue: depth by kind and state, ready jobs and the oldest one's age, finished
/// and failed jobs per 5-minute bucket over the last hour, dead jobs with their last error.
#[utoipa::path(get, path = "/v1/queue", tag = "console",
    responses((status = 200, body = Object), (status = 403)))]
pub async fn queue(req: Scoped<Admin>) -> ApiResult {
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
    let dead: Vec<_> = dead
        .iter()
        .map(|j| {
            json!({"id": j.id, "kind": j.kind, "attempt": j.attempt, "max_attempts": j.max_attempts,
                   "last_error": j.last_error, "finished_at": j.finished_at, "created_at": j.created_at})
        })
        .collect();
    ok(&json!({
        "now": now,
        "depth": depth,
        "ready": ready,
        "oldest_ready_secs": oldest,
        "bucket_secs": console_reads::BUCKET_SECS,
        "throughput": buckets,
        "dead": dead,
    }))
}

/// Retry a dead job of the org: `available` now, with a fresh attempt budget.
#[utoipa::path(post, path = "/v1/jobs/{id}/retry", tag = "jobs", params(("id" = i64, Path)),
    responses((status = 200, body = Object), (status = 403), (status = 404),
        (status = 409, description = "Not dead, or its unique key is taken")))]
pub async fn retry(req: Scoped<Admin>, Id(id): Id<i64>) -> ApiResult {
    let mut conn = req.app.pool.acquire().await?;
    match console_reads::retry_dead(&mut conn, req.org_id(), id, req.app.clock.now()).await? {
        Retry::Done => ok(&json!({"id": id, "state": "available"})),
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
#[derive(Debug, Deserialize, IntoParams)]
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
}

/// The org's runs, newest first: kind, subject, status, stop reason, rounds, tool calls,
/// tokens, timings.
#[utoipa::path(get, path = "/v1/runs", tag = "runs", params(RunsQuery),
    responses((status = 200, body = Object)))]
pub async fn runs(req: Scoped, Params(q): Params<RunsQuery>) -> ApiResult {
    let page = Page::new(q.limit, q.cursor.as_deref())?;
    let status = state(q.status.as_deref())?;
    if let Some(k) = &q.kind
        && req.app.catalog.get(k).is_none()
    {
        let mut known: Vec<_> = req.app.catalog.kinds.keys().cloned().collect();
        known.sort();
        return Err(Problem::bad_request(
            "kind",
            format!("kind must be one of {} (got {k:?})", known.join(", ")),
        ));
    }
    let (pool, kind) = (&req.app.pool, q.kind.as_deref());
    ok(&Paged::<RunRow>::fetch(pool, req.org_id(), &page, status, kind).await?)
}
