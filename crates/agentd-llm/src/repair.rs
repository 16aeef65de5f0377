//! Unambiguous repairs of a model's tool arguments, made before validation: a code fence around
//! the JSON, trailing commas, and a nested object or array sent as a JSON string where the tool's
//! schema wants the object or array. Nothing else is touched (no guessing of meaning); every
//! repair is named so the tool result can tell the model what was changed.

use serde_json::Value;

/// Arguments after repair.
#[derive(Debug, Clone, PartialEq)]
pub struct Repaired {
    /// The arguments to validate and run (the input when nothing was repaired).
    pub raw: String,
    /// What was changed, one sentence each; empty when nothing was.
    pub notes: Vec<String>,
}

/// Repairs `raw` against the tool's parameter `schema` (a JSON Schema object).
pub fn repair(raw: &str, schema: &Value) -> Repaired {
    let mut notes = Vec::new();
    let mut text = raw.trim().to_string();
    if let Some(inner) = strip_fence(&text) {
        notes.push("removed the code fence around the arguments".to_string());
        text = inner;
    }
    let mut value = serde_json::from_str::<Value>(&text).ok();
    if value.is_none() {
        let cleaned = strip_trailing_commas(&text);
        if cleaned != text
            && let Ok(v) = serde_json::from_str::<Value>(&cleaned)
        {
            notes.push("removed trailing commas".to_string());
            value = Some(v);
            text = cleaned;
        }
    }
    if value.is_none()
        && let Some(cut) = text.trim_end().strip_suffix(super::textcalls::CUT_MARK)
        && let Some(closed) = close_cut(cut.trim_end())
    {
        notes.push(
            "the arguments were cut off (the answer reached the output limit): they were closed \
             after the last complete value and what followed was dropped; check the result and \
             correct it if something is missing"
                .to_string(),
        );
        value = Some(closed);
    }
    let Some(mut value) = value else {
        return Repaired {
            raw: if notes.is_empty() {
                raw.to_string()
            } else {
                text
            },
            notes,
        };
    };
    // A tool that takes no arguments cannot be affected by any: a small model copies a JSON
    // Schema into the arguments of `help_schemas`; drop them rather than refuse the call.
    if schema["properties"]
        .as_object()
        .is_some_and(|p| p.is_empty())
        && value.as_object().is_some_and(|o| !o.is_empty())
    {
        notes.push("this tool takes no arguments; the ones sent were ignored".to_string());
        value = Value::Object(Default::default());
    }
    // Arguments the tool does not have (a small model adds `schema_revid` to create_schema):
    // ignored and named, so the call runs on the arguments it has; a missing or wrong one is
    // still refused by validation. Only where the schema closes its object.
    if schema["additionalProperties"] == Value::Bool(false)
        && let (Some(props), Some(obj)) = (schema["properties"].as_object(), value.as_object_mut())
        && !props.is_empty()
    {
        let unknown: Vec<String> = obj
            .keys()
            .filter(|k| !props.contains_key(*k))
            .cloned()
            .collect();
        if !unknown.is_empty() {
            for k in &unknown {
                obj.remove(k);
            }
            let known: Vec<&str> = props.keys().map(String::as_str).collect();
            notes.push(format!(
                "ignored argument(s) this tool does not have: {} (it takes {})",
                unknown.join(", "),
                known.join(", ")
            ));
        }
    }
    unstring(&mut value, schema, "", &mut notes);
    if notes.is_empty() {
        return Repaired {
            raw: raw.to_string(),
            notes,
        };
    }
    Repaired {
        raw: value.to_string(),
        notes,
    }
}

/// The body of a ```json … ``` (or bare ```) fence around the whole text.
fn strip_fence(t: &str) -> Option<String> {
    let rest = t.strip_prefix("```")?;
    let rest = rest
        .strip_prefix("json")
        .or_else(|| rest.strip_prefix("JSON"))
        .unwrap_or(rest);
    let body = rest.trim_end().strip_suffix("```")?;
    Some(body.trim().to_string())
}

/// How many cut points [`close_cut`] tries, the latest first.
const CUT_POINTS: usize = 8;

/// The deepest nesting [`close_cut`] follows: serde_json refuses deeper JSON anyway (its
/// recursion limit is 128), so the scan stops there and closes at an earlier cut point.
const MAX_DEPTH: usize = 128;

