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
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;
use uuid::Uuid;

/// Body of dismiss.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"reason": "we do not tag these"}))]
pub struct DismissBody {
    /// Why (1–500 characters, not only spaces). Required.
    #[schema(value_type = String, min_length = 1, max_length = 500, pattern = r"\S")]
    pub reason: Option<String>,
}

/// The answer to shown and dismiss: the suggestion's state after the call.
#[derive(Debug, Serialize, ToSchema)]
pub struct SuggestionState {
    pub id: Uuid,
    /// The same as `status` (the name of the shared API contract).
    pub state: SuggestionStatus,
    pub status: SuggestionStatus,
    /// A dismissal's reason.
    pub status_reason: Option<String>,
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
            ok(&SuggestionState {
                id: row.id,
                state: row.status,
                status: row.status,
                status_reason: row.status_reason,
            })
        }
    }
}

/// Dismiss a suggestion with a reason.
#[utoipa::path(post, path = "/v1/suggestions/{id}/dismiss", tag = "suggestions", operation_id = "dismissSuggestion",
    params(("id" = Uuid, Path, description = "The suggestion's id")), request_body(content = DismissBody),
    responses((status = 200, body = SuggestionState, description = "Dismissed"),
        (status = 403, description = "The key's role is below reviewer"),
        (status = 409, description = "Not pending or shown (`state`)"),
        (status = 422, description = "Invalid input, or no `reason`")))]
pub async fn dismiss(
    req: Scoped<Reviewer>,
    Id(id): Id,
    OptionalJsonBody(body): OptionalJsonBody<DismissBody>,
) -> ApiResult {
    transition(req, id, SuggestionStatus::Dismissed, Some(body.reason)).await
}

/// Mark a suggestion shown to a person.
#[utoipa::path(post, path = "/v1/suggestions/{id}/shown", tag = "suggestions", operation_id = "markSuggestionShown",
    params(("id" = Uuid, Path, description = "The suggestion's id")),
    responses((status = 200, body = SuggestionState, description = "Shown"),
        (status = 403, description = "The key's role is below reviewer"),
        (status = 409, description = "Not pending (`state`)")))]
pub async fn shown(req: Scoped<Reviewer>, Id(id): Id) -> ApiResult {
    transition(req, id, SuggestionStatus::Shown, None).await
}
