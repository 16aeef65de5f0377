//! `POST /v1/jobs` (the three kinds, validated like `agentd enqueue`, always for the key's org)
//! and `GET /v1/jobs/{id}`.

use super::auth::{Role, Scoped, Uploader};
use super::error::{ApiResult, Problem, json_response, ok};
use super::extract::{
    Id, JobPage, JsonBody, Paged, Params, encode_job_cursor, job_page_params, query_param,
};
use crate::jobs::proactive_suggestion as proactive;
use crate::jobs::start::StartIds;
use crate::jobs::{approval_expiry, auto_create};
use crate::kinds::{self, JobKind};
use crate::queue;
use crate::store::{api_reads, documents};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::path::{Parameter, ParameterIn};
use uuid::Uuid;

/// Most approvals one `approval_expiry` job from the API names.
const MAX_SWEEP_IDS: i64 = 1000;

/// The kinds of job the API enqueues (`webhook_delivery` jobs come from events only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum EnqueueKind {
    AutoCreate,
    ProactiveSuggestion,
    ApprovalExpiry,
}

/// Read as a string first, so a number or an unknown name is 422 naming `kind` with the kinds.
impl TryFrom<String> for EnqueueKind {
    type Error = String;

    fn try_from(name: String) -> Result<Self, String> {
        const ALL: [EnqueueKind; 3] = [
            EnqueueKind::AutoCreate,
            EnqueueKind::ProactiveSuggestion,
            EnqueueKind::ApprovalExpiry,
        ];
        ALL.into_iter().find(|k| k.as_str() == name).ok_or_else(|| {
            let known: Vec<_> = ALL.iter().map(|k| k.as_str()).collect();
            format!("unknown job kind {name:?} (known: {})", known.join(", "))
        })
    }
}

impl EnqueueKind {
    /// The job kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            EnqueueKind::AutoCreate => kinds::AutoCreate::NAME,
            EnqueueKind::ProactiveSuggestion => kinds::ProactiveSuggestion::NAME,
            EnqueueKind::ApprovalExpiry => kinds::ApprovalExpiry::NAME,
        }
    }
}

/// A job to enqueue for the key's org: its `kind` and the fields of that kind (another kind's
/// field is 422 naming it). The body is read as [`JobFields`] (so every error names its field)
/// and checked into this; `Deserialize` is derived for the serde attributes the OpenAPI schema
/// (one object per kind, each titled: the class a generated client names after it) is read from.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
#[schema(example = json!({"kind": kinds::AutoCreate::NAME, "document_id": "01a20876-e194-7505-88ab-8e4b4f516c4e"}))]
pub enum NewJobRequest {
    /// Auto-create on one of the org's documents.
    #[schema(title = "AutoCreateJob")]
    AutoCreate {
        /// The document.
        document_id: Uuid,
        /// Run again even if the document already has a proposal (on an accepted document: the
        /// reviewer role or above).
        force: Option<bool>,
        /// A schema of the org to reuse (its latest version) instead of creating one.
        schema_id: Option<Uuid>,
        /// A prompt of the org to reuse (its latest version).
        prompt_id: Option<Uuid>,
        /// Tags of the org for the prompt the run makes (at most 20).
        #[schema(max_items = 20)]
        tag_ids: Option<Vec<Uuid>>,
    },
    /// The nightly review of the org.
    #[schema(title = "ProactiveSuggestionJob")]
    ProactiveSuggestion {
        /// The night, YYYY-MM-DD (default: the org's local date). One job per org and night,
        /// as the cron and `agentd enqueue proactive` make it: a night already reviewed is a
        /// duplicate. Below admin, only today or yesterday in the org's time zone.
        #[schema(schema_with = night_schema)]
        night: Option<chrono::NaiveDate>,
    },
    /// The expiry sweep over the org's approvals.
    #[schema(title = "ApprovalExpiryJob")]
    ApprovalExpiry {
        /// Only these approvals of the org, 1–1000 (default: all its pending ones; none is 409).
        #[schema(min_items = 1, max_items = 1000)]
        approval_ids: Option<Vec<Uuid>>,
    },
}

