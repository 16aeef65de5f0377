//! Tools of the `schemas` group: `get_schema`, `list_schemas`, `validate_schema`,
//! `create_schema`, `update_schema` (new version) and `delete_schema`. The checks a
//! `response_format` and an extraction result go through are in [`super::schema_check`]. What
//! schemas share with prompts (get, list, delete, update's targets and snapshot) is in
//! [`super::versioned`], called by the tools declared here, with how a schema reads ([`Kind`]).

use super::schema_check::clip;
pub use super::schema_check::{validate_instance, validate_response_format};
use super::summary::Summary;
use super::typed::{AnyVersionId, any_object};
use super::typed::{Refines, tool};
use super::versioned::{self, Kind, Out, ids, latest_locked, merged};
use super::{Target, ToolCtx, ToolError, TypedTool, not_in_org, revid};
use super::{field_names, key_fields, schema_forms, schema_reuse};
use crate::analysis;
use crate::analysis::origins::Words;
use crate::store::schemas::{self as store, SchemaRow};
use crate::store::versions;
use crate::store::{auto_create, documents};
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

/// Renames fields named after a personal-data token (`phone_1` → `phone`) or after a value of
/// the run's document (`n_0003_00012877`, the invoice's number → the candidate's name, e.g.
/// `invoice_number`): a schema is reused for other documents, so a name must say what the
/// value is. Each rename is a note.
fn neutral_names(doc: Option<&(analysis::Analysis, Words)>, built: &mut schema_forms::Built) {
    let mut by_value: Vec<(String, String)> = Vec::new();
    if let Some((a, words)) = doc {
        // Never into a name the document's words make that is no label (`system_override`).
        let named = a
            .candidates
            .iter()
            .filter(|c| field_names::judge(&c.name, Some(words)).is_none());
        for c in named {
            if let serde_json::Value::String(v) = &c.value {
                let key = schema_forms::snake(v, 64);
                // Only values that could not be a field's own name: with a digit, or 2+ words.
                if key.chars().any(|c| c.is_ascii_digit()) || key.contains('_') {
                    by_value.push((key, c.name.clone()));
                }
            }
        }
    }
    let renames = |k: &str| -> Option<String> {
        if let Some(t) = field_names::token_field(k) {
            return Some(t.to_string());
        }
        by_value
            .iter()
            .find(|(v, name)| {
                name != k
                    && (v == k || (k.chars().count() >= 8 && v.contains(k) && k.contains('_')))
            })
            .map(|(_, name)| name.clone())
    };
    let notes = field_names::rename_fields(&mut built.response_format, &renames);
    built.notes.extend(notes);
}

/// One vocabulary across languages ([`field_names::canonicalise`]): fields named in the
/// document's language get their name in the canonical language, with the document's label
/// (or the name given) as description, and every field named after a candidate of the run's
/// document its label as description. Returns the renamed ones, for the result; a note says so.
fn canonical_names(
    doc: Option<&(analysis::Analysis, Words)>,
    built: &mut schema_forms::Built,
) -> Vec<field_names::Canonical> {
    let a = doc.map(|(a, _)| a);
    let names: Vec<&str> = a
        .map(|a| a.candidates.iter().map(|c| c.name.as_str()).collect())
        .unwrap_or_default();
    let language = a.and_then(|a| a.language);
    let canonical = |k: &str| field_names::canonical_name(k, language, &names);
    // The document's label of a candidate, found by its name or by the label's own name.
    let label = |k: &str| {
        let c = a?.candidates.iter().find(|c| {
            c.name == k
                || (matches!(c.source, analysis::Source::Label(_))
                    && schema_forms::snake(&analysis::labels::without_parentheses(&c.label), 64)
                        == k)
        })?;
        matches!(
            c.source,
            analysis::Source::Label(_) | analysis::Source::Table
        )
        .then(|| c.label.clone())
    };
    let renamed = field_names::canonicalise(&mut built.response_format, &canonical, &label);
    field_names::describe_by_labels(&mut built.response_format, &label);
    if !renamed.is_empty() {
        built.notes.push(field_names::canonical_note(&renamed));
    }
    renamed
}

