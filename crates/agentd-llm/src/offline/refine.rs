//! The offline model's refine (issue 33): it reads the reviewer's instructions from the first
//! message and understands three kinds of sentence — "add (a) field X", "rename X to Y",
//! "remove|drop (the) field X" (one per sentence, or joined by "and") — and applies them to the
//! proposal's schema: `update_schema` with the edited `response_format` (a renamed field keeps
//! its description, marked "renamed from X", so the offline extraction still finds its value),
//! `update_prompt` listing the new fields, `run_extraction` with the new prompt, and a summary
//! naming each change. Instructions it does not understand change nothing: it re-runs the
//! extraction with the current prompt and says so. It is a heuristic, not a language model.

use super::proposal::{Field, prompt_content};
use super::{Next, names};
use crate::analysis::lexicon::snake;
use serde_json::{Map, Value, json};
use std::collections::HashMap;

/// The marker a renamed field's description carries (read by `proposal::extract`).
pub const RENAMED_FROM: &str = "renamed from ";

/// One change the instructions ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Add(String),
    Rename(String, String),
    Remove(String),
}

impl Change {
    fn words(&self) -> String {
        match self {
            Change::Add(n) => format!("added {n}"),
            Change::Rename(a, b) => format!("renamed {a} to {b}"),
            Change::Remove(n) => format!("removed {n}"),
        }
    }
}

/// A field name from the words of a sentence: the first word that is not an article or
/// "field", in snake_case.
fn name(words: &[&str]) -> Option<String> {
    let w = words
        .iter()
        .find(|w| !matches!(**w, "a" | "an" | "the" | "field" | "fields" | "new"))?;
    let n = snake(w, 64);
    (!n.is_empty()).then_some(n)
}

/// The changes `instructions` ask for, in order.
pub fn changes(instructions: &str) -> Vec<Change> {
    let lower = instructions.to_lowercase();
    let mut out = Vec::new();
    for sentence in lower
        .split(['.', ';', '\n', ','])
        .flat_map(|s| s.split(" and "))
    {
        let words: Vec<&str> = sentence
            .split(|c: char| c.is_whitespace() || c == '"' || c == '\'' || c == '`')
            .filter(|w| !w.is_empty())
            .collect();
        let Some((verb, rest)) = words.split_first() else {
            continue;
        };
        let change = match *verb {
            "add" => name(rest).map(Change::Add),
            "remove" | "drop" | "delete" => name(rest).map(Change::Remove),
            "rename" => {
                let to = rest.iter().position(|w| matches!(*w, "to" | "as" | "into"));
                match to {
                    Some(i) => name(&rest[..i]).zip(name(&rest[i + 1..])),
                    None => None,
                }
                .map(|(a, b)| Change::Rename(a, b))
            }
            _ => None,
        };
        out.extend(change);
    }
    out
}

/// `response_format` with `changes` applied; the changes that applied.
pub fn apply(response_format: &Value, changes: &[Change]) -> (Value, Vec<Change>) {
    let mut rf = response_format.clone();
    let mut applied = Vec::new();
    let Some(props) = rf
        .pointer_mut("/json_schema/schema/properties")
        .and_then(Value::as_object_mut)
    else {
        return (rf, applied);
    };
    for c in changes {
        let done = match c {
            Change::Add(n) if !props.contains_key(n) => {
                let words = n.replace('_', " ");
                props.insert(
                    n.clone(),
                    json!({"type": ["string", "null"], "description": words}),
                );
                true
            }
            Change::Rename(a, b) if props.contains_key(a) && !props.contains_key(b) => {
                let mut v = props.remove(a).unwrap_or(Value::Null);
                let was = v["description"].as_str().unwrap_or(a).to_string();
                v["description"] = json!(format!("{was} ({RENAMED_FROM}{a})"));
                props.insert(b.clone(), v);
                true
            }
            Change::Remove(n) if props.len() > 1 => props.remove(n).is_some(),
            _ => false,
        };
        if done {
            applied.push(c.clone());
        }
    }
    let required: Vec<Value> = props.keys().map(|k| json!(k)).collect();
    if let Some(schema) = rf.pointer_mut("/json_schema/schema") {
        schema["required"] = Value::Array(required);
    }
    (rf, applied)
}

/// The text between `<tag>` and `</tag>` on their own lines.
fn between<'a>(text: &'a str, tag: &str) -> Option<&'a str> {
    let (_, from) = text.split_once(&format!("<{tag}>\n"))?;
    Some(from.split_once(&format!("\n</{tag}>"))?.0)
}

