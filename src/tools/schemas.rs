//! Tools of the `schemas` group: `get_schema`, `list_schemas`, `validate_schema`,
//! `create_schema`, `update_schema` (new version) and `delete_schema`; and the checks every
//! `response_format` goes through ([`validate_response_format`]) and every extraction result
//! goes through ([`validate_instance`]).

use super::schema_forms;
use super::{Category, Registry, Tool, ToolCtx, ToolError, parse_revid, req_uuid, revid};
use crate::store::schemas::{self as store, SchemaRow};
use serde_json::{Value, json};
use std::sync::Arc;
use uuid::Uuid;

/// Registers this group's tools.
pub fn register(r: &mut Registry) {
    r.register(Arc::new(GetSchema));
    r.register(Arc::new(ListSchemas));
    r.register(Arc::new(ValidateSchema));
    r.register(Arc::new(CreateSchema));
    r.register(Arc::new(UpdateSchema));
    r.register(Arc::new(DeleteSchema));
}

/// A tool's parameters: a closed object (Draft 7) with these properties and required names.
pub(crate) fn params(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// At most `max` characters of `s` (validator messages can quote whole values).
fn clip(s: String, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

/// A JSON pointer inside the inner schema as a readable path: `json_schema.schema.properties.x`.
fn at(pointer: &str) -> String {
    pointer
        .split('/')
        .skip(1)
        .fold("json_schema.schema".to_string(), |acc, seg| {
            format!("{acc}.{}", seg.replace("~1", "/").replace("~0", "~"))
        })
}

/// Checks an OpenAI structured-output `response_format`:
/// `{"type": "json_schema", "json_schema": {"name", "strict"?, "description"?, "schema"}}`, the
/// inner schema a valid Draft 7 JSON Schema of `type: "object"` with `properties`, and under
/// `strict: true` OpenAI's rules (see [`super::strict`]: supported keywords, every object closed
/// with `additionalProperties: false`, every property listed in `required`, depth and size
/// limits). Returns every problem found, each naming where and how to fix.
pub fn validate_response_format(v: &Value) -> Result<(), Vec<String>> {
    let mut errors = Vec::new();
    let Some(obj) = v.as_object() else {
        return Err(vec![format!(
            "response_format must be an object {{\"type\": \"json_schema\", \"json_schema\": \
             {{...}}}} (got {})",
            clip(v.to_string(), 80)
        )]);
    };
    if obj.get("type") != Some(&json!("json_schema")) {
        if obj.contains_key("properties") || obj.get("type") == Some(&json!("object")) {
            return Err(vec![
                "response_format looks like a bare JSON Schema: wrap it as {\"type\": \
                 \"json_schema\", \"json_schema\": {\"name\": \"my_fields\", \"strict\": true, \
                 \"schema\": <your schema>}}"
                    .into(),
            ]);
        }
        errors.push(format!(
            "response_format.type must be \"json_schema\" (got {})",
            obj.get("type").map_or("nothing".into(), |t| t.to_string())
        ));
    }
    for k in obj.keys().filter(|k| *k != "type" && *k != "json_schema") {
        errors.push(format!(
            "response_format.{k}: unknown key; only \"type\" and \"json_schema\" are allowed"
        ));
    }
    let js = match obj.get("json_schema") {
        Some(Value::Object(js)) => js,
        Some(_) | None => {
            errors.push(
                "response_format.json_schema must be an object {\"name\": ..., \"strict\": true, \
                 \"schema\": {...}}"
                    .into(),
            );
            return Err(errors);
        }
    };
    for k in js.keys() {
        if !["name", "description", "schema", "strict"].contains(&k.as_str()) {
            errors.push(format!(
                "json_schema.{k}: unknown key; allowed: name, description, strict, schema"
            ));
        }
    }
    match js.get("name") {
        Some(Value::String(n))
            if (1..=64).contains(&n.len())
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') => {}
        Some(Value::String(n)) => errors.push(format!(
            "json_schema.name must match ^[a-zA-Z0-9_-]{{1,64}}$ (letters, digits, _ and -; \
             no spaces), e.g. \"invoice_fields\" (got {n:?})"
        )),
        Some(other) => errors.push(format!("json_schema.name must be a string (got {other})")),
        None => errors.push("json_schema.name is required, e.g. \"invoice_fields\"".into()),
    }
    if let Some(d) = js.get("description").filter(|d| !d.is_string()) {
        errors.push(format!(
            "json_schema.description must be a string (got {d})"
        ));
    }
    let strict = match js.get("strict") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            errors.push(format!(
                "json_schema.strict must be true or false (got {other})"
            ));
            false
        }
    };
    match js.get("schema") {
        Some(schema @ Value::Object(_)) => check_inner_schema(schema, strict, &mut errors),
        Some(other) => errors.push(format!(
            "json_schema.schema must be a JSON Schema object (got {})",
            clip(other.to_string(), 80)
        )),
        None => errors.push(
            "json_schema.schema is required: a JSON Schema with \"type\": \"object\" and \
             \"properties\""
                .into(),
        ),
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Draft 7 meta-schema validity, compilability, the root shape and (strict) OpenAI's rules.
fn check_inner_schema(schema: &Value, strict: bool, errors: &mut Vec<String>) {
    let meta = jsonschema::draft7::meta::validator();
    let before = errors.len();
    for e in meta.iter_errors(schema) {
        errors.push(format!(
            "{}: {} (not valid Draft 7 JSON Schema)",
            at(e.instance_path().as_str()),
            clip(e.to_string(), 200)
        ));
    }
    if errors.len() == before {
        if let Err(e) = jsonschema::draft7::new(schema) {
            errors.push(format!(
                "json_schema.schema cannot be compiled: {}",
                clip(e.to_string(), 200)
            ));
        }
    }
    if schema.get("type") != Some(&json!("object")) {
        errors.push(format!(
            "json_schema.schema.type must be \"object\" (got {}): the extraction result is one \
             JSON object whose properties are the fields",
            schema
                .get("type")
                .map_or("nothing".into(), |t| t.to_string())
        ));
    }
    match schema.get("properties") {
        Some(Value::Object(p)) if !p.is_empty() => {}
        _ => errors.push(
            "json_schema.schema.properties must be a non-empty object: one entry per field, \
             e.g. {\"total\": {\"type\": \"number\"}}"
                .into(),
        ),
    }
    errors.extend(super::strict::check_schema(
        schema,
        "json_schema.schema",
        strict,
    ));
}

/// Validates `instance` against a Draft 7 `schema`; every error names the instance path.
pub fn validate_instance(schema: &Value, instance: &Value) -> Result<(), Vec<String>> {
    let validator = jsonschema::draft7::new(schema)
        .map_err(|e| vec![format!("the schema cannot be compiled: {e}")])?;
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| {
            let path = e.instance_path().as_str();
            let path = if path.is_empty() { "(root)" } else { path };
            clip(format!("{path}: {e}"), 300)
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

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
fn schema_from_args(name: &str, args: &Value) -> Result<schema_forms::Built, ToolError> {
    let fields = args.get("fields").filter(|f| !f.is_null());
    let rf = args.get("response_format").filter(|f| !f.is_null());
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

/// A schema version of this org from `"<id>:<version>"`, or the latest version from a bare id.
pub(crate) async fn resolve_schema(
    ctx: &mut ToolCtx<'_>,
    s: &str,
    field: &str,
) -> Result<SchemaRow, ToolError> {
    let row = match super::parse_rev_ref(s, field, "schema")? {
        super::RevRef::Version(id, version) => {
            store::get(ctx.conn, ctx.org_id, id, version).await?
        }
        super::RevRef::Latest(id) => store::latest(ctx.conn, ctx.org_id, id, false).await?,
    };
    row.ok_or_else(|| {
        ToolError::NotFound(format!(
            "no schema {s} in this organisation; call list_schemas"
        ))
    })
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

fn str_arg<'a>(args: &'a Value, field: &str) -> &'a str {
    args.get(field).and_then(Value::as_str).unwrap_or("")
}

struct GetSchema;

#[async_trait::async_trait]
impl Tool for GetSchema {
    fn name(&self) -> &'static str {
        "get_schema"
    }
    fn description(&self) -> &'static str {
        "Get one schema version {schema_revid: \"<schema_id>:<version>\"} (a bare schema_id \
         means its latest version): name, status and response_format."
    }
    fn parameters(&self) -> Value {
        params(
            json!({"schema_revid": {"type": "string",
                   "description": "\"<schema_id>:<version>\", as returned by create_schema."}}),
            &["schema_revid"],
        )
    }
    fn category(&self) -> Category {
        Category::Read
    }
    async fn call(&self, ctx: &mut ToolCtx<'_>, args: Value) -> Result<Value, ToolError> {
        let s = resolve_schema(ctx, str_arg(&args, "schema_revid"), "schema_revid").await?;
        Ok(schema_json(&s))
    }
}

struct ListSchemas;

#[async_trait::async_trait]
impl Tool for ListSchemas {
    fn name(&self) -> &'static str {
        "list_schemas"
    }
    fn description(&self) -> &'static str {
        "List the organisation's schemas (latest version of each): schema_revid, name, status \
         and the top-level field names."
    }
    fn parameters(&self) -> Value {
        params(json!({}), &[])
    }
    fn category(&self) -> Category {
        Category::Read
    }
    async fn call(&self, ctx: &mut ToolCtx<'_>, _args: Value) -> Result<Value, ToolError> {
        let rows = store::list_latest(ctx.conn, ctx.org_id).await?;
        let schemas: Vec<Value> = rows
            .iter()
            .map(|s| {
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
            })
            .collect();
        Ok(json!({"count": schemas.len(), "schemas": schemas}))
    }
}

