//! Read-only routes: `GET /v1/suggestions`, `GET /v1/runs/{id}` (transcript and audit) and
//! `GET /v1/status` (the org's queue at a glance, shaped like `agentd status --json`).

use super::auth::Scoped;
use super::error::{ApiResult, Problem, ok};
use super::extract::{Id, ListQuery, Listing, Paged};
use crate::store::api_reads::SuggestionItem;
use crate::store::states::SuggestionStatus;
use crate::store::{runs, status};
use serde::Serialize;
use serde_json::json;

/// The org's suggestions, newest first (`status`: pending, shown, acted, dismissed or expired).
#[utoipa::path(get, path = "/v1/suggestions", tag = "suggestions", params(ListQuery),
    responses((status = 200, body = Object)))]
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
#[utoipa::path(get, path = "/v1/runs/{id}", tag = "runs", params(("id" = uuid::Uuid, Path)),
    responses((status = 200, body = RunDetail), (status = 404)))]
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
#[utoipa::path(get, path = "/v1/status", tag = "status",
    responses((status = 200, body = Object)))]
pub async fn status(req: Scoped) -> ApiResult {
    let app = &req.app;
    let (pool, org) = (&app.pool, req.org_id());
    let now = app.clock.now();
    let mut v = serde_json::to_value(status::glance(pool, Some(org), now).await?)
        .map_err(Problem::internal)?;
    let budget = runs::budget(pool, org, now).await?;
    let budgets: Vec<_> = budget
        .map(|b| json!({"org_id": org, "monthly_limit": b.monthly_limit, "tokens_used": b.tokens_used}))
        .into_iter()
        .collect();
    v["provider"] = json!(app.provider.name());
    v["budgets"] = json!(budgets);
    v["kinds_without_handler"] = json!(crate::jobs::unimplemented_kinds(app));
    ok(&v)
}
