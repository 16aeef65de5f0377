//! Tools of the `documents` group: `get_document`, `get_ocr_text`, `list_documents`,
//! `update_document` and `delete_document`. Text is shown as a bounded excerpt
//! (`ctx.excerpt_chars` characters) with its full length and a `truncated` flag.

use super::tags::checked_tag_ids;
use super::typed::{Id, TagId, any_object};
use super::{Category, Registry, Target, ToolCtx, ToolError, TypedTool, revid};
use crate::store::documents::{self as store, AutoCreateStatus, DocumentFilter};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};
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

/// `document_id` from the arguments, else the run's document; an error if neither.
pub(crate) fn document_id_or_default(
    ctx: &ToolCtx<'_>,
    document_id: Option<Id>,
) -> Result<Uuid, ToolError> {
    document_id
        .map(|Id(d)| d)
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

/// Arguments of the tools that read one document, by default the run's.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DocumentArgs {
    /// The document's id; defaults to the document this run is about.
    pub document_id: Option<Id>,
}

struct GetDocument;

#[async_trait::async_trait]
impl TypedTool for GetDocument {
    const NAME: &'static str = "get_document";
    const DESCRIPTION: &'static str = "Get a document {document_id?}: name, metadata, tag_ids, \
         auto_create_status, proposed schema/prompt/extraction, and the start of its text \
         (text_chars is the full length; truncated says whether more exists: use get_ocr_text \
         with page to read further).";
    const CATEGORY: Category = Category::Read;
    type Args = DocumentArgs;
    type Output = Value;

