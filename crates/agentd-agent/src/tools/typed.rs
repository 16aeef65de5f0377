//! Typed tools, after rig's `Tool`: a tool is the Rust type its arguments are parsed into
//! (deriving `Deserialize` and `JsonSchema`) with a name, a description, a category and a
//! handler that takes the parsed arguments as `self`; [`Typed`] turns it into the object-safe
//! [`Tool`]. The parameter schema the model is offered is generated from that type
//! ([`parameters`]) and the arguments are parsed into it ([`parse`]) before the tool runs, so the
//! schema and the parser cannot drift and no tool reads `serde_json::Value` arguments by hand.
//!
//! The generated schema is the one agentd always sent: a closed Draft 7 object
//! (`additionalProperties: false` from `#[serde(deny_unknown_fields)]`) whose optional properties
//! are plain (not nullable) unless marked `#[schemars(extend("x-nullable" = true))]`; `required`
//! and `properties` are always present. Argument types with their own error text ([`Id`],
//! [`TagId`], [`AnyVersionId`]) say what is wrong with a value; [`parse`] prefixes the field path.

use super::summary::Summary;
use super::{Category, Declared, FollowUp, ModelCall, Target, Tool, ToolCtx, ToolError};
use crate::llm::CompletionResponse;
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer, Error as _};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::marker::PhantomData;
use uuid::Uuid;

/// What the model reads of a tool, declared with its argument type by [`tool!`].
pub trait Declaration {
    /// The name the model calls.
    const NAME: &'static str;
    /// What the model reads to decide when to call it.
    const DESCRIPTION: &'static str;
    /// Read, write or destructive.
    const CATEGORY: Category;
}

/// Declares a tool's argument type and what the model reads of the tool, once:
///
/// ```text
/// tool! {
///     /// `get_prompt`.
///     GetPrompt {
///         prompt_revid: String,
///     } = Read "get_prompt",
///     "Get one prompt version …"
/// }
/// ```
///
/// is the struct as written (fields, their docs and attributes), deriving `Deserialize` and
/// `JsonSchema` and closed to unknown fields, and its [`Declaration`]: the category, the name
/// the model calls and the description. The handler is the type's [`TypedTool`] impl.
macro_rules! tool {
    (
        $(#[$meta:meta])*
        $name:ident { $($field:tt)* } = $category:ident $tool:expr,
        $description:expr $(,)?
    ) => {
        $(#[$meta])*
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct $name { $($field)* }

        impl $crate::tools::typed::Declaration for $name {
            const NAME: &'static str = $tool;
            const DESCRIPTION: &'static str = $description;
            const CATEGORY: $crate::tools::Category = $crate::tools::Category::$category;
        }
    };
}
pub(crate) use tool;

/// Whether a successful call counts toward a run's refinements (`max_refinements`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refines {
    /// Never: reads, and writes that are not part of a proposal.
    Never,
    /// Every call: it revises what was proposed (a new version, a corrected field).
    Always,
    /// A call after an earlier success of the same tool in the run: a second schema, prompt
    /// or extraction redoes the first.
    Again,
}

impl Refines {
    /// Whether a successful call after `earlier_successes` successful calls of the same tool
    /// is a refinement.
    pub fn counts(self, earlier_successes: u32) -> bool {
        match self {
            Refines::Never => false,
            Refines::Always => true,
            Refines::Again => earlier_successes > 0,
        }
    }
}

/// What a proposable tool's snapshot is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Snapshot {
    /// The tool's own: a decision re-reads it through the tool.
    Own,
    /// The row of the document the call acts on ([`TypedTool::document`];
    /// `store::documents::snapshot`): an approval records the row's version and
    /// the sweep re-validates such approvals set-based.
    DocumentRow,
}

