//! Tools of the `schemas` group: `get_schema`, `list_schemas`, `validate_schema`,
//! `create_schema`, `update_schema` (new version) and `delete_schema`. The checks a
//! `response_format` and an extraction result go through are in [`super::schema_check`].

use super::schema_check::clip;
pub use super::schema_check::{validate_instance, validate_response_format};
use super::schema_forms;
use super::typed::tool;
use super::typed::{AnyVersionId, any_object};
use super::{Target, ToolCtx, ToolError, TypedTool, listing, missing, not_in_org};
use super::{resolve, revid};
use crate::store::schemas::{self as store, SchemaRow};
use serde_json::{Value, json};
use uuid::Uuid;

/// `validate_response_format` as a tool error the model can act on.
fn check_response_format(v: &Value) -> Result<(), ToolError> {
    validate_response_format(v).map_err(|errors| {
        ToolError::Invalid(format!(
            "response_format has {} problem(s): {}. See help_schemas for the expected shape.",
            errors.len(),
            errors.join("; ")
        ))
    })
}

/// The `response_format` to store: a near-miss or a map of fields completed
/// ([`schema_forms::complete`]), then checked. The notes say what was completed.
fn completed_response_format(name: &str, rf: &Value) -> Result<schema_forms::Built, ToolError> {
    let built = schema_forms::complete(name, rf);
    check_response_format(&built.response_format).map_err(|e| match e {
        ToolError::Invalid(m) if !built.notes.is_empty() => ToolError::Invalid(format!(
            "{m} (after agentd completed it: {})",
            built.notes.join("; ")
        )),
        other => other,
    })?;
    Ok(built)
}

/// create_schema's schema: from `fields` (the compact form), else from `response_format`.
fn schema_from_args(name: &str, args: &CreateSchema) -> Result<schema_forms::Built, ToolError> {
    let fields = args.fields.as_ref().filter(|f| !f.is_null());
    let rf = args.response_format.as_ref().filter(|f| !f.is_null());
    match (fields, rf) {
        (Some(fields), rf) => {
            let mut built = schema_forms::from_fields(name, fields).map_err(|e| {
                ToolError::Invalid(format!(
                    "{e}. Give fields as {{\"field_name\": \"string\", \"amount\": \"number\", \
                     \"items\": [{{\"description\": \"string\"}}]}}"
                ))
            })?;
            if rf.is_some() {
                built
                    .notes
                    .push("response_format was ignored: fields were given".into());
            }
            check_response_format(&built.response_format)?;
            Ok(built)
        }
        (None, Some(Value::String(s))) => Err(ToolError::Invalid(format!(
            "response_format must be an object {{\"type\": \"json_schema\", \"json_schema\": \
             {{…}}}} (got the string {:?}); simpler: give `fields`, an object of field name → \
             type, e.g. {{\"field_name\": \"string\", \"amount\": \"number\"}}",
            clip(s.clone(), 60)
        ))),
        (None, Some(rf)) => completed_response_format(name, rf),
        (None, None) => Err(ToolError::Invalid(
            "no fields: give `fields`, an object of field name → type, e.g. \
             {\"field_name\": \"string\", \"amount\": \"number\"}, with the fields worth \
             extracting from this document"
                .into(),
        )),
    }
}

/// `result` with `"completed": notes` when agentd completed the response_format.
fn with_notes(mut result: Value, notes: Vec<String>) -> Value {
    if !notes.is_empty() {
        result["completed"] = json!(notes);
    }
    result
}

/// The inner JSON Schema of a stored `response_format`.
pub(crate) fn inner_schema(response_format: &Value) -> &Value {
    response_format
        .pointer("/json_schema/schema")
        .unwrap_or(&Value::Null)
}

/// The latest version of schema `id` of this org, locked.
async fn latest_locked(ctx: &mut ToolCtx<'_>, id: Uuid) -> Result<Option<SchemaRow>, ToolError> {
    Ok(store::latest(ctx.conn, ctx.org_id, id, true).await?)
}

fn schema_json(s: &SchemaRow) -> Value {
    json!({
        "schema_revid": revid(s.schema_id, s.version),
        "schema_id": s.schema_id,
        "version": s.version,
        "name": s.name,
        "status": s.status,
        "response_format": s.response_format,
        "created_at": s.created_at,
    })
}

