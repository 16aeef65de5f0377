//! `/v1/documents`: upload (with `Idempotency-Key`, and auto-create enqueued in the same
//! transaction as the document — what `agentd documents add --auto-create` does), list, show
//! (status and proposal), accept, reject, refine with a reviewer's instructions (issue 33). An
//! upload with auto-create may name a schema, a prompt and tags to start from.

use super::auth::{Reviewer, Scoped, Uploader};
use super::error::{ApiResult, Problem, json_response, ok};
use super::extract::{Id, JsonBody, Listing, Paged};
use crate::jobs::refine::{self, RefineError, RefineQueued};
use crate::jobs::start::{self, StartIds};
use crate::kinds::{self, JobKind};
use crate::store::documents::{self, AutoCreateStatus, DocumentSummary};
use crate::store::{api_keys, auto_create};
use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;
use uuid::Uuid;

/// Largest document text, in bytes of UTF-8 (the body limit of the route is a little more).
pub const MAX_TEXT_BYTES: usize = 4 * 1024 * 1024;
/// Body limit of `POST /v1/documents`.
pub const MAX_DOCUMENT_BODY: usize = MAX_TEXT_BYTES + 64 * 1024;
/// Most characters of a document's text `GET /v1/documents/{id}` returns (`text_truncated`
/// says when there is more).
pub const MAX_TEXT_SHOWN: usize = 200_000;
/// Longest document name, in characters.
const MAX_NAME_CHARS: usize = 500;

/// A document to upload.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"name": "invoice.txt", "text": "Invoice Number: INV-42\nTotal: 120.00", "auto_create": true}))] // not a job kind: the upload's field
pub struct NewDocument {
    /// Shown in lists; 1–500 characters, not only spaces, no NUL.
    #[schema(
        min_length = 1,
        max_length = 500,
        pattern = r"^[^\u0000]*[^\u0000\s][^\u0000]*$"
    )]
    pub name: String,
    /// The document's text (UTF-8, no NUL; at most 4 MiB of UTF-8: a longer text is 413).
    #[schema(max_length = 4194304, pattern = r"^[^\u0000]*$")]
    pub text: String,
    /// Enqueue an auto-create run in the same transaction (default false).
    #[serde(default)]
    pub auto_create: bool,
    /// With `auto_create`: a schema of the org to reuse (its latest version) instead of
    /// creating one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_id: Option<Uuid>,
    /// With `auto_create`: a prompt of the org to reuse (its latest version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_id: Option<Uuid>,
    /// With `auto_create`: tags of the org for the prompt the run makes (at most 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_items = 20)]
    pub tag_ids: Option<Vec<Uuid>>,
}

impl NewDocument {
    /// What the upload names to start from.
    fn start_ids(&self) -> StartIds {
        StartIds {
            schema_id: self.schema_id,
            prompt_id: self.prompt_id,
            tag_ids: self.tag_ids.clone().unwrap_or_default(),
        }
    }
}

/// Checks what an upload or a job names to start from in the caller's transaction: another
/// org's id is 404 naming its field, too many tags 422.
pub async fn check_start(
    conn: &mut sqlx::PgConnection,
    org: Uuid,
    ids: &StartIds,
) -> Result<(), Problem> {
    match start::resolve(conn, org, ids).await? {
        Ok(_) => Ok(()),
        Err(bad) if bad.field == "tag_ids" && ids.tag_ids.len() > start::MAX_TAGS => {
            Err(Problem::invalid(bad.field, bad.message))
        }
        Err(bad) => {
            Err(Problem::new(StatusCode::NOT_FOUND, "not-found", bad.message).field(bad.field))
        }
    }
}

/// The answer to an upload.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"id": "01a20876-e194-7505-88ab-8e4b4f516c4e", "name": "invoice.txt", "auto_create_status": "queued", "job_id": 7}))]
pub struct CreatedDocument {
    pub id: Uuid,
    pub name: String,
    /// `queued` with auto-create, else `none`.
    pub auto_create_status: AutoCreateStatus,
    /// The auto_create job, if one was enqueued.
    pub job_id: Option<i64>,
}

fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, Problem> {
    let Some(v) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let s = v.to_str().unwrap_or("");
    if s.is_empty() || s.len() > 255 || !s.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Problem::bad_request(
            "Idempotency-Key",
            "Idempotency-Key must be 1–255 visible ASCII characters",
        ));
    }
    Ok(Some(s.to_string()))
}