/// `result` with `"canonical_names"` when fields were renamed into the canonical language.
fn with_canonical(mut result: Value, renamed: &[field_names::Canonical]) -> Value {
    if !renamed.is_empty() {
        result["canonical_names"] = json!(renamed);
    }
    result
}

/// The analysis of the run's document and where its words stand, when the call has one.
async fn document_analysis(
    ctx: &mut ToolCtx<'_>,
) -> Result<Option<(analysis::Analysis, Words)>, ToolError> {
    let Some(doc) = ctx.document_id else {
        return Ok(None);
    };
    let d = documents::get(ctx.conn, ctx.org_id, doc, analysis::MAX_CHARS).await?;
    Ok(d.map(|d| {
        let a = analysis::analyse(&d.text);
        let words = Words::of(&d.text, &a);
        (a, words)
    }))
}

/// Leaves out the fields named after the document's own words other than a label, a tool or
/// an id ([`field_names::judge`]) and records on the run what was left out — those and the
/// analysis' candidates the same check refused (`source: "candidate"`; the model was not
/// offered them) — for the document's report. Refused when no field is left: the model
/// can resend them named after what the values are. Returns the fields left out, for the result.
async fn without_document_words(
    ctx: &mut ToolCtx<'_>,
    doc: Option<&(analysis::Analysis, Words)>,
    built: &mut schema_forms::Built,
) -> Result<Vec<field_names::Dropped>, ToolError> {
    let words = doc.map(|(_, w)| w);
    let dropped = field_names::drop_fields(&mut built.response_format, &|k| {
        field_names::judge(k, words)
    });
    let left = inner_schema(&built.response_format)
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|p| !p.is_empty());
    if !dropped.is_empty() && !left {
        return Err(ToolError::Invalid(format!(
            "no field left: {}",
            field_names::dropped_note(&dropped)
        )));
    }
    let mut recorded: Vec<Value> = dropped
        .iter()
        .map(|d| merged(json!(d), json!({"source": "proposed"})))
        .collect();
    if let Some((a, w)) = doc {
        for c in &a.candidates {
            let given = dropped.iter().any(|d| d.name == c.name);
            if let Some(d) = field_names::judge(&c.name, Some(w)).filter(|_| !given) {
                recorded.push(merged(json!(d), json!({"source": "candidate"})));
            }
        }
    }
    if let Some(run_id) = ctx.run_id
        && !recorded.is_empty()
    {
        auto_create::add_dropped_fields(ctx.conn, ctx.org_id, run_id, &json!(recorded)).await?;
    }
    if !dropped.is_empty() {
        built.notes.push(field_names::dropped_note(&dropped));
    }
    Ok(dropped)
}

/// `result` with `"dropped_fields"` when fields were left out.
fn with_dropped(mut result: Value, dropped: &[field_names::Dropped]) -> Value {
    if !dropped.is_empty() {
        result["dropped_fields"] = json!(dropped);
    }
    result
}

/// The kind of document an analysis found (`invoice`), unless it found none.
fn kind_of(a: Option<&analysis::Analysis>) -> Option<&'static str> {
    a.map(|a| a.kind)
        .filter(|k| *k != analysis::DocKind::Other)
        .map(analysis::DocKind::as_str)
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

/// What a schema version holds besides its ids.
fn held(s: &SchemaRow) -> Value {
    json!({"name": s.name, "status": s.status, "response_format": s.response_format})
}

