//! Tools of the `documents` group: `get_document`, `get_ocr_text`, `list_documents`,
//! `update_document` and `delete_document`. Text is shown as a bounded excerpt
//! (`ctx.excerpt_chars` characters) with its full length and a `truncated` flag.

use super::summary::Summary;
use super::tags::checked_tag_ids;
use super::typed::{Id, TagId, any_object};
use super::typed::{Snapshot, tool};
use super::{Target, ToolCtx, ToolError, TypedTool, listing, not_in_org, revid};
use crate::store::documents::{self as store, AutoCreateStatus, DocumentFilter};
use serde_json::{Map, Value, json};
use uuid::Uuid;

/// `document_id` from the arguments, else the run's document; an error if neither.
pub(crate) fn document_id_or_default(
    ctx: &ToolCtx<'_>,
    document_id: Option<Id>,
) -> Result<Uuid, ToolError> {
    Id::uuid(document_id).or(ctx.document_id).ok_or_else(|| {
        ToolError::Invalid(
            "document_id is required (this run has no document of its own); \
             call list_documents to find one"
                .into(),
        )
    })
}

/// The NotFound error for a document id.
pub(crate) fn document_not_found(id: Uuid) -> ToolError {
    not_in_org("document", id)
}

/// `id` if this org has that document, else [`document_not_found`].
pub(crate) async fn existing_document(ctx: &mut ToolCtx<'_>, id: Uuid) -> Result<Uuid, ToolError> {
    if store::exists(ctx.conn, ctx.org_id, id).await? {
        Ok(id)
    } else {
        Err(document_not_found(id))
    }
}

/// Whether a text excerpt is shorter than the whole text (`text_chars` characters).
fn truncated(text: &str, text_chars: i64) -> bool {
    (text.chars().count() as i64) < text_chars
}

tool! {
    /// `get_document`.
    GetDocument {
        /// The document's id; defaults to the document this run is about.
        document_id: Option<Id>,
    } = Read "get_document",
    "Get a document {document_id?}: name, metadata, tag_ids, \
    auto_create_status, proposed schema/prompt/extraction, and the start of its text \
    (text_chars is the full length; truncated says whether more exists: use get_ocr_text \
    with page to read further)."
}

impl TypedTool for GetDocument {
    fn targets(&self) -> Vec<Target> {
        vec![Target::ReadDocument(Id::uuid(self.document_id))]
    }
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        let id = document_id_or_default(ctx, self.document_id)?;
        let d = store::get(ctx.conn, ctx.org_id, id, ctx.excerpt_chars)
            .await?
            .ok_or_else(|| document_not_found(id))?;
        Ok(json!({
            "document_id": d.id,
            "name": d.name,
            "metadata": d.metadata,
            "tag_ids": d.tag_ids,
            "auto_create_status": d.auto_create_status,
            "auto_create_error": d.auto_create_error,
            "proposed_schema_revid": d.proposed.schema().map(|(i, v)| revid(i, v)),
            "proposed_prompt_revid": d.proposed.prompt().map(|(i, v)| revid(i, v)),
            "proposed_extraction_id": d.proposed.proposed_extraction_id,
            "created_at": d.created_at,
            "updated_at": d.updated_at,
            "page_count": d.page_count,
            "text_chars": d.text_chars,
            "truncated": truncated(&d.text, d.text_chars),
            "text": d.text,
        }))
    }
}

tool! {
    /// `get_ocr_text`.
    GetOcrText {
        /// The document's id; defaults to the document this run is about.
        document_id: Option<Id>,
        /// 1-based page number; see page_count.
        #[schemars(range(min = 1))]
        page: Option<i32>,
    } = Read "get_ocr_text",
    "Get a document's OCR text {document_id?, page?}. Pages \
    are separated by form feeds; page is 1-based (omit it for the whole text). The text is \
    an excerpt: text_chars is the full length and truncated says whether it was cut."
}

impl TypedTool for GetOcrText {
    fn targets(&self) -> Vec<Target> {
        vec![Target::ReadDocument(Id::uuid(self.document_id))]
    }
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        let id = document_id_or_default(ctx, self.document_id)?;
        let page = self.page;
        if let Some(p) = page.filter(|p| *p < 1) {
            return Err(ToolError::Invalid(format!(
                "page must be an integer ≥ 1 (got {p})"
            )));
        }
        let p = store::get_page(ctx.conn, ctx.org_id, id, page, ctx.excerpt_chars)
            .await?
            .ok_or_else(|| document_not_found(id))?;
        if let Some(n) = page.filter(|n| i64::from(*n) > p.page_count) {
            return Err(ToolError::Invalid(format!(
                "page {n} does not exist: document {id} has {} page(s)",
                p.page_count
            )));
        }
        Ok(json!({
            "document_id": p.id,
            "page": page,
            "page_count": p.page_count,
            "text_chars": p.text_chars,
            "truncated": truncated(&p.text, p.text_chars),
            "text": p.text,
        }))
    }
}

tool! {
    /// `list_documents`.
    ListDocuments {
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
    } = Read "list_documents",
    "List the organisation's documents, newest first \
    {name_search?, tag_ids?, status?, limit?}: name_search is a case-insensitive part of \
    the name, tag_ids keeps documents carrying all of those tags, status is the \
    auto_create_status. No text: use get_document."
}

