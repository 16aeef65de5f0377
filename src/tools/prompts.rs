//! Tools of the `prompts` group: `get_prompt`, `list_prompts`, `create_prompt`,
//! `update_prompt` (new version) and `delete_prompt`. A prompt version names the schema
//! version its extraction answers with (`schema_revid`).

use super::schemas::{params, resolve_schema};
use super::tags::{checked_tag_ids, tag_ids_param};
use super::{Category, Registry, Tool, ToolCtx, ToolError, parse_revid, req_uuid, revid};
use crate::store::prompts::{self as store, PromptFields, PromptRow};
use serde_json::{Value, json};
use std::sync::Arc;
use uuid::Uuid;

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

/// `prompt_id`, tolerating a revid (its version is ignored).
fn prompt_id_arg(args: &Value) -> Result<Uuid, ToolError> {
    match args.get("prompt_id").and_then(Value::as_str) {
        Some(s) if s.contains(':') => Ok(parse_revid(s, "prompt_id")?.0),
        _ => req_uuid(args, "prompt_id"),
    }
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

/// `model`: absent/null → None; a blank string is an error.
fn model_arg(args: &Value) -> Result<Option<String>, ToolError> {
    match args.get("model") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(m)) if !m.trim().is_empty() => Ok(Some(m.trim().to_string())),
        Some(other) => Err(ToolError::Invalid(format!(
            "model must be a model name such as \"gpt-4o-mini\", or omitted (got {other})"
        ))),
    }
}

struct GetPrompt;

#[async_trait::async_trait]
impl Tool for GetPrompt {
    fn name(&self) -> &'static str {
        "get_prompt"
    }
    fn description(&self) -> &'static str {
        "Get one prompt version {prompt_revid: \"<prompt_id>:<version>\"} (a bare prompt_id \
         means its latest version): content, schema_revid, model, tag_ids, status."
    }
    fn parameters(&self) -> Value {
        params(
            json!({"prompt_revid": {"type": "string",
                   "description": "\"<prompt_id>:<version>\", as returned by create_prompt."}}),
            &["prompt_revid"],
        )
    }
    fn category(&self) -> Category {
        Category::Read
    }
    async fn call(&self, ctx: &mut ToolCtx<'_>, args: Value) -> Result<Value, ToolError> {
        let s = args["prompt_revid"].as_str().unwrap_or("");
        let p = resolve_prompt(ctx, s, "prompt_revid").await?;
        Ok(prompt_json(&p))
    }
}

struct ListPrompts;

#[async_trait::async_trait]
impl Tool for ListPrompts {
    fn name(&self) -> &'static str {
        "list_prompts"
    }
    fn description(&self) -> &'static str {
        "List the organisation's prompts (latest version of each): prompt_revid, name, \
         schema_revid, model, status and the start of the content."
    }
    fn parameters(&self) -> Value {
        params(json!({}), &[])
    }
    fn category(&self) -> Category {
        Category::Read
    }
    async fn call(&self, ctx: &mut ToolCtx<'_>, _args: Value) -> Result<Value, ToolError> {
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

#[async_trait::async_trait]
impl Tool for CreatePrompt {
    fn name(&self) -> &'static str {
        "create_prompt"
    }
    fn description(&self) -> &'static str {
        "Create an extraction prompt {name, content, schema_revid, model?, tag_ids?} (proposed, \
         version 1). content is the system message the extraction model gets with the document \
         text; schema_revid is the schema its answer must follow. See help_prompts."
    }
    fn parameters(&self) -> Value {
        params(
            json!({
                "name": {"type": "string", "minLength": 1, "maxLength": 200},
                "content": {"type": "string", "minLength": 1,
                            "description": "Instructions for the extraction model."},
                "schema_revid": {"type": "string",
                                 "description": "\"<schema_id>:<version>\" from create_schema."},
                "model": {"type": "string", "description": "A note only: run_extraction always uses the service's configured extraction model."},
                "tag_ids": tag_ids_param("Tags of documents this prompt is meant for."),
            }),
            &["content", "schema_revid"],
        )
    }
    fn category(&self) -> Category {
        Category::Write
    }
    async fn call(&self, ctx: &mut ToolCtx<'_>, args: Value) -> Result<Value, ToolError> {
        // A missing name is only a missing label: named, and said so in the result.
        let named = args.get("name").is_none_or(Value::is_null);
        let name = args["name"]
            .as_str()
            .unwrap_or("Extraction prompt")
            .trim()
            .to_string();
        if name.is_empty() {
            return Err(ToolError::Invalid("name must not be empty".into()));
        }
        let content = content_arg(args["content"].as_str().unwrap_or(""))?;
        let model = model_arg(&args)?;
        let schema = resolve_schema(
            ctx,
            args["schema_revid"].as_str().unwrap_or(""),
            "schema_revid",
        )
        .await?;
        let tag_ids = checked_tag_ids(ctx, &args, "tag_ids")
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
        args: &Value,
    ) -> Option<Result<Value, ToolError>> {
        // A new prompt depends on its schema version existing.
        let s = args["schema_revid"].as_str().unwrap_or("").to_string();
        Some(
            async {
                Ok(match resolve_schema(ctx, &s, "schema_revid").await {
                    Ok(sc) => json!({"schema_exists": true,
                                     "schema_revid": revid(sc.schema_id, sc.version)}),
                    Err(ToolError::NotFound(_)) => json!({"schema_exists": false}),
                    Err(e) => return Err(e),
                })
            }
            .await,
        )
    }
}

