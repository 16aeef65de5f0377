//! `GET`, `PUT` and `DELETE /v1/settings/provider-key` (admin): the org's own provider key.
//! `PUT` checks it, encrypts it (`llm::org_keys`) and stores it, replacing the one before (a
//! rotation); no route ever answers with it: `GET` says whether one is set, its last 4
//! characters and when. The org's calls use it from its next run on.

use super::acts::Act;
use super::auth::{Admin, Scoped};
use super::error::{ApiResult, Problem, ok};
use super::extract::JsonBody;
use crate::llm::org_keys::{self, SetKeyError};
use crate::store::org_keys as stored;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

/// A key to store. `Debug` hides it.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderKeyBody {
    /// The provider's API key: 20–512 printable ASCII characters without spaces. Stored
    /// encrypted; never returned.
    #[schema(min_length = 20, max_length = 512, pattern = r"^[!-~]+$")]
    pub key: String,
    /// The provider entry (`llm.providers[].name`) the key is for; absent or null: the first
    /// entry that takes a key.
    #[schema(min_length = 1, max_length = 64)]
    pub provider: Option<String>,
}

impl std::fmt::Debug for ProviderKeyBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderKeyBody")
            .field("key", &"[redacted]")
            .field("provider", &self.provider)
            .finish()
    }
}

/// Whether the org stored a key (never the key).
#[derive(Debug, Serialize, ToSchema)]
pub struct ProviderKeyView {
    pub set: bool,
    /// The key's last 4 characters; null when none is set.
    pub last4: Option<String>,
    /// The entry it is for; null: the first entry that takes a key (or none set).
    pub provider: Option<String>,
    pub set_at: Option<DateTime<Utc>>,
}

async fn view(app: &crate::app::App, org: uuid::Uuid) -> Result<ProviderKeyView, Problem> {
    Ok(match stored::get(&app.pool, org).await? {
        None => ProviderKeyView {
            set: false,
            last4: None,
            provider: None,
            set_at: None,
        },
        Some(k) => ProviderKeyView {
            set: true,
            last4: Some(k.last4),
            provider: k.provider,
            set_at: Some(k.set_at),
        },
    })
}

/// Whether the org stored its own provider key.
#[utoipa::path(get, path = "/v1/settings/provider-key", tag = "settings", operation_id = "getProviderKey",
    responses((status = 200, body = ProviderKeyView, description = "Whether a key is set, its last 4 characters and when"),
        (status = 403, description = "The key's role is below admin")))]
pub async fn get(req: Scoped<Admin>) -> ApiResult {
    ok(&view(&req.app, req.org_id()).await?)
}

/// Store the org's own provider key (replacing one set before); its calls use it from then on.
#[utoipa::path(put, path = "/v1/settings/provider-key", tag = "settings", operation_id = "setProviderKey", request_body = ProviderKeyBody,
    responses((status = 200, body = ProviderKeyView, description = "Stored (encrypted)"),
        (status = 403, description = "The key's role is below admin"),
        (status = 409, description = "This server stores no org keys (no `llm.org_key_encryption_key`, or no provider entry takes a key)"),
        (status = 422, description = "A malformed key or an unknown provider entry (`field` names it): nothing was stored")))]
pub async fn put(req: Scoped<Admin>, JsonBody(body): JsonBody<ProviderKeyBody>) -> ApiResult {
    let (app, org) = (&req.app, req.org_id());
    let now = app.clock.now();
    let provider = body.provider.as_deref();
    let mut tx = app.pool.begin().await?;
    match org_keys::set_key(&mut *tx, &app.config.llm, org, &body.key, provider, now).await {
        Ok(()) => {
            // Which entry, never the key (nor its last characters).
            let about = json!({"provider": provider});
            super::acts::record(&mut tx, &req.caller, Act::SetProviderKey, None, about, now)
                .await?;
            tx.commit().await?;
        }
        Err(SetKeyError::Invalid { field, message }) => {
            return Err(Problem::invalid(field, message));
        }
        Err(SetKeyError::Unavailable(m)) => return Err(Problem::conflict(m)),
        Err(SetKeyError::Db(e)) => return Err(e.into()),
    }
    ok(&view(app, org).await?)
}

/// Remove the org's own provider key: its calls use the operator's keys again.
#[utoipa::path(delete, path = "/v1/settings/provider-key", tag = "settings", operation_id = "deleteProviderKey",
    responses((status = 204, description = "Removed (or none was set)"),
        (status = 403, description = "The key's role is below admin")))]
pub async fn delete(req: Scoped<Admin>) -> ApiResult {
    let mut tx = req.app.pool.begin().await?;
    if stored::delete(&mut *tx, req.org_id()).await? {
        let now = req.app.clock.now();
        let act = Act::DeleteProviderKey;
        super::acts::record(&mut tx, &req.caller, act, None, json!({}), now).await?;
        tx.commit().await?;
        tracing::info!(org_id = %req.org_id(), "an org removed its own provider key");
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}
