//! The forms of a schema a model writes, turned into the one shape agentd stores: OpenAI's strict
//! structured-output `response_format` (`{"type": "json_schema", "json_schema": {"name",
//! "strict": true, "schema": {…}}}`).
//!
//! Small models rarely write that nested shape right (a 0.5B model sent `"response_format":
//! "json_schema"`, a bare JSON Schema, or only the properties map), but they write the shape of the
//! answer they want easily. So `create_schema` also takes `fields`, a compact map of field name to
//! type — `{"invoice_number": "string", "total": "number", "lines": [{"description": "string"}]}`
//! — and a `response_format` that is one of the unambiguous near-misses below is completed. Every
//! change is named in `notes`, which the tool returns to the model (nothing is changed silently);
//! the strict checker (`tools/strict.rs`) still validates the result and names what it cannot fix.

use serde_json::{Map, Value, json};

/// A `response_format` built or completed from what the model sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Built {
    pub response_format: Value,
    /// What was built or completed, one sentence each; empty when the input was already complete.
    pub notes: Vec<String>,
}

/// Why the compact `fields` form could not be read; the message starts with the path of the
/// offending part (`fields.lines[]: …`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldsError {
    #[error(
        "{0}: expected a non-empty object of field name → type, e.g. {{\"total\": \"number\"}}"
    )]
    Empty(String),
    #[error("{path}: field {key:?} appears twice")]
    Twice { path: String, key: String },
    #[error("{0}: a field needs a \"name\"")]
    NoName(String),
    #[error("{0}: a field is a name or {{\"name\", \"type\"}}")]
    NotAField(String),
    #[error("{0}: a list needs its item type, e.g. [\"string\"]")]
    NoItemType(String),
    #[error(
        "{0}: a field's type is a string such as \"string\" or \"number\", a list [type], or an object of fields"
    )]
    BadType(String),
}

pub use super::field_names::{schema_name, snake};

/// A strict `response_format` from the compact `fields` form: an object of field name → type
/// (`"string"`, `"number"`, `"integer"`, `"boolean"`, `"date"`; `[…]` for a list; `{…}` for a
/// nested object; or a property schema with `"type"`), or a list of `{"name", "type",
/// "description"}`. Every field may be null (a value the document lacks is null, not invented).
pub fn from_fields(name: &str, fields: &Value) -> Result<Built, FieldsError> {
    let mut notes = Vec::new();
    let schema = object_of(fields, "fields", &mut notes)?;
    notes.insert(
        0,
        "built a strict response_format from `fields` (every field required and nullable)".into(),
    );
    Ok(Built {
        response_format: wrap(name, schema),
        notes,
    })
}

/// `rf` completed when it is one of the unambiguous near-misses of the strict shape: a bare JSON
/// Schema (wrapped; its objects closed for strict mode), the `json_schema` object without its
/// envelope, a missing `type` or `name` (`strict` stays as written: it changes meaning), a map of fields where the schema belongs. Anything
/// else is returned unchanged for the checker to explain.
pub fn complete(name: &str, rf: &Value) -> Built {
    let mut notes = Vec::new();
    let Some(obj) = rf.as_object() else {
        return unchanged(rf);
    };
    let mut env = if obj.contains_key("json_schema") {
        obj.clone()
    } else if obj.contains_key("schema") {
        notes.push(
            "wrapped {name, strict, schema} in {\"type\": \"json_schema\", \"json_schema\": …}"
                .into(),
        );
        let mut m = Map::new();
        m.insert("json_schema".into(), rf.clone());
        m
    } else if is_json_schema(rf) {
        notes.push("wrapped the bare JSON Schema in {\"type\": \"json_schema\", \"json_schema\": {\"name\", \"strict\": true, \"schema\"}}".into());
        let mut out = wrap(name, rf.clone());
        if let Some(schema) = out.pointer_mut("/json_schema/schema") {
            close_objects(schema, "json_schema.schema", &mut notes);
        }
        return finish(out, notes);
    } else {
        // A map of field name → type (the compact form of `from_fields`), or nothing we know.
        return from_fields(name, rf).unwrap_or_else(|_| unchanged(rf));
    };
    if env.get("type").is_none() {
        env.insert("type".into(), json!("json_schema"));
        notes.push("added \"type\": \"json_schema\"".into());
    }
    let Some(js) = env.get_mut("json_schema").and_then(Value::as_object_mut) else {
        return unchanged(rf);
    };
    if js
        .get("name")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        js.insert("name".into(), json!(schema_name(name)));
        notes.push("added json_schema.name".into());
    }
    if let Some(schema) = js.get("schema")
        && !is_json_schema(schema)
        && schema.as_object().is_some_and(|m| !m.is_empty())
    {
        match object_of(schema, "json_schema.schema", &mut notes) {
            Ok(built) => {
                notes.push(
                    "json_schema.schema was a map of fields: made it an object schema".into(),
                );
                js.insert("schema".into(), built);
            }
            Err(_) => return unchanged(rf),
        }
    }
    // A schema the model wrote as a JSON Schema keeps its `required` and `additionalProperties`
    // as written: the checker names what strict mode needs (the model chose what is optional).
    finish(Value::Object(env), notes)
}

