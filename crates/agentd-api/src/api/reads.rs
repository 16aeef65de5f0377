//! Read-only routes: `GET /v1/suggestions`, `GET /v1/runs/{id}` (transcript and audit) and
//! `GET /v1/status` (the org's queue at a glance, shaped like `agentd status --json`).

use super::auth::Scoped;
use super::error::{ApiResult, Problem, ok};
use super::extract::{Id, Listing, Paged};
use crate::store::api_reads::SuggestionItem;
use crate::store::states::SuggestionStatus;
use crate::store::{runs, status};
use serde::Serialize;

/// The org's suggestions, newest first (`status`: pending, shown, acted, dismissed or expired).
#[utoipa::path(get, path = "/v1/suggestions", tag = "suggestions", operation_id = "listSuggestions",
    params(Listing<SuggestionStatus>),
    responses((status = 200, body = Paged<SuggestionItem>, description = "A page of suggestions")))]
pub async fn suggestions(
    req: Scoped,
    Listing(page, status): Listing<SuggestionStatus>,
) -> ApiResult {
    let paged = Paged::<SuggestionItem>::fetch(&req.app.pool, req.org_id(), &page, status, None);
    ok(&paged.await?)
}

/// A run with its transcript (checkpoints, in order) and audit trail.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RunDetail {
    pub run: runs::RunRow,
    pub steps: Vec<runs::StepRow>,
    pub audit: Vec<runs::AuditRow>,
}

/// A run: its row, transcript (checkpoints) and audit trail.
#[utoipa::path(get, path = "/v1/runs/{id}", tag = "runs", operation_id = "getRun",
    params(("id" = uuid::Uuid, Path, description = "The run's id")),
    responses((status = 200, body = RunDetail, description = "The run, its transcript and audit trail")))]
pub async fn run(req: Scoped, Id(id): Id) -> ApiResult {
    let pool = &req.app.pool;
    let run = runs::get_run(pool, id)
        .await?
        .filter(|r| r.org_id == req.org_id())
        .ok_or_else(|| Problem::not_found("run", id))?;
    let steps = runs::steps(pool, id).await?;
    let audit = runs::audit_for_run(pool, id).await?;
    ok(&RunDetail { run, steps, audit })
}

/// The org's queue, runs, approvals and budget at a glance.
#[utoipa::path(get, path = "/v1/status", tag = "status", operation_id = "getStatus",
    responses((status = 200, body = OrgStatus, description = "The org at a glance")))]
pub async fn status(req: Scoped) -> ApiResult {
    let app = &req.app;
    let (pool, org) = (&app.pool, req.org_id());
    let now = app.clock.now();
    let mut glance = status::glance(pool, Some(org), now).await?;
    // Worker names and raw errors stay with operators (review L8).
    for r in &mut glance.running {
        r.locked_by = None;
    }
    glance
        .recent_dead
        .iter_mut()
        .for_each(super::jobs::for_tenant);
    let budget = runs::budget(pool, org, now).await?;
    let budgets = budget
        .map(|b| Budget {
            org_id: org,
            monthly_limit: b.monthly_limit,
            tokens_used: b.tokens_used,
        })
        .into_iter()
        .collect();
    ok(&OrgStatus {
        glance,
        provider: app.provider.name().to_string(),
        budgets,
        kinds_without_handler: crate::jobs::unimplemented_kinds(app),
    })
}

/// `GET /v1/status`: the glance of `agentd status --json`, for the key's org.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OrgStatus {
    #[serde(flatten)]
    pub glance: status::Glance,
    /// The model provider of this server (`offline`, `openai`, …).
    pub provider: String,
    /// The org's token budget this month (none: unlimited).
    pub budgets: Vec<Budget>,
    /// Job kinds that have a job file but no handler in this build.
    pub kinds_without_handler: Vec<String>,
}

/// An org's token budget this month.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Budget {
    pub org_id: uuid::Uuid,
    pub monthly_limit: i64,
    pub tokens_used: i64,
}
