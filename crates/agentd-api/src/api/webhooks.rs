//! `POST /v1/webhooks`, `GET /v1/webhooks`, `DELETE /v1/webhooks/{id}` (admin): the org's
//! webhook subscriptions. Deliveries are `webhook_delivery` jobs (see `crate::webhooks`).

use super::auth::{Admin, Scoped};
use super::error::{ApiResult, Problem, json_response, ok};
use super::extract::{Id, JsonBody};
use crate::config::Invalid;
use crate::kinds::{self, JobKind};
use crate::store::events::EventType;
use crate::store::webhooks::{self, NewWebhook, WebhookRow};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;
use utoipa::ToSchema;

/// A subscription to make.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"url": "https://hooks.example.com/agentd", "events": ["proposal.ready", "approval.created"], "secret": "0123456789abcdef0123"}))]
pub struct NewWebhookRequest {
    /// Where to POST events: an absolute http(s) URL (at most 2048 characters) of a public
    /// address (unless `webhooks.allow_private_networks`), outside `webhooks.denied_cidrs`, on
    /// a port of `webhooks.allowed_ports` (80 and 443 unless the operator changed them).
    #[schema(max_length = 2048, pattern = "^[Hh][Tt][Tt][Pp][Ss]?://")]
    pub url: String,
    /// Event types to deliver (1–20, no duplicates), e.g. `["proposal.ready", "approval.created"]`.
    #[schema(schema_with = events_schema)]
    pub events: Vec<String>,
    /// 16–256 printable ASCII characters without spaces; signs every delivery (never shown again).
    #[schema(min_length = 16, max_length = 256, pattern = "^[!-~]+$")]
    pub secret: String,
}

/// `events` in the OpenAPI document: 1–20 distinct event types.
fn events_schema() -> utoipa::openapi::schema::Array {
    use utoipa::PartialSchema;
    utoipa::openapi::schema::ArrayBuilder::new()
        .items(EventType::schema())
        .min_items(Some(1))
        .max_items(Some(20))
        .unique_items(true)
        .description(Some("Event types to deliver (1–20, no duplicates), e.g. `[\"proposal.ready\", \"approval.created\"]`."))
        .build()
}

/// `GET /v1/webhooks`.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct WebhookList {
    pub webhooks: Vec<WebhookRow>,
}

/// Subscribe a URL to event types.
#[utoipa::path(post, path = "/v1/webhooks", tag = "webhooks", operation_id = "createWebhook", request_body = NewWebhookRequest,
    responses((status = 201, body = WebhookRow, description = "Subscribed"),
        (status = 403, description = "The key's role is below admin"),
        (status = 409, description = "The org has `webhook.max_per_org` subscriptions already"),
        (status = 422, description = "Invalid input, or a URL of an internal address (`field` names it)")))]
pub async fn create(req: Scoped<Admin>, JsonBody(r): JsonBody<NewWebhookRequest>) -> ApiResult {
    let invalid = |e: Invalid| Problem::invalid(e.key, e.message);
    crate::webhooks::validate_url(&r.url).map_err(invalid)?;
    let guard = crate::webhooks::guard::Policy::new(&req.app.config.webhooks);
    crate::webhooks::guard::check_registration(&r.url, &guard)
        .await
        .map_err(invalid)?;
    crate::webhooks::validate_events(&r.events).map_err(invalid)?;
    crate::webhooks::validate_secret(&r.secret).map_err(invalid)?;
    let app = &req.app;
    let spec = app.spec(kinds::WebhookDelivery::NAME);
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
    // Sealed under the master key when the server has one (review D9), bound to the org and
    // this subscription's id; without one, stored as given (docs/webhooks.md).
    let id = uuid::Uuid::now_v7();
    let sealed = match crate::llm::org_keys::Cipher::from_config(&app.config.llm) {
        Some(c) => Some(
            c.seal_webhook_secret(req.org_id(), id, &r.secret)
                .map_err(Problem::internal)?,
        ),
        None => None,
    };
    let new = NewWebhook {
        org_id: req.org_id(),
        url: &r.url,
        events: &r.events,
        secret: &r.secret,
        max_attempts: spec.queue.max_attempts,
        priority: spec.queue.priority,
        now: app.clock.now(),
    };
    let row = webhooks::insert_as(&mut *tx, id, &new, sealed.as_ref()).await?;
    // The events, never the secret nor the URL (its path or query may carry a token).
    let about = json!({"webhook_id": row.id, "events": r.events});
    let (act, now) = (super::acts::Act::CreateWebhook, app.clock.now());
    super::acts::record(&mut tx, &req.caller, act, Some(row.id), about, now).await?;
    tx.commit().await?;
    Ok(json_response(StatusCode::CREATED, &row))
}

/// The org's subscriptions (without their secrets).
#[utoipa::path(get, path = "/v1/webhooks", tag = "webhooks", operation_id = "listWebhooks",
    responses((status = 200, body = WebhookList, description = "The org's subscriptions"),
        (status = 403, description = "The key's role is below admin")))]
pub async fn list(req: Scoped<Admin>) -> ApiResult {
    let webhooks = webhooks::list(&req.app.pool, req.org_id()).await?;
    ok(&WebhookList { webhooks })
}

/// Delete a subscription; deliveries already queued for it end without sending.
#[utoipa::path(delete, path = "/v1/webhooks/{id}", tag = "webhooks", operation_id = "deleteWebhook",
    params(("id" = uuid::Uuid, Path, description = "The subscription's id")),
    responses((status = 204, description = "Deleted"), (status = 403, description = "The key's role is below admin")))]
pub async fn delete(req: Scoped<Admin>, Id(id): Id) -> ApiResult {
    let mut tx = req.app.pool.begin().await?;
    if webhooks::delete(&mut *tx, req.org_id(), id).await? {
        let (act, now) = (super::acts::Act::DeleteWebhook, req.app.clock.now());
        let about = json!({"webhook_id": id});
        super::acts::record(&mut tx, &req.caller, act, Some(id), about, now).await?;
        tx.commit().await?;
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(Problem::not_found("webhook", id))
    }
}
