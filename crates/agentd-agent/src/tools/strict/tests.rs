//! Unit tests of the strict checker and the tool-parameter transform.

use super::*;
use serde_json::json;

fn ok(schema: Value) {
    let e = check_schema(&schema, "s", true);
    assert!(e.is_empty(), "{e:?}");
}

fn errs(schema: Value) -> String {
    check_schema(&schema, "s", true).join("\n")
}

fn closed(props: Value) -> Value {
    let names: Vec<String> = props.as_object().unwrap().keys().cloned().collect();
    json!({"type": "object", "properties": props, "required": names, "additionalProperties": false})
}

#[test]
fn a_typical_extraction_schema_passes() {
    ok(closed(json!({
        "invoice_number": {"type": "string", "description": "as printed"},
        "total": {"type": ["number", "null"], "minimum": 0},
        "currency": {"type": "string", "enum": ["EUR", "GBP"]},
        "issued": {"type": "string", "format": "date"},
        "lines": {"type": "array", "maxItems": 500, "items": closed(json!({
            "sku": {"type": "string", "pattern": "^[A-Z]+-\\d+$"},
            "qty": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        }))},
        "ref": {"$ref": "#/$defs/party"},
    })));
}

#[test]
fn each_rule_names_the_path_and_the_fix() {
    let e =
        errs(json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": []}));
    assert!(
        e.contains(
            "s: strict mode requires \"additionalProperties\": false on every object; add it"
        ),
        "{e}"
    );
    assert!(
        e.contains("(missing: a); make an optional field nullable"),
        "{e}"
    );
    let e = errs(closed(
        json!({"a": {"type": "string", "minLength": 2, "default": "x"}}),
    ));
    assert!(
        e.contains("s.properties.a.minLength: \"minLength\" is not supported"),
        "{e}"
    );
    assert!(e.contains("say the constraint in \"description\""), "{e}");
    assert!(e.contains("s.properties.a.default:"), "{e}");
    let e = errs(closed(
        json!({"a": {"oneOf": [{"type": "string"}, {"type": "number"}]}}),
    ));
    assert!(e.contains("s.properties.a.oneOf: \"oneOf\" is not supported by OpenAI strict structured outputs; use \"anyOf\" instead"), "{e}");
    let e = errs(closed(json!({"a": {"type": "string", "format": "iban"}})));
    assert!(
        e.contains("s.properties.a.format: \"iban\" is not a supported format"),
        "{e}"
    );
    let e = errs(closed(json!({"a": {"type": "object"}})));
    assert!(
        e.contains("s.properties.a: an object needs \"properties\""),
        "{e}"
    );
    let mut bad = closed(json!({"a": {"type": "string"}}));
    bad["required"] = json!(["a", "b"]);
    assert!(errs(bad).contains("s.required: \"b\" is not a property"));
    let e = errs(json!({"anyOf": [closed(json!({"a": {"type": "string"}}))]}));
    assert!(e.contains("the root must be an object"), "{e}");
    let e = errs(closed(json!({"a": {"type": "strin"}})));
    assert!(
        e.contains("s.properties.a.type: \"strin\" is not a JSON Schema type"),
        "{e}"
    );
}

#[test]
fn nesting_beyond_ten_object_levels_is_refused_at_the_deepest_path() {
    let nest = |levels: usize| {
        let mut s = closed(json!({"leaf": {"type": "string"}}));
        for _ in 1..levels {
            s = closed(json!({"n": s}));
        }
        s
    };
    ok(nest(MAX_NESTING));
    let e = errs(nest(MAX_NESTING + 1));
    assert!(
        e.contains("11 levels of nested objects exceed OpenAI's limit of 10"),
        "{e}"
    );
    assert!(e.starts_with("s.properties.n.properties.n"), "{e}");
    // Arrays do not add a level of their own.
    let mut s = closed(json!({"leaf": {"type": "string"}}));
    for _ in 1..MAX_NESTING {
        s = closed(json!({"n": {"type": "array", "items": s}}));
    }
    ok(s);
}

#[test]
fn size_limits_count_properties_enums_and_characters() {
    let many: Map<String, Value> = (0..MAX_PROPERTIES + 1)
        .map(|i| (format!("f{i}"), json!({"type": "string"})))
        .collect();
    let e = errs(closed(Value::Object(many)));
    assert!(
        e.contains("5001 object properties in total exceed OpenAI's limit of 5000"),
        "{e}"
    );
    let values: Vec<String> = (0..600)
        .map(|i| format!("value-number-{i:04}-{}", "x".repeat(20)))
        .collect();
    let e = errs(closed(
        json!({"a": {"type": "string", "enum": values.clone()}, "b": {"type": "string", "enum": values}}),
    ));
    assert!(
        e.contains("1200 enum values in total exceed OpenAI's limit of 1000"),
        "{e}"
    );
    assert!(e.contains("s.properties.a.enum: 600 values of"), "{e}");
    let long = "y".repeat(MAX_NAME_CHARS + 1);
    let e = errs(closed(json!({"a": {"type": "string", "const": long}})));
    assert!(e.contains("over OpenAI's limit of 120000"), "{e}");
}

#[test]
fn non_strict_mode_only_checks_type_names() {
    let loose = json!({"type": "object", "properties": {"a": {"type": "string", "minLength": 1}, "b": {"type": "numbr"}}});
    let e = check_schema(&loose, "s", false);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("s.properties.b.type"));
}

