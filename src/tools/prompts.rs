//! Tools of the `prompts` group: `get_prompt`, `list_prompts`, `create_prompt`,
//! `update_prompt` (new version) and `delete_prompt`. A prompt version names the schema
//! version its extraction answers with (`schema_revid`).

use super::schemas::resolve_schema;
use super::tags::{NoArgs, checked_tag_ids};
use super::typed::{AnyVersionId, TagId, nullable};
use super::{Category, Registry, Target, ToolCtx, ToolError, TypedTool, revid};
use crate::store::prompts::{self as store, PromptFields, PromptRow};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

/// Registers this group's tools.
pub fn register(r: &mut Registry) {
    r.register(Arc::new(GetPrompt));
    r.register(Arc::new(ListPrompts));
    r.register(Arc::new(CreatePrompt));
    r.register(Arc::new(UpdatePrompt));
    r.register(Arc::new(DeletePrompt));
}

/// Longest prompt content accepted, in characters.
const MAX_CONTENT_CHARS: usize = 20_000;

fn prompt_json(p: &PromptRow) -> Value {
    json!({
        "prompt_revid": revid(p.prompt_id, p.version),
        "prompt_id": p.prompt_id,
        "version": p.version,
        "name": p.name,
        "content": p.content,
        "schema_revid": revid(p.schema_id, p.schema_version),
        "model": p.model,
        "tag_ids": p.tag_ids,
        "status": p.status,
        "created_at": p.created_at,
    })
}

fn not_found(what: &str) -> ToolError {
    ToolError::NotFound(format!(
        "no prompt {what} in this organisation; call list_prompts"
    ))
}

/// A prompt version of this org from `"<id>:<version>"`, or the latest from a bare id.
pub(crate) async fn resolve_prompt(
    ctx: &mut ToolCtx<'_>,
    s: &str,
    field: &str,
) -> Result<PromptRow, ToolError> {
    let row = match super::parse_rev_ref(s, field, "prompt")? {
        super::RevRef::Version(id, version) => {
            store::get(ctx.conn, ctx.org_id, id, version).await?
        }
        super::RevRef::Latest(id) => store::latest(ctx.conn, ctx.org_id, id, false).await?,
    };
    row.ok_or_else(|| not_found(s))
}

/// Trimmed, non-empty, bounded content.
fn content_arg(v: &str) -> Result<String, ToolError> {
    let c = v.trim();
    if c.is_empty() {
        return Err(ToolError::Invalid(
            "content must be the prompt's instructions (see help_prompts)".into(),
        ));
    }
    if c.chars().count() > MAX_CONTENT_CHARS {
        return Err(ToolError::Invalid(format!(
            "content is too long: at most {MAX_CONTENT_CHARS} characters"
        )));
    }
    Ok(c.to_string())
}

/// `model`: None stays None; a blank name is an error.
fn model_arg(model: Option<&str>) -> Result<Option<String>, ToolError> {
    match model {
        None => Ok(None),
        Some(m) if !m.trim().is_empty() => Ok(Some(m.trim().to_string())),
        Some(other) => Err(ToolError::Invalid(format!(
            "model must be a model name such as \"gpt-4o-mini\", or omitted (got {other:?})"
        ))),
    }
}

struct GetPrompt;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GetPromptArgs {
    /// "<prompt_id>:<version>", as returned by create_prompt.
    prompt_revid: String,
}

#[async_trait::async_trait]
impl TypedTool for GetPrompt {
    const NAME: &'static str = "get_prompt";
    const DESCRIPTION: &'static str = "Get one prompt version {prompt_revid: \
         \"<prompt_id>:<version>\"} (a bare prompt_id means its latest version): content, \
         schema_revid, model, tag_ids, status.";
    const CATEGORY: Category = Category::Read;
    type Args = GetPromptArgs;
    type Output = Value;

    async fn run(&self, ctx: &mut ToolCtx<'_>, args: GetPromptArgs) -> Result<Value, ToolError> {
        let p = resolve_prompt(ctx, &args.prompt_revid, "prompt_revid").await?;
        Ok(prompt_json(&p))
    }
}

struct ListPrompts;

#[async_trait::async_trait]
impl TypedTool for ListPrompts {
    const NAME: &'static str = "list_prompts";
    const DESCRIPTION: &'static str = "List the organisation's prompts (latest version of \
         each): prompt_revid, name, schema_revid, model, status and the start of the content.";
    const CATEGORY: Category = Category::Read;
    type Args = NoArgs;
    type Output = Value;