fn validate(d: &NewDocument) -> Result<(), Problem> {
    let name_chars = d.name.trim().chars().count();
    if name_chars == 0 || d.name.chars().count() > MAX_NAME_CHARS {
        return Err(Problem::invalid(
            "name",
            format!("name must be 1–{MAX_NAME_CHARS} characters (got {name_chars} after trimming)"),
        ));
    }
    if d.name.contains('\0') {
        return Err(Problem::invalid(
            "name",
            "name must not contain NUL (\\u0000)",
        ));
    }
    if d.text.len() > MAX_TEXT_BYTES {
        return Err(Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "text-too-large",
            format!(
                "text is {} bytes of UTF-8; the limit is {MAX_TEXT_BYTES}",
                d.text.len()
            ),
        )
        .field("text"));
    }
    if let Some(at) = d.text.find('\0') {
        return Err(Problem::invalid(
            "text",
            format!("text contains NUL (\\u0000) at byte {at}; PostgreSQL text cannot hold it"),
        ));
    }
    if !d.auto_create {
        let named = [
            ("schema_id", d.schema_id.is_some()),
            ("prompt_id", d.prompt_id.is_some()),
            ("tag_ids", d.tag_ids.is_some()),
        ];
        if let Some((field, _)) = named.iter().find(|(_, given)| *given) {
            return Err(Problem::invalid(
                *field,
                format!("{field} is what auto-create starts from: give it with auto_create: true"),
            ));
        }
    }
    Ok(())
}

/// Holds one of `api.max_concurrent_uploads` slots while an upload is read and stored (its
/// body is held, parsed and canonicalised for `Idempotency-Key`, up to 4 MiB + 64 KiB each:
/// review D8); with none free, 503 with `Retry-After: 1` before the body is read. Runs after
/// authentication and the rates.
pub async fn upload_slot(
    axum::extract::State(s): axum::extract::State<super::ApiState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    match s.uploads.clone().try_acquire_owned() {
        Ok(_slot) => next.run(req).await,
        Err(_) => Problem::uploads_full().into_response(),
    }
}

/// Upload a document; with `auto_create` its auto-create job is enqueued in the same transaction.
#[utoipa::path(post, path = "/v1/documents", tag = "documents", operation_id = "createDocument",
    request_body = NewDocument,
    params(("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255, pattern = "^[!-~]+$",
        description = "1–255 visible ASCII characters, kept 24 h per org: the same key and body answer the same; another body is 422")),
    responses((status = 201, body = CreatedDocument, description = "Stored (or the answer first given to this Idempotency-Key)"),
        (status = 403, description = "The key's role is below uploader"),
        (status = 404, description = "`schema_id`, `prompt_id` or one of `tag_ids` is not the org's (`field` names it)"),
        (status = 413, description = "The body is over 4 MiB + 64 KiB, or `text` over 4 MiB of UTF-8"),
        (status = 422, description = "Invalid input, or an Idempotency-Key used with another body"),
        (status = 503, description = "`api.max_concurrent_uploads` uploads are being handled (`Retry-After`), or another of the server's limits")))]
pub async fn create(
    req: Scoped<Uploader>,
    headers: HeaderMap,
    JsonBody(doc): JsonBody<NewDocument>,
) -> ApiResult {
    let key = idempotency_key(&headers)?;
    validate(&doc)?;
    let (app, caller) = (&req.app, req.caller);
    let now = app.clock.now();
    let mut tx = app.pool.begin().await?;
    if let Some(key) = &key {
        let canonical = serde_jcs::to_vec(&doc).map_err(Problem::internal)?;
        let hash = hex::encode(Sha256::digest(canonical));
        let route = "POST /v1/documents";
        if let Some(prev) =
            api_keys::claim_idempotent(&mut tx, caller.org_id, key, route, &hash, now).await?
        {
            if prev.request_hash != hash || prev.route != route {
                return Err(Problem::invalid(
                    "Idempotency-Key",
                    "this Idempotency-Key was used with a different request; use a new key",
                ));
            }
            let status = StatusCode::from_u16(prev.status as u16).unwrap_or(StatusCode::CREATED);
            return Ok(json_response(status, &prev.response));
        }
    }
    let id = documents::insert(
        &mut tx,
        caller.org_id,
        &doc.name,
        Some(&doc.text),
        &json!({}),
        now,
    )
    .await?;
    let mut job_id = None;
    if doc.auto_create {
        let ids = doc.start_ids();
        check_start(&mut tx, caller.org_id, &ids).await?;
        job_id = crate::documents::enqueue_auto_create(
            &mut tx,
            app,
            caller.org_id,
            id,
            &ids,
            super::trace::job_traceparent(&headers),
            now,
        )
        .await?;
    }
    let body = CreatedDocument {
        id,
        name: doc.name.clone(),
        auto_create_status: if doc.auto_create {
            AutoCreateStatus::Queued
        } else {
            AutoCreateStatus::None
        },
        job_id,
    };
    let body = serde_json::to_value(&body).map_err(Problem::internal)?;
    if let Some(key) = &key {
        api_keys::finish_idempotent(&mut tx, caller.org_id, key, 201, &body).await?;
    }
    tx.commit().await?;
    Ok(json_response(StatusCode::CREATED, &body))
}