/// `night` in the OpenAPI document: a date (`format: date`, spelled out by a pattern so no
/// generator takes `""` for one), or null.
fn night_schema() -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, SchemaType, Type};
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Date)))
        .pattern(Some("^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$"))
        .description(Some(
            "The night, YYYY-MM-DD (default: the org's local date); one job per org and night. \
             Below admin, only today or yesterday in the org's time zone.",
        ))
        .build()
}

/// The body of `POST /v1/jobs` as read: every kind's fields, each optional.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobFields {
    pub kind: EnqueueKind,
    pub document_id: Option<Uuid>,
    pub force: Option<bool>,
    pub schema_id: Option<Uuid>,
    pub prompt_id: Option<Uuid>,
    pub tag_ids: Option<Vec<Uuid>>,
    pub night: Option<chrono::NaiveDate>,
    pub approval_ids: Option<Vec<Uuid>>,
}

fn not_for(kind: EnqueueKind, field: &str, given: bool) -> Result<(), Problem> {
    if given {
        Err(Problem::invalid(
            field,
            format!("{field} does not apply to kind {}", kind.as_str()),
        ))
    } else {
        Ok(())
    }
}

impl JobFields {
    /// The request of its kind: another kind's field, or a missing `document_id`, is 422
    /// naming it.
    pub fn checked(self) -> Result<NewJobRequest, Problem> {
        let k = self.kind;
        if k != EnqueueKind::AutoCreate {
            not_for(k, "schema_id", self.schema_id.is_some())?;
            not_for(k, "prompt_id", self.prompt_id.is_some())?;
            not_for(k, "tag_ids", self.tag_ids.is_some())?;
        }
        Ok(match k {
            EnqueueKind::AutoCreate => {
                not_for(k, "night", self.night.is_some())?;
                not_for(k, "approval_ids", self.approval_ids.is_some())?;
                let document_id = self.document_id.ok_or_else(|| {
                    Problem::invalid("document_id", "document_id is required for auto_create")
                })?;
                NewJobRequest::AutoCreate {
                    document_id,
                    force: self.force,
                    schema_id: self.schema_id,
                    prompt_id: self.prompt_id,
                    tag_ids: self.tag_ids,
                }
            }
            EnqueueKind::ProactiveSuggestion => {
                not_for(k, "document_id", self.document_id.is_some())?;
                not_for(k, "force", self.force.is_some())?;
                not_for(k, "approval_ids", self.approval_ids.is_some())?;
                NewJobRequest::ProactiveSuggestion { night: self.night }
            }
            EnqueueKind::ApprovalExpiry => {
                not_for(k, "document_id", self.document_id.is_some())?;
                not_for(k, "force", self.force.is_some())?;
                not_for(k, "night", self.night.is_some())?;
                NewJobRequest::ApprovalExpiry {
                    approval_ids: self.approval_ids,
                }
            }
        })
    }
}

impl NewJobRequest {
    /// Its kind.
    pub fn kind(&self) -> EnqueueKind {
        match self {
            NewJobRequest::AutoCreate { .. } => EnqueueKind::AutoCreate,
            NewJobRequest::ProactiveSuggestion { .. } => EnqueueKind::ProactiveSuggestion,
            NewJobRequest::ApprovalExpiry { .. } => EnqueueKind::ApprovalExpiry,
        }
    }
}

/// The answer to an enqueue.
#[derive(Debug, Serialize, ToSchema)]
pub struct EnqueuedJob {
    /// The job (the existing one for a duplicate; none if it ended meanwhile).
    pub id: Option<i64>,
    pub kind: EnqueueKind,
    /// True when a job with the same unique key already existed (its id is returned).
    pub duplicate: bool,
}