/// A tool, as its arguments: `self` is one call's parsed arguments. [`Typed`] makes it a
/// [`Tool`]; handlers are plain `async fn`s.
pub trait TypedTool: Declaration + DeserializeOwned + JsonSchema + Send + Sync + 'static {
    /// See [`Tool::calls_model`]: such a tool also implements [`Self::prepare`] and
    /// [`Self::apply`].
    const CALLS_MODEL: bool = false;
    /// Whether a call can be stored as a pending approval: such a tool also implements
    /// [`Self::snapshot`] (what the action depends on) and usually [`Self::summary`].
    const PROPOSABLE: bool = false;
    /// See [`Tool::refines`].
    const REFINES: Refines = Refines::Never;
    /// See [`Tool::snapshot_kind`].
    const SNAPSHOT: Snapshot = Snapshot::Own;

    /// The arguments a constrained call of this tool fills (see [`Tool::guided_parameters`]);
    /// `None`: all of them. [`guided`] builds the usual narrowing.
    fn guided_parameters(_candidates: &[String]) -> Option<Value> {
        None
    }
    /// The document a proposed call acts on (see [`Tool::document`]).
    fn document(&self) -> Option<Uuid> {
        None
    }
    /// The one-line summary of a proposed call a reviewer reads before the JSON
    /// (`approvals::summary`); `None`: the generic "Call `tool` with key=value, …".
    fn summary(
        &self,
        _s: &mut Summary<'_>,
    ) -> impl Future<Output = sqlx::Result<Option<String>>> + Send {
        async { Ok(None) }
    }
    /// Runs the tool; the result is the JSON the model reads.
    fn run(self, ctx: &mut ToolCtx<'_>) -> impl Future<Output = Result<Value, ToolError>> + Send;
    /// See [`Tool::targets`].
    fn targets(&self) -> Vec<Target> {
        Vec::new()
    }
    /// See [`Tool::follow_up`].
    fn follow_up(&self, _result: &Value) -> Option<FollowUp> {
        None
    }
    /// See [`Tool::snapshot`]; only called when [`Self::PROPOSABLE`].
    fn snapshot(
        &self,
        _ctx: &mut ToolCtx<'_>,
    ) -> impl Future<Output = Result<Value, ToolError>> + Send {
        async {
            Err(ToolError::Conflict(format!(
                "`{}` declares no snapshot",
                Self::NAME
            )))
        }
    }
    /// See [`Tool::prepare`]; only called when [`Self::CALLS_MODEL`].
    fn prepare(
        &self,
        _ctx: &mut ToolCtx<'_>,
    ) -> impl Future<Output = Result<ModelCall, ToolError>> + Send {
        async { Err(no_model::<Self>()) }
    }
    /// See [`Tool::apply`].
    fn apply(
        &self,
        _ctx: &mut ToolCtx<'_>,
        _state: &Value,
        _answer: &CompletionResponse,
    ) -> impl Future<Output = Result<Value, ToolError>> + Send {
        async { Err(no_model::<Self>()) }
    }
}

/// What a model phase of a tool that calls no model answers.
fn no_model<T: TypedTool>() -> ToolError {
    ToolError::Conflict(format!("`{}` does not call a model", T::NAME))
}

/// The [`Tool`] of a [`TypedTool`] `T`: parses the JSON arguments into `T` and runs it.
pub struct Typed<T>(PhantomData<fn() -> T>);

impl<T> Default for Typed<T> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