struct UpdatePrompt;

#[async_trait::async_trait]
impl Tool for UpdatePrompt {
    fn name(&self) -> &'static str {
        "update_prompt"
    }
    fn description(&self) -> &'static str {
        "Save a new version of a prompt {prompt_id, content?, schema_revid?, model?, tag_ids?} \
         (proposed, version + 1); fields left out keep their current value."
    }
    fn parameters(&self) -> Value {
        params(
            json!({
                "prompt_id": {"type": "string", "description": "The prompt's id (no version)."},
                "content": {"type": "string", "minLength": 1},
                "schema_revid": {"type": "string"},
                "model": {"type": ["string", "null"],
                          "description": "A model name; null clears it (the default model)."},
                "tag_ids": tag_ids_param("The complete new set of tag ids."),
            }),
            &["prompt_id"],
        )
    }
    fn category(&self) -> Category {
        Category::Write
    }
    fn targets(&self, args: &Value) -> Vec<super::Target> {
        prompt_id_arg(args)
            .map(super::Target::Prompt)
            .into_iter()
            .collect()
    }
    async fn call(&self, ctx: &mut ToolCtx<'_>, args: Value) -> Result<Value, ToolError> {
        let id = prompt_id_arg(&args)?;
        let changes = ["content", "schema_revid", "model", "tag_ids"];
        if !changes.iter().any(|k| args.get(k).is_some()) {
            return Err(ToolError::Invalid(
                "nothing to update: give content, schema_revid, model and/or tag_ids".into(),
            ));
        }
        let prev = store::latest(ctx.conn, ctx.org_id, id, true)
            .await?
            .ok_or_else(|| not_found(&id.to_string()))?;
        let mut f = PromptFields::from(&prev);
        if let Some(c) = args.get("content").and_then(Value::as_str) {
            f.content = content_arg(c)?;
        }
        if args.get("model").is_some() {
            f.model = model_arg(&args)?;
        }
        if let Some(s) = args.get("schema_revid").and_then(Value::as_str) {
            let schema = resolve_schema(ctx, s, "schema_revid").await?;
            f.schema_id = schema.schema_id;
            f.schema_version = schema.version;
        }
        if let Some(t) = checked_tag_ids(ctx, &args, "tag_ids").await? {
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
        args: &Value,
    ) -> Option<Result<Value, ToolError>> {
        Some(
            async {
                let id = prompt_id_arg(args)?;
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

#[async_trait::async_trait]
impl Tool for DeletePrompt {
    fn name(&self) -> &'static str {
        "delete_prompt"
    }
    fn description(&self) -> &'static str {
        "Delete a prompt {prompt_id} with all its versions. Extractions made with it are kept."
    }
    fn parameters(&self) -> Value {
        params(
            json!({"prompt_id": {"type": "string", "description": "The prompt's id."}}),
            &["prompt_id"],
        )
    }
    fn category(&self) -> Category {
        Category::Destructive
    }
    fn targets(&self, args: &Value) -> Vec<super::Target> {
        prompt_id_arg(args)
            .map(super::Target::Prompt)
            .into_iter()
            .collect()
    }
    async fn call(&self, ctx: &mut ToolCtx<'_>, args: Value) -> Result<Value, ToolError> {
        let id = prompt_id_arg(&args)?;
        let n = store::delete(ctx.conn, ctx.org_id, id).await?;
        if n == 0 {
            return Err(not_found(&id.to_string()));
        }
        Ok(json!({"deleted": true, "prompt_id": id, "versions_deleted": n}))
    }
    async fn snapshot(
        &self,
        ctx: &mut ToolCtx<'_>,
        args: &Value,
    ) -> Option<Result<Value, ToolError>> {
        Some(
            async {
                let id = prompt_id_arg(args)?;
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
