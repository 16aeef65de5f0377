//! Tools of the `tags` group: `list_tags`, `create_tag` (idempotent by name), `delete_tag`.
//! Also the tag-id checks the documents and prompts tools share.

use super::typed::{Id, TagId};
use super::{Category, Registry, Target, ToolCtx, ToolError, TypedTool};
use crate::store::tags as store;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use uuid::Uuid;

/// Registers this group's tools.
pub fn register(r: &mut Registry) {
    r.register(Arc::new(ListTags));
    r.register(Arc::new(CreateTag));
    r.register(Arc::new(DeleteTag));
}

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

/// Arguments of a tool that takes none.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

struct ListTags;

#[async_trait::async_trait]
impl TypedTool for ListTags {
    const NAME: &'static str = "list_tags";
    const DESCRIPTION: &'static str =
        "List the organisation's tags: tag_id, name, color and how many documents carry each.";
    const CATEGORY: Category = Category::Read;
    type Args = NoArgs;
    type Output = Value;

    async fn run(&self, ctx: &mut ToolCtx<'_>, _args: NoArgs) -> Result<Value, ToolError> {
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

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CreateTagArgs {
    /// Tag name, e.g. "invoice".
    #[schemars(length(min = 1, max = 100))]
    name: String,
    /// Hex color "#rrggbb", e.g. "#1f77b4".
    #[schemars(regex(pattern = "^#[0-9a-fA-F]{6}$"))]
    color: String,
}

impl CreateTagArgs {
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
            && color.starts_with('#')
            && color[1..].chars().all(|c| c.is_ascii_hexdigit());
        if !ok {
            return Err(ToolError::Invalid(format!(
                "color must be \"#rrggbb\" (six hex digits), e.g. \"#1f77b4\" (got {color:?})"
            )));
        }
        Ok(color.to_ascii_lowercase())
    }
}

#[async_trait::async_trait]
impl TypedTool for CreateTag {
    const NAME: &'static str = "create_tag";
    const DESCRIPTION: &'static str = "Create a tag {name, color \"#rrggbb\"}. If the \
         organisation already has a tag of that name (ignoring case), returns it with existing: \
         true and changes nothing.";
    const CATEGORY: Category = Category::Write;
    type Args = CreateTagArgs;
    type Output = Value;

    async fn run(&self, ctx: &mut ToolCtx<'_>, args: CreateTagArgs) -> Result<Value, ToolError> {
        let name = args.name()?;
        let color = args.color()?;
        let (tag, existing) =
            store::create(ctx.conn, ctx.org_id, &name, &color, ctx.run_id, ctx.now).await?;
        Ok(json!({"tag_id": tag.id, "name": tag.name, "color": tag.color, "existing": existing}))
    }
    async fn snapshot(
        &self,
        ctx: &mut ToolCtx<'_>,
        args: &CreateTagArgs,
    ) -> Option<Result<Value, ToolError>> {
        Some(
            async {
                let name = args.name()?;
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

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct DeleteTagArgs {
    /// Id of the tag (see list_tags).
    tag_id: Id,
}

#[async_trait::async_trait]
impl TypedTool for DeleteTag {
    const NAME: &'static str = "delete_tag";
    const DESCRIPTION: &'static str = "Delete a tag {tag_id}; it is also removed from every \
         document and prompt that carries it.";
    const CATEGORY: Category = Category::Destructive;
    type Args = DeleteTagArgs;
    type Output = Value;

    fn targets(&self, _args: &DeleteTagArgs) -> Vec<Target> {
        vec![Target::Shared("a tag")]
    }
    async fn run(&self, ctx: &mut ToolCtx<'_>, args: DeleteTagArgs) -> Result<Value, ToolError> {
        let Id(id) = args.tag_id;
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
        args: &DeleteTagArgs,
    ) -> Option<Result<Value, ToolError>> {
        let Id(id) = args.tag_id;
        Some(
            async {
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
