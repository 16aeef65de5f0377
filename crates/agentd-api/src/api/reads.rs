//! Read-only routes: `GET /v1/suggestions`, `GET /v1/runs/{id}` (transcript and audit),
//! `GET /v1/status` (the org's queue at a glance, shaped like `agentd status --json`) and
//! `GET /v1/usage` (the month's tokens and what they cost, and a row per day over `?days=`).

use super::auth::Scoped;
use super::error::{ApiResult, Problem, ok};
use super::extract::{Id, Listing, Paged, Params, query_param};
use crate::store::api_reads::SuggestionItem;
use crate::store::states::SuggestionStatus;
use crate::store::{runs, status};
use serde::{Deserialize, Serialize};
use utoipa::openapi::path::{Parameter, ParameterIn};

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
    let mut run = runs::get_run(pool, id)
        .await?
        .filter(|r| r.org_id == req.org_id())
        .ok_or_else(|| Problem::not_found("run", id))?;
    run_for_tenant(&mut run);
    let steps = runs::steps(pool, id).await?;
    let audit = runs::audit_for_run(pool, id).await?;
    ok(&RunDetail { run, steps, audit })
}

/// A run as the org reads it: its error as a class and a short message, since the stored text
/// can name provider endpoints and database errors (the reconciler copies a job's raw
/// `last_error` into it; review D11). Operators read it raw (`agentd runs`).
pub(super) fn run_for_tenant(run: &mut runs::RunRow) {
    run.error = run.error.as_deref().map(super::jobs::tenant_error);
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

/// Query of `GET /v1/usage`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    /// Days of `daily`, ending today (UTC): 1–366, default 30.
    pub days: Option<i64>,
}

/// Most days `?days=` takes.
pub const MAX_USAGE_DAYS: i64 = 366;
/// Days of `daily` without `?days=`.
pub const DEFAULT_USAGE_DAYS: i64 = 30;

/// In the OpenAPI document: `days`, 1–[`MAX_USAGE_DAYS`].
impl utoipa::IntoParams for UsageQuery {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        let days = ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
            .minimum(Some(1))
            .maximum(Some(MAX_USAGE_DAYS))
            .default(Some(DEFAULT_USAGE_DAYS.into()));
        vec![query_param(
            "days",
            &format!(
                "Days of `daily`, ending today (UTC): 1–{MAX_USAGE_DAYS} (default {DEFAULT_USAGE_DAYS})"
            ),
            days.into(),
        )]
    }
}

/// The org's model use this month: runs, tokens and their cost in dollars; and the same per
/// day (UTC) over the last `days` days.
#[utoipa::path(get, path = "/v1/usage", tag = "status", operation_id = "getUsage",
    params(UsageQuery),
    responses((status = 200, body = OrgUsage, description = "The org's use this month, and per day")))]
pub async fn usage(req: Scoped, Params(q): Params<UsageQuery>) -> ApiResult {
    let days = q.days.unwrap_or(DEFAULT_USAGE_DAYS);
    if !(1..=MAX_USAGE_DAYS).contains(&days) {
        return Err(Problem::bad_request(
            "days",
            format!("days must be between 1 and {MAX_USAGE_DAYS} (got {days})"),
        ));
    }
    let (pool, org) = (&req.app.pool, req.org_id());
    let now = req.app.clock.now();
    let period = runs::period_of(now);
    let u = runs::month_usage(pool, org, period).await?;
    let budget = runs::budget(pool, org, now).await?;
    let daily = crate::store::console_reads::daily_usage(pool, org, now.date_naive(), days).await?;
    let mut usage = OrgUsage::new(period, &u, budget);
    usage.daily = daily
        .iter()
        .map(|(day, u)| DayUsage::new(*day, u))
        .collect();
    ok(&usage)
}

/// One day (UTC) of `GET /v1/usage`'s `daily`: the runs started on it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DayUsage {
    pub day: chrono::NaiveDate,
    pub runs: i64,
    /// Input plus output tokens.
    pub tokens: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// In US dollars; null when not known (`cost_note` says why).
    pub cost_usd: Option<f64>,
    /// The cost of the calls whose model has a price (a lower bound when `cost_usd` is null).
    pub priced_cost_usd: f64,
    pub cost_note: Option<String>,
}

impl DayUsage {
    fn new(day: chrono::NaiveDate, u: &runs::MonthUsage) -> Self {
        let (cost_usd, cost_note) = match u.cost() {
            Ok(c) => (Some(c.dollars()), None),
            Err(why) => (None, Some(why)),
        };
        DayUsage {
            day,
            runs: u.runs,
            tokens: u.input_tokens + u.output_tokens,
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cost_usd,
            priced_cost_usd: crate::config::NanoUsd(u.cost_nano_usd).dollars(),
            cost_note,
        }
    }
}

/// `GET /v1/usage`: the org's runs started this month (UTC), their tokens and what they cost
/// at the price table (`llm.prices`), beside its budget.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OrgUsage {
    /// The month, as its first day.
    pub period_start: chrono::NaiveDate,
    /// Runs started in it.
    pub runs: i64,
    /// Input plus output tokens of those runs.
    pub tokens: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// Of `input_tokens`: read from the provider's prompt cache.
    pub cache_read_tokens: i64,
    /// Of `input_tokens`: written to the provider's prompt cache.
    pub cache_write_tokens: i64,
    /// What they cost in US dollars, rounded to the micro-dollar; null when it is not known
    /// (`cost_note` says why).
    pub cost_usd: Option<f64>,
    /// The cost of the calls whose model has a price: all of `cost_usd`, or a lower bound when
    /// that is null.
    pub priced_cost_usd: f64,
    /// Why `cost_usd` is null: tokens of a model with no price, runs from before costs were
    /// recorded.
    pub cost_note: Option<String>,
    /// The monthly token limit enforced (the smaller of the budget and what the cost cap buys at
    /// the model's highest price); null: none.
    pub effective_token_limit: Option<i64>,
    /// Tokens charged to that limit this month; null: no limit.
    pub budget_tokens_used: Option<i64>,
    /// The org's use per day (UTC), oldest first, ending today: `?days=` days (default 30).
    pub daily: Vec<DayUsage>,
}

impl OrgUsage {
    pub fn new(
        period_start: chrono::NaiveDate,
        u: &runs::MonthUsage,
        budget: Option<runs::Budget>,
    ) -> Self {
        let (cost_usd, cost_note) = match u.cost() {
            Ok(c) => (Some(c.dollars()), None),
            Err(why) => (None, Some(why)),
        };
        OrgUsage {
            period_start,
            runs: u.runs,
            tokens: u.input_tokens + u.output_tokens,
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_write_tokens: u.cache_write_tokens,
            cost_usd,
            priced_cost_usd: crate::config::NanoUsd(u.cost_nano_usd).dollars(),
            cost_note,
            effective_token_limit: budget.map(|b| b.monthly_limit),
            budget_tokens_used: budget.map(|b| b.tokens_used),
            daily: Vec::new(),
        }
    }
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
