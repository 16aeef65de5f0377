//! Forks (issue 50, item 2), reviewer role: `POST /v1/runs/{id}/fork` makes a new run from the
//! run's first N checkpoints (copied, not run again) and enqueues its live part with another
//! model or instructions; `POST /v1/runs/{id}/adopt` makes an auto_create fork's proposal its
//! document's. The rules are `jobs::fork`'s; here the errors become problem details naming the
//! field.

use super::auth::{Reviewer, Scoped};
use super::error::{ApiResult, Problem, json_response, ok};
use super::extract::{Id, JsonBody};
use crate::jobs::fork::{self, Adopted, ForkAsk, ForkError, Forked};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::json;
use utoipa::ToSchema;

/// What a fork is asked for.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"from_step": 2, "model": "gpt-4.1-mini", "instructions": "Name the total field total_due."}))]
pub struct ForkRequest {
    /// How many of the run's checkpoints the fork starts with, copied (the `seq` of the first
    /// step it runs itself): 1 to the run's number of steps.
    #[schema(value_type = i64, minimum = 1, maximum = 2147483647)]
    #[serde(deserialize_with = "whole_number")]
    pub from_step: i64,
    /// The model of the fork's live part (default: the run's).
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^\u0000-\u001f\u007f-\u009f\s][^\u0000-\u001f\u007f-\u009f]*$"
    )]
    pub model: Option<String>,
    /// What to do differently, in the reviewer's words (1–2000 characters, not only spaces, no
    /// NUL); the fork's system prompt gets them verbatim, fenced as a person's words.
    #[schema(
        min_length = 1,
        max_length = 2000,
        pattern = r"^[^\u0000]*[^\u0000\s][^\u0000]*$"
    )]
    pub instructions: Option<String>,
}

/// A JSON integer, also written with a zero fraction (`2.0`: JSON Schema's `integer` allows it).
fn whole_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let n = serde_json::Number::deserialize(d)?;
    if let Some(i) = n.as_i64() {
        return Ok(i);
    }
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(f as i64), // checked: whole, in range
        _ => Err(serde::de::Error::custom(format_args!(
            "expected a whole number (got {n})"
        ))),
    }
}

/// The problem detail of a fork or adopt that was refused.
fn problem(e: ForkError, id: uuid::Uuid) -> Problem {
    let detail = e.to_string();
    match e {
        ForkError::NotFound(_) => Problem::not_found("run", id).field("id"),
        ForkError::Running(_) => Problem::conflict(detail)
            .field("id")
            .extra(json!({"run_status": "running"})),
        // Below 1 the request is invalid whatever the run; past its last step it conflicts
        // with this run (it has `steps`).
        ForkError::Step { got, last } if got < 1 => {
            Problem::invalid("from_step", detail).extra(json!({"steps": last}))
        }
        ForkError::Step { last, .. } => Problem::conflict(detail)
            .field("from_step")
            .extra(json!({"steps": last})),
        ForkError::Model(m) => Problem::invalid("model", m),
        ForkError::Instructions(m) => Problem::invalid("instructions", m),
        ForkError::Kind(..)
        | ForkError::Busy(..)
        | ForkError::NotAFork(_)
        | ForkError::Incomplete(..)
        | ForkError::Adopted(_) => Problem::conflict(detail).field("id"),
        ForkError::NotEnded(_, status) => Problem::conflict(detail)
            .field("id")
            .extra(json!({"run_status": status})),
        ForkError::Db(e) => e.into(),
        ForkError::Queue(e) => e.into(),
    }
}

/// Fork a run from step N: a new run of its kind and subject starts with its first `from_step`
/// checkpoints (no provider call and no side effect repeated for them) and goes on live with
/// `model` and `instructions` (a `run_fork` job). The run is not changed; an auto_create fork
/// writes its own proposal and leaves the document's until it is adopted (`adoptFork`).
/// Audited with the key that asked.
#[utoipa::path(post, path = "/v1/runs/{id}/fork", tag = "runs", operation_id = "forkRun",
    params(("id" = uuid::Uuid, Path, description = "The run's id")),
    request_body = ForkRequest,
    responses((status = 202, body = Forked, description = "The fork is made and its live part enqueued"),
        (status = 403, description = "The key's role is below reviewer"),
        (status = 409, description = "The run is still running, of a kind that cannot be forked (`approval_expiry`), its document has a run in progress (`field: id`), or `from_step` is past the run's last step (`field: from_step`, `steps` says how many it has)"),
        (status = 422, description = "`from_step` below 1, `model` or `instructions` invalid")))]
pub async fn fork(
    req: Scoped<Reviewer>,
    Id(id): Id,
    JsonBody(body): JsonBody<ForkRequest>,
) -> ApiResult {
    let by = format!("key {}", req.caller.key_id);
    let ask = ForkAsk {
        from_step: body.from_step,
        model: body.model.as_deref(),
        instructions: body.instructions.as_deref(),
    };
    match fork::request(&req.app, req.org_id(), id, &ask, &by).await {
        Ok(forked) => Ok(json_response(StatusCode::ACCEPTED, &forked)),
        Err(e) => Err(problem(e, id)),
    }
}

/// Adopt an auto_create fork's proposal: the fork's schema, prompt and extraction become its
/// document's proposal (`proposed`, to accept or reject like any). Audited.
#[utoipa::path(post, path = "/v1/runs/{id}/adopt", tag = "runs", operation_id = "adoptFork",
    params(("id" = uuid::Uuid, Path, description = "The fork's run id")),
    responses((status = 200, body = Adopted, description = "The document's proposal is the fork's"),
        (status = 403, description = "The key's role is below reviewer"),
        (status = 409, description = "Not an auto_create fork, not ended well, without a complete proposal, adopted already, or its document has a run in progress")))]
pub async fn adopt(req: Scoped<Reviewer>, Id(id): Id) -> ApiResult {
    let by = format!("key {}", req.caller.key_id);
    match fork::adopt(&req.app, req.org_id(), id, &by).await {
        Ok(adopted) => ok(&adopted),
        Err(e) => Err(problem(e, id)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_names_its_field_and_status() {
        let id = uuid::Uuid::nil();
        let past = problem(ForkError::Step { got: 9, last: 4 }, id);
        assert_eq!(past.status, StatusCode::CONFLICT);
        assert_eq!(past.field.as_deref(), Some("from_step"));
        let zero = problem(ForkError::Step { got: 0, last: 4 }, id);
        assert_eq!(zero.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(zero.field.as_deref(), Some("from_step"));
        let running = problem(ForkError::Running(id), id);
        assert_eq!(running.status, StatusCode::CONFLICT);
        assert_eq!(running.field.as_deref(), Some("id"));
        let model = problem(ForkError::Model("model must be …".into()), id);
        assert_eq!(model.field.as_deref(), Some("model"));
        assert_eq!(
            problem(ForkError::NotFound(id), id).status,
            StatusCode::NOT_FOUND
        );
    }
}