#[async_trait::async_trait]
impl<T: TypedTool> Tool for Typed<T> {
    fn name(&self) -> &'static str {
        T::NAME
    }
    fn description(&self) -> &'static str {
        T::DESCRIPTION
    }
    fn parameters(&self) -> Value {
        parameters::<T>()
    }
    fn guided_parameters(&self, candidates: &[String]) -> Value {
        T::guided_parameters(candidates).unwrap_or_else(parameters::<T>)
    }
    fn category(&self) -> Category {
        T::CATEGORY
    }
    async fn call(&self, ctx: &mut ToolCtx<'_>, args: Value) -> Result<Value, ToolError> {
        parse::<T>(&args)?.run(ctx).await
    }
    fn targets(&self, args: &Value) -> Vec<Target> {
        // Arguments that do not parse touch nothing: the call itself fails with the reason.
        parse::<T>(args).map(|a| a.targets()).unwrap_or_default()
    }
    fn calls_model(&self) -> bool {
        T::CALLS_MODEL
    }
    fn follow_up(&self, args: &Value, result: &Value) -> Option<FollowUp> {
        parse::<T>(args).ok()?.follow_up(result)
    }
    async fn prepare(&self, ctx: &mut ToolCtx<'_>, args: &Value) -> Declared<ModelCall> {
        declared(T::CALLS_MODEL, args, async |a: T| a.prepare(ctx).await).await
    }
    async fn apply(
        &self,
        ctx: &mut ToolCtx<'_>,
        args: &Value,
        (state, answer): (&Value, &CompletionResponse),
    ) -> Result<Value, ToolError> {
        parse::<T>(args)?.apply(ctx, state, answer).await
    }
    async fn snapshot(&self, ctx: &mut ToolCtx<'_>, args: &Value) -> Declared<Value> {
        declared(T::PROPOSABLE, args, async |a: T| a.snapshot(ctx).await).await
    }
    fn refines(&self) -> Refines {
        T::REFINES
    }
    fn snapshot_kind(&self) -> Snapshot {
        T::SNAPSHOT
    }
    fn document(&self, args: &Value) -> Option<Uuid> {
        parse::<T>(args).ok()?.document()
    }
    async fn summary(
        &self,
        conn: &mut sqlx::PgConnection,
        org_id: Uuid,
        args: &Value,
    ) -> sqlx::Result<Option<String>> {
        // Arguments that do not parse get the generic summary.
        let Ok(a) = parse::<T>(args) else {
            return Ok(None);
        };
        a.summary(&mut Summary::new(conn, org_id, args)).await
    }
}

/// `part` run on the parsed arguments when the tool declares it (`declared`); `None` when it
/// does not (a tool that calls no model, or cannot be proposed).
async fn declared<T: TypedTool, R>(
    declared: bool,
    args: &Value,
    part: impl AsyncFnOnce(T) -> Result<R, ToolError>,
) -> Declared<R> {
    if !declared {
        return None;
    }
    Some(match parse::<T>(args) {
        Ok(a) => part(a).await,
        Err(e) => Err(e),
    })
}

/// Reads `args` as `A`; a value that does not fit is an `Invalid` error naming its path
/// (`document_id must be a UUID (got "doc-1")`, `tag_ids[2] must be a tag id (UUID), …`).
pub fn parse<A: DeserializeOwned>(args: &Value) -> Result<A, ToolError> {
    serde_path_to_error::deserialize(args).map_err(|e| {
        let path = e.path().to_string();
        let msg = e.inner().to_string();
        ToolError::Invalid(if path == "." {
            msg
        } else if msg.starts_with("must ") {
            format!("{path} {msg}")
        } else {
            format!("{path}: {msg}")
        })
    })
}

/// The parameter schema of arguments `A`: Draft 7, inline, a closed object with `properties`
/// and `required` always present, optional properties not nullable unless marked `x-nullable`,
/// no titles and no integer formats (the schema the model reads stays short).
pub fn parameters<A: JsonSchema>() -> Value {
    let mut settings = SchemaSettings::draft07();
    settings.inline_subschemas = true;
    settings.meta_schema = None;
    let mut v = settings
        .into_generator()
        .into_root_schema_for::<A>()
        .to_value();
    if let Some(root) = v.as_object_mut() {
        root.remove("title");
        root.remove("description");
        root.entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        root.entry("required")
            .or_insert_with(|| Value::Array(Vec::new()));
        let required: Vec<Value> = root["required"].as_array().cloned().unwrap_or_default();
        if let Some(props) = root.get_mut("properties").and_then(Value::as_object_mut) {
            for (name, p) in props.iter_mut() {
                let nullable = p
                    .as_object_mut()
                    .and_then(|o| o.remove("x-nullable"))
                    .is_some();
                if !nullable && !required.contains(&Value::String(name.clone())) {
                    not_null(p);
                }
            }
        }
    }
    tidy(&mut v);
    v
}

