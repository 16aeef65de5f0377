//! `POST /v1/documents/{id}/fields`: a reviewer adds one "also found" field to the document's
//! proposal (issue 48, item 2) — a field `create_schema` left out of the proposed schema as
//! no key field (`GET /v1/documents/{id}` → `also_found`). In one transaction: a new version
//! of the proposed schema with the field as it was proposed (checked by the same
//! `validate_response_format` as `update_schema`), a new version of the proposed prompt on it,
//! the proposed extraction given the field's value **from the analysis of the document's
//! text** (the model is not called again; a value the field's type refuses is left out, and
//! the answer's `value` is null), and the field no longer listed as also found. Audited.

use super::acts::{self, Act};
use super::auth::{Reviewer, Scoped};
use super::error::{ApiResult, Problem, ok};
use super::extract::{Id, JsonBody};
use crate::store::documents::AutoCreateStatus;
use crate::store::extractions::ExtractionRow;
use crate::store::{auto_create, documents, prompts, schemas, sql, versions};
use agentd_agent::tools::key_fields;
use agentd_agent::tools::schemas::{validate_instance, validate_response_format};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;
use uuid::Uuid;

/// Longest field name accepted, in characters.
const MAX_NAME_CHARS: usize = 64;

/// Which also-found field to add.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"name": "payment_terms"}))]
pub struct AddField {
    /// The name of one of the document's `also_found` fields.
    #[schema(min_length = 1, max_length = 64)]
    pub name: String,
}

/// The answer: the new schema version and what the field holds.
#[derive(Debug, Serialize, ToSchema)]
pub struct FieldAdded {
    pub document_id: Uuid,
    pub name: String,
    /// The proposed schema's new version, `<schema id>:<version>`.
    pub schema_revid: String,
    /// The proposed prompt's new version, when the proposal has a prompt.
    pub prompt_revid: Option<String>,
    /// The value put in the proposed extraction (from the analysis; null when none fits).
    #[schema(value_type = Value)]
    pub value: Value,
}

/// Add an "also found" field to the document's proposal: a new schema version with it, a new
/// prompt version on that schema, and its value (from the analysis) in the proposed
/// extraction. Audited with the key that asked.
#[utoipa::path(post, path = "/v1/documents/{id}/fields", tag = "documents", operation_id = "addDocumentField",
    params(("id" = Uuid, Path, description = "The document's id")),
    request_body = AddField,
    responses((status = 200, body = FieldAdded, description = "The field is in the proposal"),
        (status = 403, description = "The key's role is below reviewer"),
        (status = 404, description = "No such document in this org"),
        (status = 409, description = "The document has no proposal (`auto_create_status` says where it is)"),
        (status = 422, description = "`name` is not one of the document's also-found fields (the problem names them)")))]
pub async fn add(
    req: Scoped<Reviewer>,
    Id(id): Id,
    JsonBody(body): JsonBody<AddField>,
) -> ApiResult {
    let (org, now) = (req.org_id(), req.app.clock.now());
    let name = body.name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
        return Err(Problem::invalid("name", "name must be 1 to 64 characters"));
    }
    let mut tx = req.app.pool.begin().await?;
    let st = auto_create::lock_state(&mut tx, org, id)
        .await?
        .ok_or_else(|| Problem::not_found("document", id))?;
    if st.auto_create_status != AutoCreateStatus::Proposed {
        return Err(Problem::conflict(format!(
            "document {id} has no proposal to add a field to (auto_create_status = {})",
            st.auto_create_status
        ))
        .extra(json!({"auto_create_status": st.auto_create_status})));
    }
    let (Some(run), Some((schema_id, version))) = (st.auto_create_run_id, st.proposed.schema())
    else {
        return Err(Problem::conflict(format!(
            "document {id} proposes no schema"
        )));
    };
    let also = auto_create::also_found(&mut *tx, run).await?;
    let listed: Vec<&str> = also
        .as_array()
        .map(|a| a.iter().filter_map(|f| f["name"].as_str()).collect())
        .unwrap_or_default();
    let Some(entry) = also
        .as_array()
        .and_then(|a| a.iter().find(|f| f["name"].as_str() == Some(name)))
        .filter(|f| f["schema"].is_object())
    else {
        let known = match listed.is_empty() {
            true => "it has none".to_string(),
            false => format!("they are: {}", listed.join(", ")),
        };
        return Err(Problem::invalid(
            "name",
            format!("{name:?} is not one of document {id}'s also-found fields ({known})"),
        ));
    };
    let proposed = schemas::get(&mut tx, org, schema_id, version)
        .await?
        .ok_or_else(|| Problem::not_found("schema", schema_id))?;
    let rf = key_fields::with_field(&proposed.response_format, name, &entry["schema"]);
    if let Err(errors) = validate_response_format(&rf) {
        return Err(Problem::invalid(
            "name",
            format!(
                "the schema with {name:?} does not pass the checks: {}",
                errors.join("; ")
            ),
        ));
    }
    // `create_version` numbers after the latest, locked.
    versions::latest::<schemas::SchemaRow>(&mut tx, org, schema_id, true).await?;
    let s = schemas::create_version(&mut tx, org, schema_id, &rf, Some(run), now)
        .await?
        .ok_or_else(|| Problem::not_found("schema", schema_id))?;
    let mut prompt_revid = None;
    let mut prompt_version = None;
    if let Some((prompt_id, _)) = st.proposed.prompt()
        && let Some(prev) =
            versions::latest::<prompts::PromptRow>(&mut tx, org, prompt_id, true).await?
    {
        let mut f = prev.fields.clone();
        f.schema_version = s.version;
        let p = prompts::create_version(&mut tx, org, &prev, &f, Some(run), now).await?;
        prompt_revid = Some(format!("{}:{}", p.prompt_id, p.version));
        prompt_version = Some(p.version);
    }
    // The value (and the kind) from the analysis of the document's text.
    let text = documents::get(&mut tx, org, id, key_fields::MAX_CHARS)
        .await?
        .map(|d| d.text)
        .unwrap_or_default();
    let (kind, found) = key_fields::from_analysis(&text, name);
    if let Some(kind) = kind {
        schemas::set_document_kind(&mut tx, org, s.schema_id, s.version, kind).await?;
    }
    let mut value = Value::Null;
    let mut result = None;
    if let Some(e) = st.proposed.proposed_extraction_id
        && let Some(row) = sql::by_id::<ExtractionRow>(&mut tx, org, e, true).await?
        && let Some(obj) = row.result.as_object()
    {
        let mut r = obj.clone();
        r.insert(name.to_string(), found.clone());
        let r = Value::Object(r);
        if validate_instance(&rf["json_schema"]["schema"], &r).is_ok() {
            value = found;
            result = Some(r);
        }
    }
    auto_create::field_added(
        &mut tx,
        org,
        id,
        run,
        name,
        s.version,
        prompt_version,
        result.as_ref(),
    )
    .await?;
    let about = json!({"document_id": id, "run_id": run, "schema_revid": format!("{}:{}", s.schema_id, s.version)});
    acts::record(
        &mut tx,
        &req.caller,
        Act::AddProposalField,
        Some(id),
        about,
        now,
    )
    .await?;
    tx.commit().await?;
    ok(&FieldAdded {
        document_id: id,
        name: name.to_string(),
        schema_revid: format!("{}:{}", s.schema_id, s.version),
        prompt_revid,
        value,
    })
}