fn unchanged(rf: &Value) -> Built {
    Built {
        response_format: rf.clone(),
        notes: Vec::new(),
    }
}

fn finish(response_format: Value, notes: Vec<String>) -> Built {
    Built {
        response_format,
        notes,
    }
}

fn wrap(name: &str, schema: Value) -> Value {
    json!({"type": "json_schema", "json_schema": {
        "name": schema_name(name), "strict": true, "schema": schema}})
}

/// A JSON Schema object rather than a map of fields: it has `type` or `properties`.
fn is_json_schema(v: &Value) -> bool {
    v.get("properties").is_some_and(Value::is_object) || v.get("type").is_some_and(Value::is_string)
}

/// Strict mode: every object lists all its properties in `required` and sets
/// `additionalProperties: false`. Adds what is missing, noting it once per object path.
fn close_objects(node: &mut Value, path: &str, notes: &mut Vec<String>) {
    let Some(obj) = node.as_object_mut() else {
        return;
    };
    if let Some(props) = obj.get_mut("properties").and_then(Value::as_object_mut) {
        let keys: Vec<String> = props.keys().cloned().collect();
        for k in &keys {
            if let Some(p) = props.get_mut(k) {
                close_objects(p, &format!("{path}.properties.{k}"), notes);
            }
        }
        if obj.get("required").is_none() {
            obj.insert("required".into(), json!(keys));
            notes.push(format!("{path}: listed every property in `required` (strict mode; allow null where a value may be missing)"));
        }
        if obj.get("additionalProperties").is_none() {
            obj.insert("additionalProperties".into(), json!(false));
            notes.push(format!(
                "{path}: added additionalProperties: false (strict mode)"
            ));
        }
    }
    if let Some(items) = obj.get_mut("items") {
        close_objects(items, &format!("{path}.items"), notes);
    }
}

/// A strict object schema from a map (or list) of fields.
fn object_of(fields: &Value, path: &str, notes: &mut Vec<String>) -> Result<Value, FieldsError> {
    let pairs: Vec<(String, Value)> = match fields {
        Value::Object(m) if !m.is_empty() => {
            m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        }
        Value::Array(items) if !items.is_empty() => {
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                out.push(named_field(item, &format!("{path}[{i}]"))?);
            }
            out
        }
        _ => return Err(FieldsError::Empty(path.into())),
    };
    let mut props = Map::new();
    for (name, spec) in pairs {
        let key = schema_name(&name);
        if key != name {
            notes.push(format!("{path}: renamed field {name:?} to {key:?}"));
        }
        if props.contains_key(&key) {
            return Err(FieldsError::Twice {
                path: path.into(),
                key,
            });
        }
        let prop = property(&spec, &name, &format!("{path}.{key}"), notes)?;
        props.insert(key, prop);
    }
    let required: Vec<String> = props.keys().cloned().collect();
    Ok(
        json!({"type": "object", "properties": props, "required": required,
              "additionalProperties": false}),
    )
}

/// `{"name": "total", "type": "number", "description": …}` or a bare name (a string field).
fn named_field(item: &Value, path: &str) -> Result<(String, Value), FieldsError> {
    match item {
        Value::String(s) if !s.trim().is_empty() => Ok((s.clone(), json!("string"))),
        Value::Object(m) => {
            let name = m
                .get("name")
                .and_then(Value::as_str)
                .filter(|s| !s.trim().is_empty())
                .ok_or_else(|| FieldsError::NoName(path.into()))?;
            let mut spec = m.clone();
            spec.remove("name");
            if !spec.contains_key("type") {
                spec.insert("type".into(), json!("string"));
            }
            Ok((name.to_string(), Value::Object(spec)))
        }
        _ => Err(FieldsError::NotAField(path.into())),
    }
}

