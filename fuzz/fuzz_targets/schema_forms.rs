//! The `fields` schema form and the strict-schema checker, on any JSON:
//! - no panic in `from_fields`, `complete`, `validate_response_format`, `check_schema`,
//!   `strict_tool_parameters`, `args_from_strict`;
//! - a `response_format` built from the compact `fields` form passes the checker (unless it is
//!   past one of OpenAI's size limits, which the checker names), and an answer of all nulls
//!   validates against it (every field may be null);
//! - `complete` is idempotent: its result needs no further completion;
//! - a tool schema made strict passes the strict rules on closing objects and `required`.
#![no_main]

mod common;

use agentd::tools::schema_check::{validate_instance, validate_response_format};
use agentd::tools::schema_forms::{complete, from_fields};
use agentd::tools::strict::{args_from_strict, check_schema, strict_tool_parameters};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

/// A checker message about one of OpenAI's size limits rather than the shape.
fn about_limits(e: &str) -> bool {
    [
        "levels of nesting",
        "properties in total",
        "characters",
        "enum values",
    ]
    .iter()
    .any(|w| e.contains(w))
}

/// Only the compact forms (type names, lists, nested maps, `{"name", "type"}` items): a property
/// that is already a JSON Schema (`type` object, array, a list or not a string) is kept as
/// written, for the checker to judge.
fn compact_fields(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.values().all(compact_property),
        Value::Array(items) => items.iter().all(|i| match i {
            Value::Object(m) => scalar_type(m.get("type")),
            _ => true,
        }),
        _ => true,
    }
}

fn compact_property(v: &Value) -> bool {
    match v {
        Value::Array(items) => items.first().is_none_or(compact_property),
        Value::Object(m) if m.contains_key("type") => scalar_type(m.get("type")),
        Value::Object(m) => m.values().all(compact_property),
        _ => true,
    }
}

/// No `type`, or a type name that is not object or array.
fn scalar_type(t: Option<&Value>) -> bool {
    match t {
        None => true,
        Some(Value::String(t)) => t != "object" && t != "array",
        Some(_) => false,
    }
}

/// An instance of `schema` with every property null.
fn all_null(schema: &Value) -> Value {
    let props = schema["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    Value::Object(
        props
            .keys()
            .map(|k| (k.clone(), Value::Null))
            .collect::<Map<_, _>>(),
    )
}

fuzz_target!(|data: &[u8]| {
    let Some(v) = common::value(data) else {
        return;
    };
    let name = v["name"].as_str().unwrap_or("Invoice 2024 (scan).pdf");
    if let Ok(built) = from_fields(name, &v)
        && compact_fields(&v)
    {
        let rf = &built.response_format;
        if let Err(errors) = validate_response_format(rf) {
            assert!(
                errors.iter().all(|e| about_limits(e)),
                "built from fields {v} but refused: {errors:?}\n{rf}"
            );
        } else {
            let schema = &rf["json_schema"]["schema"];
            if let Err(e) = validate_instance(schema, &all_null(schema)) {
                panic!("all-null answer refused by {schema}: {e:?}");
            }
        }
    }
    let once = complete(name, &v);
    let twice = complete(name, &once.response_format);
    assert_eq!(
        twice.response_format, once.response_format,
        "complete is not idempotent on {v}: {:?} then {:?}",
        once.notes, twice.notes
    );
    let _ = validate_response_format(&v);
    for strict in [false, true] {
        let _ = check_schema(&v, "schema", strict);
    }
    let made = strict_tool_parameters(&v);
    // Tool schemas are agentd's own (generated from the argument types, without `$defs`): the
    // transform walks properties, items and anyOf.
    let text = v.to_string();
    if v["type"] == "object"
        && v["properties"].is_object()
        && !["$defs", "definitions", "$ref"]
            .iter()
            .any(|k| text.contains(k))
    {
        for e in check_schema(&made, "parameters", true) {
            assert!(
                !e.contains("strict mode requires"),
                "strict form of {v} is not closed: {e}\n{made}"
            );
        }
    }
    let args = v.get("arguments").cloned().unwrap_or(Value::Null);
    for strict in [false, true] {
        let _ = args_from_strict(&v, args.clone(), strict);
    }
});
