//! `GET /v1/settings` and `PATCH /v1/settings` (admin): the org's budget (tokens per month, an
//! optional cost cap), model, auto-create, time zone and nightly hour, approval TTL and the
//! re-proposal of expired approvals, where calls with the org's own provider key may fall back
//! (`byok_fallback`), and its own API request rates. Validation is [`crate::org_settings`]'s, shared with
//! `agentd orgs set`: a bad key is a 422 naming it, and nothing is written.

use super::auth::{Admin, Scoped};
use super::error::{ApiResult, Problem, ok};
use super::extract::JsonBody;
use crate::app::App;
use crate::org_settings::{self, ApplyError, Patch};
use crate::store::{org_settings as store, runs};
use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;

/// The org's settings.
#[derive(Debug, Serialize, ToSchema)]
pub struct Settings {
    /// Tokens the org's runs may use per calendar month (UTC); null: unlimited.
    pub monthly_token_budget: Option<i64>,
    /// Cost cap per month in cents; null: none.
    pub cost_cap_cents: Option<i64>,
    /// The limit enforced: the smaller of the budget and what the cost cap buys; null: none.
    pub effective_token_limit: Option<i64>,
    /// Tokens used this month.
    pub tokens_used_this_month: i64,
    /// The model of the org's runs (null: the default).
    pub model: Option<String>,
    pub auto_create: bool,
    pub timezone: String,
    pub nightly_hour: i16,
    /// Null: the job file's TTL.
    pub approval_ttl_secs: Option<i32>,
    pub repropose_expired: bool,
    /// With the org's own provider key: `none`, its calls go only to the entry the key is for;
    /// `operator`, the operator's entries (and keys) serve them when that entry fails or does
    /// not serve the model.
    pub byok_fallback: store::ByokFallback,
    /// API requests a minute of all the org's keys together; null: the service's
    /// (`api.requests_per_minute_per_org`).
    pub requests_per_minute: Option<i32>,
    /// Run-enqueuing requests a minute per key; null: the service's
    /// (`api.runs_per_minute_per_key`).
    pub runs_per_minute: Option<i32>,
}

pub(super) async fn current(app: &App, org_id: uuid::Uuid) -> Result<Settings, Problem> {
    let b = runs::budget(&app.pool, org_id, app.clock.now()).await?;
    let o = store::get(&app.pool, org_id)
        .await?
        .ok_or_else(|| Problem::not_found("org", org_id))?;
    Ok(Settings {
        monthly_token_budget: o.token_budget,
        cost_cap_cents: o.cost_cap_cents,
        effective_token_limit: b.map(|b| b.monthly_limit),
        tokens_used_this_month: b.map(|b| b.tokens_used).unwrap_or(0),
        model: o.model,
        auto_create: o.auto_create,
        timezone: o.timezone,
        nightly_hour: o.nightly_hour,
        approval_ttl_secs: o.approval_ttl_secs,
        repropose_expired: o.repropose_expired,
        byok_fallback: o.byok_fallback,
        requests_per_minute: o.requests_per_minute,
        runs_per_minute: o.runs_per_minute,
    })
}

/// The org's settings.
#[utoipa::path(get, path = "/v1/settings", tag = "settings", operation_id = "getSettings",
    responses((status = 200, body = Settings, description = "The org's settings"),
        (status = 403, description = "The key's role is below admin")))]
pub async fn get(req: Scoped<Admin>) -> ApiResult {
    ok(&current(&req.app, req.org_id()).await?)
}

/// Change the org's settings (absent keys stay; `null` clears an optional one).
#[utoipa::path(patch, path = "/v1/settings", tag = "settings", operation_id = "updateSettings", request_body = Patch,
    responses((status = 200, body = Settings, description = "The settings after the change"),
        (status = 403, description = "The key's role is below admin"),
        (status = 422, description = "A bad key (`field` names it): nothing was written")))]
pub async fn patch(req: Scoped<Admin>, JsonBody(p): JsonBody<Patch>) -> ApiResult {
    let (app, org) = (&req.app, req.org_id());
    let by = org_settings::SetBy::OrgAdmin;
    let now = app.clock.now();
    let mut tx = app.pool.begin().await?;
    match org_settings::apply_in(&mut tx, &app.config, org, &p, now, by).await {
        Ok(_) => {
            let about = json!({"changed": p.keys()});
            let act = super::acts::Act::UpdateSettings;
            super::acts::record(&mut tx, &req.caller, act, None, about, now).await?;
            tx.commit().await?;
        }
        Err(ApplyError::Invalid(e)) => {
            return Err(Problem::invalid(e.field.clone(), e.to_string()));
        }
        Err(ApplyError::NotFound(id)) => return Err(Problem::not_found("org", id)),
        Err(ApplyError::Db(e)) => return Err(e.into()),
    }
    ok(&current(app, org).await?)
}
