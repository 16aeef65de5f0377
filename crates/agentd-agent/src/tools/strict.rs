//! OpenAI strict structured-output rules, checked before a schema is stored or offered, and the
//! transform that makes tool parameter schemas strict-compatible (`llm.strict_tools`).
//!
//! The rules, from OpenAI's Structured Outputs guide, "Supported schemas"
//! (platform.openai.com/docs/guides/structured-outputs#supported-schemas):
//! - Supported keywords: `type` (string, number, integer, boolean, object, array, null, or a
//!   list of them), `enum`, `const`, `anyOf`, `$ref` with `$defs`/`definitions`, `description`
//!   and `title`; for strings `pattern` and `format` (date-time, time, date, duration, email,
//!   hostname, ipv4, ipv6, uuid); for numbers `minimum`, `maximum`, `exclusiveMinimum`,
//!   `exclusiveMaximum`, `multipleOf`; for arrays `items`, `minItems`, `maxItems`; for objects
//!   `properties`, `required`, `additionalProperties`. Everything else (`allOf`, `oneOf`, `not`,
//!   `if`/`then`/`else`, `default`, `minLength`/`maxLength`, `uniqueItems`, `patternProperties`,
//!   `minProperties`, …) is refused by the API.
//! - Every object sets `"additionalProperties": false` and lists every property in `required`
//!   (an optional field is a required one whose type admits `null`).
//! - The root is an object, not `anyOf`.
//! - Limits: at most 5,000 object properties in total and 10 levels of nesting; at most 120,000
//!   characters across all property names, definition names, enum and const values; at most
//!   1,000 enum values in total, and a string enum of more than 250 values at most 15,000
//!   characters. (At launch, August 2024, the guide said 100 properties and 5 levels; the API's
//!   error reads "6 levels of nesting exceeds limit of 5" for such schemas then. The figures
//!   here are the current guide's.)
//!
//! Nesting counts object schemas on the way down (the root object is level 1; arrays and `anyOf`
//! do not add a level of their own).

use serde_json::{Map, Value, json};

/// Most object properties in one schema.
pub const MAX_PROPERTIES: usize = 5_000;
/// Most levels of nested objects (the root object is level 1).
pub const MAX_NESTING: usize = 10;
/// Most characters across property names, definition names, enum and const values.
pub const MAX_NAME_CHARS: usize = 120_000;
/// Most enum values across the schema.
pub const MAX_ENUM_VALUES: usize = 1_000;
/// A string enum with more values than this ...
pub const LARGE_ENUM: usize = 250;
/// ... may hold at most this many characters.
pub const MAX_LARGE_ENUM_CHARS: usize = 15_000;

const JSON_TYPES: [&str; 7] = [
    "string", "number", "integer", "boolean", "object", "array", "null",
];

const FORMATS: [&str; 9] = [
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// Keywords OpenAI's strict mode accepts, on any subschema.
const SUPPORTED: [&str; 22] = [
    "type",
    "description",
    "title",
    "enum",
    "const",
    "anyOf",
    "$ref",
    "$defs",
    "definitions",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
];

/// What the transform drops from tool parameter schemas (agentd still validates them itself).
const DROPPED_FOR_TOOLS: [&str; 9] = [
    "minLength",
    "maxLength",
    "default",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "examples",
    "$schema",
    "$comment",
];

/// The fix to suggest for an unsupported keyword.
fn keyword_fix(k: &str) -> &'static str {
    match k {
        "oneOf" => "use \"anyOf\" instead",
        "allOf" => "merge the subschemas into one object",
        "minLength" | "maxLength" | "uniqueItems" | "minProperties" | "maxProperties" => {
            "remove it and say the constraint in \"description\""
        }
        "default" => "remove it; say the default in \"description\"",
        "nullable" => "use \"type\": [\"<type>\", \"null\"] instead",
        _ => "remove it",
    }
}

