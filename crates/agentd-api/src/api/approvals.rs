//! `/v1/approvals`: list, show (`ETag` = the snapshot hash), approve (`If-Match` → 412,
//! expired → 410, stale → 409 with what changed, already decided → 200 with that decision),
//! reject. Deciding goes through [`crate::approvals::decide`], so nothing runs twice.

use super::auth::{Needs, Reviewer, Scoped};
use super::error::{ApiResult, Problem, ok};
use super::extract::{Id, Listing, OptionalJsonBody, Paged};
use crate::approvals::{self, DecideError, Decision};
use crate::store::approvals::{self as store, ApprovalRow, ApprovalStatus};
use crate::store::runs;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;
use uuid::Uuid;

/// Optional body of approve.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"by": "alice"}))]
pub struct DecisionBody {
    /// Who decides (recorded as `human:<by> (key <key id>)`; 1–200 characters, not only
    /// spaces); default: the key's id.
    #[schema(min_length = 1, max_length = 200, pattern = r"\S")]
    pub by: Option<String>,
    /// Approve these arguments instead of the proposed ones: validated against the tool's
    /// schema, kept on the approval's document, re-hashed, audited as `edited`.
    #[schema(value_type = Option<Object>)]
    pub arguments: Option<Value>,
}

/// Body of reject.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"reason": "wrong vendor", "by": "alice"}))]
pub struct RejectBody {
    /// Who decides (1–200 characters, not only spaces); default: the key's id.
    #[schema(min_length = 1, max_length = 200, pattern = r"\S")]
    pub by: Option<String>,
    /// Why (1–500 characters, not only spaces). Required.
    #[schema(value_type = String, min_length = 1, max_length = 500, pattern = r"\S")]
    pub reason: Option<String>,
}

/// The answer to approve and reject: the approval after the call.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApprovalOutcome {
    /// Whether this call decided it (false: it was decided before; nothing ran twice).
    pub changed: bool,
    pub approval: ApprovalView,
}

use crate::approvals::{ApprovalView, view};
use crate::store::runs::AuditRow;

fn etag(hash: &str) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{hash}\"")).unwrap_or(HeaderValue::from_static("\"\""))
}

/// The org's approvals, newest first (`status`: pending, executed, rejected, expired, stale or
/// failed).
#[utoipa::path(get, path = "/v1/approvals", tag = "approvals", operation_id = "listApprovals",
    params(Listing<ApprovalStatus>),
    responses((status = 200, body = Paged<ApprovalView>, description = "A page of approvals")))]
pub async fn list(req: Scoped, Listing(page, status): Listing<ApprovalStatus>) -> ApiResult {
    let paged = Paged::<ApprovalRow>::fetch(&req.app.pool, req.org_id(), &page, status, None);
    ok(&paged.await?.map(|r| view(&r)))
}

async fn find<R: Needs>(req: &Scoped<R>, id: Uuid) -> Result<ApprovalRow, Problem> {
    store::get(&req.app.pool, id)
        .await?
        .filter(|r| r.org_id == req.org_id())
        .ok_or_else(|| Problem::not_found("approval", id))
}

/// An approval with its history: the audit rows of its proposal and decisions.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApprovalDetail {
    #[serde(flatten)]
    pub approval: ApprovalView,
    pub history: Vec<AuditRow>,
}

/// One approval: action, snapshot, `expires_at`; `ETag` is the snapshot hash.
#[utoipa::path(get, path = "/v1/approvals/{id}", tag = "approvals", operation_id = "getApproval",
    params(("id" = Uuid, Path, description = "The approval's id")),
    responses((status = 200, body = ApprovalDetail, description = "The approval and its history",
        headers(("ETag" = String, description = "`\"<snapshot hash>\"`: send it back as If-Match")))))]
pub async fn get(req: Scoped, Id(id): Id) -> ApiResult {
    let row = find(&req, id).await?;
    let v = ApprovalDetail {
        approval: view(&row),
        history: store::history(&req.app.pool, &row).await?,
    };
    let mut res = ok(&v)?;
    res.headers_mut()
        .insert(header::ETAG, etag(&row.snapshot_hash));
    Ok(res)
}