/// The org's documents, newest first (`status`: an auto-create status).
#[utoipa::path(get, path = "/v1/documents", tag = "documents", operation_id = "listDocuments",
    params(Listing<AutoCreateStatus>),
    responses((status = 200, body = Paged<DocumentSummary>, description = "A page of documents")))]
pub async fn list(req: Scoped, Listing(page, status): Listing<AutoCreateStatus>) -> ApiResult {
    let paged = Paged::<DocumentSummary>::fetch(&req.app.pool, req.org_id(), &page, status, None);
    ok(&paged.await?)
}

/// A document: auto-create status and the proposal (schema fields, prompt, extracted values,
/// run) and its text (at most 200,000 characters; `text_chars`, `text_truncated`).
#[utoipa::path(get, path = "/v1/documents/{id}", tag = "documents", operation_id = "getDocument",
    params(("id" = Uuid, Path, description = "The document's id")),
    responses((status = 200, body = DocumentReport, description = "The document and its proposal")))]
pub async fn get(req: Scoped, Id(id): Id) -> ApiResult {
    let (app, org) = (&req.app, req.org_id());
    if auto_create::state(&app.pool, Some(org), id)
        .await?
        .is_none()
    {
        return Err(Problem::not_found("document", id));
    }
    let mut report = crate::documents::document_report(app, id)
        .await?
        .filter(|r| r["org_id"] == json!(org))
        .ok_or_else(|| Problem::not_found("document", id))?;
    // The stored error can name provider endpoints and database errors (review D11).
    if let Some(raw) = report["error"].as_str() {
        report["error"] = json!(super::jobs::tenant_error(raw));
    }
    // The text beside the proposal (the console shows both), bounded.
    let mut conn = app.pool.acquire().await?;
    if let Some(d) = documents::get(&mut conn, org, id, MAX_TEXT_SHOWN).await? {
        report["text"] = json!(d.text);
        report["text_chars"] = json!(d.text_chars);
        report["text_truncated"] = json!(d.text_chars > MAX_TEXT_SHOWN as i64);
    }
    ok(&report)
}

/// Accept the proposal: schema and prompt become active, the extraction accepted.
#[utoipa::path(post, path = "/v1/documents/{id}/accept", tag = "documents", operation_id = "acceptDocument",
    params(("id" = Uuid, Path, description = "The document's id")),
    responses((status = 200, body = DecidedDocument, description = "Accepted"),
        (status = 403, description = "The key's role is below reviewer"),
        (status = 409, description = "The document has no proposal to decide (`auto_create_status` says where it is)")))]
pub async fn accept(req: Scoped<Reviewer>, Id(id): Id) -> ApiResult {
    decide(req, id, true).await
}

/// Reject the proposal: its artifacts are removed (the audit trail stays).
#[utoipa::path(post, path = "/v1/documents/{id}/reject", tag = "documents", operation_id = "rejectDocument",
    params(("id" = Uuid, Path, description = "The document's id")),
    responses((status = 200, body = DecidedDocument, description = "Rejected"),
        (status = 403, description = "The key's role is below reviewer"),
        (status = 409, description = "The document has no proposal to decide (`auto_create_status` says where it is)")))]
pub async fn reject(req: Scoped<Reviewer>, Id(id): Id) -> ApiResult {
    decide(req, id, false).await
}

async fn decide(req: Scoped<Reviewer>, id: Uuid, accept: bool) -> ApiResult {
    let org = req.org_id();
    let now = req.app.clock.now();
    let mut tx = req.app.pool.begin().await?;
    let st = auto_create::lock_state(&mut tx, org, id)
        .await?
        .ok_or_else(|| Problem::not_found("document", id))?;
    if st.auto_create_status != AutoCreateStatus::Proposed {
        return Err(Problem::conflict(format!(
            "document {id} has no proposal to decide (auto_create_status = {})",
            st.auto_create_status
        ))
        .extra(json!({"auto_create_status": st.auto_create_status})));
    }
    let Some(run) = st.auto_create_run_id else {
        return Err(Problem::internal(format!(
            "document {id} is proposed without a run"
        )));
    };
    let act = match accept {
        true => super::acts::Act::AcceptProposal,
        false => super::acts::Act::RejectProposal,
    };
    let about = json!({"document_id": id, "run_id": run});
    super::acts::record(&mut tx, &req.caller, act, Some(id), about, now).await?;
    let body = if accept {
        auto_create::accept(&mut tx, org, id, run, now).await?;
        DecidedDocument {
            id,
            auto_create_status: AutoCreateStatus::Accepted,
            run_id: run,
            artifacts_removed: None,
        }
    } else {
        let removed = auto_create::reject(&mut tx, org, id, run, now).await?;
        DecidedDocument {
            id,
            auto_create_status: AutoCreateStatus::Rejected,
            run_id: run,
            artifacts_removed: Some(removed),
        }
    };
    tx.commit().await?;
    ok(&body)
}