fn type_names(obj: &Map<String, Value>) -> Vec<&str> {
    match obj.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// Counts for the size limits.
#[derive(Default)]
struct Sizes {
    properties: usize,
    name_chars: usize,
    enum_values: usize,
    max_depth: usize,
    deepest: String,
}

/// Checks `schema` (rooted at `path`, e.g. `json_schema.schema`): unknown type names always;
/// under `strict`, OpenAI's strict rules and limits too. Every message names the path and the
/// fix.
pub fn check_schema(schema: &Value, path: &str, strict: bool) -> Vec<String> {
    let mut errors = Vec::new();
    let mut sizes = Sizes::default();
    if strict && schema.get("anyOf").is_some() && schema.get("type").is_none() {
        errors.push(format!(
            "{path}: the root must be an object (\"type\": \"object\"), not anyOf; put the \
             alternatives under a property"
        ));
    }
    walk(schema, path, strict, 0, &mut sizes, &mut errors);
    if strict {
        limits(&sizes, path, &mut errors);
    }
    errors
}

fn limits(s: &Sizes, path: &str, errors: &mut Vec<String>) {
    if s.max_depth > MAX_NESTING {
        errors.push(format!(
            "{}: {} levels of nested objects exceed OpenAI's limit of {MAX_NESTING}; flatten \
             the schema (move inner fields up a level)",
            s.deepest, s.max_depth
        ));
    }
    if s.properties > MAX_PROPERTIES {
        errors.push(format!(
            "{path}: {} object properties in total exceed OpenAI's limit of {MAX_PROPERTIES}; \
             split it into several schemas",
            s.properties
        ));
    }
    if s.enum_values > MAX_ENUM_VALUES {
        errors.push(format!(
            "{path}: {} enum values in total exceed OpenAI's limit of {MAX_ENUM_VALUES}; use \
             plain strings for the long lists",
            s.enum_values
        ));
    }
    if s.name_chars > MAX_NAME_CHARS {
        errors.push(format!(
            "{path}: property names, definition names and enum/const values add up to {} \
             characters, over OpenAI's limit of {MAX_NAME_CHARS}; shorten them",
            s.name_chars
        ));
    }
}

fn walk(node: &Value, path: &str, strict: bool, depth: usize, s: &mut Sizes, e: &mut Vec<String>) {
    let Some(obj) = node.as_object() else {
        if strict && !node.is_boolean() {
            e.push(format!("{path}: must be a JSON Schema object (got {node})"));
        }
        return;
    };
    let types = type_names(obj);
    for t in types.iter().filter(|t| !JSON_TYPES.contains(t)) {
        e.push(format!(
            "{path}.type: {t:?} is not a JSON Schema type; use one of {}",
            JSON_TYPES.join(", ")
        ));
    }
    let properties = obj.get("properties").and_then(Value::as_object);
    let is_object = types.contains(&"object") || properties.is_some();
    let depth = if is_object { depth + 1 } else { depth };
    if strict {
        if depth > s.max_depth {
            s.max_depth = depth;
            s.deepest = path.to_string();
        }
        strict_node(obj, path, is_object, properties, s, e);
    }
    if let Some(p) = properties {
        for (k, sub) in p {
            walk(sub, &format!("{path}.properties.{k}"), strict, depth, s, e);
        }
    }
    match obj.get("items") {
        Some(items @ Value::Object(_)) => {
            walk(items, &format!("{path}.items"), strict, depth, s, e)
        }
        Some(Value::Array(a)) => {
            if strict {
                e.push(format!(
                    "{path}.items: a list of schemas (tuple) is not supported; give one schema"
                ));
            }
            for (i, sub) in a.iter().enumerate() {
                walk(sub, &format!("{path}.items[{i}]"), strict, depth, s, e);
            }
        }
        _ => {}
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(a)) = obj.get(key) {
            for (i, sub) in a.iter().enumerate() {
                walk(sub, &format!("{path}.{key}[{i}]"), strict, depth, s, e);
            }
        }
    }
    for key in ["definitions", "$defs"] {
        if let Some(Value::Object(defs)) = obj.get(key) {
            for (k, sub) in defs {
                if strict {
                    s.name_chars += k.chars().count();
                }
                // A definition is used where it is referenced: count its depth from the root.
                walk(sub, &format!("{path}.{key}.{k}"), strict, 0, s, e);
            }
        }
    }
}

