//! The checks every `response_format` goes through before it is stored or sent
//! ([`validate_response_format`]) and every extraction result goes through
//! ([`validate_instance`]). Pure functions: the unit tests are below.

use serde_json::{Value, json};

/// At most `max` characters of `s` (validator messages can quote whole values).
pub(crate) fn clip(s: String, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]), // checked: `i` is a char boundary of `s`
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
    if errors.len() == before
        && let Err(e) = jsonschema::draft7::new(schema)
    {
        errors.push(format!(
            "json_schema.schema cannot be compiled: {}",
            clip(e.to_string(), 200)
        ));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rf(schema: Value, strict: bool) -> Value {
        json!({"type": "json_schema",
               "json_schema": {"name": "x", "strict": strict, "schema": schema}})
    }

    #[test]
    fn a_valid_strict_response_format_passes() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "string"}},
                            "required": ["a"], "additionalProperties": false});
        assert_eq!(validate_response_format(&rf(schema, true)), Ok(()));
    }

    #[test]
    fn a_bare_schema_is_told_to_wrap_it() {
        let errors = validate_response_format(&json!({"type": "object"})).unwrap_err();
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].contains("looks like a bare JSON Schema"),
            "{errors:?}"
        );
    }

    #[test]
    fn every_problem_is_listed_with_its_path() {
        let v = json!({"type": "json_schema", "extra": 1,
                       "json_schema": {"name": "has space", "strict": "yes",
                                       "schema": {"type": "array"}}});
        let errors = validate_response_format(&v).unwrap_err();
        let all = errors.join("\n");
        for needle in [
            "response_format.extra: unknown key",
            "json_schema.name must match",
            "json_schema.strict must be true or false",
            "json_schema.schema.type must be \"object\"",
            "json_schema.schema.properties must be a non-empty object",
        ] {
            assert!(all.contains(needle), "{needle} missing from {all}");
        }
    }

    #[test]
    fn strict_rules_apply_only_under_strict() {
        let open = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(validate_response_format(&rf(open.clone(), false)), Ok(()));
        let errors = validate_response_format(&rf(open, true)).unwrap_err();
        assert!(
            errors.iter().any(|e| e.contains("additionalProperties")),
            "{errors:?}"
        );
    }

    #[test]
    fn instances_are_checked_with_their_path() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "number"}}});
        assert_eq!(validate_instance(&schema, &json!({"n": 1})), Ok(()));
        let errors = validate_instance(&schema, &json!({"n": "x"})).unwrap_err();
        assert!(errors[0].starts_with("/n: "), "{errors:?}");
        let long = "y".repeat(1000);
        let errors = validate_instance(&schema, &json!({"n": long})).unwrap_err();
        assert!(
            errors[0].chars().count() <= 301,
            "clipped: {}",
            errors[0].len()
        );
    }

    #[test]
    fn paths_read_as_dotted_names() {
        assert_eq!(at(""), "json_schema.schema");
        assert_eq!(at("/properties/a~1b"), "json_schema.schema.properties.a/b");
    }
}