/// A reviewer's refine: what to change in the document's proposal.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"instructions": "Add a field due_date; rename total to total_due."}))]
pub struct RefineRequest {
    /// What to change, in the reviewer's words (1–2000 characters, not only spaces, no NUL);
    /// the run gets them verbatim, fenced as a person's words.
    #[schema(
        min_length = 1,
        max_length = 2000,
        pattern = r"^[^\u0000]*[^\u0000\s][^\u0000]*$"
    )]
    pub instructions: String,
}

/// Refine the proposal with instructions: a run starts from the proposal (schema, prompt,
/// extraction) and the instructions, writes new versions of that schema and prompt and a new
/// extraction, and brings the document back to `proposed`. Audited with the key that asked.
#[utoipa::path(post, path = "/v1/documents/{id}/refine", tag = "documents", operation_id = "refineDocument",
    params(("id" = Uuid, Path, description = "The document's id")),
    request_body = RefineRequest,
    responses((status = 202, body = RefineQueued, description = "The refine run is enqueued (an `auto_create` job); the document is `queued`"),
        (status = 403, description = "The key's role is below reviewer"),
        (status = 409, description = "The document has no proposal to refine (`auto_create_status` says where it is), or an auto-create job of it waits or runs"),
        (status = 422, description = "`instructions` empty, over 2000 characters or with NUL")))]
pub async fn refine(
    req: Scoped<Reviewer>,
    Id(id): Id,
    JsonBody(body): JsonBody<RefineRequest>,
) -> ApiResult {
    let (app, org) = (&req.app, req.org_id());
    let by = format!("key {}", req.caller.key_id);
    let q = &app.spec(kinds::AutoCreate::NAME).queue;
    let now = app.clock.now();
    let e = match refine::request(&app.pool, q, org, id, &body.instructions, &by, now).await {
        Ok(queued) => return Ok(json_response(StatusCode::ACCEPTED, &queued)),
        Err(e) => e,
    };
    let detail = e.to_string();
    Err(match e {
        RefineError::Instructions(m) => Problem::invalid("instructions", m),
        RefineError::NotFound(_) => Problem::not_found("document", id).field("id"),
        RefineError::NoProposal(_, status) => Problem::conflict(detail)
            .field("id")
            .extra(json!({"auto_create_status": status})),
        RefineError::Busy(_) => Problem::conflict(detail).field("id"),
        RefineError::Db(e) => e.into(),
        RefineError::Queue(e) => e.into(),
    })
}

/// The answer to accept or reject.
#[derive(Debug, Serialize, ToSchema)]
pub struct DecidedDocument {
    pub id: Uuid,
    /// `accepted` or `rejected`.
    pub auto_create_status: AutoCreateStatus,
    /// The run whose proposal was decided.
    pub run_id: Uuid,
    /// Reject only: how many proposed artifacts were removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub artifacts_removed: Option<u64>,
}

/// `GET /v1/documents/{id}`: the document's auto-create report (`documents::document_report`,
/// also `agentd documents show --json`) and its text. Only its schema is used: the report is
/// built as JSON; `tests/it/api.rs` checks the two key for key.
#[derive(ToSchema)]
#[expect(dead_code, reason = "schema only: the report is built as JSON")]
pub struct DocumentReport {
    document_id: Uuid,
    org_id: Uuid,
    name: String,
    auto_create_status: AutoCreateStatus,
    /// Why auto-create failed or was skipped.
    error: Option<String>,
    /// The proposed (or accepted) schema.
    schema: Option<ReportSchema>,
    /// The schema's fields.
    fields: Vec<ReportField>,
    /// Field names the run's `create_schema` / `update_schema` left out, and why: names made of
    /// the document's own words that are no label — an instruction-like line's
    /// (`system_override`), a value's (`auth_0o2331`), a table row's or a receipt's item
    /// (`croissant`), the title's (`tax_invoice`) — or of a tool's name or an id. `source` says
    /// whether the model (or the offline provider) proposed the name or the analysis found it
    /// and did not offer it. Empty when nothing was left out.
    dropped_fields: Vec<DroppedField>,
    /// Fields the analysis found that the proposal left out as no key field (a table's rows, a
    /// contact or payment detail, a footer's line, another name for a field it has), and why;
    /// `POST /v1/documents/{id}/fields` adds one. Empty when nothing was left out.
    also_found: Vec<AlsoFoundField>,
    /// The proposed (or accepted) extraction prompt.
    prompt: Option<ReportPrompt>,
    /// The extraction: the values read from the document.
    extraction: Option<ReportExtraction>,
    /// The auto-create run.
    run: Option<ReportRun>,
    /// The text (its first 200,000 characters).
    text: Option<String>,
    /// The text's length in characters.
    text_chars: Option<i64>,
    /// Whether `text` is cut short.
    text_truncated: Option<bool>,
}

