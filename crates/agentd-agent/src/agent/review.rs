//! The review call (issue 28, item 3: "one targeted re-ask"). Where constrained calls are on,
//! an auto_create run whose goal is met and whose extraction flags values — a value the
//! document does not contain, a field left empty while the document reads it — asks once more
//! with a short brief instead of the whole transcript: each flagged field, the value the
//! extraction holds, and the document's lines that may hold it (for an empty field, the line the
//! analysis read it from), with a `response_format` of corrections over those fields only, each
//! typed as the run's schema types it. The answer becomes `update_extraction_field` calls, run
//! like any calls (audit row, caps, policy); after them the run ends with a summary from its
//! records ([`super::one_call::nothing_to_add`]). An empty list ends the run with that said.
//!
//! Before 2026-11-28 this was a whole round (the transcript, the document, every tool): a third
//! call of 1,500–2,500 tokens, which put three one-page documents of the test part over 4,000
//! tokens with the 0.5B model.

use super::goals::GoalState;
use super::transcript::Transcript;
use super::{RunSpec, one_call};
use crate::analysis::ground;
use crate::analysis::values::fold;
use crate::llm::{Block, CompletionRequest, CompletionResponse, FinishReason, Message, Role};
use crate::tools::extraction::{RunExtraction, UpdateExtractionField};
use crate::tools::typed::Declaration;
use serde_json::{Map, Value, json};

/// The `json_schema` name of the review's format (how its answer is told apart).
pub const FORMAT_NAME: &str = "review";

/// Most fields one review asks about.
pub const MAX_FIELDS: usize = 8;

/// Document lines shown for one field, and the characters of one line.
const LINES_PER_FIELD: usize = 2;
const LINE_CHARS: usize = 160;

/// The review's system message.
const SYSTEM: &str = "You check values extracted from a document against the document's own \
    lines. Answer with one JSON object and nothing else.";

/// What the brief asks, after the fields.
const ASK: &str = "Answer {\"fixes\": [...]}: for each field whose value is wrong, {\"field\", \
    \"value\"} with the value the lines show, or null when they do not give it. Leave out the \
    fields that are right; [] when none is wrong.";

/// The final text when the review corrected nothing.
pub const NONE_CORRECTED: &str = "The flagged values were reviewed against the document's lines; \
    none was corrected and they stay flagged for the reviewer. (Written by agentd from the \
    review's answer.)";

/// A field the extraction flagged.
#[derive(Debug, Clone, PartialEq)]
pub struct Flag {
    pub field: String,
    /// The value the extraction holds (null when empty).
    pub value: Value,
    /// For a field left empty: the label and value the analysis read in the document.
    pub read: Option<(String, String)>,
}

/// The fields the run's last extraction flagged, when the next round is the review:
/// constrained calls on, an auto_create goal met, no call waiting, the last call a successful
/// `run_extraction` whose result flags top-level fields (not a cut answer or a truncated
/// input: those go to a whole round), and `update_extraction_field` allowed. `None` otherwise.
pub fn flags(
    spec: &RunSpec,
    constrained: bool,
    goal: Option<&GoalState>,
    t: &Transcript,
) -> Option<Vec<Flag>> {
    let last = t.history.last()?;
    if !(constrained
        && one_call::proposal_made(goal)
        && t.pending.is_empty()
        && last.tool == RunExtraction::NAME
        && !last.is_error
        && spec.policy.allows(UpdateExtractionField::NAME))
    {
        return None;
    }
    let Ok(Value::Object(out)) = serde_json::from_str::<Value>(&last.content) else {
        return None;
    };
    if out.contains_key("finish_reason") || out.get("input_truncated") == Some(&json!(true)) {
        return None;
    }
    flags_of(&out)
}

/// The flagged top-level fields of a `run_extraction` result (at most [`MAX_FIELDS`]).
fn flags_of(out: &Map<String, Value>) -> Option<Vec<Flag>> {
    let result = out.get("result").and_then(Value::as_object)?;
    let mut flags: Vec<Flag> = Vec::new();
    let ungrounded = out.get("ungrounded").and_then(Value::as_array);
    for pointer in ungrounded.into_iter().flatten().filter_map(Value::as_str) {
        let Some(field) = ground::top_level_field(pointer) else {
            continue;
        };
        if let Some(value) = result
            .get(&field)
            .filter(|v| !v.is_array() && !v.is_object())
        {
            flags.push(Flag {
                field,
                value: value.clone(),
                read: None,
            });
        }
    }
    let empties = out.get("empty_but_in_document").and_then(Value::as_array);
    for e in empties.into_iter().flatten() {
        let (Some(field), Some(label), Some(raw)) = (
            e.get("field").and_then(Value::as_str),
            e.get("label").and_then(Value::as_str),
            e.get("value").and_then(Value::as_str),
        ) else {
            continue;
        };
        if result.contains_key(field) && !flags.iter().any(|f| f.field == field) {
            flags.push(Flag {
                field: field.to_string(),
                value: Value::Null,
                read: Some((label.to_string(), raw.to_string())),
            });
        }
    }
    flags.truncate(MAX_FIELDS);
    (!flags.is_empty()).then_some(flags)
}