struct ValidateSchema;

#[async_trait::async_trait]
impl Tool for ValidateSchema {
    fn name(&self) -> &'static str {
        "validate_schema"
    }
    fn description(&self) -> &'static str {
        "Check a response_format {schema: {\"type\": \"json_schema\", \"json_schema\": {...}}} \
         without saving it; returns valid and every error found."
    }
    fn parameters(&self) -> Value {
        params(
            json!({"schema": {"type": "object",
                   "description": "The response_format to check (see help_schemas)."}}),
            &["schema"],
        )
    }
    fn category(&self) -> Category {
        Category::Read
    }
    async fn call(&self, _ctx: &mut ToolCtx<'_>, args: Value) -> Result<Value, ToolError> {
        Ok(match validate_response_format(&args["schema"]) {
            Ok(()) => json!({"valid": true, "errors": []}),
            Err(errors) => json!({"valid": false, "errors": errors}),
        })
    }
}

struct CreateSchema;

#[async_trait::async_trait]
impl Tool for CreateSchema {
    fn name(&self) -> &'static str {
        "create_schema"
    }
    fn description(&self) -> &'static str {
        "Create a schema (stored as proposed, version 1) from its fields: {name, fields: \
         {\"field_name\": \"string\" | \"number\" | \"integer\" | \"boolean\" | \"date\", \
         \"list_field\": [{…fields of one item…}]}}. For full control give response_format \
         (OpenAI's structured-output shape, see help_schemas) instead of fields. Returns \
         schema_revid for create_prompt."
    }
    fn parameters(&self) -> Value {
        params(
            json!({
                "name": {"type": "string", "minLength": 1, "maxLength": 200,
                         "description": "A readable name for the kind of document."},
                "fields": {"type": ["object", "array"],
                    "description": "The fields worth extracting: an object of field name → \
                                    type (\"string\", \"number\", \"integer\", \"boolean\", \
                                    \"date\"; [{…}] for a list of items)."},
                "response_format": {"type": ["object", "string"],
                    "description": "Only without fields: {\"type\": \"json_schema\", \
                                    \"json_schema\": {\"name\", \"strict\", \"schema\"}}"},
            }),
            &["name"],
        )
    }
    fn category(&self) -> Category {
        Category::Write
    }
    async fn call(&self, ctx: &mut ToolCtx<'_>, args: Value) -> Result<Value, ToolError> {
        let name = str_arg(&args, "name").trim();
        if name.is_empty() {
            return Err(ToolError::Invalid("name must not be empty".into()));
        }
        let built = schema_from_args(name, &args)?;
        let rf = &built.response_format;
        let s = store::create(ctx.conn, ctx.org_id, name, rf, ctx.run_id, ctx.now).await?;
        Ok(with_notes(
            json!({
                "schema_revid": revid(s.schema_id, s.version), "schema_id": s.schema_id,
                "version": s.version, "name": s.name, "status": s.status,
            }),
            built.notes,
        ))
    }
    async fn snapshot(
        &self,
        _ctx: &mut ToolCtx<'_>,
        _args: &Value,
    ) -> Option<Result<Value, ToolError>> {
        // Creating a new schema depends on no existing row.
        Some(Ok(json!({"depends_on": null})))
    }
}