/// A schema of the report.
#[derive(ToSchema)]
#[expect(dead_code, reason = "schema only: the report is built as JSON")]
struct ReportSchema {
    /// `<schema id>:<version>`.
    revid: String,
    name: String,
    status: String,
}

/// A field of the report's schema.
#[derive(ToSchema)]
#[expect(dead_code, reason = "schema only: the report is built as JSON")]
struct ReportField {
    name: String,
    /// The field's JSON Schema type (a name, a list of names, or null).
    #[schema(value_type = Value)]
    r#type: Value,
    #[schema(value_type = Value)]
    description: Value,
}

/// A field name the proposal left out ([`DocumentReport::dropped_fields`]).
#[derive(ToSchema)]
#[expect(dead_code, reason = "schema only: the report is built as JSON")]
struct DroppedField {
    /// The name as proposed (`lines[].croissant` for a list item's field).
    name: String,
    /// `instruction`, `value`, `item` or `title`.
    reason: String,
    /// The reason in words, with the document's line.
    why: String,
    /// 1-based line of the document the name's words are on, when they are the document's.
    line: Option<i64>,
    /// `proposed` (a schema call gave it) or `candidate` (the analysis found it; not offered).
    source: String,
}

/// A field the proposal left out as no key field ([`DocumentReport::also_found`]).
#[derive(ToSchema)]
#[expect(dead_code, reason = "schema only: the report is built as JSON")]
struct AlsoFoundField {
    /// The field's name in the proposal it was left out of.
    name: String,
    /// The document's label.
    label: String,
    /// `table`, `detail`, `footer`, `weak_label` or `double`.
    reason: String,
    /// The reason in words.
    why: String,
    /// 1-based line of the document, when the analysis found it there.
    line: Option<i64>,
    /// The field's JSON Schema type as proposed.
    #[schema(value_type = Value)]
    r#type: Value,
}

/// A prompt of the report.
#[derive(ToSchema)]
#[expect(dead_code, reason = "schema only: the report is built as JSON")]
struct ReportPrompt {
    /// `<prompt id>:<version>`.
    revid: String,
    name: String,
    status: String,
    content: String,
}

/// An extraction of the report.
#[derive(ToSchema)]
#[expect(dead_code, reason = "schema only: the report is built as JSON")]
struct ReportExtraction {
    id: Uuid,
    status: crate::store::states::ExtractionStatus,
    /// The values, by field name.
    #[schema(value_type = Object)]
    result: Value,
    /// JSON pointers (`/total`) of values the document's text does not contain, after the
    /// same normalisation of amounts and dates: a reviewer checks these first.
    ungrounded: Vec<String>,
}

/// The run of the report.
#[derive(ToSchema)]
#[expect(dead_code, reason = "schema only: the report is built as JSON")]
struct ReportRun {
    id: Uuid,
    provider: String,
    /// The model the run asked for.
    model: String,
    status: crate::store::states::RunStatus,
    stop_reason: Option<String>,
    rounds: i32,
    tool_calls: i32,
    /// Input plus output tokens.
    tokens: i64,
    input_tokens: i64,
    output_tokens: i64,
    /// Of `input_tokens`: read from the provider's prompt cache.
    cache_read_tokens: i64,
    /// Of `input_tokens`: written to the provider's prompt cache.
    cache_write_tokens: i64,
    /// What the run's model calls cost in US dollars at `llm.prices`; null: not known
    /// (`cost_note` says why).
    cost_usd: Option<f64>,
    /// Why `cost_usd` is null (a model with no price, a run from before costs were recorded).
    cost_note: Option<String>,
    /// Wall time of the run, once it ended.
    seconds: Option<f64>,
}
