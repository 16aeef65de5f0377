//! `POST /v1/suggestions/{id}/shown` (a person saw it: `pending → shown`) and
//! `POST /v1/suggestions/{id}/dismiss {"reason"}` (`pending|shown → dismissed`; the nightly run
//! then skips the same kind for the same subject for 14 days). `acted` is set when the
//! suggestion's approval executes, `expired` by the expiry sweep. Reviewer role.

use super::approvals::check_reason;
use super::auth::{Reviewer, Scoped};
use super::error::{ApiResult, Problem, ok};
use super::extract::{Id, OptionalJsonBody};
use crate::store::sql;
use crate::store::suggestions::{self as store, SuggestionRow, SuggestionStatus, Transition};
use serde::Deserialize;
use serde_json::json;
use utoipa::ToSchema;
use uuid::Uuid;

/// Body of dismiss.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DismissBody {
    /// Why (1–500 characters). Required.
    pub reason: Option<String>,
}

async fn transition(
    req: Scoped<Reviewer>,
    id: Uuid,
    to: SuggestionStatus,
    reason: Option<Option<String>>,
) -> ApiResult {
    let (app, caller) = (&req.app, req.caller);
    let mut conn = app.pool.acquire().await?;
    // Another org's id is "not found" before the body is looked at.
    if sql::by_id::<SuggestionRow>(&mut conn, caller.org_id, id, false)
        .await?
        .is_none()
    {
        return Err(Problem::not_found("suggestion", id));
    }
    let reason = match reason {
        Some(r) => Some(check_reason(r.as_deref())?),
        None => None,
    };
    let by = format!("key {}", caller.key_id);
    // One connection at a time: holding `conn` while `begin` takes a second let a burst of these
    // calls take the whole pool and wait on each other (review L3).
    drop(conn);
    let mut tx = app.pool.begin().await?;
    let out = store::transition(
        &mut tx,
        caller.org_id,
        id,
        to,
        reason.as_deref(),
        &by,
        app.clock.now(),
    )
    .await?;
    tx.commit().await?;
    match out {
        Transition::NotFound => Err(Problem::not_found("suggestion", id)),
        Transition::Refused(state) => Err(Problem::conflict(format!(
            "suggestion {id} is {state}; it cannot become {to}"
        ))
        .extra(json!({"state": state}))),
        Transition::Done(_) => {
            let mut conn = app.pool.acquire().await?;
            let row = sql::by_id::<SuggestionRow>(&mut conn, caller.org_id, id, false)
                .await?
                .ok_or_else(|| Problem::not_found("suggestion", id))?;
            ok(
                &json!({"id": row.id, "state": row.status, "status": row.status,
                       "status_reason": row.status_reason}),
            )
        }
    }
}

/// Dismiss a suggestion with a reason.
#[utoipa::path(post, path = "/v1/suggestions/{id}/dismiss", tag = "suggestions",
    params(("id" = Uuid, Path)), request_body(content = DismissBody),
    responses((status = 200, body = Object), (status = 404), (status = 409), (status = 422)))]
pub async fn dismiss(
    req: Scoped<Reviewer>,
    Id(id): Id,
    OptionalJsonBody(body): OptionalJsonBody<DismissBody>,
) -> ApiResult {
    transition(req, id, SuggestionStatus::Dismissed, Some(body.reason)).await
}

/// Mark a suggestion shown to a person.
#[utoipa::path(post, path = "/v1/suggestions/{id}/shown", tag = "suggestions",
    params(("id" = Uuid, Path)),
    responses((status = 200, body = Object), (status = 404), (status = 409)))]
pub async fn shown(req: Scoped<Reviewer>, Id(id): Id) -> ApiResult {
    transition(req, id, SuggestionStatus::Shown, None).await
}
