//! Tools of the `documents` group: `get_document`, `get_ocr_text`, `list_documents`,
//! `update_document` and `delete_document`. Text is shown as a bounded excerpt
//! (`ctx.excerpt_chars` characters) with its full length and a `truncated` flag.

use super::schemas::params;
use super::tags::{checked_tag_ids, tag_ids_param};
use super::{Category, Registry, Tool, ToolCtx, ToolError, opt_uuid, req_uuid, revid};
use crate::store::documents::{self as store, DocumentFilter};
use serde_json::{Value, json};
use std::sync::Arc;
use uuid::Uuid;

/// Registers this group's tools.
pub fn register(r: &mut Registry) {
    r.register(Arc::new(GetDocument));
    r.register(Arc::new(GetOcrText));
    r.register(Arc::new(ListDocuments));
    r.register(Arc::new(UpdateDocument));
    r.register(Arc::new(DeleteDocument));
}

/// Every `auto_create_status` a document can have.
const STATUSES: [&str; 8] = [
    "none", "queued", "running", "proposed", "accepted", "rejected", "failed", "skipped",
];

/// `document_id` from the arguments, else the run's document; an error if neither.
pub(crate) fn document_id_or_default(ctx: &ToolCtx<'_>, args: &Value) -> Result<Uuid, ToolError> {
    opt_uuid(args, "document_id")?
        .or(ctx.document_id)
        .ok_or_else(|| {
            ToolError::Invalid(
                "document_id is required (this run has no document of its own); \
                 call list_documents to find one"
                    .into(),
            )
        })
}

/// The NotFound error for a document id.
pub(crate) fn document_not_found(id: Uuid) -> ToolError {
    ToolError::NotFound(format!(
        "no document {id} in this organisation; call list_documents"
    ))
}

fn doc_id_param() -> Value {
    json!({"type": "string",
           "description": "The document's id; defaults to the document this run is about."})
}

struct GetDocument;

#[async_trait::async_trait]
impl Tool for GetDocument {
    fn name(&self) -> &'static str {
        "get_document"
    }
    fn description(&self) -> &'static str {
        "Get a document {document_id?}: name, metadata, tag_ids, auto_create_status, proposed \
         schema/prompt/extraction, and the start of its text (text_chars is the full length; \
         truncated says whether more exists: use get_ocr_text with page to read further)."
    }
    fn parameters(&self) -> Value {
        params(json!({"document_id": doc_id_param()}), &[])
    }
    fn category(&self) -> Category {
        Category::Read
    }
    fn targets(&self, args: &Value) -> Vec<super::Target> {
        vec![super::Target::ReadDocument(super::scope::target_id(
            args,
            "document_id",
        ))]
    }
    async fn call(&self, ctx: &mut ToolCtx<'_>, args: Value) -> Result<Value, ToolError> {
        let id = document_id_or_default(ctx, &args)?;
        let d = store::get(ctx.conn, ctx.org_id, id, ctx.excerpt_chars)
            .await?
            .ok_or_else(|| document_not_found(id))?;
        let truncated = (d.text.chars().count() as i64) < d.text_chars;
        let proposed_schema = d
            .proposed_schema_id
            .zip(d.proposed_schema_version)
            .map(|(i, v)| revid(i, v));
        let proposed_prompt = d
            .proposed_prompt_id
            .zip(d.proposed_prompt_version)
            .map(|(i, v)| revid(i, v));
        Ok(json!({
            "document_id": d.id,
            "name": d.name,
            "metadata": d.metadata,
            "tag_ids": d.tag_ids,
            "auto_create_status": d.auto_create_status,
            "auto_create_error": d.auto_create_error,
            "proposed_schema_revid": proposed_schema,
            "proposed_prompt_revid": proposed_prompt,
            "proposed_extraction_id": d.proposed_extraction_id,
            "created_at": d.created_at,
            "updated_at": d.updated_at,
            "page_count": d.page_count,
            "text_chars": d.text_chars,
            "truncated": truncated,
            "text": d.text,
        }))
    }
}

struct GetOcrText;