/// `A`'s parameters with only the properties `keep`, all of them required: the arguments a
/// constrained call of a small model fills, without the optional ones it fills with noise (an
/// invented `model` or `tag_ids`).
pub fn guided<A: JsonSchema>(keep: &[&str]) -> Value {
    let mut v = parameters::<A>();
    if let Some(props) = v.get_mut("properties").and_then(Value::as_object_mut) {
        props.retain(|k, _| keep.contains(&k.as_str()));
    }
    v["required"] = Value::Array(keep.iter().map(|k| Value::String(k.to_string())).collect());
    v
}

/// An optional property is left out, not sent as null: `["string", "null"]` → `"string"`,
/// `anyOf: [X, {"type": "null"}]` → `X`.
fn not_null(p: &mut Value) {
    let Some(o) = p.as_object_mut() else { return };
    if let Some(Value::Array(types)) = o.get_mut("type") {
        types.retain(|t| t != "null");
        if types.len() == 1 {
            let t = types.remove(0);
            o.insert("type".into(), t);
        }
    }
    if let Some(Value::Array(values)) = o.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    let any_of = o.get("anyOf").and_then(Value::as_array).cloned();
    if let Some(alts) = any_of {
        let rest: Vec<&Value> = alts.iter().filter(|a| a["type"] != "null").collect();
        if let [only] = rest.as_slice() {
            let mut merged = only.as_object().cloned().unwrap_or_default();
            for (k, v) in o.iter().filter(|(k, _)| *k != "anyOf") {
                merged.insert(k.clone(), v.clone());
            }
            *o = merged;
        }
    }
}

/// Drops titles, `"default": null` and number formats; a doc comment's line breaks become
/// spaces.
fn tidy(v: &mut Value) {
    match v {
        Value::Object(o) => {
            o.remove("title");
            if o.get("default").is_some_and(Value::is_null) {
                o.remove("default");
            }
            if matches!(o.get("type"), Some(t) if t == "integer" || t == "number") {
                o.remove("format");
            }
            if let Some(Value::String(d)) = o.get_mut("description") {
                *d = d.replace('\n', " ");
            }
            for (k, child) in o.iter_mut() {
                match (k.as_str(), child) {
                    // Names of properties (one may be called "title"), each a schema.
                    ("properties", Value::Object(props)) => props.values_mut().for_each(tidy),
                    ("enum" | "const" | "required", _) => {}
                    (_, child) => tidy(child),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(tidy),
        _ => {}
    }
}

/// For `Option<Option<T>>` fields (with `#[serde(default)]`): absent is `None`, `null` is
/// `Some(None)` (e.g. "null clears it").
pub fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// The schema of a free-form JSON object (a property the tool reads as a whole).
pub fn any_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "object"})
}

/// An argument type read from one JSON value, with its own error text (after the field path).
trait FromArg: Sized {
    fn from_arg(v: Value) -> Result<Self, String>;
}

/// A UUID argument type `$t` (a string in the schema) read through its [`FromArg`].
macro_rules! uuid_arg {
    ($(#[$doc:meta])* $t:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $t(pub Uuid);

        impl JsonSchema for $t {
            fn inline_schema() -> bool {
                true
            }
            fn schema_name() -> Cow<'static, str> {
                stringify!($t).into()
            }
            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                json_schema!({"type": "string"})
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                Self::from_arg(Value::deserialize(d)?).map_err(D::Error::custom)
            }
        }
    };
}

uuid_arg! {
    /// A UUID argument. A malformed one: `<field> must be a UUID (got "doc-1")`.
    Id
}