/// The lines of `document` that may hold `field`: for a field the analysis read, the line with
/// its label; else those sharing the most words (three letters or more) with its name, at most
/// [`LINES_PER_FIELD`], in document order. Each is numbered (1-based) and clipped.
pub fn lines_for(flag: &Flag, document: &str) -> Vec<String> {
    let lines: Vec<&str> = document.lines().collect();
    let clip = |i: usize, l: &str| -> String {
        let l: String = l.trim().chars().take(LINE_CHARS).collect();
        format!("{}: {l}", i + 1)
    };
    if let Some((label, _)) = &flag.read {
        let label = fold(label);
        if let Some((i, l)) = lines
            .iter()
            .enumerate()
            .find(|(_, l)| !label.is_empty() && fold(l).contains(&label))
        {
            return vec![clip(i, l)];
        }
    }
    let words: Vec<String> = flag
        .field
        .split('_')
        .filter(|w| w.chars().count() >= 3)
        .map(fold)
        .collect();
    let mut scored: Vec<(usize, usize)> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let folded = fold(l);
            let line_words: Vec<&str> = folded
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .collect();
            let n = words
                .iter()
                .filter(|w| line_words.iter().any(|lw| lw.starts_with(w.as_str())))
                .count();
            (i, n)
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    // Most words first, the earlier line on a tie; then back in document order.
    scored.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.truncate(LINES_PER_FIELD);
    scored.sort_unstable();
    scored
        .into_iter()
        .filter_map(|(i, _)| lines.get(i).map(|l| clip(i, l)))
        .collect()
}

/// The brief: each flagged field, its value and the lines that may hold it, then the ask.
pub fn brief(flags: &[Flag], document: &str) -> String {
    let mut out = String::from(
        "An extraction of a document was checked against the document's text. These fields \
         need a look:\n",
    );
    for f in flags {
        let why = match &f.read {
            Some((label, raw)) => format!("empty, though the document reads {label:?}: {raw:?}"),
            None => "not found in the document".to_string(),
        };
        out.push_str(&format!("- {} = {}: {why}.", f.field, f.value));
        let lines = lines_for(f, document);
        match lines.is_empty() {
            true => out.push_str(" No line of the document names it.\n"),
            false => {
                out.push_str(" Lines that may hold it:\n");
                for l in lines {
                    out.push_str(&format!("    {l}\n"));
                }
            }
        }
    }
    out.push_str(ASK);
    out
}

/// The `response_format`: `fixes`, corrections over the flagged fields only, each value typed
/// as the run's schema has the field (`properties`: the schema's properties; a field it does
/// not type takes a string, a number or null).
pub fn format(flags: &[Flag], properties: &Map<String, Value>) -> Value {
    let items: Vec<Value> = flags
        .iter()
        .map(|f| {
            let ty = properties
                .get(&f.field)
                .and_then(|p| p.get("type"))
                .cloned()
                .unwrap_or_else(|| json!(["string", "number", "null"]));
            let mut types: Vec<Value> = match ty {
                Value::Array(a) => a,
                other => vec![other],
            };
            if !types.contains(&json!("null")) {
                types.push(json!("null"));
            }
            json!({
                "type": "object",
                "properties": {"field": {"const": f.field}, "value": {"type": types}},
                "required": ["field", "value"],
                "additionalProperties": false,
            })
        })
        .collect();
    json!({
        "type": "json_schema",
        "json_schema": {
            "name": FORMAT_NAME,
            "description": "Corrections of flagged values of an extraction.",
            "schema": {
                "type": "object",
                "properties": {"fixes": {
                    "type": "array",
                    "maxItems": flags.len(),
                    "items": {"anyOf": items},
                }},
                "required": ["fixes"],
                "additionalProperties": false,
            },
        }
    })
}