/// A JSON object cut off mid-way (a model at its output cap), closed after its last complete
/// member or element: `{"fields": {"a": "string", "b": "str` → `{"fields": {"a": "string"}}`.
/// `None` when `t` is not the start of an object or no cut point gives valid JSON.
///
/// The text is the model's: memory is bounded by the last [`CUT_POINTS`] cut points of at most
/// [`MAX_DEPTH`] open brackets each, time by one pass plus [`CUT_POINTS`] parses.
fn close_cut(t: &str) -> Option<Value> {
    if !t.starts_with('{') {
        return None;
    }
    // Cut points: before a `,` or after a `}`/`]` outside strings, with the open brackets there.
    let mut cuts: std::collections::VecDeque<(usize, Vec<u8>)> =
        std::collections::VecDeque::with_capacity(CUT_POINTS);
    let mut cut = |at: usize, open: &[u8]| {
        if cuts.len() == CUT_POINTS {
            cuts.pop_front();
        }
        cuts.push_back((at, open.to_vec()));
    };
    let mut stack: Vec<u8> = Vec::new();
    let (mut in_str, mut escaped) = (false, false);
    for (i, b) in t.bytes().enumerate() {
        if in_str {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' | b'[' if stack.len() == MAX_DEPTH => break,
            b'{' | b'[' => stack.push(b),
            b'}' | b']' => {
                stack.pop();
                if stack.is_empty() {
                    return None; // complete: not cut (or not JSON at all)
                }
                cut(i + 1, &stack);
            }
            b',' => cut(i, &stack),
            _ => {}
        }
    }
    for (at, open) in cuts.iter().rev() {
        // Cut points sit at ASCII bytes of `t`, so `get` always finds a char boundary.
        let mut s = t.get(..*at)?.trim_end().to_string();
        for b in open.iter().rev() {
            s.push(if *b == b'{' { '}' } else { ']' });
        }
        if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(&s) {
            return Some(v);
        }
    }
    None
}

/// `t` without commas that directly precede `}` or `]` (outside strings).
fn strip_trailing_commas(t: &str) -> String {
    let chars: Vec<char> = t.chars().collect();
    let mut out = String::with_capacity(t.len());
    let (mut in_str, mut escaped) = (false, false);
    for (i, &c) in chars.iter().enumerate() {
        if in_str {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_str = false;
            }
            continue;
        }
        if c == '"' {
            in_str = true;
        } else if c == ',' {
            let next = chars.iter().skip(i + 1).find(|c| !c.is_whitespace());
            if matches!(next, Some('}') | Some(']')) {
                continue;
            }
        }
        out.push(c);
    }
    out
}