    fn targets(&self, args: &DocumentArgs) -> Vec<Target> {
        vec![Target::ReadDocument(args.document_id.map(|Id(d)| d))]
    }
    async fn run(&self, ctx: &mut ToolCtx<'_>, args: DocumentArgs) -> Result<Value, ToolError> {
        let id = document_id_or_default(ctx, args.document_id)?;
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

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GetOcrTextArgs {
    /// The document's id; defaults to the document this run is about.
    document_id: Option<Id>,
    /// 1-based page number; see page_count.
    #[schemars(range(min = 1))]
    page: Option<i32>,
}

#[async_trait::async_trait]
impl TypedTool for GetOcrText {
    const NAME: &'static str = "get_ocr_text";
    const DESCRIPTION: &'static str = "Get a document's OCR text {document_id?, page?}. Pages \
         are separated by form feeds; page is 1-based (omit it for the whole text). The text is \
         an excerpt: text_chars is the full length and truncated says whether it was cut.";
    const CATEGORY: Category = Category::Read;
    type Args = GetOcrTextArgs;
    type Output = Value;

    fn targets(&self, args: &GetOcrTextArgs) -> Vec<Target> {
        vec![Target::ReadDocument(args.document_id.map(|Id(d)| d))]
    }
    async fn run(&self, ctx: &mut ToolCtx<'_>, args: GetOcrTextArgs) -> Result<Value, ToolError> {
        let id = document_id_or_default(ctx, args.document_id)?;
        let page = args.page;
        if let Some(p) = page.filter(|p| *p < 1) {
            return Err(ToolError::Invalid(format!(
                "page must be an integer ≥ 1 (got {p})"
            )));
        }
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

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListDocumentsArgs {
    #[schemars(length(max = 200))]
    name_search: Option<String>,
    /// Only documents that carry all of these tags.
    #[schemars(length(max = 100))]
    tag_ids: Option<Vec<TagId>>,
    /// auto_create_status to match.
    status: Option<AutoCreateStatus>,
    /// At most this many (default 20, max 100).
    #[schemars(range(min = 1, max = 100))]
    limit: Option<i64>,
}

#[async_trait::async_trait]
impl TypedTool for ListDocuments {
    const NAME: &'static str = "list_documents";
    const DESCRIPTION: &'static str = "List the organisation's documents, newest first \
         {name_search?, tag_ids?, status?, limit?}: name_search is a case-insensitive part of \
         the name, tag_ids keeps documents carrying all of those tags, status is the \
         auto_create_status. No text: use get_document.";
    const CATEGORY: Category = Category::Read;
    type Args = ListDocumentsArgs;
    type Output = Value;

    async fn run(
        &self,
        ctx: &mut ToolCtx<'_>,
        args: ListDocumentsArgs,
    ) -> Result<Value, ToolError> {
        let limit = args.limit.unwrap_or(20);
        if !(1..=100).contains(&limit) {
            return Err(ToolError::Invalid(format!(
                "limit must be between 1 and 100 (got {limit})"
            )));
        }
        let filter = DocumentFilter {
            name_search: args
                .name_search
                .as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string),
            // A filter: unknown ids match nothing.
            tag_ids: args
                .tag_ids
                .map(|ids| ids.into_iter().map(|TagId(t)| t).collect()),
            status: args.status,
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

struct UpdateDocument;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct UpdateDocumentArgs {
    /// The document's id; defaults to the document this run is about.
    document_id: Option<Id>,
    /// The complete new set of tag ids.
    #[schemars(length(max = 100))]
    tag_ids: Option<Vec<TagId>>,
    /// Keys to set (null removes).
    #[serde(default)]
    #[schemars(schema_with = "any_object")]
    metadata: Option<Map<String, Value>>,
}

#[async_trait::async_trait]
impl TypedTool for UpdateDocument {
    const NAME: &'static str = "update_document";
    const DESCRIPTION: &'static str = "Update a document {document_id?, tag_ids?, metadata?}: \
         tag_ids replaces the document's tags (ids of this organisation's tags, see list_tags); \
         metadata is merged into the existing metadata key by key (a null value removes the \
         key).";
    const CATEGORY: Category = Category::Write;
    type Args = UpdateDocumentArgs;
    type Output = Value;

    fn targets(&self, args: &UpdateDocumentArgs) -> Vec<Target> {
        vec![Target::Document(args.document_id.map(|Id(d)| d))]
    }
    async fn run(
        &self,
        ctx: &mut ToolCtx<'_>,
        args: UpdateDocumentArgs,
    ) -> Result<Value, ToolError> {
        let id = document_id_or_default(ctx, args.document_id)?;
        let metadata = args.metadata.map(Value::Object);
        if args.tag_ids.is_none() && metadata.is_none() {
            return Err(ToolError::Invalid(
                "nothing to update: give tag_ids and/or metadata".into(),
            ));
        }
        // Check the document first, so another org's document id reads as not found even
        // when the tag ids are wrong too.
        if store::lock(ctx.conn, ctx.org_id, id).await?.is_none() {
            return Err(document_not_found(id));
        }
        let tag_ids = checked_tag_ids(ctx, args.tag_ids.as_deref(), "tag_ids").await?;
        let d = store::update(
            ctx.conn,
            ctx.org_id,
            id,
            tag_ids.as_deref(),
            metadata.as_ref(),
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
        args: &UpdateDocumentArgs,
    ) -> Option<Result<Value, ToolError>> {
        Some(document_snapshot(ctx, document_id_or_default(ctx, args.document_id)).await)
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
        Some(d) => d.snapshot(),
        None => store::DocumentLock::missing_snapshot(id),
    })
}

struct DeleteDocument;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct DeleteDocumentArgs {
    /// The document's id.
    document_id: Id,
}

#[async_trait::async_trait]
impl TypedTool for DeleteDocument {
    const NAME: &'static str = "delete_document";
    const DESCRIPTION: &'static str =
        "Delete a document {document_id} and its extractions. Cannot be undone.";
    const CATEGORY: Category = Category::Destructive;
    type Args = DeleteDocumentArgs;
    type Output = Value;

    fn targets(&self, args: &DeleteDocumentArgs) -> Vec<Target> {
        vec![Target::Document(Some(args.document_id.0))]
    }
    async fn run(
        &self,
        ctx: &mut ToolCtx<'_>,
        args: DeleteDocumentArgs,
    ) -> Result<Value, ToolError> {
        let Id(id) = args.document_id;
        if !store::delete(ctx.conn, ctx.org_id, id).await? {
            return Err(document_not_found(id));
        }
        Ok(json!({"deleted": true, "document_id": id}))
    }
    async fn snapshot(
        &self,
        ctx: &mut ToolCtx<'_>,
        args: &DeleteDocumentArgs,
    ) -> Option<Result<Value, ToolError>> {
        Some(document_snapshot(ctx, Ok(args.document_id.0)).await)
    }
}
