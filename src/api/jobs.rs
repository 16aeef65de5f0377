//! `POST /v1/jobs` (the three kinds, validated like `agentd enqueue`, always for the key's org)
//! and `GET /v1/jobs/{id}`.

use super::auth::{Scoped, Uploader};
use super::error::{ApiResult, Problem, json_response, ok};
use super::extract::{Id, JsonBody};
use crate::queue::{self, NewJob};
use crate::store::{api_reads, documents};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;
use uuid::Uuid;

/// Most approvals one `approval_expiry` job from the API names.
const MAX_SWEEP_IDS: i64 = 1000;

/// A job to enqueue for the key's org.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewJobRequest {
    /// auto_create, proactive_suggestion or approval_expiry.
    pub kind: String,
    /// auto_create: the document (required).
    pub document_id: Option<Uuid>,
    /// auto_create: run again even if the document already has a proposal.
    pub force: Option<bool>,
    /// proactive_suggestion: the night, YYYY-MM-DD (default: today, UTC).
    #[schema(value_type = Option<String>, format = Date)]
    pub night: Option<chrono::NaiveDate>,
    /// approval_expiry: only these approvals of the org (default: all its pending ones).
    pub approval_ids: Option<Vec<Uuid>>,
}

/// The answer to an enqueue.
#[derive(Debug, Serialize, ToSchema)]
pub struct EnqueuedJob {
    pub id: Option<i64>,
    pub kind: String,
    /// True when a job with the same unique key already existed (its id is returned).
    pub duplicate: bool,
}

fn not_for(kind: &str, field: &str, given: bool) -> Result<(), Problem> {
    if given {
        Err(Problem::invalid(
            field,
            format!("{field} does not apply to kind {kind}"),
        ))
    } else {
        Ok(())
    }
}

/// Enqueue a job.
#[utoipa::path(post, path = "/v1/jobs", tag = "jobs", request_body = NewJobRequest,
    responses((status = 201, body = EnqueuedJob), (status = 200, body = EnqueuedJob, description = "Already enqueued"),
        (status = 404), (status = 422)))]
pub async fn create(req: Scoped<Uploader>, JsonBody(r): JsonBody<NewJobRequest>) -> ApiResult {
    let (app, org) = (&req.app, req.org_id());
    let kind = r.kind.as_str();
    let known = ["auto_create", "proactive_suggestion", "approval_expiry"];
    if !known.contains(&kind) || app.catalog.get(kind).is_none() {
        return Err(Problem::invalid(
            "kind",
            format!("unknown job kind {kind:?} (known: {})", known.join(", ")),
        ));
    }
    let q = app.spec(kind).queue.clone();
    let job = match kind {
        "auto_create" => {
            not_for(kind, "night", r.night.is_some())?;
            not_for(kind, "approval_ids", r.approval_ids.is_some())?;
            let doc = r.document_id.ok_or_else(|| {
                Problem::invalid("document_id", "document_id is required for auto_create")
            })?;
            let mut conn = app.pool.acquire().await?;
            if !documents::exists(&mut conn, org, doc).await? {
                return Err(Problem::not_found("document", doc).field("document_id"));
            }
            let force = r.force.unwrap_or(false);
            let key = if force {
                format!("auto_create:{doc}:{}", Uuid::new_v4())
            } else {
                format!("auto_create:{doc}")
            };
            NewJob::new(
                kind,
                json!({"org_id": org, "document_id": doc, "force": force}),
            )
            .unique_key(key)
        }
        "proactive_suggestion" => {
            not_for(kind, "document_id", r.document_id.is_some())?;
            not_for(kind, "force", r.force.is_some())?;
            not_for(kind, "approval_ids", r.approval_ids.is_some())?;
            let night = r.night.unwrap_or_else(|| app.clock.now().date_naive());
            NewJob::new(kind, json!({"org_id": org, "night": night}))
                .unique_key(format!("proactive_suggestion:{org}:{night}"))
        }
        _ => {
            not_for(kind, "document_id", r.document_id.is_some())?;
            not_for(kind, "force", r.force.is_some())?;
            not_for(kind, "night", r.night.is_some())?;
            let ids = match r.approval_ids {
                Some(ids) if ids.is_empty() => {
                    return Err(Problem::invalid(
                        "approval_ids",
                        "approval_ids must not be empty (leave it out for all pending approvals)",
                    ));
                }
                Some(ids) if ids.len() as i64 > MAX_SWEEP_IDS => {
                    return Err(Problem::invalid(
                        "approval_ids",
                        format!("at most {MAX_SWEEP_IDS} approval ids per job"),
                    ));
                }
                Some(ids) => {
                    let mine = api_reads::approvals_of_org(&app.pool, org, &ids).await?;
                    if let Some(other) = ids.iter().find(|i| !mine.contains(i)) {
                        return Err(Problem::not_found("approval", other).field("approval_ids"));
                    }
                    ids
                }
                None => {
                    let ids =
                        api_reads::pending_approval_ids(&app.pool, org, MAX_SWEEP_IDS).await?;
                    if ids.is_empty() {
                        return Err(Problem::invalid(
                            "approval_ids",
                            "this org has no pending approvals to sweep",
                        ));
                    }
                    ids
                }
            };
            NewJob::new(kind, json!({"approval_ids": ids}))
        }
    }
    .priority(q.priority)
    .max_attempts(q.max_attempts);
    match queue::enqueue_committed(&app.pool, &job).await? {
        Some(id) => Ok(json_response(
            StatusCode::CREATED,
            &EnqueuedJob {
                id: Some(id),
                kind: r.kind,
                duplicate: false,
            },
        )),
        None => {
            let id = match &job.unique_key {
                Some(k) => api_reads::job_id_by_unique_key(&app.pool, k).await?,
                None => None,
            };
            ok(&EnqueuedJob {
                id,
                kind: r.kind,
                duplicate: true,
            })
        }
    }
}

/// One job of the org.
#[utoipa::path(get, path = "/v1/jobs/{id}", tag = "jobs", params(("id" = i64, Path)),
    responses((status = 200, body = Object), (status = 404)))]
pub async fn get(req: Scoped, Id(id): Id<i64>) -> ApiResult {
    let job = api_reads::job(&req.app.pool, req.org_id(), id)
        .await?
        .ok_or_else(|| Problem::not_found("job", id))?;
    ok(&job)
}