/// OpenAI's rules for one subschema (the recursion is in `walk`).
fn strict_node(
    obj: &Map<String, Value>,
    path: &str,
    is_object: bool,
    properties: Option<&Map<String, Value>>,
    s: &mut Sizes,
    e: &mut Vec<String>,
) {
    for k in obj.keys().filter(|k| !SUPPORTED.contains(&k.as_str())) {
        e.push(format!(
            "{path}.{k}: \"{k}\" is not supported by OpenAI strict structured outputs; {}",
            keyword_fix(k)
        ));
    }
    if let Some(f) = obj.get("format").and_then(Value::as_str)
        && !FORMATS.contains(&f)
    {
        e.push(format!(
            "{path}.format: {f:?} is not a supported format; use one of {} or remove it",
            FORMATS.join(", ")
        ));
    }
    if let Some(r) = obj.get("$ref").and_then(Value::as_str)
        && !r.starts_with('#')
    {
        e.push(format!(
            "{path}.$ref: {r:?} must point inside this schema (\"#/$defs/<name>\")"
        ));
    }
    if let Some(c) = obj.get("const") {
        s.name_chars += c.as_str().map_or(0, |c| c.chars().count());
    }
    if let Some(Value::Array(values)) = obj.get("enum") {
        s.enum_values += values.len();
        let chars: usize = values
            .iter()
            .filter_map(Value::as_str)
            .map(|v| v.chars().count())
            .sum();
        s.name_chars += chars;
        if values.len() > LARGE_ENUM && chars > MAX_LARGE_ENUM_CHARS {
            e.push(format!(
                "{path}.enum: {} values of {chars} characters in total; OpenAI allows at most \
                 {MAX_LARGE_ENUM_CHARS} characters in an enum of more than {LARGE_ENUM} values; \
                 shorten the values or use a plain string",
                values.len()
            ));
        }
    }
    if !is_object {
        return;
    }
    if obj.get("additionalProperties") != Some(&Value::Bool(false)) {
        e.push(format!(
            "{path}: strict mode requires \"additionalProperties\": false on every object; add it"
        ));
    }
    let props = properties.map(|p| p.keys().map(String::as_str).collect::<Vec<_>>());
    let props = props.unwrap_or_default();
    s.properties += props.len();
    s.name_chars += props.iter().map(|p| p.chars().count()).sum::<usize>();
    if properties.is_none() {
        e.push(format!(
            "{path}: an object needs \"properties\" in strict mode (free-form objects are not \
             supported); list its fields"
        ));
    }
    let required: Vec<&str> = match obj.get("required") {
        None => Vec::new(),
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        Some(other) => {
            e.push(format!(
                "{path}.required must be a list of property names (got {other})"
            ));
            Vec::new()
        }
    };
    let missing: Vec<&str> = props
        .iter()
        .copied()
        .filter(|k| !required.contains(k))
        .collect();
    if !missing.is_empty() {
        e.push(format!(
            "{path}: strict mode requires every property in \"required\" (missing: {}); make \
             an optional field nullable instead, e.g. \"type\": [\"string\", \"null\"]",
            missing.join(", ")
        ));
    }
    for r in required.iter().filter(|r| !props.contains(r)) {
        e.push(format!(
            "{path}.required: {r:?} is not a property; remove it or add the property"
        ));
    }
}

/// A tool parameter schema made strict-compatible: every property required, the optional ones
/// nullable; every object closed; free-form objects (no `properties`) become JSON-encoded
/// strings (strict mode cannot describe them); keywords strict mode refuses are dropped
/// (agentd still validates arguments against the original schema).
pub fn strict_tool_parameters(schema: &Value) -> Value {
    transform(schema)
}