/// The review request in place of the round `req` would have been: the same model, the brief
/// (with the document taken from `req`'s first message), no tools, the output bounded by the
/// answer it asks for.
pub fn request(
    req: &CompletionRequest,
    flags: &[Flag],
    properties: &Map<String, Value>,
) -> CompletionRequest {
    let document = one_call::document_in(req);
    CompletionRequest {
        model: req.model.clone(),
        messages: vec![
            Message::text(Role::System, SYSTEM),
            Message::text(Role::User, brief(flags, &document)),
        ],
        tools: Vec::new(),
        tool_choice: req.tool_choice,
        // A field, a value of a line and the JSON around it, each.
        max_tokens: Some(40 + 60 * flags.len() as u32),
        response_format: Some(format(flags, properties)),
    }
}

/// If `req` was the review and `resp` holds its answer as text (no calls): the corrections
/// become `update_extraction_field` calls (a field not asked about, or a value equal to the
/// one held, is left out); with none, the text becomes [`NONE_CORRECTED`]. Returns how many
/// calls it made. An answer that is not the form stays as it is.
pub fn split(req: &CompletionRequest, resp: &mut CompletionResponse) -> usize {
    let format = req.response_format.as_ref();
    let ours = format
        .and_then(|f| f.pointer("/json_schema/name"))
        .is_some_and(|n| n == FORMAT_NAME);
    if !ours || !resp.message.tool_calls().is_empty() {
        return 0;
    }
    let asked: Vec<&str> = format
        .and_then(|f| f.pointer("/json_schema/schema/properties/fixes/items/anyOf"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|i| i.pointer("/properties/field/const").and_then(Value::as_str))
        .collect();
    let text = resp.message.joined_text();
    let Some(Value::Object(answer)) = crate::tools::extraction::parse_json_answer(&text) else {
        return 0;
    };
    let Some(fixes) = answer.get("fixes").and_then(Value::as_array) else {
        return 0;
    };
    let held = |field: &str| held_value(req, field);
    let mut calls: Vec<Block> = Vec::new();
    for fix in fixes {
        let (Some(field), Some(value)) =
            (fix.get("field").and_then(Value::as_str), fix.get("value"))
        else {
            continue;
        };
        if !asked.contains(&field)
            || calls.len() >= asked.len()
            || held(field).as_ref() == Some(value)
        {
            continue;
        }
        calls.push(Block::ToolUse {
            id: format!("review_{}", calls.len()),
            name: UpdateExtractionField::NAME.to_string(),
            arguments: json!({"path": format!("/{}", field.replace('~', "~0").replace('/', "~1")), "value": value})
                .to_string(),
        });
    }
    if calls.is_empty() {
        resp.message = Message::text(Role::Assistant, NONE_CORRECTED);
        resp.finish = FinishReason::EndTurn;
        return 0;
    }
    let n = calls.len();
    resp.message.content = calls;
    resp.finish = FinishReason::ToolUse;
    n
}

/// The value the brief of `req` says the extraction holds for `field` (`- field = value: …`).
fn held_value(req: &CompletionRequest, field: &str) -> Option<Value> {
    let brief = req.messages.last()?.joined_text();
    let prefix = format!("- {field} = ");
    let line = brief.lines().find(|l| l.starts_with(&prefix))?;
    let rest = line.get(prefix.len()..)?;
    // The value is JSON up to the `: ` that follows it.
    let mut de = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
    de.next()?.ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::Usage;

    fn flag(field: &str, value: Value, read: Option<(&str, &str)>) -> Flag {
        Flag {
            field: field.into(),
            value,
            read: read.map(|(l, r)| (l.into(), r.into())),
        }
    }

    fn out(result: Value, ungrounded: &[&str], empties: Value) -> Map<String, Value> {
        let v =
            json!({"result": result, "ungrounded": ungrounded, "empty_but_in_document": empties});
        v.as_object().cloned().unwrap()
    }

    const DOC: &str =
        "ACME GmbH\nInvoice Number: INV-77\nContract: see annex\nTotal Due: 1,250.00\n";

    #[test]
    fn flagged_fields_are_the_top_level_ungrounded_and_the_empty_ones_the_document_reads() {
        let o = out(
            json!({"contract_number": "C-9", "total": null, "lines": [{"amount": 3}]}),
            &["/contract_number", "/lines/0/amount"],
            json!([{"field": "total", "label": "Total Due", "value": "1,250.00"}]),
        );
        let f = flags_of(&o).unwrap();
        assert_eq!(
            f,
            [
                flag("contract_number", json!("C-9"), None),
                flag("total", Value::Null, Some(("Total Due", "1,250.00"))),
            ]
        );
        assert!(flags_of(&out(json!({"total": 1}), &[], json!([]))).is_none());
    }

    #[test]
    fn the_brief_shows_each_field_with_the_lines_that_may_hold_it() {
        let flags = [
            flag("contract_number", json!("C-9"), None),
            flag("total", Value::Null, Some(("Total Due", "1,250.00"))),
            flag("iban", json!("DE00"), None),
        ];
        let b = brief(&flags, DOC);
        assert!(
            b.contains("- contract_number = \"C-9\": not found in the document."),
            "{b}"
        );
        // Both lines with a word of the name, in document order.
        assert!(
            b.contains("    2: Invoice Number: INV-77\n    3: Contract: see annex\n"),
            "{b}"
        );
        assert!(b.contains("- total = null: empty, though the document reads \"Total Due\": \"1,250.00\". Lines that may hold it:\n    4: Total Due: 1,250.00\n"), "{b}");
        assert!(
            b.contains(
                "- iban = \"DE00\": not found in the document. No line of the document names it."
            ),
            "{b}"
        );
        assert!(
            !b.contains("ACME"),
            "only the lines that may hold a field: {b}"
        );
    }

    #[test]
    fn the_format_types_each_value_as_the_schema_does_and_allows_null() {
        let flags = [flag("total", Value::Null, None)];
        let props = json!({"total": {"type": "number"}})
            .as_object()
            .cloned()
            .unwrap();
        let f = format(&flags, &props);
        let item = f
            .pointer("/json_schema/schema/properties/fixes/items/anyOf/0")
            .unwrap();
        assert_eq!(item["properties"]["field"]["const"], "total");
        assert_eq!(
            item["properties"]["value"]["type"],
            json!(["number", "null"])
        );
        assert_eq!(
            f.pointer("/json_schema/schema/properties/fixes/maxItems"),
            Some(&json!(1))
        );
    }

    fn answered(text: &str) -> CompletionResponse {
        CompletionResponse {
            message: Message::text(Role::Assistant, text),
            finish: FinishReason::EndTurn,
            usage: Usage::default(),
            model: "m".into(),
        }
    }

    fn review_req() -> CompletionRequest {
        let flags = [
            flag("contract_number", json!("C-9"), None),
            flag("total", Value::Null, Some(("Total Due", "1,250.00"))),
        ];
        let base = CompletionRequest {
            model: "m".into(),
            messages: vec![Message::text(
                Role::User,
                format!("Propose.\n<document>\n{DOC}\n</document>"),
            )],
            tools: Vec::new(),
            tool_choice: crate::llm::ToolChoice::Auto,
            max_tokens: Some(700),
            response_format: None,
        };
        let props = json!({"total": {"type": ["number", "null"]}, "contract_number": {"type": ["string", "null"]}});
        request(&base, &flags, props.as_object().unwrap())
    }

    #[test]
    fn the_request_is_the_brief_alone_without_tools_or_the_whole_document() {
        let r = review_req();
        assert!(r.tools.is_empty());
        assert_eq!(r.messages.len(), 2);
        let brief = r.messages[1].joined_text();
        assert!(brief.contains("4: Total Due: 1,250.00"), "{brief}");
        assert!(!brief.contains("ACME"), "{brief}");
        assert_eq!(r.max_tokens, Some(160));
    }

    #[test]
    fn corrections_become_update_calls_and_none_ends_the_run_with_that_said() {
        let r = review_req();
        let mut resp = answered(
            &json!({"fixes": [
                {"field": "contract_number", "value": null},
                {"field": "total", "value": 1250.0},
                // Not asked about; and a value equal to the one held changes nothing.
                {"field": "iban", "value": "DE00"},
                {"field": "contract_number", "value": "C-9"},
            ]})
            .to_string(),
        );
        assert_eq!(split(&r, &mut resp), 2);
        let calls = resp.message.tool_calls();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].1, UpdateExtractionField::NAME);
        let args: Value = serde_json::from_str(calls[0].2).unwrap();
        assert_eq!(args, json!({"path": "/contract_number", "value": null}));
        let args: Value = serde_json::from_str(calls[1].2).unwrap();
        assert_eq!(args, json!({"path": "/total", "value": 1250.0}));
        assert_eq!(resp.finish, FinishReason::ToolUse);

        let mut resp = answered(r#"{"fixes": []}"#);
        assert_eq!(split(&r, &mut resp), 0);
        assert_eq!(resp.message.joined_text(), NONE_CORRECTED);
        // Not the form: left as it is.
        let mut resp = answered("All values look right.");
        assert_eq!(split(&r, &mut resp), 0);
        assert_eq!(resp.message.joined_text(), "All values look right.");
        // Another request's answer is not touched.
        let mut other = r.clone();
        other.response_format = None;
        let mut resp = answered(r#"{"fixes": []}"#);
        assert_eq!(split(&other, &mut resp), 0);
        assert_eq!(resp.message.joined_text(), r#"{"fixes": []}"#);
    }
}