/// The quoted value after `key "` (`schema_id "…"`).
fn quoted_after<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let (_, from) = text.split_once(&format!("{key} \""))?;
    Some(from.split_once('"')?.0)
}

/// True when the first message is a refine's.
pub fn is_refine(first: &str) -> bool {
    first.contains("<reviewer_instructions>")
}

/// The next step of a refine run, from its first message and the results so far.
pub fn next(first: &str, r: &HashMap<String, (Vec<Value>, u32)>) -> Next {
    let ok = |t: &str| r.get(t).and_then(|(v, _)| v.last());
    let errors = |t: &str| r.get(t).map(|(_, e)| *e).unwrap_or(0);
    let find = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let instructions = between(first, "reviewer_instructions").unwrap_or("");
    let rf: Value = between(first, "schema")
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or(Value::Null);
    let (schema_id, prompt_id) = (
        quoted_after(first, "schema_id").unwrap_or_default(),
        quoted_after(first, "prompt_id").unwrap_or_default(),
    );
    let (edited, applied) = apply(&rf, &changes(instructions));
    if applied.is_empty() {
        let current = quoted_after(first, "prompt_revid").unwrap_or_default();
        if ok(names::RUN_EXTRACTION).is_none() && errors(names::RUN_EXTRACTION) < 2 {
            return Next::Call(names::RUN_EXTRACTION, json!({"prompt_revid": current}));
        }
        return Next::Say(
            "offline model: no change it understands in the instructions (it knows \"add \
             field X\", \"rename X to Y\", \"remove field X\"); the proposal is unchanged and \
             the extraction ran again."
                .into(),
        );
    }
    let Some(schema) = ok(names::UPDATE_SCHEMA) else {
        if errors(names::UPDATE_SCHEMA) >= 2 {
            return Next::Say("offline model: update_schema was refused twice; stopping.".into());
        }
        return Next::Call(
            names::UPDATE_SCHEMA,
            json!({"schema_id": schema_id, "response_format": edited}),
        );
    };
    let schema_revid = find(schema, "schema_revid").unwrap_or_default();
    let Some(prompt) = ok(names::UPDATE_PROMPT) else {
        if errors(names::UPDATE_PROMPT) >= 2 {
            return Next::Say("offline model: update_prompt was refused twice; stopping.".into());
        }
        let fields: Vec<Field> = edited
            .pointer("/json_schema/schema/properties")
            .and_then(Value::as_object)
            .map(fields_of)
            .unwrap_or_default();
        return Next::Call(
            names::UPDATE_PROMPT,
            json!({"prompt_id": prompt_id, "schema_revid": schema_revid,
                   "content": prompt_content(&fields)}),
        );
    };
    let prompt_revid = find(prompt, "prompt_revid").unwrap_or_default();
    if ok(names::RUN_EXTRACTION).is_none() {
        if errors(names::RUN_EXTRACTION) >= 2 {
            return Next::Say("offline model: run_extraction failed twice; stopping.".into());
        }
        return Next::Call(names::RUN_EXTRACTION, json!({"prompt_revid": prompt_revid}));
    }
    let said: Vec<String> = applied.iter().map(Change::words).collect();
    Next::Say(format!(
        "offline model: refined the proposal as the reviewer asked ({}): schema \
         {schema_revid}, prompt {prompt_revid}, and ran the extraction again.",
        said.join("; ")
    ))
}

/// The fields of a schema's properties, as the prompt lists them.
fn fields_of(props: &Map<String, Value>) -> Vec<Field> {
    props
        .iter()
        .map(|(k, v)| Field {
            name: k.clone(),
            kind: "string",
            description: v["description"].as_str().unwrap_or(k).to_string(),
            items: Vec::new(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn understands_add_rename_and_remove() {
        let c =
            changes("Add a field due_date and rename total to total_due. Remove the field notes");
        assert_eq!(
            c,
            vec![
                Change::Add("due_date".into()),
                Change::Rename("total".into(), "total_due".into()),
                Change::Remove("notes".into()),
            ]
        );
        let rf = json!({"json_schema": {"schema": {"properties": {
            "total": {"type": ["number", "null"], "description": "Total"}}, "required": ["total"]}}});
        let (out, applied) = apply(&rf, &c);
        assert_eq!(applied.len(), 2, "notes is not there: {applied:?}");
        let props = &out["json_schema"]["schema"]["properties"];
        assert_eq!(
            props["total_due"]["description"],
            json!("Total (renamed from total)")
        );
        assert!(props.get("total").is_none() && props.get("due_date").is_some());
        assert_eq!(
            out["json_schema"]["schema"]["required"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        assert!(changes("make it better").is_empty());
    }
}