uuid_arg! {
    /// A tag id in a list. A malformed one: `tag_ids[2] must be a tag id (UUID), got "x"`.
    TagId
}

uuid_arg! {
    /// The id of a versioned row (a schema or a prompt), tolerating a revid
    /// `"<id>:<version>"` whose version is ignored.
    AnyVersionId
}

impl FromArg for Id {
    fn from_arg(v: Value) -> Result<Self, String> {
        match v {
            Value::String(s) => Uuid::parse_str(&s)
                .map(Id)
                .map_err(|_| format!("must be a UUID (got {s:?})")),
            other => Err(format!("must be a UUID string (got {other})")),
        }
    }
}

impl Id {
    /// The UUID of an optional id.
    pub fn uuid(id: Option<Id>) -> Option<Uuid> {
        id.map(|Id(u)| u)
    }
}

impl FromArg for TagId {
    fn from_arg(v: Value) -> Result<Self, String> {
        v.as_str()
            .and_then(|s| Uuid::parse_str(s).ok())
            .map(TagId)
            .ok_or_else(|| format!("must be a tag id (UUID), got {v}"))
    }
}

impl FromArg for AnyVersionId {
    fn from_arg(v: Value) -> Result<Self, String> {
        match v {
            Value::String(s) if s.contains(':') => super::split_revid(&s)
                .map(|(id, _)| AnyVersionId(id))
                .ok_or_else(|| super::revid_problem(&s)),
            other => Id::from_arg(other).map(|Id(id)| AnyVersionId(id)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Example {
        /// The document's id;
        /// defaults to the run's.
        document_id: Option<Id>,
        #[schemars(length(max = 100))]
        tag_ids: Option<Vec<TagId>>,
        #[schemars(range(min = 1))]
        page: Option<i32>,
        #[serde(default, deserialize_with = "nullable")]
        #[schemars(with = "Option<String>", extend("x-nullable" = true))]
        model: Option<Option<String>>,
        name: String,
    }

    #[test]
    fn schema_is_closed_plain_and_short() {
        assert_eq!(
            parameters::<Example>(),
            json!({
                "type": "object",
                "properties": {
                    "document_id": {"type": "string",
                                    "description": "The document's id; defaults to the run's."},
                    "tag_ids": {"type": "array", "items": {"type": "string"}, "maxItems": 100},
                    "page": {"type": "integer", "minimum": 1},
                    "model": {"type": ["string", "null"]},
                    "name": {"type": "string"},
                },
                "required": ["name"],
                "additionalProperties": false,
            })
        );
    }

    #[test]
    fn parse_errors_name_the_path() {
        let e = parse::<Example>(&json!({"name": "x", "document_id": "doc-1"})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid arguments: document_id must be a UUID (got \"doc-1\")"
        );
        let id = Uuid::new_v4();
        let e = parse::<Example>(&json!({"name": "x", "tag_ids": [id, "t"]})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid arguments: tag_ids[1] must be a tag id (UUID), got \"t\""
        );
        let ok: Example = parse(&json!({"name": "x", "tag_ids": [id], "model": null})).unwrap();
        assert_eq!(ok.tag_ids, Some(vec![TagId(id)]));
        assert_eq!(ok.model, Some(None));
    }

    #[test]
    fn any_version_id_takes_a_revid() {
        let id = Uuid::new_v4();
        let v: AnyVersionId = serde_json::from_value(json!(format!("{id}:3"))).unwrap();
        assert_eq!(v.0, id);
        let e = serde_json::from_value::<AnyVersionId>(json!("abc:x")).unwrap_err();
        assert!(e.to_string().contains("must be \"<id>:<version>\""), "{e}");
        let e = serde_json::from_value::<AnyVersionId>(json!("abc")).unwrap_err();
        assert!(
            e.to_string().contains("must be a UUID (got \"abc\")"),
            "{e}"
        );
    }
}