#[async_trait::async_trait]
impl Tool for GetOcrText {
    fn name(&self) -> &'static str {
        "get_ocr_text"
    }
    fn description(&self) -> &'static str {
        "Get a document's OCR text {document_id?, page?}. Pages are separated by form feeds; \
         page is 1-based (omit it for the whole text). The text is an excerpt: text_chars is \
         the full length and truncated says whether it was cut."
    }
    fn parameters(&self) -> Value {
        params(
            json!({
                "document_id": doc_id_param(),
                "page": {"type": "integer", "minimum": 1,
                         "description": "1-based page number; see page_count."},
            }),
            &[],
        )
    }
    fn category(&self) -> Category {
        Category::Read
    }
    fn targets(&self, args: &Value) -> Vec<super::Target> {
        vec![super::Target::ReadDocument(super::scope::target_id(
            args,
            "document_id",
        ))]
    }
    async fn call(&self, ctx: &mut ToolCtx<'_>, args: Value) -> Result<Value, ToolError> {
        let id = document_id_or_default(ctx, &args)?;
        let page = match args.get("page") {
            None | Some(Value::Null) => None,
            Some(p) => Some(
                p.as_i64()
                    .and_then(|n| i32::try_from(n).ok())
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| {
                        ToolError::Invalid(format!("page must be an integer ≥ 1 (got {p})"))
                    })?,
            ),
        };
        let p = store::get_page(ctx.conn, ctx.org_id, id, page, ctx.excerpt_chars)
            .await?
            .ok_or_else(|| document_not_found(id))?;
        if let Some(n) = page {
            if i64::from(n) > p.page_count {
                return Err(ToolError::Invalid(format!(
                    "page {n} does not exist: document {id} has {} page(s)",
                    p.page_count
                )));
            }
        }
        let truncated = (p.text.chars().count() as i64) < p.text_chars;
        Ok(json!({
            "document_id": p.id,
            "page": page,
            "page_count": p.page_count,
            "text_chars": p.text_chars,
            "truncated": truncated,
            "text": p.text,
        }))
    }
}

struct ListDocuments;

#[async_trait::async_trait]
impl Tool for ListDocuments {
    fn name(&self) -> &'static str {
        "list_documents"
    }
    fn description(&self) -> &'static str {
        "List the organisation's documents, newest first {name_search?, tag_ids?, status?, \
         limit?}: name_search is a case-insensitive part of the name, tag_ids keeps documents \
         carrying all of those tags, status is the auto_create_status. No text: use \
         get_document."
    }
    fn parameters(&self) -> Value {
        params(
            json!({
                "name_search": {"type": "string", "maxLength": 200},
                "tag_ids": tag_ids_param("Only documents that carry all of these tags."),
                "status": {"type": "string", "enum": STATUSES,
                           "description": "auto_create_status to match."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100,
                          "description": "At most this many (default 20, max 100)."},
            }),
            &[],
        )
    }
    fn category(&self) -> Category {
        Category::Read
    }
    async fn call(&self, ctx: &mut ToolCtx<'_>, args: Value) -> Result<Value, ToolError> {
        let tag_ids = match args.get("tag_ids") {
            None | Some(Value::Null) => None,
            Some(_) => Some(parse_ids(&args, "tag_ids")?),
        };
        let status = args.get("status").and_then(Value::as_str);
        if let Some(s) = status {
            if !STATUSES.contains(&s) {
                return Err(ToolError::Invalid(format!(
                    "status must be one of {} (got {s:?})",
                    STATUSES.join(", ")
                )));
            }
        }
        let limit = args.get("limit").and_then(Value::as_i64).unwrap_or(20);
        if !(1..=100).contains(&limit) {
            return Err(ToolError::Invalid(format!(
                "limit must be between 1 and 100 (got {limit})"
            )));
        }
        let filter = DocumentFilter {
            name_search: args
                .get("name_search")
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string),
            tag_ids,
            status: status.map(str::to_string),
            limit,
        };
        let docs = store::list(ctx.conn, ctx.org_id, &filter).await?;
        let docs: Vec<Value> = docs
            .into_iter()
            .map(|d| {
                json!({"document_id": d.id, "name": d.name, "tag_ids": d.tag_ids,
                       "auto_create_status": d.auto_create_status, "created_at": d.created_at})
            })
            .collect();
        Ok(json!({"count": docs.len(), "documents": docs}))
    }
}

/// A list of UUIDs, without checking what they refer to (a filter: unknown ids match nothing).
fn parse_ids(args: &Value, field: &str) -> Result<Vec<Uuid>, ToolError> {
    let items = args[field].as_array().ok_or_else(|| {
        ToolError::Invalid(format!(
            "{field} must be an array of ids (got {})",
            args[field]
        ))
    })?;
    items
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_str()
                .and_then(|s| Uuid::parse_str(s).ok())
                .ok_or_else(|| ToolError::Invalid(format!("{field}[{i}] must be a UUID, got {v}")))
        })
        .collect()
}

struct UpdateDocument;