impl TypedTool for ListDocuments {
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        let limit = self.limit.unwrap_or(20);
        if !(1..=100).contains(&limit) {
            return Err(ToolError::Invalid(format!(
                "limit must be between 1 and 100 (got {limit})"
            )));
        }
        let filter = DocumentFilter {
            name_search: self
                .name_search
                .as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string),
            // A filter: unknown ids match nothing.
            tag_ids: self
                .tag_ids
                .map(|ids| ids.into_iter().map(|TagId(t)| t).collect()),
            status: self.status,
            limit,
        };
        let docs = store::list(ctx.conn, ctx.org_id, &filter).await?;
        Ok(listing("documents", docs, |d| {
            json!({"document_id": d.id, "name": d.name, "tag_ids": d.tag_ids,
                   "auto_create_status": d.auto_create_status, "created_at": d.created_at})
        }))
    }
}

tool! {
    /// `update_document`.
    UpdateDocument {
        /// The document's id; defaults to the document this run is about.
        document_id: Option<Id>,
        /// The complete new set of tag ids.
        #[schemars(length(max = 100))]
        tag_ids: Option<Vec<TagId>>,
        /// Keys to set (null removes).
        #[serde(default)]
        #[schemars(schema_with = "any_object")]
        metadata: Option<Map<String, Value>>,
    } = Write "update_document",
    "Update a document {document_id?, tag_ids?, metadata?}: \
    tag_ids replaces the document's tags (ids of this organisation's tags, see list_tags); \
    metadata is merged into the existing metadata key by key (a null value removes the \
    key)."
}

impl TypedTool for UpdateDocument {
    const PROPOSABLE: bool = true;
    const SNAPSHOT: Snapshot = Snapshot::DocumentRow;

    fn targets(&self) -> Vec<Target> {
        vec![Target::Document(Id::uuid(self.document_id))]
    }
    fn document(&self) -> Option<Uuid> {
        Id::uuid(self.document_id)
    }
    /// `Update document 'a.txt': metadata, tag_ids`: the keys it sets.
    async fn summary(&self, s: &mut Summary<'_>) -> sqlx::Result<Option<String>> {
        let doc = s.document().await?;
        let keys: Vec<&str> = s
            .args()
            .as_object()
            .map(|o| {
                o.iter()
                    .filter(|(k, v)| *k != "document_id" && !v.is_null())
                    .map(|(k, _)| k.as_str())
                    .collect()
            })
            .unwrap_or_default();
        Ok(Some(format!("Update {doc}: {}", keys.join(", "))))
    }
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        let id = document_id_or_default(ctx, self.document_id)?;
        let metadata = self.metadata.map(Value::Object);
        if self.tag_ids.is_none() && metadata.is_none() {
            return Err(ToolError::Invalid(
                "nothing to update: give tag_ids and/or metadata".into(),
            ));
        }
        // Check the document first, so another org's document id reads as not found even
        // when the tag ids are wrong too.
        if !store::lock(ctx.conn, ctx.org_id, id).await? {
            return Err(document_not_found(id));
        }
        let tag_ids = checked_tag_ids(ctx, self.tag_ids.as_deref(), "tag_ids").await?;
        let (tags, meta) = (tag_ids.as_deref(), metadata.as_ref());
        let d = store::update(ctx.conn, ctx.org_id, id, tags, meta, ctx.now)
            .await?
            .ok_or_else(|| document_not_found(id))?;
        Ok(json!({
            "document_id": d.id, "name": d.name, "tag_ids": d.tag_ids,
            "updated_at": d.updated_at, "updated": true,
        }))
    }
    async fn snapshot(&self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        document_snapshot(ctx, document_id_or_default(ctx, self.document_id)?).await
    }
}

/// What an action on a document depends on, with the row locked; `{"exists": false}` when the
/// document is missing or another org's.
async fn document_snapshot(ctx: &mut ToolCtx<'_>, id: Uuid) -> Result<Value, ToolError> {
    Ok(store::snapshot(ctx.conn, ctx.org_id, id).await?)
}

tool! {
    /// `delete_document`.
    DeleteDocument {
        /// The document's id.
        document_id: Id,
    } = Destructive "delete_document",
    "Delete a document {document_id} and its extractions. Cannot be undone."
}

impl TypedTool for DeleteDocument {
    const PROPOSABLE: bool = true;

    fn targets(&self) -> Vec<Target> {
        vec![Target::Document(Some(self.document_id.0))]
    }
    fn document(&self) -> Option<Uuid> {
        Some(self.document_id.0)
    }
    /// `Delete document 'a.txt'`.
    async fn summary(&self, s: &mut Summary<'_>) -> sqlx::Result<Option<String>> {
        Ok(Some(format!("Delete {}", s.document().await?)))
    }
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        let Id(id) = self.document_id;
        if !store::delete(ctx.conn, ctx.org_id, id).await? {
            return Err(document_not_found(id));
        }
        Ok(json!({"deleted": true, "document_id": id}))
    }
    /// The document's row and its extractions, which the deletion removes too (review #14b);
    /// without extractions, the row's alone (as approvals proposed before this was added).
    async fn snapshot(&self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        let id = self.document_id.0;
        let mut s = document_snapshot(ctx, id).await?;
        if s["exists"] == true {
            let e = crate::store::extractions::fingerprint(ctx.conn, ctx.org_id, id).await?;
            if e["count"] != 0 {
                s["extractions"] = e;
            }
        }
        Ok(s)
    }
}