    async fn run(&self, ctx: &mut ToolCtx<'_>, _args: NoArgs) -> Result<Value, ToolError> {
        let rows = store::list_latest(ctx.conn, ctx.org_id).await?;
        let prompts: Vec<Value> = rows
            .iter()
            .map(|p| {
                let preview: String = p.content.chars().take(200).collect();
                json!({
                    "prompt_revid": revid(p.prompt_id, p.version), "prompt_id": p.prompt_id,
                    "name": p.name, "version": p.version,
                    "schema_revid": revid(p.schema_id, p.schema_version),
                    "model": p.model, "tag_ids": p.tag_ids, "status": p.status,
                    "content_preview": preview, "created_at": p.created_at,
                })
            })
            .collect();
        Ok(json!({"count": prompts.len(), "prompts": prompts}))
    }
}

struct CreatePrompt;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CreatePromptArgs {
    #[schemars(length(min = 1, max = 200))]
    name: Option<String>,
    /// Instructions for the extraction model.
    #[schemars(length(min = 1))]
    content: String,
    /// "<schema_id>:<version>" from create_schema.
    schema_revid: String,
    /// A note only: run_extraction always uses the service's configured extraction model.
    model: Option<String>,
    /// Tags of documents this prompt is meant for.
    #[schemars(length(max = 100))]
    tag_ids: Option<Vec<TagId>>,
}

#[async_trait::async_trait]
impl TypedTool for CreatePrompt {
    const NAME: &'static str = "create_prompt";
    const DESCRIPTION: &'static str = "Create an extraction prompt {name, content, \
         schema_revid, model?, tag_ids?} (proposed, version 1). content is the system message \
         the extraction model gets with the document text; schema_revid is the schema its \
         answer must follow. See help_prompts.";
    const CATEGORY: Category = Category::Write;
    type Args = CreatePromptArgs;
    type Output = Value;

    async fn run(&self, ctx: &mut ToolCtx<'_>, args: CreatePromptArgs) -> Result<Value, ToolError> {
        // A missing name is only a missing label: named, and said so in the result.
        let named = args.name.is_none();
        let name = args
            .name
            .as_deref()
            .unwrap_or("Extraction prompt")
            .trim()
            .to_string();
        if name.is_empty() {
            return Err(ToolError::Invalid("name must not be empty".into()));
        }
        let content = content_arg(&args.content)?;
        let model = model_arg(args.model.as_deref())?;
        let schema = resolve_schema(ctx, &args.schema_revid, "schema_revid").await?;
        let tag_ids = checked_tag_ids(ctx, args.tag_ids.as_deref(), "tag_ids")
            .await?
            .unwrap_or_default();
        let f = PromptFields {
            name,
            content,
            schema_id: schema.schema_id,
            schema_version: schema.version,
            model,
            tag_ids,
        };
        let p = store::create(ctx.conn, ctx.org_id, &f, ctx.run_id, ctx.now).await?;
        let mut result = json!({
            "prompt_revid": revid(p.prompt_id, p.version), "prompt_id": p.prompt_id,
            "version": p.version, "schema_revid": revid(p.schema_id, p.schema_version),
            "status": p.status,
        });
        if named {
            result["completed"] = json!(["no name was given: named it \"Extraction prompt\""]);
        }
        Ok(result)
    }
    async fn snapshot(
        &self,
        ctx: &mut ToolCtx<'_>,
        args: &CreatePromptArgs,
    ) -> Option<Result<Value, ToolError>> {
        // A new prompt depends on its schema version existing.
        Some(
            async {
                Ok(
                    match resolve_schema(ctx, &args.schema_revid, "schema_revid").await {
                        Ok(sc) => json!({"schema_exists": true,
                                     "schema_revid": revid(sc.schema_id, sc.version)}),
                        Err(ToolError::NotFound(_)) => json!({"schema_exists": false}),
                        Err(e) => return Err(e),
                    },
                )
            }
            .await,
        )
    }
}

struct UpdatePrompt;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct UpdatePromptArgs {
    /// The prompt's id (no version).
    prompt_id: AnyVersionId,
    #[schemars(length(min = 1))]
    content: Option<String>,
    schema_revid: Option<String>,
    /// A model name; null clears it (the default model).
    #[serde(default, deserialize_with = "nullable")]
    #[schemars(with = "Option<String>", extend("x-nullable" = true))]
    model: Option<Option<String>>,
    /// The complete new set of tag ids.
    #[schemars(length(max = 100))]
    tag_ids: Option<Vec<TagId>>,
}

