//! Tools of the `prompts` group: `get_prompt`, `list_prompts`, `create_prompt`,
//! `update_prompt` (new version) and `delete_prompt`. A prompt version names the schema
//! version its extraction answers with (`schema_revid`). What prompts share with schemas (get,
//! list, delete, update's targets and snapshot) is in [`super::versioned`], called by the tools
//! declared here, with how a prompt reads ([`Kind`]).

use super::summary::Summary;
use super::tags::checked_tag_ids;
use super::typed::{AnyVersionId, TagId, nullable};
use super::typed::{Refines, tool};
use super::versioned::{self, Kind, Out, ids, latest_locked, merged};
use super::{Target, ToolCtx, ToolError, TypedTool};
use super::{resolve, revid};
use crate::store::prompts::{self as store, PromptFields, PromptRow};
use crate::store::schemas::SchemaRow;
use serde_json::{Value, json};
use uuid::Uuid;

/// Longest prompt content accepted, in characters.
const MAX_CONTENT_CHARS: usize = 20_000;

/// A prompt version's ids as the model sees them.
fn revids(p: &PromptRow) -> Value {
    merged(
        ids(p),
        json!({"schema_revid": revid(p.fields.schema_id, p.fields.schema_version)}),
    )
}

impl Kind for PromptRow {
    fn target(id: Uuid) -> Target {
        Target::Prompt(id)
    }
    fn json(&self) -> Value {
        let f = &self.fields;
        let held = json!({
            "name": f.name, "content": f.content, "model": f.model,
            "tag_ids": f.tag_ids, "status": self.status, "created_at": self.created_at,
        });
        merged(revids(self), held)
    }
    fn listed(self) -> Value {
        // The whole prompt but its content, of which the start.
        let mut row = self.json();
        if let Some(o) = row.as_object_mut() {
            o.remove("content");
        }
        row["content_preview"] = json!(self.fields.content.chars().take(200).collect::<String>());
        row
    }
    fn latest_snapshot(&self) -> Value {
        json!({"exists": true, "latest": self.json()})
    }
    fn version_snapshot(&self) -> Value {
        self.json()
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

tool! {
    /// `get_prompt`.
    GetPrompt {
        /// "<prompt_id>:<version>", as returned by create_prompt.
        prompt_revid: String,
    } = Read "get_prompt",
    "Get one prompt version {prompt_revid: \"<prompt_id>:<version>\"} (a bare prompt_id means its \
    latest version): content, schema_revid, model, tag_ids, status."
}

impl TypedTool for GetPrompt {
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Out {
        versioned::get::<PromptRow>(ctx, &self.prompt_revid).await
    }
}

tool! {
    /// `list_prompts` (no arguments).
    ListPrompts {} = Read "list_prompts",
    "List the organisation's prompts (latest version of each): prompt_revid, name, \
    schema_revid, model, status and the start of the content."
}

impl TypedTool for ListPrompts {
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Out {
        versioned::list::<PromptRow>(ctx).await
    }
}

tool! {
    /// `create_prompt`.
    CreatePrompt {
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
    } = Write "create_prompt",
    "Create an extraction prompt {name, content, \
    schema_revid, model?, tag_ids?} (proposed, version 1). content is the system message \
    the extraction model gets with the document text; schema_revid is the schema its \
    answer must follow. See help_prompts."
}

impl TypedTool for CreatePrompt {
    const PROPOSABLE: bool = true;
    /// A second prompt in a run redoes the first.
    const REFINES: Refines = Refines::Again;

    fn guided_parameters(_candidates: &[String]) -> Option<Value> {
        Some(super::typed::guided::<Self>(&[
            "name",
            "schema_revid",
            "content",
        ]))
    }
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        // A missing name is only a missing label: named, and said so in the result.
        let named = self.name.is_none();
        let name = self.name.as_deref().unwrap_or("Extraction prompt").trim();
        if name.is_empty() {
            return Err(ToolError::Invalid("name must not be empty".into()));
        }
        let content = content_arg(&self.content)?;
        let model = model_arg(self.model.as_deref())?;
        let schema = resolve::<SchemaRow>(ctx, &self.schema_revid, "schema_revid").await?;
        let tag_ids = checked_tag_ids(ctx, self.tag_ids.as_deref(), "tag_ids").await?;
        let f = PromptFields {
            name: name.to_string(),
            content,
            schema_id: schema.schema_id,
            schema_version: schema.version,
            model,
            tag_ids: tag_ids.unwrap_or_default(),
        };
        let p = store::create(ctx.conn, ctx.org_id, &f, ctx.run_id, ctx.now).await?;
        let mut result = revids(&p);
        result["status"] = json!(p.status);
        if named {
            result["completed"] = json!(["no name was given: named it \"Extraction prompt\""]);
        }
        Ok(result)
    }
    async fn summary(&self, s: &mut Summary<'_>) -> sqlx::Result<Option<String>> {
        Ok(Some(versioned::summary::<PromptRow>("Create", s)))
    }
    /// The schema version, if it exists: what a new prompt depends on.
    async fn snapshot(&self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        Ok(
            match resolve::<SchemaRow>(ctx, &self.schema_revid, "schema_revid").await {
                Ok(sc) => json!({"schema_exists": true,
                                 "schema_revid": revid(sc.schema_id, sc.version)}),
                Err(ToolError::NotFound(_)) => json!({"schema_exists": false}),
                Err(e) => return Err(e),
            },
        )
    }
}

tool! {
    /// `update_prompt`.
    UpdatePrompt {
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
    } = Write "update_prompt",
    "Save a new version of a prompt {prompt_id, content?, \
    schema_revid?, model?, tag_ids?} (proposed, version + 1); fields left out keep their \
    current value."
}

impl UpdatePrompt {
    /// `update_prompt`: a new version with the fields given.
    async fn save(&self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        if self.content.is_none()
            && self.schema_revid.is_none()
            && self.model.is_none()
            && self.tag_ids.is_none()
        {
            return Err(ToolError::Invalid(
                "nothing to update: give content, schema_revid, model and/or tag_ids".into(),
            ));
        }
        let prev: PromptRow = latest_locked(ctx, self.prompt_id.0).await?;
        let mut f = prev.fields.clone();
        if let Some(c) = &self.content {
            f.content = content_arg(c)?;
        }
        if let Some(m) = &self.model {
            f.model = model_arg(m.as_deref())?;
        }
        if let Some(s) = &self.schema_revid {
            let schema = resolve::<SchemaRow>(ctx, s, "schema_revid").await?;
            f.schema_id = schema.schema_id;
            f.schema_version = schema.version;
        }
        if let Some(t) = checked_tag_ids(ctx, self.tag_ids.as_deref(), "tag_ids").await? {
            f.tag_ids = t;
        }
        let p = store::create_version(ctx.conn, ctx.org_id, &prev, &f, ctx.run_id, ctx.now).await?;
        let after = json!({"previous_version": prev.version, "status": p.status});
        Ok(merged(revids(&p), after))
    }
}

impl TypedTool for UpdatePrompt {
    const PROPOSABLE: bool = true;
    const REFINES: Refines = Refines::Always;

