//! Tools of the `tags` group: `list_tags`, `create_tag` (idempotent by name), `delete_tag`.
//! Also the tag-id checks the documents and prompts tools share.

use super::schemas::params;
use super::{Category, Registry, Tool, ToolCtx, ToolError, req_uuid};
use crate::store::tags as store;
use serde_json::{Value, json};
use std::sync::Arc;
use uuid::Uuid;

/// Registers this group's tools.
pub fn register(r: &mut Registry) {
    r.register(Arc::new(ListTags));
    r.register(Arc::new(CreateTag));
    r.register(Arc::new(DeleteTag));
}

/// JSON Schema of a list of tag ids.
pub(crate) fn tag_ids_param(description: &str) -> Value {
    json!({
        "type": "array",
        "items": {"type": "string"},
        "maxItems": 100,
        "description": description,
    })
}

/// Parses `field` as a list of UUIDs (duplicates dropped, order kept) and checks that every
/// one is a tag of this org. None: the field is absent.
pub(crate) async fn checked_tag_ids(
    ctx: &mut ToolCtx<'_>,
    args: &Value,
    field: &str,
) -> Result<Option<Vec<Uuid>>, ToolError> {
    let items = match args.get(field) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(a)) => a,
        Some(other) => {
            return Err(ToolError::Invalid(format!(
                "{field} must be an array of tag ids (got {other})"
            )));
        }
    };
    let mut ids: Vec<Uuid> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let id = item
            .as_str()
            .and_then(|s| Uuid::parse_str(s).ok())
            .ok_or_else(|| {
                ToolError::Invalid(format!("{field}[{i}] must be a tag id (UUID), got {item}"))
            })?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    let missing = store::missing(ctx.conn, ctx.org_id, &ids).await?;
    if !missing.is_empty() {
        let list: Vec<String> = missing.iter().map(Uuid::to_string).collect();
        return Err(ToolError::NotFound(format!(
            "{field}: no tag {} in this organisation; call list_tags, or create_tag first",
            list.join(", ")
        )));
    }
    Ok(Some(ids))
}

struct ListTags;

#[async_trait::async_trait]
impl Tool for ListTags {
    fn name(&self) -> &'static str {
        "list_tags"
    }
    fn description(&self) -> &'static str {
        "List the organisation's tags: tag_id, name, color and how many documents carry each."
    }
    fn parameters(&self) -> Value {
        params(json!({}), &[])
    }
    fn category(&self) -> Category {
        Category::Read
    }
    async fn call(&self, ctx: &mut ToolCtx<'_>, _args: Value) -> Result<Value, ToolError> {
        let tags = store::list(ctx.conn, ctx.org_id).await?;
        let tags: Vec<Value> = tags
            .into_iter()
            .map(|t| {
                json!({"tag_id": t.id, "name": t.name, "color": t.color,
                       "document_count": t.document_count})
            })
            .collect();
        Ok(json!({ "count": tags.len(), "tags": tags }))
    }
}

struct CreateTag;

/// Trimmed tag name, or what is wrong with it.
fn tag_name(args: &Value) -> Result<String, ToolError> {
    let name = args
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim();
    if name.is_empty() {
        return Err(ToolError::Invalid(
            "name must be a non-empty tag name, e.g. \"invoice\"".into(),
        ));
    }
    Ok(name.to_string())
}

/// `#rrggbb`, lowercased, or what is wrong with it.
fn tag_color(args: &Value) -> Result<String, ToolError> {
    let color = args.get("color").and_then(Value::as_str).unwrap_or("");
    let ok = color.len() == 7
        && color.starts_with('#')
        && color[1..].chars().all(|c| c.is_ascii_hexdigit());
    if !ok {
        return Err(ToolError::Invalid(format!(
            "color must be \"#rrggbb\" (six hex digits), e.g. \"#1f77b4\" (got {color:?})"
        )));
    }
    Ok(color.to_ascii_lowercase())
}

#[async_trait::async_trait]
impl Tool for CreateTag {
    fn name(&self) -> &'static str {
        "create_tag"
    }
    fn description(&self) -> &'static str {
        "Create a tag {name, color \"#rrggbb\"}. If the organisation already has a tag of that \
         name (ignoring case), returns it with existing: true and changes nothing."
    }
    fn parameters(&self) -> Value {
        params(
            json!({
                "name": {"type": "string", "minLength": 1, "maxLength": 100,
                         "description": "Tag name, e.g. \"invoice\"."},
                "color": {"type": "string", "pattern": "^#[0-9a-fA-F]{6}$",
                          "description": "Hex color \"#rrggbb\", e.g. \"#1f77b4\"."},
            }),
            &["name", "color"],
        )
    }
    fn category(&self) -> Category {
        Category::Write
    }
    async fn call(&self, ctx: &mut ToolCtx<'_>, args: Value) -> Result<Value, ToolError> {
        let name = tag_name(&args)?;
        let color = tag_color(&args)?;
        let (tag, existing) =
            store::create(ctx.conn, ctx.org_id, &name, &color, ctx.run_id, ctx.now).await?;
        Ok(json!({"tag_id": tag.id, "name": tag.name, "color": tag.color, "existing": existing}))
    }
    async fn snapshot(
        &self,
        ctx: &mut ToolCtx<'_>,
        args: &Value,
    ) -> Option<Result<Value, ToolError>> {
        Some(
            async {
                let name = tag_name(args)?;
                let tag = store::lock_by_name(ctx.conn, ctx.org_id, &name).await?;
                Ok(match tag {
                    Some(t) => json!({"name": name, "exists": true, "tag_id": t.id,
                                      "tag_name": t.name, "color": t.color}),
                    None => json!({"name": name, "exists": false}),
                })
            }
            .await,
        )
    }
}

struct DeleteTag;

#[async_trait::async_trait]
impl Tool for DeleteTag {
    fn name(&self) -> &'static str {
        "delete_tag"
    }
    fn description(&self) -> &'static str {
        "Delete a tag {tag_id}; it is also removed from every document and prompt that carries it."
    }
    fn parameters(&self) -> Value {
        params(
            json!({"tag_id": {"type": "string", "description": "Id of the tag (see list_tags)."}}),
            &["tag_id"],
        )
    }
    fn category(&self) -> Category {
        Category::Destructive
    }
    fn targets(&self, _args: &Value) -> Vec<super::Target> {
        vec![super::Target::Shared("a tag")]
    }
    async fn call(&self, ctx: &mut ToolCtx<'_>, args: Value) -> Result<Value, ToolError> {
        let id = req_uuid(&args, "tag_id")?;
        let done = store::delete(ctx.conn, ctx.org_id, id, ctx.now)
            .await?
            .ok_or_else(|| {
                ToolError::NotFound(format!("no tag {id} in this organisation; call list_tags"))
            })?;
        Ok(json!({
            "deleted": true, "tag_id": id,
            "documents_updated": done.documents_updated,
            "prompts_updated": done.prompts_updated,
        }))
    }
    async fn snapshot(
        &self,
        ctx: &mut ToolCtx<'_>,
        args: &Value,
    ) -> Option<Result<Value, ToolError>> {
        Some(
            async {
                let id = req_uuid(args, "tag_id")?;
                Ok(match store::lock(ctx.conn, ctx.org_id, id).await? {
                    Some(l) => json!({
                        "exists": true, "tag_id": id, "name": l.tag.name, "color": l.tag.color,
                        "document_ids": l.document_ids,
                    }),
                    None => json!({"exists": false, "tag_id": id}),
                })
            }
            .await,
        )
    }
}
