//! `GET /v1/settings` and `PATCH /v1/settings` (admin): the org's monthly token budget.

use super::ApiState;
use super::auth::{Caller, Role};
use super::error::{ApiResult, Problem, ok};
use super::extract::JsonBody;
use crate::store::{api_keys, runs};
use axum::extract::State;
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;

/// The org's settings.
#[derive(Debug, Serialize, ToSchema)]
pub struct Settings {
    /// Tokens the org's runs may use per calendar month (UTC); null: unlimited.
    pub monthly_token_budget: Option<i64>,
    /// Tokens used this month.
    pub tokens_used_this_month: i64,
}

/// A change of settings; absent keys stay as they are.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SettingsPatch {
    /// A limit ≥ 0, or null for unlimited.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>)]
    pub monthly_token_budget: Option<Option<i64>>,
}

/// A present key (even `null`) is `Some`; an absent one stays `None` (serde's default).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<i64>>, D::Error> {
    Option::<i64>::deserialize(d).map(Some)
}

async fn current(s: &ApiState, caller: &Caller) -> Result<Settings, Problem> {
    let b = runs::budget(&s.app.pool, caller.org_id, s.app.clock.now()).await?;
    Ok(Settings {
        monthly_token_budget: b.map(|b| b.monthly_limit),
        tokens_used_this_month: b.map(|b| b.tokens_used).unwrap_or(0),
    })
}

/// The org's settings.
#[utoipa::path(get, path = "/v1/settings", tag = "settings",
    responses((status = 200, body = Settings), (status = 403)), security(("bearer" = [])))]
pub async fn get(State(s): State<ApiState>, caller: Caller) -> ApiResult {
    caller.require(Role::Admin)?;
    ok(&current(&s, &caller).await?)
}

/// Change the org's settings.
#[utoipa::path(patch, path = "/v1/settings", tag = "settings", request_body = SettingsPatch,
    responses((status = 200, body = Settings), (status = 403), (status = 422)),
    security(("bearer" = [])))]
pub async fn patch(
    State(s): State<ApiState>,
    caller: Caller,
    JsonBody(p): JsonBody<SettingsPatch>,
) -> ApiResult {
    caller.require(Role::Admin)?;
    match p.monthly_token_budget {
        Some(Some(n)) if n < 0 => {
            return Err(Problem::invalid(
                "monthly_token_budget",
                format!("monthly_token_budget must be ≥ 0 or null (got {n})"),
            ));
        }
        Some(Some(n)) => runs::set_budget(&s.app.pool, caller.org_id, n, s.app.clock.now()).await?,
        Some(None) => {
            api_keys::clear_budget(&s.app.pool, caller.org_id).await?;
        }
        None => {}
    }
    ok(&current(&s, &caller).await?)
}