impl Kind for SchemaRow {
    fn target(id: Uuid) -> Target {
        Target::Schema(id)
    }
    fn json(&self) -> Value {
        let created = json!({"created_at": self.created_at});
        merged(merged(ids(self), held(self)), created)
    }
    fn listed(self) -> Value {
        let fields: Vec<&String> = inner_schema(&self.response_format)
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().collect())
            .unwrap_or_default();
        let more = json!({"name": self.name, "status": self.status, "fields": fields,
                          "created_at": self.created_at});
        merged(ids(&self), more)
    }
    fn latest_snapshot(&self) -> Value {
        let latest = json!({"exists": true, "schema_id": self.schema_id,
                            "latest_version": self.version});
        merged(latest, held(self))
    }
    fn version_snapshot(&self) -> Value {
        merged(json!({"version": self.version}), held(self))
    }
    /// Refused while prompt versions use the schema; its versions are locked first.
    async fn check_delete(ctx: &mut ToolCtx<'_>, id: Uuid) -> Result<(), ToolError> {
        let locked = versions::lock_all::<SchemaRow>(ctx.conn, ctx.org_id, id).await?;
        if locked.is_empty() {
            return Err(not_in_org("schema", id));
        }
        let users = store::dependent_prompts(ctx.conn, ctx.org_id, id).await?;
        if !users.is_empty() {
            return Err(ToolError::Conflict(format!(
                "schema {id} is used by prompt version(s) {}; delete_prompt them (or \
                 update_prompt to another schema_revid) first",
                users.join(", ")
            )));
        }
        Ok(())
    }
    /// The prompt versions using the schema.
    async fn dependents(
        ctx: &mut ToolCtx<'_>,
        id: Uuid,
        snapshot: &mut Value,
    ) -> Result<(), ToolError> {
        let users = store::dependent_prompts(ctx.conn, ctx.org_id, id).await?;
        snapshot["dependent_prompts"] = json!(users);
        Ok(())
    }
}

tool! {
    /// `get_schema`.
    GetSchema {
        /// "<schema_id>:<version>", as returned by create_schema.
        schema_revid: String,
    } = Read "get_schema",
    "Get one schema version {schema_revid: \"<schema_id>:<version>\"} (a bare schema_id means its \
    latest version): name, status and response_format."
}

impl TypedTool for GetSchema {
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Out {
        versioned::get::<SchemaRow>(ctx, &self.schema_revid).await
    }
}

tool! {
    /// `list_schemas` (no arguments).
    ListSchemas {} = Read "list_schemas",
    "List the organisation's schemas (latest version of each): schema_revid, name, status and \
    the top-level field names."
}