/// The JSON types `schema` allows (`type` as a string or a list).
fn types(schema: &Value) -> Vec<&str> {
    match &schema["type"] {
        Value::String(s) => vec![s.as_str()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// Replaces strings holding JSON objects/arrays where the schema wants those (not strings).
fn unstring(v: &mut Value, schema: &Value, path: &str, notes: &mut Vec<String>) {
    let allowed = types(schema);
    // Where the schema also allows a string (create_schema's response_format, whose handler
    // explains a string that is not JSON), a string holding a JSON object or array is still
    // that object or array: no string argument of ours is JSON text.
    if let Value::String(s) = v
        && (allowed.contains(&"object") || allowed.contains(&"array"))
        && let Ok(parsed) = serde_json::from_str::<Value>(s.trim())
        && ((parsed.is_object() && allowed.contains(&"object"))
            || (parsed.is_array() && allowed.contains(&"array")))
    {
        let what = if parsed.is_object() {
            "an object"
        } else {
            "an array"
        };
        notes.push(format!(
            "`{}` was a JSON string; it was parsed as {what}",
            if path.is_empty() { "arguments" } else { path }
        ));
        *v = parsed;
    }
    match v {
        Value::Object(map) => {
            if let Some(props) = schema["properties"].as_object() {
                for (k, child) in map.iter_mut() {
                    if let Some(s) = props.get(k) {
                        let p = if path.is_empty() {
                            k.clone()
                        } else {
                            format!("{path}.{k}")
                        };
                        unstring(child, s, &p, notes);
                    }
                }
            }
        }
        Value::Array(items) if schema["items"].is_object() => {
            for (i, child) in items.iter_mut().enumerate() {
                unstring(child, &schema["items"], &format!("{path}[{i}]"), notes);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_cut_at_the_output_cap_are_closed_and_said_so() {
        // Qwen2.5-0.5B on llama.cpp (eval, 2026-11-23): a good field map that ran into
        // repeating one key until the output cap.
        let cut = format!(
            r#"{{"fields": {{"employee_name": "string", "net_pay": "number", "order_date": "string", "order_date": "string", "order_da{}"#,
            super::super::textcalls::CUT_MARK
        );
        let cut = cut.as_str();
        let r = repair(cut, &json!({"type": "object"}));
        let v: Value = serde_json::from_str(&r.raw).expect("closed");
        assert_eq!(
            v,
            json!({"fields": {"employee_name": "string", "net_pay": "number", "order_date": "string"}})
        );
        assert!(r.notes[0].contains("cut off"), "{:?}", r.notes);
        // A cut inside a nested list keeps the complete items.
        let r = repair(
            &format!(
                r#"{{"fields": {{"lines": [{{"sku": "string"}}, {{"sku": "str{}"#,
                super::super::textcalls::CUT_MARK
            ),
            &json!({"type": "object"}),
        );
        assert_eq!(
            serde_json::from_str::<Value>(&r.raw).expect("closed"),
            json!({"fields": {"lines": [{"sku": "string"}]}})
        );
        // Not cut at the output limit (no mark), not an object, or nothing complete: left as
        // it was (validation refuses it).
        let marked = |t: &str| format!("{t}{}", super::super::textcalls::CUT_MARK);
        for bad in [
            r#"{"name": "x", "#.to_string(),
            marked(r#"{"fields": {"a": "str"#),
            marked("[1, 2"),
            "not json".to_string(),
        ] {
            let bad = bad.as_str();
            let r = repair(bad, &json!({"type": "object"}));
            assert_eq!(r.raw, bad);
            assert!(r.notes.is_empty());
        }
    }
    /// N15(d) (review 2026-11-26): `close_cut` kept a copy of the bracket stack per comma,
    /// O(commas × depth): 2.5 GB for 50k `[` and 50k `,`. Now at most 8 cut points of at most
    /// 128 brackets are kept, and the scan stops where serde_json would refuse the nesting.
    #[test]
    fn a_deep_cut_with_many_commas_is_closed_in_bounded_work() {
        let mark = super::super::textcalls::CUT_MARK;
        let deep = format!("{}{}", "[".repeat(50_000), ",".repeat(50_000));
        let started = std::time::Instant::now();
        // As `cut_call` hands it over: the arguments object, nothing complete in it.
        let args = format!("{{{deep}{mark}");
        let r = repair(&args, &json!({"type": "object"}));
        assert_eq!(
            r.raw, args,
            "nothing complete: left for validation to refuse"
        );
        assert!(r.notes.is_empty());
        // A complete member before the deep part is kept.
        let args = format!(r#"{{"name": "x", "fields": {deep}{mark}"#);
        let r = repair(&args, &json!({"type": "object"}));
        assert_eq!(
            serde_json::from_str::<Value>(&r.raw).expect("closed"),
            json!({"name": "x"})
        );
        // Commas at a depth serde_json accepts: closed at the last of them.
        let args = format!(r#"{{"a": {}1,2,{mark}"#, "[".repeat(100));
        let r = repair(&args, &json!({"type": "object"}));
        let v: Value = serde_json::from_str(&r.raw).expect("closed");
        let mut inner = &v["a"];
        for _ in 0..99 {
            inner = &inner[0];
        }
        assert_eq!(inner, &json!([1, 2]));
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "name": {"type": "string"},
            "response_format": {"type": "object"},
            "tags": {"type": "array", "items": {"type": "string"}}
        }})
    }

    #[test]
    fn stringified_object_is_parsed_and_named() {
        let raw = r#"{"name": "inv", "response_format": "{\"type\": \"json_schema\"}"}"#;
        let r = repair(raw, &schema());
        let v: Value = serde_json::from_str(&r.raw).unwrap();
        assert_eq!(v["response_format"], json!({"type": "json_schema"}));
        assert_eq!(
            r.notes,
            vec!["`response_format` was a JSON string; it was parsed as an object"]
        );
    }

    #[test]
    fn fences_and_trailing_commas() {
        let raw = "```json\n{\"name\": \"a, }\", \"tags\": [\"x\",],}\n```";
        let r = repair(raw, &schema());
        let v: Value = serde_json::from_str(&r.raw).unwrap();
        assert_eq!(v, json!({"name": "a, }", "tags": ["x"]}));
        assert_eq!(r.notes.len(), 2, "{:?}", r.notes);
    }

    #[test]
    fn strings_the_schema_wants_and_valid_input_are_untouched() {
        let raw = r#"{"name": "{\"a\": 1}"}"#;
        assert_eq!(
            repair(raw, &schema()),
            Repaired {
                raw: raw.into(),
                notes: vec![]
            }
        );
        let bad = r#"{"name": "#;
        assert_eq!(repair(bad, &schema()).raw, bad);
    }

    #[test]
    fn arguments_of_a_tool_without_parameters_are_dropped() {
        let schema =
            serde_json::json!({"type": "object", "properties": {}, "additionalProperties": false});
        let r = repair(r#"{"type": "object", "properties": {"a": 1}}"#, &schema);
        assert_eq!(r.raw, "{}");
        assert_eq!(r.notes.len(), 1);
        let r = repair("{}", &schema);
        assert!(r.notes.is_empty());
    }

    #[test]
    fn arguments_the_tool_does_not_have_are_dropped_and_named() {
        let schema = serde_json::json!({"type": "object", "additionalProperties": false,
            "properties": {"name": {"type": "string"}}});
        let r = repair(
            r#"{"name": "x", "schema_revid": "1", "tag_ids": []}"#,
            &schema,
        );
        assert_eq!(r.raw, r#"{"name":"x"}"#);
        assert!(
            r.notes[0].contains("schema_revid, tag_ids") && r.notes[0].contains("it takes name")
        );
    }
}