/// Approve: re-check the snapshot and, if nothing changed and the TTL holds, execute.
#[utoipa::path(post, path = "/v1/approvals/{id}/approve", tag = "approvals", operation_id = "approveApproval",
    params(("id" = Uuid, Path, description = "The approval's id"),
        ("If-Match" = Option<String>, Header, description = "`\"<snapshot hash>\"` from GET (`*` or absent: any)")),
    request_body(content = Option<DecisionBody>, description = "Optional (absent: `{}`)"),
    responses((status = 200, body = ApprovalOutcome, description = "Executed now (`changed`), or the decision made before",
            headers(("ETag" = String, description = "`\"<snapshot hash>\"`"))),
        (status = 403, description = "The key's role is below reviewer"),
        (status = 409, description = "Stale: the data changed since it was proposed (`changes`, `approval`); nothing ran"),
        (status = 410, description = "Expired (`approval`); nothing ran"),
        (status = 412, description = "If-Match does not match the snapshot hash (`snapshot_hash`)"),
        (status = 422, description = "Invalid input, or edited `arguments` the tool refuses")))]
pub async fn approve(
    req: Scoped<Reviewer>,
    Id(id): Id,
    headers: HeaderMap,
    OptionalJsonBody(body): OptionalJsonBody<DecisionBody>,
) -> ApiResult {
    if let Some(a) = &body.arguments
        && !a.is_object()
    {
        return Err(Problem::invalid(
            "arguments",
            "arguments must be a JSON object",
        ));
    }
    decide_with(req, id, headers, body, None).await
}

/// Reject with a reason: nothing is executed.
#[utoipa::path(post, path = "/v1/approvals/{id}/reject", tag = "approvals", operation_id = "rejectApproval",
    params(("id" = Uuid, Path, description = "The approval's id")), request_body(content = RejectBody),
    responses((status = 200, body = ApprovalOutcome, description = "Rejected now (`changed`), or the decision made before",
            headers(("ETag" = String, description = "`\"<snapshot hash>\"`"))),
        (status = 403, description = "The key's role is below reviewer"),
        (status = 409, description = "Stale before this call (`changes`, `approval`)"),
        (status = 410, description = "Expired before this call (`approval`)"),
        (status = 422, description = "Invalid input, or no `reason`")))]
pub async fn reject(
    req: Scoped<Reviewer>,
    Id(id): Id,
    headers: HeaderMap,
    OptionalJsonBody(body): OptionalJsonBody<RejectBody>,
) -> ApiResult {
    let reason = body.reason;
    let body = DecisionBody {
        by: body.by,
        arguments: None,
    };
    decide_with(req, id, headers, body, Some(reason)).await
}

/// A rejection's reason: required, 1–500 characters, not only spaces (kept trimmed).
pub fn check_reason(reason: Option<&str>) -> Result<String, Problem> {
    let given = reason.unwrap_or("");
    let r = given.trim();
    if r.is_empty() {
        return Err(Problem::invalid(
            "reason",
            "reason is required: say why the action is rejected (1–500 characters)",
        ));
    }
    if given.chars().count() > 500 {
        return Err(Problem::invalid(
            "reason",
            "reason must be at most 500 characters",
        ));
    }
    Ok(r.to_string())
}

fn if_match_ok(headers: &HeaderMap, hash: &str) -> Result<bool, Problem> {
    let Some(v) = headers.get(header::IF_MATCH) else {
        return Ok(true);
    };
    let v = v
        .to_str()
        .map_err(|_| Problem::bad_request("If-Match", "If-Match must be ASCII"))?;
    Ok(v.split(',').map(str::trim).any(|tag| {
        let tag = tag.strip_prefix("W/").unwrap_or(tag);
        tag == "*" || tag.trim_matches('"') == hash
    }))
}