impl TypedTool for ListSchemas {
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Out {
        versioned::list::<SchemaRow>(ctx).await
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
    /// A second schema in a run redoes the first.
    const REFINES: Refines = Refines::Again;

    /// A list of `{"name", "type"}` fields with scalar types, nothing else: the form a small
    /// model fills right. Given a map, a 0.5B model wrote JSON Schema words as field names
    /// (`{"type": "string", "description": "string"}`) or the document's name as one field; the
    /// `response_format` it filled with prose and the schema's own name (defaulted) are left out.
    /// A field's name offers the run's `candidates` ([`offer_names`]).
    fn guided_parameters(candidates: &[String]) -> Option<Value> {
        let mut v = super::typed::guided::<Self>(&["fields"]);
        v["properties"]["fields"] = json!({
            "description": "One entry per value worth extracting from this document, named in \
                snake_case after what the value is (invoice_number, total_due, issue_date).",
            "type": "array",
            "minItems": 1,
            "maxItems": 40,
            "items": guided_field(),
        });
        offer_names(&mut v, candidates);
        Some(v)
    }
    async fn summary(&self, s: &mut Summary<'_>) -> sqlx::Result<Option<String>> {
        Ok(Some(versioned::summary::<SchemaRow>("Create", s)))
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
        let doc = document_analysis(ctx).await?;
        neutral_names(doc.as_ref(), &mut built);
        let renamed = canonical_names(doc.as_ref(), &mut built);
        let dropped = without_document_words(ctx, doc.as_ref(), &mut built).await?;
        let also =
            key_fields::keep_key_fields(ctx, doc.as_ref().map(|(a, _)| a), &mut built).await?;
        let kind = kind_of(doc.as_ref().map(|(a, _)| a));
        if named {
            built
                .notes
                .push("no name was given: named it \"Document fields\"".into());
        }
        if ctx.subject.reuses_schemas()
            && let Some(run_id) = ctx.run_id
            && let Some(reused) = reuse(ctx, run_id, kind, &built).await?
        {
            let result = with_dropped(with_notes(reused, built.notes), &dropped);
            let result = key_fields::with_also_found(result, &also);
            return Ok(with_canonical(result, &renamed));
        }
        let rf = &built.response_format;
        let s = store::create(ctx.conn, ctx.org_id, name, rf, ctx.run_id, ctx.now).await?;
        if let Some(kind) = kind {
            store::set_document_kind(ctx.conn, ctx.org_id, s.schema_id, s.version, kind).await?;
        }
        let result = merged(ids(&s), json!({"name": s.name, "status": s.status}));
        let result = with_dropped(with_notes(result, built.notes), &dropped);
        let result = key_fields::with_also_found(result, &also);
        Ok(with_canonical(result, &renamed))
    }
    async fn snapshot(&self, _ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        // Creating a new schema depends on no existing row.
        Ok(json!({"depends_on": null}))
    }
}

/// Reuse before creating ([`schema_reuse`]): the org's schema that fits `built` best, as it is
/// (recorded on the run, `auto_create::set_reused_schema`) or as a new version with the fields
/// it lacks; `None` when none fits (or the extended schema would not pass the checks), and a
/// new schema is made. The result says so to the model.
async fn reuse(
    ctx: &mut ToolCtx<'_>,
    run_id: Uuid,
    kind: Option<&str>,
    built: &schema_forms::Built,
) -> Result<Option<Value>, ToolError> {
    let rows =
        store::reuse_candidates(ctx.conn, ctx.org_id, run_id, schema_reuse::MAX_COMPARED).await?;
    let Some((candidate, fit)) = schema_reuse::best(&built.response_format, kind, &rows) else {
        return Ok(None);
    };
    let row = &candidate.row;
    let (rf, added, left_out) = schema_reuse::extend(&row.response_format, &built.response_format);
    let old = revid(row.schema_id, row.version);
    let why = match fit.same_kind {
        true => format!("the same kind of document, {} fields in common", fit.shared),
        false => format!("{} of its fields match", fit.shared),
    };
    let mut note = format!(
        "not created: this org already has the schema {:?} ({old}) for this kind of document \
         ({why}), so it was reused",
        row.name
    );
    let (mut result, revid_now) = if added.is_empty() {
        auto_create::set_reused_schema(ctx.conn, ctx.org_id, run_id, row.schema_id, row.version)
            .await?;
        note.push_str(" as it is (it has every field you gave)");
        (
            merged(ids(row), json!({"name": row.name, "status": row.status})),
            old,
        )
    } else {
        if validate_response_format(&rf).is_err() {
            return Ok(None);
        }
        let s = store::create_version(
            ctx.conn,
            ctx.org_id,
            row.schema_id,
            &rf,
            ctx.run_id,
            ctx.now,
        )
        .await?
        .ok_or_else(|| not_in_org("schema", row.schema_id))?;
        if let Some(kind) = candidate.document_kind.as_deref().or(kind) {
            store::set_document_kind(ctx.conn, ctx.org_id, s.schema_id, s.version, kind).await?;
        }
        note.push_str(&format!(
            "; version {} adds the fields it lacked: {}",
            s.version,
            added.join(", ")
        ));
        let r = merged(
            ids(&s),
            json!({"name": s.name, "status": s.status, "previous_version": row.version,
                   "fields_added": added}),
        );
        (r, revid(s.schema_id, s.version))
    };
    if !left_out.is_empty() {
        note.push_str(&format!(
            "; left out (the schema holds {} fields at most): {}",
            schema_reuse::MAX_FIELDS,
            left_out.join(", ")
        ));
    }
    note.push_str(&format!(
        ". Pass schema_revid \"{revid_now}\" to create_prompt."
    ));
    result["reused"] = json!(true);
    result["note"] = json!(note);
    Ok(Some(result))
}

/// One field of the guided list form, `{"name", "type"}` with a scalar type: what a constrained
/// `create_schema` lists, and what the one call's `more` adds (`agent::one_call`).
pub fn guided_field() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 64},
            "type": {"enum": ["string", "number", "integer", "boolean", "date"]},
        },
        "required": ["name", "type"],
        "additionalProperties": false,
    })
}