#[test]
fn every_builtin_tool_becomes_strict_compatible() {
    let registry = crate::tools::builtin_registry();
    for name in registry.names() {
        let tool = registry.get(name).unwrap();
        let original = tool.parameters();
        let strict = strict_tool_parameters(&original);
        let e = check_schema(&strict, &format!("{name}.parameters"), true);
        assert!(e.is_empty(), "{name}: {e:?}\n{strict}");
        jsonschema::draft7::new(&strict).unwrap_or_else(|e| panic!("{name}: {e}"));
        // Same property names: nothing is lost, only typed for strict mode.
        assert_eq!(
            original
                .get("properties")
                .map(|p| p.as_object().unwrap().keys().collect::<Vec<_>>()),
            strict
                .get("properties")
                .map(|p| p.as_object().unwrap().keys().collect::<Vec<_>>()),
            "{name}"
        );
    }
}

#[test]
fn the_transform_makes_optional_fields_nullable_and_free_objects_strings() {
    let original = json!({"type": "object", "properties": {
        "id": {"type": "string", "minLength": 1},
        "limit": {"type": "integer"},
        "kind": {"type": "string", "enum": ["a", "b"]},
        "filter": {"type": "object", "description": "Any filter"},
        "opts": {"type": "object", "properties": {"deep": {"type": "boolean"}}},
    }, "required": ["id"], "additionalProperties": false});
    let s = strict_tool_parameters(&original);
    assert_eq!(
        s["required"],
        json!(["filter", "id", "kind", "limit", "opts"])
    );
    assert_eq!(s["properties"]["id"], json!({"type": "string"}));
    assert_eq!(s["properties"]["limit"]["type"], json!(["integer", "null"]));
    assert_eq!(s["properties"]["kind"]["enum"], json!(["a", "b", null]));
    assert_eq!(s["properties"]["filter"]["type"], json!(["string", "null"]));
    assert!(
        s["properties"]["filter"]["description"]
            .as_str()
            .unwrap()
            .contains("encoded as a string")
    );
    assert_eq!(
        s["properties"]["opts"]["properties"]["deep"]["type"],
        json!(["boolean", "null"])
    );
    assert_eq!(
        s["properties"]["opts"]["additionalProperties"],
        json!(false)
    );
    // What a strict model sends becomes what the handlers and the validator expect.
    let sent = json!({"id": "x", "limit": null, "kind": null, "filter": "{\"q\": 1}", "opts": {"deep": null}});
    let args = args_from_strict(&original, sent, true);
    assert_eq!(args, json!({"id": "x", "filter": {"q": 1}, "opts": {}}));
    let v = jsonschema::draft7::new(&original).unwrap();
    assert!(v.is_valid(&args));
    // Without strict mode a string stays a string (validation then says so); null still means absent.
    let args = args_from_strict(
        &original,
        json!({"id": "x", "filter": "{}", "limit": null}),
        false,
    );
    assert_eq!(args, json!({"id": "x", "filter": "{}"}));
    // A required property sent as null is kept, so validation reports it.
    assert_eq!(
        args_from_strict(&original, json!({"id": null}), true),
        json!({"id": null})
    );
}

#[test]
fn a_strict_registry_offers_strict_specs_and_reads_their_arguments() {
    use crate::tools::Registry;
    let plain = crate::tools::builtin_registry();
    let strict = crate::tools::builtin_registry().strict_tools(true);
    let allow = vec!["create_schema".to_string(), "list_documents".to_string()];
    for s in plain.specs(&allow) {
        assert!(!s.strict, "{}", s.name);
    }
    let specs = strict.specs(&allow);
    assert_eq!(specs.len(), 2);
    for s in &specs {
        assert!(s.strict, "{}", s.name);
        assert!(
            check_schema(&s.parameters, &s.name, true).is_empty(),
            "{}",
            s.name
        );
    }
    // create_schema's free-form response_format (optional: `fields` is the simple form) is
    // offered as a nullable JSON string and read back as the object the handler validates.
    assert_eq!(
        specs[0].parameters["properties"]["response_format"]["type"],
        json!(["string", "null"])
    );
    let rf = json!({"type": "json_schema", "json_schema": {"name": "x", "strict": true,
        "schema": closed(json!({"a": {"type": "string"}}))}});
    let raw = json!({"name": "X", "response_format": rf.to_string()}).to_string();
    let args = strict.prepare_args("create_schema", &raw).unwrap();
    assert_eq!(args["response_format"], rf);
    let tool = strict.get("create_schema").unwrap();
    Registry::validate(tool.as_ref(), &args).unwrap();
    // Without strict tools the loop's argument repair (before validation) decodes the same
    // string and says so; a string that is not JSON is left for the handler to explain.
    let repaired = crate::llm::repair::repair(&raw, &tool.parameters());
    let args: Value = serde_json::from_str(&repaired.raw).unwrap();
    assert_eq!(args["response_format"], rf);
    assert!(
        repaired.notes[0].contains("was a JSON string"),
        "{:?}",
        repaired.notes
    );
}