/// Approve (`reject` None) or reject with the reason given (checked once the approval is
/// found, so another org's id is 404 whatever the body).
async fn decide_with(
    req: Scoped<Reviewer>,
    id: Uuid,
    headers: HeaderMap,
    body: DecisionBody,
    reject: Option<Option<String>>,
) -> ApiResult {
    let approve = reject.is_none();
    let caller = req.caller;
    let by = match body.by.as_deref() {
        Some(b) if b.trim().is_empty() => {
            return Err(Problem::invalid("by", "by must not be empty when given"));
        }
        Some(b) if b.chars().count() > 200 => {
            return Err(Problem::invalid("by", "by must be at most 200 characters"));
        }
        Some(b) => format!("{} (key {})", b.trim(), caller.key_id),
        None => format!("key {}", caller.key_id),
    };
    let row = find(&req, id).await?;
    let reject_reason = match reject {
        Some(r) => Some(check_reason(r.as_deref())?),
        None => None,
    };
    if !row.status.is_pending() {
        return already(&row);
    }
    if approve && !if_match_ok(&headers, &row.snapshot_hash)? {
        return Err(Problem::new(
            StatusCode::PRECONDITION_FAILED,
            "precondition-failed",
            "If-Match does not match this approval's snapshot hash; GET it again",
        )
        .field("If-Match")
        .extra(json!({"snapshot_hash": row.snapshot_hash})));
    }
    let app = &req.app;
    let kind = runs::kind_of(&app.pool, row.run_id).await?;
    let env = app.approval_tool_env(kind.as_deref());
    let decision = if approve {
        Decision::Approve { by }
    } else {
        Decision::Reject { by }
    };
    let extra = approvals::DecisionExtra {
        reason: reject_reason,
        edited_args: body.arguments,
    };
    let out = match approvals::decide(
        &app.pool,
        &app.clock,
        &env,
        row.id,
        Some(caller.org_id),
        decision,
        extra,
    )
    .await
    {
        Ok(o) => o,
        Err(DecideError::NotFound(id)) => return Err(Problem::not_found("approval", id)),
        Err(DecideError::InvalidEdit(msg)) => return Err(Problem::invalid("arguments", msg)),
        Err(e @ DecideError::OrgInactive(_)) => {
            return Err(Problem::new(
                StatusCode::CONFLICT,
                "org-inactive",
                e.to_string(),
            ));
        }
        Err(e) => return Err(Problem::internal(e)),
    };
    let after = store::get(&app.pool, row.id).await?.unwrap_or(row);
    if !out.changed {
        return already(&after);
    }
    outcome(&after, out.changes, true)
}

/// The answer for an approval in its current state: expired → 410, stale → 409 with what
/// changed, otherwise 200 with the decision (`changed`: whether this call made it).
fn outcome(row: &ApprovalRow, changes: Option<Value>, changed: bool) -> ApiResult {
    match row.status {
        ApprovalStatus::Expired => Err(Problem::new(
            StatusCode::GONE,
            "expired",
            format!(
                "approval {} expired at {}; nothing was executed",
                row.id,
                row.expires_at.to_rfc3339()
            ),
        )
        .extra(json!({"approval": view(row)}))),
        ApprovalStatus::Stale => Err(Problem::new(
            StatusCode::CONFLICT,
            "stale",
            "the data changed since the action was proposed; nothing was executed",
        )
        .extra(json!({"changes": changes, "approval": view(row)}))),
        _ => {
            let body = ApprovalOutcome {
                changed,
                approval: view(row),
            };
            let mut res = ok(&body)?;
            res.headers_mut()
                .insert(header::ETAG, etag(&row.snapshot_hash));
            Ok(res.into_response())
        }
    }
}

/// An approval decided before this call: its decision again (nothing runs twice).
fn already(row: &ApprovalRow) -> ApiResult {
    let changes = row.result.as_ref().and_then(|r| r.get("changes").cloned());
    outcome(row, changes, false)
}
