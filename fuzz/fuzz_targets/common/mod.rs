//! Helpers shared by the targets.
#![allow(dead_code)]

use arbitrary::{Result, Unstructured};
use serde_json::{Map, Value};

/// Words the schema and tool code look for, so generated JSON meets them often.
const WORDS: &[&str] = &[
    "type",
    "object",
    "array",
    "string",
    "number",
    "integer",
    "boolean",
    "null",
    "date",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "anyOf",
    "enum",
    "const",
    "description",
    "name",
    "schema",
    "json_schema",
    "strict",
    "fields",
    "$ref",
    "$defs",
    "format",
    "pattern",
    "minimum",
    "default",
    "value",
    "arguments",
];

fn word(u: &mut Unstructured) -> Result<String> {
    Ok(if u.ratio(3, 4)? {
        (*u.choose(WORDS)?).to_string()
    } else {
        u.arbitrary()?
    })
}

/// A JSON value at most `depth` levels deep, from the fuzzer's bytes.
pub fn json(u: &mut Unstructured, depth: usize) -> Result<Value> {
    let pick: u8 = if depth == 0 {
        u.int_in_range(0..=4)?
    } else {
        u.int_in_range(0..=6)?
    };
    Ok(match pick {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => Value::from(u.arbitrary::<i64>()?),
        3 => serde_json::Number::from_f64(u.arbitrary()?).map_or(Value::Null, Value::Number),
        4 => Value::String(word(u)?),
        5 => {
            let n = u.int_in_range(0..=4)?;
            Value::Array((0..n).map(|_| json(u, depth - 1)).collect::<Result<_>>()?)
        }
        _ => {
            let n = u.int_in_range(0..=5)?;
            let mut m = Map::new();
            for _ in 0..n {
                m.insert(word(u)?, json(u, depth - 1)?);
            }
            Value::Object(m)
        }
    })
}

/// The fuzzer's bytes as JSON: parsed when the first byte is even (seeds are JSON text),
/// generated otherwise.
pub fn value(data: &[u8]) -> Option<Value> {
    let (&mode, rest) = data.split_first()?;
    if mode % 2 == 0 {
        serde_json::from_slice(rest).ok()
    } else {
        json(&mut Unstructured::new(rest), 8).ok()
    }
}