struct UpdateSchema;

#[async_trait::async_trait]
impl Tool for UpdateSchema {
    fn name(&self) -> &'static str {
        "update_schema"
    }
    fn description(&self) -> &'static str {
        "Save a new version of a schema {schema_id, response_format} (proposed, version + 1); \
         existing versions and the prompts using them are unchanged. Returns the new \
         schema_revid."
    }
    fn parameters(&self) -> Value {
        params(
            json!({
                "schema_id": {"type": "string", "description": "The schema's id (no version)."},
                "response_format": {"type": "object",
                    "description": "The complete new response_format (see help_schemas)."},
            }),
            &["schema_id", "response_format"],
        )
    }
    fn category(&self) -> Category {
        Category::Write
    }
    fn targets(&self, args: &Value) -> Vec<super::Target> {
        schema_id_arg(args)
            .map(super::Target::Schema)
            .into_iter()
            .collect()
    }
    async fn call(&self, ctx: &mut ToolCtx<'_>, args: Value) -> Result<Value, ToolError> {
        let id = schema_id_arg(&args)?;
        let latest = store::latest(ctx.conn, ctx.org_id, id, true)
            .await?
            .ok_or_else(|| not_found(id))?;
        let built = completed_response_format(&latest.name, &args["response_format"])?;
        let rf = &built.response_format;
        if latest.response_format == *rf {
            return Ok(json!({
                "schema_revid": revid(id, latest.version), "schema_id": id,
                "version": latest.version, "unchanged": true,
            }));
        }
        let s = store::create_version(ctx.conn, ctx.org_id, id, rf, ctx.run_id, ctx.now)
            .await?
            .ok_or_else(|| not_found(id))?;
        Ok(with_notes(
            json!({
                "schema_revid": revid(s.schema_id, s.version), "schema_id": s.schema_id,
                "version": s.version, "previous_version": latest.version, "status": s.status,
            }),
            built.notes,
        ))
    }
    async fn snapshot(
        &self,
        ctx: &mut ToolCtx<'_>,
        args: &Value,
    ) -> Option<Result<Value, ToolError>> {
        Some(
            async {
                let id = schema_id_arg(args)?;
                Ok(match store::latest(ctx.conn, ctx.org_id, id, true).await? {
                    Some(s) => json!({
                        "exists": true, "schema_id": id, "latest_version": s.version,
                        "name": s.name, "status": s.status, "response_format": s.response_format,
                    }),
                    None => json!({"exists": false, "schema_id": id}),
                })
            }
            .await,
        )
    }
}