/// Enqueue a job.
#[utoipa::path(post, path = "/v1/jobs", tag = "jobs", operation_id = "createJob", request_body = NewJobRequest,
    responses((status = 201, body = EnqueuedJob, description = "Enqueued"),
        (status = 200, body = EnqueuedJob, description = "Already enqueued (`duplicate`): the job with its unique key"),
        (status = 403, description = "The key's role is below uploader, or below reviewer for `force` on an accepted document"),
        (status = 404, description = "`document_id` or one of `approval_ids` is not the org's"),
        (status = 409, description = "approval_expiry without `approval_ids`: the org has no pending approval to sweep"),
        (status = 422, description = "Invalid input: an unknown kind, a field of another kind, a missing `document_id`, a `night` other than today or yesterday (below admin)")))]
pub async fn create(
    req: Scoped<Uploader>,
    headers: axum::http::HeaderMap,
    JsonBody(body): JsonBody<JobFields>,
) -> ApiResult {
    let (app, org) = (&req.app, req.org_id());
    let r = body.checked()?;
    let enqueued = r.kind();
    let kind = enqueued.as_str();
    if app.catalog.get(kind).is_none() {
        return Err(Problem::invalid(
            "kind",
            format!("this server has no job file for {kind:?}"),
        ));
    }
    let q = app.spec(kind).queue.clone();
    let job = match r {
        NewJobRequest::AutoCreate {
            document_id: doc,
            force,
            schema_id,
            prompt_id,
            tag_ids,
        } => {
            let mut conn = app.pool.acquire().await?;
            let Some(status) = documents::auto_create_status(&mut conn, org, doc).await? else {
                return Err(Problem::not_found("document", doc).field("document_id"));
            };
            let force = force.unwrap_or(false);
            // A forced run on an accepted document turns it back to `proposed`: undoing a
            // reviewer's decision takes a reviewer (review L5).
            if force
                && status == documents::AutoCreateStatus::Accepted
                && req.caller.role < Role::Reviewer
            {
                return Err(Problem::new(
                    StatusCode::FORBIDDEN,
                    "forbidden",
                    "`force` on an accepted document takes the reviewer role or above",
                )
                .field("force"));
            }
            let ids = StartIds {
                schema_id,
                prompt_id,
                tag_ids: tag_ids.unwrap_or_default(),
            };
            super::documents::check_start(&mut conn, org, &ids).await?;
            kinds::AutoCreate::job(&auto_create::Payload::new(org, doc, force, &ids))
        }
        NewJobRequest::ProactiveSuggestion { night } => {
            let today = proactive::night_of(&app.pool, org, app.clock.now())
                .await?
                .ok_or_else(|| Problem::not_found("org", org))?;
            let night = night.unwrap_or(today);
            // Each night is a job of its own: below admin, only tonight's or last night's
            // review, not a full run for any date (review L5).
            let recent = night == today || today.pred_opt() == Some(night);
            if !recent && req.caller.role < Role::Admin {
                return Err(Problem::invalid(
                    "night",
                    format!(
                        "night must be today ({today}) or yesterday in the org's time zone; \
                         other nights take the admin role"
                    ),
                ));
            }
            proactive::nightly_job(&q, org, night)
        }
        NewJobRequest::ApprovalExpiry { approval_ids } => {
            let ids = match approval_ids {
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
                        return Err(Problem::conflict(
                            "this org has no pending approvals to sweep",
                        )
                        .field("approval_ids"));
                    }
                    ids
                }
            };
            kinds::ApprovalExpiry::job(&approval_expiry::Payload::org_sweep(org, ids))
        }
    }
    .priority(q.priority)
    .max_attempts(q.max_attempts)
    .traceparent(super::trace::job_traceparent(&headers));
    match queue::enqueue_committed(&app.pool, &job).await? {
        Some(id) => Ok(json_response(
            StatusCode::CREATED,
            &EnqueuedJob {
                id: Some(id),
                kind: enqueued,
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
                kind: enqueued,
                duplicate: true,
            })
        }
    }
}

/// Query of `GET /v1/jobs`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobsQuery {
    /// 1–200 (default 50).
    pub limit: Option<i64>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Only jobs of this kind.
    pub kind: Option<String>,
    /// Only jobs in this state.
    pub state: Option<String>,
    /// Only jobs created at or after this time (RFC 3339).
    pub created_after: Option<String>,
    /// Only jobs created before this time (RFC 3339).
    pub created_before: Option<String>,
    /// Only the jobs of this document (its id).
    pub document: Option<String>,
}