tool! {
    /// `get_schema`.
    GetSchema {
        /// "<schema_id>:<version>", as returned by create_schema.
        schema_revid: String,
    } = Read "get_schema",
    "Get one schema version {schema_revid: \
    \"<schema_id>:<version>\"} (a bare schema_id means its latest version): name, status \
    and response_format."
}

impl TypedTool for GetSchema {
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        Ok(schema_json(
            &resolve(ctx, &self.schema_revid, "schema_revid").await?,
        ))
    }
}

tool! {
    /// `list_schemas` (no arguments).
    ListSchemas {} = Read "list_schemas",
    "List the organisation's schemas (latest version of \
    each): schema_revid, name, status and the top-level field names."
}

impl TypedTool for ListSchemas {
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        let rows = store::list_latest(ctx.conn, ctx.org_id).await?;
        Ok(listing("schemas", rows, |s| {
            let fields: Vec<&String> = inner_schema(&s.response_format)
                .get("properties")
                .and_then(Value::as_object)
                .map(|p| p.keys().collect())
                .unwrap_or_default();
            json!({
                "schema_revid": revid(s.schema_id, s.version), "schema_id": s.schema_id,
                "name": s.name, "version": s.version, "status": s.status,
                "fields": fields, "created_at": s.created_at,
            })
        }))
    }
}

tool! {
    /// `validate_schema`.
    ValidateSchema {
        /// The response_format to check (see help_schemas).
        #[schemars(schema_with = "any_object")]
        schema: Value,
    } = Read "validate_schema",
    "Check a response_format {schema: {\"type\": \
    \"json_schema\", \"json_schema\": {...}}} without saving it; returns valid and every \
    error found."
}

impl TypedTool for ValidateSchema {
    async fn run(self, _ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        Ok(match validate_response_format(&self.schema) {
            Ok(()) => json!({"valid": true, "errors": []}),
            Err(errors) => json!({"valid": false, "errors": errors}),
        })
    }
}

tool! {
    /// `create_schema`.
    CreateSchema {
        /// A readable name for the kind of document.
        #[schemars(length(min = 1, max = 200))]
        name: Option<String>,
        /// The fields worth extracting: an object of field name → type ("string", "number",
        /// "integer", "boolean", "date"; [{…}] for a list of items).
        #[schemars(extend("type" = ["object", "array"]))]
        fields: Option<Value>,
        /// Only without fields: {"type": "json_schema", "json_schema": {"name", "strict",
        /// "schema"}}
        #[schemars(extend("type" = ["object", "string"]))]
        response_format: Option<Value>,
    } = Write "create_schema",
    // No placeholder names here a small model copies as fields (it made `list_field` one).
    "Create a schema (stored as proposed, version 1) from the \
    fields worth extracting from the document: `fields` maps each field's name (snake_case, \
    after what the value is) to its type, \"string\", \"number\", \"integer\", \"boolean\" \
    or \"date\", or to a list [{…one item's fields…}]; a list of {name, type} works too. \
    For full control give response_format (OpenAI's structured-output shape, see \
    help_schemas) instead of fields. Returns schema_revid for create_prompt."
}

impl TypedTool for CreateSchema {
    const PROPOSABLE: bool = true;

    /// A list of `{"name", "type"}` fields with scalar types, nothing else: the form a small
    /// model fills right. Given a map, a 0.5B model wrote JSON Schema words as field names
    /// (`{"type": "string", "description": "string"}`) or the document's name as one field; the
    /// `response_format` it filled with prose and the schema's own name (defaulted) are left out.
    fn guided_parameters() -> Option<Value> {
        let mut v = super::typed::guided::<Self>(&["fields"]);
        v["properties"]["fields"] = json!({
            "description": "One entry per value worth extracting from this document, named in \
                snake_case after what the value is (invoice_number, total_due, issue_date).",
            "type": "array",
            "minItems": 1,
            "maxItems": 40,
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "minLength": 1, "maxLength": 64},
                    "type": {"enum": ["string", "number", "integer", "boolean", "date"]},
                },
                "required": ["name", "type"],
                "additionalProperties": false,
            },
        });
        Some(v)
    }
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        // A missing name is only a missing label (small models often send just the fields).
        let (name, named) = match self.name.as_deref() {
            Some(n) => (n.trim(), false),
            None => ("Document fields", true),
        };
        if name.is_empty() {
            return Err(ToolError::Invalid("name must not be empty".into()));
        }
        let mut built = schema_from_args(name, &self)?;
        if named {
            built
                .notes
                .push("no name was given: named it \"Document fields\"".into());
        }
        let rf = &built.response_format;
        let s = store::create(ctx.conn, ctx.org_id, name, rf, ctx.run_id, ctx.now).await?;
        let result = json!({
            "schema_revid": revid(s.schema_id, s.version), "schema_id": s.schema_id,
            "version": s.version, "name": s.name, "status": s.status,
        });
        Ok(with_notes(result, built.notes))
    }
    async fn snapshot(&self, _ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        // Creating a new schema depends on no existing row.
        Ok(json!({"depends_on": null}))
    }
}