/// `schema_id`, tolerating a revid (its version is ignored).
fn schema_id_arg(args: &Value) -> Result<Uuid, ToolError> {
    match args.get("schema_id").and_then(Value::as_str) {
        Some(s) if s.contains(':') => Ok(parse_revid(s, "schema_id")?.0),
        _ => req_uuid(args, "schema_id"),
    }
}

fn not_found(id: Uuid) -> ToolError {
    ToolError::NotFound(format!(
        "no schema {id} in this organisation; call list_schemas"
    ))
}

struct DeleteSchema;

#[async_trait::async_trait]
impl Tool for DeleteSchema {
    fn name(&self) -> &'static str {
        "delete_schema"
    }
    fn description(&self) -> &'static str {
        "Delete a schema {schema_id} with all its versions. Refused while prompts use it: \
         delete or re-point those prompts first."
    }
    fn parameters(&self) -> Value {
        params(
            json!({"schema_id": {"type": "string", "description": "The schema's id."}}),
            &["schema_id"],
        )
    }
    fn category(&self) -> Category {
        Category::Destructive
    }
    fn targets(&self, args: &Value) -> Vec<super::Target> {
        schema_id_arg(args)
            .map(super::Target::Schema)
            .into_iter()
            .collect()
    }
    async fn call(&self, ctx: &mut ToolCtx<'_>, args: Value) -> Result<Value, ToolError> {
        let id = schema_id_arg(&args)?;
        let lock = store::lock_all(ctx.conn, ctx.org_id, id)
            .await?
            .ok_or_else(|| not_found(id))?;
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
    async fn snapshot(
        &self,
        ctx: &mut ToolCtx<'_>,
        args: &Value,
    ) -> Option<Result<Value, ToolError>> {
        Some(
            async {
                let id = schema_id_arg(args)?;
                Ok(match store::lock_all(ctx.conn, ctx.org_id, id).await? {
                    Some(l) => {
                        let versions: Vec<Value> = l
                            .versions
                            .iter()
                            .map(|s| {
                                json!({"version": s.version, "name": s.name, "status": s.status,
                                       "response_format": s.response_format})
                            })
                            .collect();
                        json!({"exists": true, "schema_id": id, "versions": versions,
                               "dependent_prompts": l.dependent_prompts})
                    }
                    None => json!({"exists": false, "schema_id": id}),
                })
            }
            .await,
        )
    }
}