/// What the pattern of a `created_after` / `created_before` parameter says (with
/// `format: date-time`): an RFC 3339 time with its offset.
const TIME_PATTERN: &str = "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$";

impl JobsQuery {
    /// The filters as the store reads them (400 naming the bad parameter).
    fn filter(&self, app: &crate::app::App) -> Result<api_reads::JobFilter, Problem> {
        if let Some(k) = &self.kind {
            super::console_routes::known_kind(app, "kind", k)?;
        }
        let state = self
            .state
            .as_deref()
            .map(str::parse::<queue::JobState>)
            .transpose()
            .map_err(|e| Problem::bad_request("state", format!("state {e}")))?;
        let document = self
            .document
            .as_deref()
            .map(|d| {
                Uuid::parse_str(d).map_err(|_| {
                    Problem::bad_request(
                        "document",
                        format!("document must be a document id (a UUID; got {d:?})"),
                    )
                })
            })
            .transpose()?;
        Ok(api_reads::JobFilter {
            kind: self.kind.clone(),
            state,
            created_after: time("created_after", self.created_after.as_deref())?,
            created_before: time("created_before", self.created_before.as_deref())?,
            document,
        })
    }
}

/// A time parameter: RFC 3339 with an offset (400 naming `field` otherwise).
fn time(field: &str, raw: Option<&str>) -> Result<Option<DateTime<Utc>>, Problem> {
    raw.map(|t| {
        DateTime::parse_from_rfc3339(t)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| {
                Problem::bad_request(
                    field,
                    format!("{field} must be an RFC 3339 time such as 2026-12-03T09:30:00Z ({e}; got {t:?})"),
                )
            })
    })
    .transpose()
}

/// The org's jobs, newest first (by creation), in keyset pages: only a kind, a state, those
/// created in `[created_after, created_before)`, or a document's jobs (another org's document
/// has none here). Each job as `GET /v1/jobs/{id}` shows it.
#[utoipa::path(get, path = "/v1/jobs", tag = "jobs", operation_id = "listJobs", params(JobsQuery),
    responses((status = 200, body = Paged<crate::queue::JobRow>, description = "A page of jobs")))]
pub async fn list(req: Scoped, Params(q): Params<JobsQuery>) -> ApiResult {
    let page = JobPage::new(q.limit, q.cursor.as_deref())?;
    let filter = q.filter(&req.app)?;
    let org = Some(req.org_id());
    let mut rows =
        api_reads::jobs_page(&req.app.pool, org, &filter, page.after, page.limit + 1).await?;
    let more = rows.len() as i64 > page.limit;
    rows.truncate(page.limit as usize);
    let next_cursor = rows
        .last()
        .filter(|_| more)
        .map(|j| encode_job_cursor(j.created_at, j.id));
    rows.iter_mut().for_each(for_tenant);
    ok(&Paged {
        items: rows,
        next_cursor,
    })
}

/// In the OpenAPI document: `limit`, `cursor`, `kind` (a job kind of the built-in catalog),
/// `state` (a job state), `created_after` and `created_before` (times) and `document` (a
/// UUID), as [`JobsQuery`] is read.
impl utoipa::IntoParams for JobsQuery {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        use utoipa::PartialSchema;
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        let time = || {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
                .pattern(Some(TIME_PATTERN))
                .into()
        };
        let uuid = ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Uuid)));
        let mut params = job_page_params();
        params.push(query_param(
            "kind",
            "Only jobs of this kind",
            super::console_routes::kind_schema(),
        ));
        params.push(query_param(
            "state",
            "Only jobs in this state",
            queue::JobState::schema(),
        ));
        params.push(query_param(
            "created_after",
            "Only jobs created at or after this time (RFC 3339, with its offset)",
            time(),
        ));
        params.push(query_param(
            "created_before",
            "Only jobs created before this time (RFC 3339, with its offset)",
            time(),
        ));
        params.push(query_param(
            "document",
            "Only the jobs of this document (its id): its auto-create runs and refines",
            uuid.into(),
        ));
        params
    }
}