/// One property schema from a compact type.
fn property(
    spec: &Value,
    field: &str,
    path: &str,
    notes: &mut Vec<String>,
) -> Result<Value, FieldsError> {
    match spec {
        Value::String(t) => Ok(scalar(t, None, field, path, notes)),
        Value::Array(items) => {
            let item = items
                .first()
                .ok_or_else(|| FieldsError::NoItemType(path.into()))?;
            let items = property(item, field, &format!("{path}[]"), notes)?;
            Ok(json!({"type": ["array", "null"], "items": non_null(items)}))
        }
        Value::Object(m) => match m.get("type") {
            Some(Value::String(t)) if !matches!(t.as_str(), "object" | "array") => {
                let desc = m.get("description").and_then(Value::as_str);
                Ok(scalar(t, desc, field, path, notes))
            }
            Some(_) => {
                // A property schema already (object, array, or a type list): kept as written.
                let mut v = spec.clone();
                close_objects(&mut v, path, notes);
                Ok(v)
            }
            None => {
                let mut obj = object_of(spec, path, notes)?;
                obj["type"] = json!(["object", "null"]);
                Ok(obj)
            }
        },
        _ => Err(FieldsError::BadType(path.into())),
    }
}

/// Items of a list are never null themselves.
fn non_null(mut v: Value) -> Value {
    if let Some(Value::Array(ts)) = v.get("type").cloned() {
        let kept: Vec<Value> = ts.into_iter().filter(|t| t != "null").collect();
        if kept.len() == 1 {
            v["type"] = kept[0].clone();
        }
    }
    v
}

