//! `GET /v1/keys`, `POST /v1/keys`, `POST /v1/keys/{id}/revoke` (admin): the org's API keys,
//! as `agentd keys list|create|revoke` manage them. A new key is shown once, in the answer that
//! creates it; only its SHA-256 and prefix are stored.

use super::acts::{self, Act};
use super::auth::{Admin, Role, Scoped, create_key};
use super::error::{ApiResult, Problem, json_response, ok};
use super::extract::{Id, JsonBody};
use crate::store::api_keys::{self, ApiKeyRow};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;
use uuid::Uuid;

/// `GET /v1/keys`.
#[derive(Debug, Serialize, ToSchema)]
pub struct KeyList {
    /// The org's keys, newest first (revoked ones too, with `revoked_at`).
    pub keys: Vec<ApiKeyRow>,
}

/// A key to make.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"role": "reviewer"}))]
pub struct NewKeyRequest {
    /// What the key may do.
    pub role: Role,
}

/// A new key: the only time the key itself is shown.
#[derive(Debug, Serialize, ToSchema)]
pub struct NewKey {
    pub id: Uuid,
    pub role: Role,
    /// The key (`agentd_…`): store it now, it is never shown again.
    pub key: String,
}

/// The org's API keys (prefixes only, never the keys).
#[utoipa::path(get, path = "/v1/keys", tag = "keys", operation_id = "listKeys",
    responses((status = 200, body = KeyList, description = "The org's keys"),
        (status = 403, description = "The key's role is below admin")))]
pub async fn list(req: Scoped<Admin>) -> ApiResult {
    let keys = api_keys::list_keys(&req.app.pool, Some(req.org_id())).await?;
    ok(&KeyList { keys })
}

/// Make a key for the org; the answer is the only place the key appears.
#[utoipa::path(post, path = "/v1/keys", tag = "keys", operation_id = "createKey", request_body = NewKeyRequest,
    responses((status = 201, body = NewKey, description = "Made: the key, shown once"),
        (status = 403, description = "The key's role is below admin")))]
pub async fn create(req: Scoped<Admin>, JsonBody(r): JsonBody<NewKeyRequest>) -> ApiResult {
    let now = req.app.clock.now();
    let mut tx = req.app.pool.begin().await?;
    let (id, key) = create_key(&mut *tx, req.org_id(), r.role, now).await?;
    let about = json!({"key_id": id, "role": r.role});
    acts::record(&mut tx, &req.caller, Act::CreateKey, Some(id), about, now).await?;
    tx.commit().await?;
    Ok(json_response(
        StatusCode::CREATED,
        &NewKey {
            id,
            role: r.role,
            key,
        },
    ))
}

/// The answer to a revoke.
#[derive(Debug, Serialize, ToSchema)]
pub struct RevokedKey {
    pub id: Uuid,
    pub revoked: bool,
}

/// Revoke a key of the org: it is refused from now on (its open event streams end).
#[utoipa::path(post, path = "/v1/keys/{id}/revoke", tag = "keys", operation_id = "revokeKey",
    params(("id" = uuid::Uuid, Path, description = "The key's id")),
    responses((status = 200, body = RevokedKey, description = "Revoked"),
        (status = 403, description = "The key's role is below admin"),
        (status = 409, description = "Already revoked, or the key of this request")))]
pub async fn revoke(req: Scoped<Admin>, Id(id): Id) -> ApiResult {
    let (pool, org) = (&req.app.pool, req.org_id());
    if id == req.caller.key_id {
        // The org would be left without the key in use, mid-session: another admin key, or
        // `agentd keys revoke`, does it.
        return Err(Problem::conflict(
            "this is the key of this request; revoke it with another admin key or `agentd keys revoke`",
        ));
    }
    let now = req.app.clock.now();
    let mut tx = pool.begin().await?;
    if api_keys::revoke_key(&mut *tx, id, Some(org), now).await? {
        let about = json!({"key_id": id});
        acts::record(&mut tx, &req.caller, Act::RevokeKey, Some(id), about, now).await?;
        tx.commit().await?;
        return ok(&RevokedKey { id, revoked: true });
    }
    drop(tx);
    let mine = api_keys::list_keys(pool, Some(org)).await?;
    match mine.iter().any(|k| k.id == id) {
        true => Err(Problem::conflict(format!("key {id} is already revoked"))),
        false => Err(Problem::not_found("key", id)),
    }
}