/// In the guided list of `{name, type}` fields, the name is one of `candidates` or any
/// other name (both described): the candidates come first so a model that cannot name a field
/// well picks one.
fn offer_names(args: &mut Value, candidates: &[String]) {
    if candidates.is_empty() {
        return;
    }
    let Some(name) = args.pointer_mut("/properties/fields/items/properties/name") else {
        return;
    };
    let free = name.clone();
    // A list of one field satisfies `minItems: 1`, and the 0.5B model stopped there (a credit
    // note proposed as `type`): with candidates, ask for as many as there are, up to
    // MIN_FIELDS_OFFERED, which it fills from the offered names.
    let at_least = candidates.len().min(MIN_FIELDS_OFFERED);
    *name = json!({
        "description": format!(
            "snake_case, after what the value is; preferably one of the candidates: {}",
            candidates.join(", ")
        ),
        "anyOf": [{"type": "string", "enum": candidates}, free],
    });
    if let Some(min) = args.pointer_mut("/properties/fields/minItems") {
        *min = json!(at_least.max(1));
    }
}

/// How many fields a constrained `create_schema` must list at least when the analysis offers
/// that many candidates (labelled documents of the eval have 5–11 fields).
const MIN_FIELDS_OFFERED: usize = 6;

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

impl UpdateSchema {
    /// `update_schema`: a new version with this response_format, unless it is the latest's.
    async fn save(&self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        let AnyVersionId(id) = self.schema_id;
        let latest: SchemaRow = latest_locked(ctx, id).await?;
        let mut built = completed_response_format(&latest.name, &self.response_format)?;
        let doc = document_analysis(ctx).await?;
        neutral_names(doc.as_ref(), &mut built);
        let renamed = canonical_names(doc.as_ref(), &mut built);
        let dropped = without_document_words(ctx, doc.as_ref(), &mut built).await?;
        let rf = &built.response_format;
        if latest.response_format == *rf {
            let same = merged(ids(&latest), json!({"unchanged": true}));
            let same = with_dropped(with_notes(same, built.notes), &dropped);
            return Ok(with_canonical(same, &renamed));
        }
        let s = store::create_version(ctx.conn, ctx.org_id, id, rf, ctx.run_id, ctx.now)
            .await?
            .ok_or_else(|| not_in_org("schema", id))?;
        let after = json!({"previous_version": latest.version, "status": s.status});
        let result = with_dropped(with_notes(merged(ids(&s), after), built.notes), &dropped);
        Ok(with_canonical(result, &renamed))
    }
}

impl TypedTool for UpdateSchema {
    const PROPOSABLE: bool = true;
    const REFINES: Refines = Refines::Always;

    fn targets(&self) -> Vec<Target> {
        vec![SchemaRow::target(self.schema_id.0)]
    }
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Out {
        self.save(ctx).await
    }
    async fn snapshot(&self, ctx: &mut ToolCtx<'_>) -> Out {
        versioned::update_snapshot::<SchemaRow>(ctx, self.schema_id.0).await
    }
    async fn summary(&self, s: &mut Summary<'_>) -> sqlx::Result<Option<String>> {
        Ok(Some(versioned::summary::<SchemaRow>("Update", s)))
    }
}

tool! {
    /// `delete_schema`.
    DeleteSchema {
        /// The schema's id.
        schema_id: AnyVersionId,
    } = Destructive "delete_schema",
    "Delete a schema {schema_id} with all its versions. Refused while prompts use it: delete or \
    re-point those prompts first."
}

impl TypedTool for DeleteSchema {
    const PROPOSABLE: bool = true;

    fn targets(&self) -> Vec<Target> {
        vec![SchemaRow::target(self.schema_id.0)]
    }
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Out {
        versioned::delete::<SchemaRow>(ctx, self.schema_id.0).await
    }
    async fn snapshot(&self, ctx: &mut ToolCtx<'_>) -> Out {
        versioned::delete_snapshot::<SchemaRow>(ctx, self.schema_id.0).await
    }
    async fn summary(&self, s: &mut Summary<'_>) -> sqlx::Result<Option<String>> {
        Ok(Some(versioned::summary::<SchemaRow>("Delete", s)))
    }
}