fn transform(node: &Value) -> Value {
    let Some(obj) = node.as_object() else {
        return node.clone();
    };
    let types = type_names(obj);
    let properties = obj.get("properties").and_then(Value::as_object);
    if types.contains(&"object") && properties.is_none() {
        let description = obj
            .get("description")
            .and_then(Value::as_str)
            .map(|d| format!("{d} (a JSON object, encoded as a string)"))
            .unwrap_or_else(|| "A JSON object, encoded as a string.".into());
        return json!({"type": "string", "description": description});
    }
    let mut out = Map::new();
    for (k, v) in obj {
        if DROPPED_FOR_TOOLS.contains(&k.as_str()) {
            continue;
        }
        let v = match k.as_str() {
            "items" => transform(v),
            "anyOf" => Value::Array(
                v.as_array()
                    .map(|a| a.iter().map(transform).collect())
                    .unwrap_or_default(),
            ),
            "properties" | "required" | "additionalProperties" => continue,
            _ => v.clone(),
        };
        out.insert(k.clone(), v);
    }
    if let Some(p) = properties {
        let required: Vec<&str> = obj
            .get("required")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut props = Map::new();
        for (k, sub) in p {
            let t = transform(sub);
            props.insert(
                k.clone(),
                if required.contains(&k.as_str()) {
                    t
                } else {
                    nullable(t)
                },
            );
        }
        out.insert(
            "required".into(),
            Value::Array(props.keys().cloned().map(Value::String).collect()),
        );
        out.insert("properties".into(), Value::Object(props));
        out.insert("additionalProperties".into(), Value::Bool(false));
    }
    Value::Object(out)
}

/// `schema` admitting `null` as well.
fn nullable(mut schema: Value) -> Value {
    let Some(obj) = schema.as_object_mut() else {
        return schema;
    };
    match obj.get_mut("type") {
        Some(Value::String(t)) => {
            let t = t.clone();
            if t != "null" {
                obj.insert("type".into(), json!([t, "null"]));
            }
        }
        Some(Value::Array(a)) => {
            if !a.contains(&json!("null")) {
                a.push(json!("null"));
            }
        }
        _ => {
            if let Some(Value::Array(a)) = obj.get_mut("anyOf") {
                if !a.iter().any(|b| b.get("type") == Some(&json!("null"))) {
                    a.push(json!({"type": "null"}));
                }
                return schema;
            }
            return json!({"anyOf": [schema, {"type": "null"}]});
        }
    }
    if let Some(Value::Array(values)) = obj.get_mut("enum")
        && !values.contains(&Value::Null)
    {
        values.push(Value::Null);
    }
    schema
}

/// Arguments as the handlers expect them, from arguments written against the strict form:
/// `null` for a property the original schema does not require means absent (always — a model
/// may send it without strict mode too); with `strict`, a JSON string where the original wants
/// a free-form object is decoded. Anything else is left for validation to report.
pub fn args_from_strict(original: &Value, args: Value, strict: bool) -> Value {
    let Value::Object(mut map) = args else {
        return args;
    };
    let Some(props) = original.get("properties").and_then(Value::as_object) else {
        return Value::Object(map);
    };
    let required: Vec<&str> = original
        .get("required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (k, sub) in props {
        let Some(v) = map.remove(k) else { continue };
        if v.is_null() && !required.contains(&k.as_str()) {
            continue;
        }
        // A free-form object (or `["object", …]`, e.g. create_schema's `fields`), which the
        // strict form offers as a JSON string.
        let types: Vec<&str> = match sub.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let free_object = types.contains(&"object") && sub.get("properties").is_none();
        let v = match v {
            Value::String(s) if strict && free_object => match serde_json::from_str::<Value>(&s) {
                Ok(decoded @ Value::Object(_)) => decoded,
                Ok(decoded @ Value::Array(_)) if types.contains(&"array") => decoded,
                _ => Value::String(s),
            },
            Value::Object(_) if sub.get("properties").is_some() => args_from_strict(sub, v, strict),
            Value::Array(items)
                if sub
                    .get("items")
                    .is_some_and(|i| i.get("properties").is_some()) =>
            {
                Value::Array(
                    items
                        .into_iter()
                        .map(|i| args_from_strict(&sub["items"], i, strict))
                        .collect(),
                )
            }
            v => v,
        };
        map.insert(k.clone(), v);
    }
    Value::Object(map)
}

#[cfg(test)]
mod tests;