    fn targets(&self) -> Vec<Target> {
        vec![PromptRow::target(self.prompt_id.0)]
    }
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Out {
        self.save(ctx).await
    }
    async fn snapshot(&self, ctx: &mut ToolCtx<'_>) -> Out {
        versioned::update_snapshot::<PromptRow>(ctx, self.prompt_id.0).await
    }
    async fn summary(&self, s: &mut Summary<'_>) -> sqlx::Result<Option<String>> {
        Ok(Some(versioned::summary::<PromptRow>("Update", s)))
    }
}

tool! {
    /// `delete_prompt`.
    DeletePrompt {
        /// The prompt's id.
        prompt_id: AnyVersionId,
    } = Destructive "delete_prompt",
    "Delete a prompt {prompt_id} with all its versions. Extractions made with it are kept."
}

impl TypedTool for DeletePrompt {
    const PROPOSABLE: bool = true;

    fn targets(&self) -> Vec<Target> {
        vec![PromptRow::target(self.prompt_id.0)]
    }
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Out {
        versioned::delete::<PromptRow>(ctx, self.prompt_id.0).await
    }
    async fn snapshot(&self, ctx: &mut ToolCtx<'_>) -> Out {
        versioned::delete_snapshot::<PromptRow>(ctx, self.prompt_id.0).await
    }
    async fn summary(&self, s: &mut Summary<'_>) -> sqlx::Result<Option<String>> {
        Ok(Some(versioned::summary::<PromptRow>("Delete", s)))
    }
}
