//! Tools of the `tags` group: `list_tags`, `create_tag` (idempotent by name), `delete_tag`.
//! Also the tag-id checks the documents and prompts tools share.

use super::summary::{Summary, quoted};
use super::typed::tool;
use super::typed::{Id, TagId};
use super::{Target, ToolCtx, ToolError, TypedTool, listing, missing, not_in_org};
use crate::store::tags as store;
use serde_json::{Value, json};
use uuid::Uuid;

/// The tag ids given as `field` (duplicates dropped, order kept), each checked to be a tag of
/// this org. None: the field is absent.
pub(crate) async fn checked_tag_ids(
    ctx: &mut ToolCtx<'_>,
    given: Option<&[TagId]>,
    field: &str,
) -> Result<Option<Vec<Uuid>>, ToolError> {
    let Some(given) = given else {
        return Ok(None);
    };
    let mut ids: Vec<Uuid> = Vec::with_capacity(given.len());
    for TagId(id) in given {
        if !ids.contains(id) {
            ids.push(*id);
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

tool! {
    /// `list_tags` (no arguments).
    ListTags {} = Read "list_tags",
    "List the organisation's tags: tag_id, name, color and how many documents carry each."
}

impl TypedTool for ListTags {
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        let tags = store::list(ctx.conn, ctx.org_id).await?;
        Ok(listing("tags", tags, |t| {
            json!({"tag_id": t.id, "name": t.name, "color": t.color,
                   "document_count": t.document_count})
        }))
    }
}

tool! {
    /// `create_tag`.
    CreateTag {
        /// Tag name, e.g. "invoice".
        #[schemars(length(min = 1, max = 100))]
        name: String,
        /// Hex color "#rrggbb", e.g. "#1f77b4".
        #[schemars(regex(pattern = "^#[0-9a-fA-F]{6}$"))]
        color: String,
    } = Write "create_tag",
    "Create a tag {name, color \"#rrggbb\"}. If the \
    organisation already has a tag of that name (ignoring case), returns it with existing: \
    true and changes nothing."
}

impl CreateTag {
    /// Trimmed tag name, or what is wrong with it.
    fn name(&self) -> Result<String, ToolError> {
        let name = self.name.trim();
        if name.is_empty() {
            return Err(ToolError::Invalid(
                "name must be a non-empty tag name, e.g. \"invoice\"".into(),
            ));
        }
        Ok(name.to_string())
    }

    /// `#rrggbb`, lowercased, or what is wrong with it.
    fn color(&self) -> Result<String, ToolError> {
        let color = self.color.as_str();
        let ok = color.len() == 7
            && color
                .strip_prefix('#')
                .is_some_and(|hex| hex.chars().all(|c| c.is_ascii_hexdigit()));
        if !ok {
            return Err(ToolError::Invalid(format!(
                "color must be \"#rrggbb\" (six hex digits), e.g. \"#1f77b4\" (got {color:?})"
            )));
        }
        Ok(color.to_ascii_lowercase())
    }
}

impl TypedTool for CreateTag {
    const PROPOSABLE: bool = true;

    /// `Create tag 'urgent' (#ff0000)`.
    async fn summary(&self, s: &mut Summary<'_>) -> sqlx::Result<Option<String>> {
        Ok(Some(format!(
            "Create tag {}{}",
            quoted(s.str("name")),
            s.str("color")
                .map(|c| format!(" ({c})"))
                .unwrap_or_default()
        )))
    }

    async fn run(self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        let (name, color) = (self.name()?, self.color()?);
        let (tag, existing) =
            store::create(ctx.conn, ctx.org_id, &name, &color, ctx.run_id, ctx.now).await?;
        Ok(json!({"tag_id": tag.id, "name": tag.name, "color": tag.color, "existing": existing}))
    }
    /// The tag of this name, locked: what creating it depends on.
    async fn snapshot(&self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        let name = self.name()?;
        let tag = store::lock_by_name(ctx.conn, ctx.org_id, &name).await?;
        Ok(match tag {
            Some(t) => json!({"name": name, "exists": true, "tag_id": t.id,
                              "tag_name": t.name, "color": t.color}),
            None => json!({"name": name, "exists": false}),
        })
    }
}

tool! {
    /// `delete_tag`.
    DeleteTag {
        /// Id of the tag (see list_tags).
        tag_id: Id,
    } = Destructive "delete_tag",
    "Delete a tag {tag_id}; it is also removed from every \
    document and prompt that carries it."
}

impl TypedTool for DeleteTag {
    const PROPOSABLE: bool = true;

    /// `Delete tag '<tag_id>'`.
    async fn summary(&self, s: &mut Summary<'_>) -> sqlx::Result<Option<String>> {
        let tag = s.str("tag_id").or(s.str("name"));
        Ok(Some(format!("Delete tag {}", quoted(tag))))
    }

    fn targets(&self) -> Vec<Target> {
        vec![Target::Shared("a tag")]
    }
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        let Id(id) = self.tag_id;
        let done = store::delete(ctx.conn, ctx.org_id, id, ctx.now)
            .await?
            .ok_or_else(|| not_in_org("tag", id))?;
        Ok(json!({
            "deleted": true, "tag_id": id,
            "documents_updated": done.documents_updated,
            "prompts_updated": done.prompts_updated,
        }))
    }
    /// The tag and the documents carrying it, locked.
    async fn snapshot(&self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        let Id(id) = self.tag_id;
        Ok(match store::lock(ctx.conn, ctx.org_id, id).await? {
            Some(l) => json!({
                "exists": true, "tag_id": id, "name": l.tag.name, "color": l.tag.color,
                "document_ids": l.document_ids, "prompt_ids": l.prompt_ids,
            }),
            None => missing("tag_id", id),
        })
    }
}