tool! {
    /// `update_schema`.
    UpdateSchema {
        /// The schema's id (no version).
        schema_id: AnyVersionId,
        /// The complete new response_format (see help_schemas).
        #[schemars(schema_with = "any_object")]
        response_format: Value,
    } = Write "update_schema",
    "Save a new version of a schema {schema_id, \
    response_format} (proposed, version + 1); existing versions and the prompts using them \
    are unchanged. Returns the new schema_revid."
}

impl TypedTool for UpdateSchema {
    const PROPOSABLE: bool = true;

    fn targets(&self) -> Vec<Target> {
        vec![Target::Schema(self.schema_id.0)]
    }
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        let AnyVersionId(id) = self.schema_id;
        let latest = latest_locked(ctx, id)
            .await?
            .ok_or_else(|| not_in_org("schema", id))?;
        let built = completed_response_format(&latest.name, &self.response_format)?;
        let rf = &built.response_format;
        if latest.response_format == *rf {
            return Ok(json!({
                "schema_revid": revid(id, latest.version), "schema_id": id,
                "version": latest.version, "unchanged": true,
            }));
        }
        let s = store::create_version(ctx.conn, ctx.org_id, id, rf, ctx.run_id, ctx.now)
            .await?
            .ok_or_else(|| not_in_org("schema", id))?;
        let result = json!({
            "schema_revid": revid(s.schema_id, s.version), "schema_id": s.schema_id,
            "version": s.version, "previous_version": latest.version, "status": s.status,
        });
        Ok(with_notes(result, built.notes))
    }
    /// The latest version, locked: what a new version depends on.
    async fn snapshot(&self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        let AnyVersionId(id) = self.schema_id;
        Ok(match latest_locked(ctx, id).await? {
            Some(s) => json!({
                "exists": true, "schema_id": id, "latest_version": s.version,
                "name": s.name, "status": s.status, "response_format": s.response_format,
            }),
            None => missing("schema_id", id),
        })
    }
}

tool! {
    /// `delete_schema`.
    DeleteSchema {
        /// The schema's id.
        schema_id: AnyVersionId,
    } = Destructive "delete_schema",
    "Delete a schema {schema_id} with all its versions. \
    Refused while prompts use it: delete or re-point those prompts first."
}

impl TypedTool for DeleteSchema {
    const PROPOSABLE: bool = true;

    fn targets(&self) -> Vec<Target> {
        vec![Target::Schema(self.schema_id.0)]
    }
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        let AnyVersionId(id) = self.schema_id;
        let lock = store::lock_all(ctx.conn, ctx.org_id, id)
            .await?
            .ok_or_else(|| not_in_org("schema", id))?;
        if !lock.dependent_prompts.is_empty() {
            return Err(ToolError::Conflict(format!(
                "schema {id} is used by prompt version(s) {}; delete_prompt them (or \
                 update_prompt to another schema_revid) first",
                lock.dependent_prompts.join(", ")
            )));
        }
        let n = store::delete(ctx.conn, ctx.org_id, id).await?;
        Ok(json!({"deleted": true, "schema_id": id, "versions_deleted": n}))
    }
    /// Every version and the prompts using them, locked: what the deletion depends on.
    async fn snapshot(&self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        let AnyVersionId(id) = self.schema_id;
        let Some(l) = store::lock_all(ctx.conn, ctx.org_id, id).await? else {
            return Ok(missing("schema_id", id));
        };
        let versions: Vec<Value> = l
            .versions
            .iter()
            .map(|s| {
                json!({"version": s.version, "name": s.name, "status": s.status,
                       "response_format": s.response_format})
            })
            .collect();
        Ok(
            json!({"exists": true, "schema_id": id, "versions": versions,
                  "dependent_prompts": l.dependent_prompts}),
        )
    }
}