#[async_trait::async_trait]
impl TypedTool for UpdatePrompt {
    const NAME: &'static str = "update_prompt";
    const DESCRIPTION: &'static str = "Save a new version of a prompt {prompt_id, content?, \
         schema_revid?, model?, tag_ids?} (proposed, version + 1); fields left out keep their \
         current value.";
    const CATEGORY: Category = Category::Write;
    type Args = UpdatePromptArgs;
    type Output = Value;

    fn targets(&self, args: &UpdatePromptArgs) -> Vec<Target> {
        vec![Target::Prompt(args.prompt_id.0)]
    }
    async fn run(&self, ctx: &mut ToolCtx<'_>, args: UpdatePromptArgs) -> Result<Value, ToolError> {
        let AnyVersionId(id) = args.prompt_id;
        if args.content.is_none()
            && args.schema_revid.is_none()
            && args.model.is_none()
            && args.tag_ids.is_none()
        {
            return Err(ToolError::Invalid(
                "nothing to update: give content, schema_revid, model and/or tag_ids".into(),
            ));
        }
        let prev = store::latest(ctx.conn, ctx.org_id, id, true)
            .await?
            .ok_or_else(|| not_found(&id.to_string()))?;
        let mut f = PromptFields::from(&prev);
        if let Some(c) = &args.content {
            f.content = content_arg(c)?;
        }
        if let Some(m) = &args.model {
            f.model = model_arg(m.as_deref())?;
        }
        if let Some(s) = &args.schema_revid {
            let schema = resolve_schema(ctx, s, "schema_revid").await?;
            f.schema_id = schema.schema_id;
            f.schema_version = schema.version;
        }
        if let Some(t) = checked_tag_ids(ctx, args.tag_ids.as_deref(), "tag_ids").await? {
            f.tag_ids = t;
        }
        let p = store::create_version(ctx.conn, ctx.org_id, &prev, &f, ctx.run_id, ctx.now).await?;
        Ok(json!({
            "prompt_revid": revid(p.prompt_id, p.version), "prompt_id": p.prompt_id,
            "version": p.version, "previous_version": prev.version,
            "schema_revid": revid(p.schema_id, p.schema_version), "status": p.status,
        }))
    }
    async fn snapshot(
        &self,
        ctx: &mut ToolCtx<'_>,
        args: &UpdatePromptArgs,
    ) -> Option<Result<Value, ToolError>> {
        let AnyVersionId(id) = args.prompt_id;
        Some(
            async {
                Ok(match store::latest(ctx.conn, ctx.org_id, id, true).await? {
                    Some(p) => json!({"exists": true, "latest": prompt_json(&p)}),
                    None => json!({"exists": false, "prompt_id": id}),
                })
            }
            .await,
        )
    }
}

struct DeletePrompt;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct DeletePromptArgs {
    /// The prompt's id.
    prompt_id: AnyVersionId,
}

#[async_trait::async_trait]
impl TypedTool for DeletePrompt {
    const NAME: &'static str = "delete_prompt";
    const DESCRIPTION: &'static str = "Delete a prompt {prompt_id} with all its versions. \
         Extractions made with it are kept.";
    const CATEGORY: Category = Category::Destructive;
    type Args = DeletePromptArgs;
    type Output = Value;

    fn targets(&self, args: &DeletePromptArgs) -> Vec<Target> {
        vec![Target::Prompt(args.prompt_id.0)]
    }
    async fn run(&self, ctx: &mut ToolCtx<'_>, args: DeletePromptArgs) -> Result<Value, ToolError> {
        let AnyVersionId(id) = args.prompt_id;
        let n = store::delete(ctx.conn, ctx.org_id, id).await?;
        if n == 0 {
            return Err(not_found(&id.to_string()));
        }
        Ok(json!({"deleted": true, "prompt_id": id, "versions_deleted": n}))
    }
    async fn snapshot(
        &self,
        ctx: &mut ToolCtx<'_>,
        args: &DeletePromptArgs,
    ) -> Option<Result<Value, ToolError>> {
        let AnyVersionId(id) = args.prompt_id;
        Some(
            async {
                let versions = store::lock_all(ctx.conn, ctx.org_id, id).await?;
                Ok(if versions.is_empty() {
                    json!({"exists": false, "prompt_id": id})
                } else {
                    let v: Vec<Value> = versions.iter().map(prompt_json).collect();
                    json!({"exists": true, "prompt_id": id, "versions": v})
                })
            }
            .await,
        )
    }
}