#[async_trait::async_trait]
impl Tool for UpdateDocument {
    fn name(&self) -> &'static str {
        "update_document"
    }
    fn description(&self) -> &'static str {
        "Update a document {document_id?, tag_ids?, metadata?}: tag_ids replaces the document's \
         tags (ids of this organisation's tags, see list_tags); metadata is merged into the \
         existing metadata key by key (a null value removes the key)."
    }
    fn parameters(&self) -> Value {
        params(
            json!({
                "document_id": doc_id_param(),
                "tag_ids": tag_ids_param("The complete new set of tag ids."),
                "metadata": {"type": "object", "description": "Keys to set (null removes)."},
            }),
            &[],
        )
    }
    fn category(&self) -> Category {
        Category::Write
    }
    fn targets(&self, args: &Value) -> Vec<super::Target> {
        vec![super::Target::Document(super::scope::target_id(
            args,
            "document_id",
        ))]
    }
    async fn call(&self, ctx: &mut ToolCtx<'_>, args: Value) -> Result<Value, ToolError> {
        let id = document_id_or_default(ctx, &args)?;
        let metadata = args.get("metadata").filter(|m| !m.is_null());
        if metadata.is_some_and(|m| !m.is_object()) {
            return Err(ToolError::Invalid(
                "metadata must be an object of keys to set".into(),
            ));
        }
        let has_tags = args.get("tag_ids").is_some_and(|t| !t.is_null());
        if !has_tags && metadata.is_none() {
            return Err(ToolError::Invalid(
                "nothing to update: give tag_ids and/or metadata".into(),
            ));
        }
        // Check the document first, so another org's document id reads as not found even
        // when the tag ids are wrong too.
        if store::lock(ctx.conn, ctx.org_id, id).await?.is_none() {
            return Err(document_not_found(id));
        }
        let tag_ids = checked_tag_ids(ctx, &args, "tag_ids").await?;
        let d = store::update(
            ctx.conn,
            ctx.org_id,
            id,
            tag_ids.as_deref(),
            metadata,
            ctx.now,
        )
        .await?
        .ok_or_else(|| document_not_found(id))?;
        Ok(json!({
            "document_id": d.id, "name": d.name, "tag_ids": d.tag_ids,
            "updated_at": d.updated_at, "updated": true,
        }))
    }
    async fn snapshot(
        &self,
        ctx: &mut ToolCtx<'_>,
        args: &Value,
    ) -> Option<Result<Value, ToolError>> {
        Some(document_snapshot(ctx, document_id_or_default(ctx, args)).await)
    }
}

/// What an action on a document depends on, with the row locked; `{"exists": false}` when the
/// document is missing or another org's.
async fn document_snapshot(
    ctx: &mut ToolCtx<'_>,
    id: Result<Uuid, ToolError>,
) -> Result<Value, ToolError> {
    let id = id?;
    Ok(match store::lock(ctx.conn, ctx.org_id, id).await? {
        Some(d) => json!({
            "exists": true, "document_id": d.id, "name": d.name, "tag_ids": d.tag_ids,
            "metadata": d.metadata, "auto_create_status": d.auto_create_status,
            "updated_at": d.updated_at, "text_sha256": d.text_sha256,
        }),
        None => json!({"exists": false, "document_id": id}),
    })
}

struct DeleteDocument;

#[async_trait::async_trait]
impl Tool for DeleteDocument {
    fn name(&self) -> &'static str {
        "delete_document"
    }
    fn description(&self) -> &'static str {
        "Delete a document {document_id} and its extractions. Cannot be undone."
    }
    fn parameters(&self) -> Value {
        params(
            json!({"document_id": {"type": "string", "description": "The document's id."}}),
            &["document_id"],
        )
    }
    fn category(&self) -> Category {
        Category::Destructive
    }
    fn targets(&self, args: &Value) -> Vec<super::Target> {
        vec![super::Target::Document(super::scope::target_id(
            args,
            "document_id",
        ))]
    }
    async fn call(&self, ctx: &mut ToolCtx<'_>, args: Value) -> Result<Value, ToolError> {
        let id = req_uuid(&args, "document_id")?;
        if !store::delete(ctx.conn, ctx.org_id, id).await? {
            return Err(document_not_found(id));
        }
        Ok(json!({"deleted": true, "document_id": id}))
    }
    async fn snapshot(
        &self,
        ctx: &mut ToolCtx<'_>,
        args: &Value,
    ) -> Option<Result<Value, ToolError>> {
        Some(document_snapshot(ctx, req_uuid(args, "document_id")).await)
    }
}
