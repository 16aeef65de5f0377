//! `POST /v1/webhooks`, `GET /v1/webhooks`, `DELETE /v1/webhooks/{id}` (admin): the org's
//! webhook subscriptions. Deliveries are `webhook_delivery` jobs (see `crate::webhooks`).

use super::auth::{Admin, Scoped};
use super::error::{ApiResult, Problem, json_response, ok};
use super::extract::{Id, JsonBody};
use crate::config::Invalid;
use crate::store::webhooks::{self, NewWebhook, WebhookRow};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use utoipa::ToSchema;

/// A subscription to make.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewWebhookRequest {
    /// Where to POST events: an absolute http(s) URL.
    pub url: String,
    /// Event types to deliver, e.g. `["proposal.ready", "approval.created"]`.
    pub events: Vec<String>,
    /// 16–256 printable characters; signs every delivery (never shown again).
    pub secret: String,
}

/// Subscribe a URL to event types.
#[utoipa::path(post, path = "/v1/webhooks", tag = "webhooks", request_body = NewWebhookRequest,
    responses((status = 201, body = WebhookRow), (status = 403), (status = 409), (status = 422)))]
pub async fn create(req: Scoped<Admin>, JsonBody(r): JsonBody<NewWebhookRequest>) -> ApiResult {
    let invalid = |e: Invalid| Problem::invalid(e.key, e.message);
    crate::webhooks::validate_url(&r.url).map_err(invalid)?;
    let allow = req.app.config.webhooks.allow_private_networks;
    crate::webhooks::guard::check_registration(&r.url, allow)
        .await
        .map_err(invalid)?;
    crate::webhooks::validate_events(&r.events).map_err(invalid)?;
    crate::webhooks::validate_secret(&r.secret).map_err(invalid)?;
    let app = &req.app;
    let spec = app.spec("webhook_delivery");
    let max = spec.webhook.as_ref().map_or(20, |w| w.max_per_org);
    // Count and insert with the org row locked: concurrent requests cannot pass the cap
    // together (review L4).
    let mut tx = app.pool.begin().await?;
    sqlx::query("SELECT 1 FROM orgs WHERE id = $1 FOR UPDATE")
        .bind(req.org_id())
        .execute(&mut *tx)
        .await?;
    if webhooks::count(&mut *tx, req.org_id()).await? >= i64::from(max) {
        return Err(Problem::conflict(format!(
            "this org has {max} webhooks, the most allowed (webhook.max_per_org); delete one first"
        )));
    }
    let row = webhooks::insert(
        &mut *tx,
        &NewWebhook {
            org_id: req.org_id(),
            url: &r.url,
            events: &r.events,
            secret: &r.secret,
            max_attempts: spec.queue.max_attempts,
            priority: spec.queue.priority,
            now: app.clock.now(),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(json_response(StatusCode::CREATED, &row))
}

/// The org's subscriptions (without their secrets).
#[utoipa::path(get, path = "/v1/webhooks", tag = "webhooks",
    responses((status = 200, body = Object, description = "`{webhooks: [...]}`"), (status = 403)))]
pub async fn list(req: Scoped<Admin>) -> ApiResult {
    let rows = webhooks::list(&req.app.pool, req.org_id()).await?;
    ok(&serde_json::json!({ "webhooks": rows }))
}

/// Delete a subscription; deliveries already queued for it end without sending.
#[utoipa::path(delete, path = "/v1/webhooks/{id}", tag = "webhooks", params(("id" = uuid::Uuid, Path)),
    responses((status = 204), (status = 403), (status = 404)))]
pub async fn delete(req: Scoped<Admin>, Id(id): Id) -> ApiResult {
    if webhooks::delete(&req.app.pool, req.org_id(), id).await? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(Problem::not_found("webhook", id))
    }
}