fn scalar(t: &str, desc: Option<&str>, field: &str, path: &str, notes: &mut Vec<String>) -> Value {
    let raw = t.trim().to_ascii_lowercase();
    let base = raw.trim_end_matches('?').trim_end_matches("|null").trim();
    let (kind, hint) = match base {
        "string" | "str" | "text" => ("string", None),
        "number" | "float" | "decimal" | "double" | "amount" | "money" | "currency_amount" => {
            ("number", None)
        }
        "integer" | "int" | "count" => ("integer", None),
        "boolean" | "bool" => ("boolean", None),
        "date" => ("string", Some("date as written")),
        "datetime" | "date-time" | "timestamp" => ("string", Some("date and time as written")),
        _ => {
            notes.push(format!(
                "{path}: {t:?} is not a type; made it a string field with that description"
            ));
            let d = desc.map(str::to_string).unwrap_or_else(|| t.to_string());
            return json!({"type": ["string", "null"], "description": d});
        }
    };
    let description = match (desc, hint) {
        (Some(d), _) => d.to_string(),
        (None, Some(h)) => format!("{} ({h})", field.replace('_', " ")),
        (None, None) => field.replace('_', " "),
    };
    json!({"type": [kind, "null"], "description": description})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::schemas::validate_response_format;

    fn strict_ok(rf: &Value) {
        if let Err(errors) = validate_response_format(rf) {
            panic!("{errors:?} in {rf}");
        }
    }

    /// The offline model's proposal of a table (agentd-llm's `offline`): its schema is strict,
    /// and the compact form of its fields builds a schema the same extraction fills.
    #[test]
    fn the_offline_proposal_of_a_table_is_strict_and_its_compact_form_is_filled_alike() {
        use crate::llm::offline::{extract, fields_arg, infer_fields, response_format};
        let text = "INVOICE\nDescription      Qty    Unit    Amount\nWidget           2      3.00    6.00\nGadget           1      4.50    4.50\n\nTotal: 10.50\n";
        let f = infer_fields(text);
        strict_ok(&response_format("invoice", &f));
        let built = from_fields("invoice", &fields_arg(&f)).expect("a valid fields argument");
        let v = extract(text, &built.response_format["json_schema"]["schema"]);
        assert_eq!(v["line_items"][1]["amount"], json!(4.5));
        assert_eq!(v["total"], json!(10.5));
    }

    #[test]
    fn compact_fields_become_a_strict_schema() {
        let b = from_fields(
            "Invoice",
            &json!({"invoice_number": "string", "Total Due": "number", "issued": "date",
                    "lines": [{"description": "string", "qty": "int"}],
                    "seller": {"name": "string", "vat_id": "string"}}),
        )
        .unwrap();
        strict_ok(&b.response_format);
        let s = &b.response_format["json_schema"]["schema"];
        assert_eq!(b.response_format["json_schema"]["name"], "invoice");
        assert_eq!(
            s["properties"]["total_due"]["type"],
            json!(["number", "null"])
        );
        assert_eq!(s["properties"]["lines"]["items"]["type"], "object");
        assert_eq!(
            s["properties"]["lines"]["items"]["properties"]["qty"]["type"],
            json!(["integer", "null"])
        );
        assert_eq!(s["properties"]["seller"]["type"], json!(["object", "null"]));
        assert!(
            b.notes
                .iter()
                .any(|n| n.contains("renamed field \"Total Due\""))
        );
    }

    #[test]
    fn a_list_of_named_fields_is_accepted() {
        let b = from_fields(
            "Receipt",
            &json!([{"name": "total", "type": "number", "description": "Total paid"}, "merchant"]),
        )
        .unwrap();
        strict_ok(&b.response_format);
        let p = &b.response_format["json_schema"]["schema"]["properties"];
        assert_eq!(p["total"]["description"], "Total paid");
        assert_eq!(p["merchant"]["type"], json!(["string", "null"]));
    }

    #[test]
    fn empty_or_malformed_fields_are_explained() {
        assert!(
            from_fields("x", &json!({}))
                .unwrap_err()
                .to_string()
                .contains("non-empty object")
        );
        assert!(
            from_fields("x", &json!({"a": 3}))
                .unwrap_err()
                .to_string()
                .contains("fields.a")
        );
        assert!(
            from_fields("x", &json!([{"type": "string"}]))
                .unwrap_err()
                .to_string()
                .contains("\"name\"")
        );
        assert!(
            from_fields("x", &json!({"a": []}))
                .unwrap_err()
                .to_string()
                .contains("item type")
        );
    }

    #[test]
    fn fields_errors_name_the_path() {
        let e = |fields: Value| from_fields("x", &fields).unwrap_err().to_string();
        assert_eq!(
            e(json!({})),
            "fields: expected a non-empty object of field name → type, e.g. {\"total\": \"number\"}"
        );
        assert_eq!(
            e(json!([{"name": "a b"}, {"name": "a_b"}])),
            "fields: field \"a_b\" appears twice"
        );
        assert_eq!(e(json!([{}])), "fields[0]: a field needs a \"name\"");
        assert_eq!(
            e(json!([3])),
            "fields[0]: a field is a name or {\"name\", \"type\"}"
        );
        assert_eq!(
            e(json!({"lines": []})),
            "fields.lines: a list needs its item type, e.g. [\"string\"]"
        );
        assert_eq!(
            e(json!({"a": 3})),
            "fields.a: a field's type is a string such as \"string\" or \"number\", a list \
             [type], or an object of fields"
        );
    }

    #[test]
    fn a_bare_json_schema_is_wrapped() {
        let b = complete(
            "Lab report",
            &json!({"type": "object", "properties": {"patient": {"type": "string"}}}),
        );
        strict_ok(&b.response_format);
        assert_eq!(b.response_format["json_schema"]["name"], "lab_report");
        assert!(
            b.notes
                .iter()
                .any(|n| n.contains("wrapped the bare JSON Schema"))
        );
        assert!(b.notes.iter().any(|n| n.contains("required")));
    }

    #[test]
    fn a_properties_map_and_a_missing_envelope_are_completed() {
        let b = complete(
            "Invoice",
            &json!({"json_schema": {"strict": true, "schema": {"InvoiceNumber": {"type": "string"},
                                                "Total": {"type": "number"}}}}),
        );
        strict_ok(&b.response_format);
        assert_eq!(b.response_format["type"], "json_schema");
        let p = &b.response_format["json_schema"]["schema"]["properties"];
        assert!(p.get("invoicenumber").is_some(), "{p}");
    }

    #[test]
    fn a_complete_strict_schema_is_left_alone() {
        let rf = json!({"type": "json_schema", "json_schema": {"name": "x", "strict": true,
            "schema": {"type": "object", "properties": {"a": {"type": "string"}},
                       "required": ["a"], "additionalProperties": false}}});
        let b = complete("X", &rf);
        assert_eq!(b.response_format, rf);
        assert!(b.notes.is_empty());
    }

    #[test]
    fn a_map_of_fields_as_response_format_is_built() {
        let b = complete(
            "Payslip",
            &json!({"employee": "string", "net_pay": "number"}),
        );
        strict_ok(&b.response_format);
        assert!(b.notes[0].contains("from `fields`"));
    }

    #[test]
    fn what_is_not_a_near_miss_is_returned_unchanged() {
        for rf in [json!("json_schema"), json!({"foo": 1}), json!([1, 2])] {
            let b = complete("X", &rf);
            assert_eq!(b.response_format, rf);
            assert!(b.notes.is_empty());
        }
    }
}