/// One job of the org.
#[utoipa::path(get, path = "/v1/jobs/{id}", tag = "jobs", operation_id = "getJob",
    params(("id" = i64, Path, minimum = 1, description = "The job's number")),
    responses((status = 200, body = crate::queue::JobRow, description = "The job")))]
pub async fn get(req: Scoped, Id(id): Id<i64>) -> ApiResult {
    let mut job = api_reads::job(&req.app.pool, req.org_id(), id)
        .await?
        .ok_or_else(|| Problem::not_found("job", id))?;
    for_tenant(&mut job);
    ok(&job)
}

/// A job as the API shows it to the org (review L8): not which worker holds it (`locked_by`
/// names hosts and processes), and its last error as [`tenant_error`] gives it. Operators
/// read both in full with `agentd jobs` and `agentd status`.
pub(crate) fn for_tenant(job: &mut crate::queue::JobRow) {
    job.locked_by = None;
    job.last_error = job.last_error.as_deref().map(tenant_error);
}

/// Most characters of the message [`tenant_error`] keeps of an error it has no class for.
const TENANT_ERROR_CHARS: usize = 200;

/// A job's error for the org: `<class>: <short message>`. The raw text can name provider
/// endpoints, database errors and internals; a known class says what happened in its own
/// words, anything else keeps its first line, cut, with URLs left out.
pub(crate) fn tenant_error(raw: &str) -> String {
    const CLASSES: [(&[&str], &str, &str); 7] = [
        (
            &["handler panicked", "ended abnormally"],
            "internal",
            "the job's handler failed unexpectedly",
        ),
        (
            &["lease expired"],
            "lease_expired",
            "the worker stopped renewing the job (it crashed, hung or lost the database)",
        ),
        (
            &["released by a worker"],
            "released",
            "a worker shutting down gave the job back",
        ),
        (
            &["(queue.timeout_secs)"],
            "timeout",
            "the job ran past its time limit",
        ),
        (
            &["provider failed", "redaction table"],
            "provider",
            "the model provider failed",
        ),
        (
            &[
                "database error",
                "error returned from database",
                "pool timed out",
            ],
            "database",
            "a database error interrupted the job",
        ),
        (&["cancelled"], "cancelled", "the job was cancelled"),
    ];
    for (marks, class, message) in CLASSES {
        if marks.iter().any(|m| raw.contains(m)) {
            return format!("{class}: {message}");
        }
    }
    static URL: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        // checked: a constant pattern, compiled by the unit test below
        regex::Regex::new(r"[A-Za-z][A-Za-z0-9+.-]*://\S+").expect("re")
    });
    let line = raw.lines().next().unwrap_or_default();
    let line = URL.replace_all(line, "<url>");
    let mut short: String = line.chars().take(TENANT_ERROR_CHARS).collect();
    if line.chars().count() > TENANT_ERROR_CHARS {
        short.push('…');
    }
    format!("job: {short}")
}

#[cfg(test)]
mod tests {
    use super::tenant_error;

    #[test]
    fn tenant_errors_are_a_class_and_a_short_message() {
        assert_eq!(
            tenant_error(
                "provider failed: openai: HTTP 502 from http://10.0.0.5:8000/v1 (retryable)"
            ),
            "provider: the model provider failed"
        );
        assert_eq!(
            tenant_error(
                "lease expired: the worker crashed, hung or lost its database connection (attempt 2)"
            ),
            "lease_expired: the worker stopped renewing the job (it crashed, hung or lost the database)"
        );
        assert_eq!(
            tenant_error(
                "database error: error returned from database: relation \"x\" does not exist"
            ),
            "database: a database error interrupted the job"
        );
        let other = tenant_error(&format!(
            "bad payload at https://internal.example/x?k=1\n{}",
            "y".repeat(500)
        ));
        assert_eq!(other, "job: bad payload at <url>");
        let long = tenant_error(&"z".repeat(1000));
        assert_eq!(long.chars().count(), "job: ".len() + 200 + 1);
    }
}
