//! run_extraction's model call in two halves, so no transaction is open while the model
//! answers: [`prepare_extraction`] reads the document, prompt and schema and builds the request;
//! [`apply_extraction`] validates the (checkpointed) answer against the schema and stores it.

use super::documents::{document_id_or_default, document_not_found};
use super::extraction::{
    EXTRACTION_MAX_TOKENS, RunExtraction, extraction_json, parse_json_answer, prompt_for,
};
use super::schemas::{inner_schema, validate_instance};
use super::{ModelCall, ToolCtx, ToolError, revid};
use crate::analysis::{self, Analysis, ground};
use crate::llm::{CompletionRequest, CompletionResponse, FinishReason, Message, Role, ToolChoice};
use crate::store::documents::{self as documents, clean_json};
use crate::store::extractions::{self as store, ExtractionSource};
use crate::store::schemas;
use serde_json::{Value, json};
use std::cell::OnceCell;
use uuid::Uuid;

/// Reads the document, prompt and schema and builds the extraction request. The model is the
/// configured extraction model (`llm.extraction_model`), never one named by the agent.
pub(crate) async fn prepare_extraction(
    ctx: &mut ToolCtx<'_>,
    args: &RunExtraction,
) -> Result<ModelCall, ToolError> {
    let doc_id = document_id_or_default(ctx, args.document_id)?;
    let doc = documents::get(ctx.conn, ctx.org_id, doc_id, ctx.excerpt_chars)
        .await?
        .ok_or_else(|| document_not_found(doc_id))?;
    let prompt = prompt_for(ctx, args.prompt_revid.as_deref()).await?;
    let schema_revid = revid(prompt.fields.schema_id, prompt.fields.schema_version);
    let schema = schemas::get(
        ctx.conn,
        ctx.org_id,
        prompt.fields.schema_id,
        prompt.fields.schema_version,
    )
    .await?
    .ok_or_else(|| schema_gone(&schema_revid))?;
    if doc.text.trim().is_empty() {
        return Err(ToolError::Conflict(format!(
            "document {doc_id} has no text to extract from"
        )));
    }
    let input_truncated = (doc.text.chars().count() as i64) < doc.text_chars;
    let mut messages = vec![
        Message::text(Role::System, prompt.fields.content.clone()),
        Message::text(Role::User, doc.text.clone()),
    ];
    let read = crate::llm::offline::extract(&doc.text, inner_schema(&schema.response_format));
    let tables = long_tables(&read);
    if let Some(r) = readings(&read, &tables) {
        messages.push(Message::text(Role::User, r));
    }
    let request = CompletionRequest {
        model: ctx.model.clone(),
        messages,
        tools: Vec::new(),
        tool_choice: ToolChoice::None,
        max_tokens: Some(EXTRACTION_MAX_TOKENS),
        response_format: Some(without_fields(&schema.response_format, &tables)),
    };
    let state = json!({
        "document_id": doc_id,
        "prompt_id": prompt.prompt_id, "prompt_version": prompt.version,
        "schema_id": schema.schema_id, "schema_version": schema.version,
        "input_truncated": input_truncated,
        "tables_from_analysis": tables,
    });
    Ok(ModelCall { request, state })
}

/// Fields read at most in a [`readings`] message, the longest text value shown, and the
/// longest list of rows (as JSON).
const MAX_READINGS: usize = 40;
const MAX_READING_CHARS: usize = 200;
const MAX_ROWS_JSON: usize = 600;

/// The top-level lists of `read` (the analysis' extraction for the schema) too long to show as
/// a reading: tables the analysis read whole. The model is not asked to write them — at the
/// speed a small local model writes (15 tokens a second on this project's machine) forty rows
/// take longer than a request may — and the stored extraction takes the analysis' rows.
fn long_tables(read: &Value) -> Vec<String> {
    read.as_object()
        .map(|o| {
            o.iter()
                .filter(|(_, v)| {
                    v.as_array().is_some_and(|rows| !rows.is_empty())
                        && v.to_string().len() > MAX_ROWS_JSON
                })
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// `response_format` without the top-level `fields` (from its properties and its required
/// list): what the model is asked to answer.
fn without_fields(response_format: &Value, fields: &[String]) -> Value {
    let mut rf = response_format.clone();
    if fields.is_empty() {
        return rf;
    }
    if let Some(props) = rf
        .pointer_mut("/json_schema/schema/properties")
        .and_then(Value::as_object_mut)
    {
        for f in fields {
            props.remove(f);
        }
    }
    if let Some(required) = rf
        .pointer_mut("/json_schema/schema/required")
        .and_then(Value::as_array_mut)
    {
        required.retain(|r| r.as_str().is_none_or(|r| !fields.iter().any(|f| f == r)));
    }
    rf
}

/// The extraction request's hint (issue 28, item 2: the same analysis on the model path): the
/// value the document analysis reads for each field of the schema (`read`: by the field's name
/// or its label, as the offline extraction does; a table's rows when short), as one JSON object
/// after the document text, and the `tables` the analysis fills in itself; `None` when it
/// reads none. A small model copies a right reading and has the text to correct a wrong one;
/// measured with a 0.5B model its own readings were right for fewer fields than the analysis'
/// (docs/analysis.md). After the text, so the provider boundary has seen the document's
/// personal data before this message (it redacts a value it knows wherever it appears).
fn readings(read: &Value, tables: &[String]) -> Option<String> {
    let shown: serde_json::Map<String, Value> = read
        .as_object()?
        .iter()
        .filter(|(_, v)| match v {
            Value::String(s) => s.chars().count() <= MAX_READING_CHARS,
            Value::Number(_) | Value::Bool(_) => true,
            // A table's rows: a model that invents a row is flagged and asked again.
            Value::Array(rows) => !rows.is_empty() && v.to_string().len() <= MAX_ROWS_JSON,
            _ => false,
        })
        .take(MAX_READINGS)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if shown.is_empty() && tables.is_empty() {
        return None;
    }
    let mut out = format!(
        "{} (check each against the text; keep a reading that is right, correct \
         one that is wrong; a field without a reading is yours to find, or null):\n{}",
        analysis::READINGS_START,
        Value::Object(shown)
    );
    if !tables.is_empty() {
        let rows = |k: &String| read[k].as_array().map_or(0, Vec::len);
        let listed: Vec<String> = tables
            .iter()
            .map(|k| format!("`{k}` ({} rows)", rows(k)))
            .collect();
        out.push_str(&format!(
            "\nThe analysis reads {} from the document's table itself: leave it out of your \
             answer.",
            listed.join(", ")
        ));
    }
    Some(out)
}

/// Validates the answer against the prompt's schema and stores it as a proposed extraction.
pub(crate) async fn apply_extraction(
    ctx: &mut ToolCtx<'_>,
    state: &Value,
    resp: &CompletionResponse,
) -> Result<Value, ToolError> {
    let id = |k: &str| {
        state[k]
            .as_str()
            .and_then(|s| Uuid::parse_str(s).ok())
            .ok_or_else(|| ToolError::Conflict(format!("checkpointed extraction state lacks {k}")))
    };
    let ver = |k: &str| state[k].as_i64().unwrap_or_default() as i32;
    let (doc_id, schema_id, schema_version) =
        (id("document_id")?, id("schema_id")?, ver("schema_version"));
    let schema_revid = revid(schema_id, schema_version);
    let schema = schemas::get(ctx.conn, ctx.org_id, schema_id, schema_version)
        .await?
        .ok_or_else(|| schema_gone(&schema_revid))?;
    let cut = resp.finish == FinishReason::MaxTokens;
    let cut_note = if cut {
        format!(
            " The answer was cut off at the output limit (finish_reason = length, {} output \
             tokens): ask for fewer or shorter fields.",
            resp.usage.output_tokens
        )
    } else {
        String::new()
    };
    let answer = resp.message.joined_text();
    let result = parse_json_answer(&answer).ok_or_else(|| {
        let start: String = answer.chars().take(200).collect();
        ToolError::Invalid(format!(
            "the extraction model did not answer with JSON (it said: {start:?}); make the \
             prompt ask for one JSON object only.{cut_note}"
        ))
    })?;
    let result = clean_json(&result);
    let text = documents::get(ctx.conn, ctx.org_id, doc_id, ground::MAX_CHARS)
        .await?
        .map(|d| d.text)
        .unwrap_or_default();
    // The analysis of the text, made once and only when a table, a fill or the empty fields
    // need it.
    let analysed = OnceCell::new();
    let (result, from_analysis) = with_tables(
        result,
        &string_list(&state["tables_from_analysis"]),
        inner_schema(&schema.response_format),
        &text,
        &analysed,
    );
    if let Err(errors) = validate_instance(inner_schema(&schema.response_format), &result) {
        return Err(ToolError::Invalid(format!(
            "the extraction result does not match schema {schema_revid} ({} problem(s): {}); \
             nothing was stored. Make the prompt clearer about these fields, or update_schema \
             and run again.{cut_note}",
            errors.len(),
            errors.join("; ")
        )));
    }
    let src = ExtractionSource {
        document_id: doc_id,
        prompt_id: id("prompt_id")?,
        prompt_version: ver("prompt_version"),
        schema_id,
        schema_version,
    };
    let (result, filled) = fill_from_document(
        result,
        inner_schema(&schema.response_format),
        &text,
        &analysed,
    );
    let ungrounded = ground::ungrounded(&result, &text);
    let e = store::insert(
        ctx.conn,
        ctx.org_id,
        src,
        &result,
        &ungrounded,
        ctx.run_id,
        ctx.now,
    )
    .await?;
    let mut out = extraction_json(&e);
    if !ungrounded.is_empty() {
        out["ungrounded_note"] = json!(
            "these values were not found in the document text (after normalising numbers and \
             dates); they are flagged for the reviewer. If one is wrong, correct it with \
             update_extraction_field."
        );
    }
    if !filled.is_empty() {
        out["filled_from_document"] = json!(filled);
        out["filled_note"] = json!(
            "the answer left these fields empty or gave values the document does not contain; \
             they hold what the document says under that field's label instead (`was`: the \
             answer's value). If one is wrong, correct it with update_extraction_field."
        );
    }
    let missed = empty_with_candidate(&result, &text, &analysed);
    if !missed.is_empty() {
        out["empty_but_in_document"] = json!(missed);
        out["empty_note"] = json!(
            "these fields came back empty although the document has a value for them; if the \
             value is right, set it with update_extraction_field."
        );
    }
    if !from_analysis.is_empty() {
        out["tables_from_analysis"] = json!(from_analysis);
        out["tables_note"] = json!(
            "these tables were too long to ask the extraction model for: they hold the rows \
             the document analysis read from the document."
        );
    }
    out["input_truncated"] = state["input_truncated"].clone();
    if cut {
        out["finish_reason"] = json!("length");
    }
    Ok(out)
}

/// The strings of a JSON list (none when it is not one).
fn string_list(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// `result` with each of `tables` set to the rows the analysis of `text` reads for it (the
/// model was asked to leave them out), when `result` is an object and the analysis reads rows;
/// `{field, rows}` per table set.
fn with_tables(
    result: Value,
    tables: &[String],
    schema: &Value,
    text: &str,
    analysed: &OnceCell<Analysis>,
) -> (Value, Vec<Value>) {
    let Value::Object(mut obj) = result else {
        return (result, Vec::new());
    };
    if tables.is_empty() {
        return (Value::Object(obj), Vec::new());
    }
    let a = analysed.get_or_init(|| analysis::analyse(text));
    let read = crate::llm::offline::extract_from(a, text, schema);
    let mut set = Vec::new();
    for t in tables {
        if let Some(rows) = read
            .get(t)
            .and_then(Value::as_array)
            .filter(|r| !r.is_empty())
        {
            set.push(json!({"field": t, "rows": rows.len()}));
            obj.insert(t.clone(), Value::Array(rows.clone()));
        }
    }
    (Value::Object(obj), set)
}

/// Top-level scalar fields of `result` that are null, or hold a value `text` does not contain,
/// while the analysis of `text` reads a value for that field (by its name or label, as the
/// offline extraction does): that value replaces the answer's when the result stays valid for
/// `schema`. Returns the result and `{field, label, value, was}` per replaced field (at most
/// 20). A small model names the right field and copies a neighbour's value, or none; the
/// document's own reading is better than either, and the tool result says what changed.
fn fill_from_document(
    result: Value,
    schema: &Value,
    text: &str,
    analysed: &OnceCell<Analysis>,
) -> (Value, Vec<Value>) {
    let Some(obj) = result.as_object() else {
        return (result, Vec::new());
    };
    let ungrounded = ground::ungrounded(&result, text);
    let wants = |k: &str, v: &Value| {
        let scalar = !v.is_array() && !v.is_object();
        let pointer = format!("/{}", k.replace('~', "~0").replace('/', "~1"));
        scalar && (v.is_null() || ungrounded.contains(&pointer))
    };
    if !obj.iter().any(|(k, v)| wants(k, v)) {
        return (result, Vec::new());
    }
    let a = analysed.get_or_init(|| analysis::analyse(text));
    let read = crate::llm::offline::extract_from(a, text, schema);
    let mut filled_obj = obj.clone();
    let mut filled = Vec::new();
    for (k, v) in obj {
        if filled.len() >= 20 || !wants(k, v) {
            continue;
        }
        let Some(new) = read
            .get(k)
            .filter(|n| !n.is_null() && !n.is_array() && !n.is_object())
        else {
            continue;
        };
        if new == v || !ground::ungrounded(new, text).is_empty() {
            continue;
        }
        let label = a.get(k).map(|c| c.label.clone()).unwrap_or_default();
        filled.push(json!({"field": k, "label": label, "value": new, "was": v}));
        filled_obj.insert(k.clone(), new.clone());
    }
    let filled_result = Value::Object(filled_obj);
    if filled.is_empty() || validate_instance(schema, &filled_result).is_err() {
        return (result, Vec::new());
    }
    (filled_result, filled)
}

/// Top-level fields of `result` that are null while the analysis of `text` has a candidate of
/// that name: `{field, label, value}` each (at most 10).
fn empty_with_candidate(result: &Value, text: &str, analysed: &OnceCell<Analysis>) -> Vec<Value> {
    let Some(obj) = result.as_object() else {
        return Vec::new();
    };
    if !obj.values().any(Value::is_null) {
        return Vec::new();
    }
    let a = analysed.get_or_init(|| analysis::analyse(text));
    obj.iter()
        .filter(|(_, v)| v.is_null())
        .filter_map(|(k, _)| a.get(k))
        .filter(|c| c.kind != analysis::ValueKind::List)
        .take(10)
        .map(|c| json!({"field": c.name, "label": c.label, "value": c.raw}))
        .collect()
}

/// The prompt's schema version was deleted under it.
fn schema_gone(schema_revid: &str) -> ToolError {
    ToolError::NotFound(format!(
        "the prompt's schema {schema_revid} no longer exists; update_prompt to another \
         schema_revid"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_show_the_scalar_values_the_analysis_reads_for_the_schema() {
        let text = "Invoice Number: INV-77\nInvoice Date: 2026-11-02\nTotal Due: 1,250.00\n";
        let schema = json!({"type": "object", "properties": {
            "invoice_number": {"type": ["string", "null"]},
            "total_due": {"type": ["number", "null"]},
            "po_number": {"type": ["string", "null"]},
        }});
        let read = crate::llm::offline::extract(text, &schema);
        assert!(long_tables(&read).is_empty());
        let r = readings(&read, &[]).expect("readings");
        let (head, body) = r.split_once('\n').unwrap();
        assert!(head.starts_with(analysis::READINGS_START), "{r}");
        let read: Value = serde_json::from_str(body).unwrap();
        assert_eq!(read, json!({"invoice_number": "INV-77", "total_due": 1250}));
        // Nothing read, no message.
        let none = json!({"type": "object", "properties": {"po_number": {"type": "string"}}});
        assert_eq!(
            readings(&crate::llm::offline::extract(text, &none), &[]),
            None
        );
    }

    #[test]
    fn a_long_table_is_read_by_the_analysis_not_asked_of_the_model() {
        let mut text = String::from(
            "Invoice Number: INV-78\nTotal Due: 4,100.00\n\n\
            Item        Description                         Qty     Amount\n",
        );
        for k in 1..=40 {
            text.push_str(&format!(
                "SKU-{k:03}     Replacement filter cartridge type {k:<4}   {:>3}   {:>8}.00\n",
                k % 7 + 1,
                k * 10
            ));
        }
        let rf = json!({"type": "json_schema", "json_schema": {"name": "x", "strict": true,
            "schema": {"type": "object", "additionalProperties": false,
                "required": ["invoice_number", "line_items"],
                "properties": {
                    "invoice_number": {"type": ["string", "null"]},
                    "line_items": {"type": "array", "items": {"type": "object"}}}}}});
        let read = crate::llm::offline::extract(&text, inner_schema(&rf));
        let tables = long_tables(&read);
        assert_eq!(tables, ["line_items"], "{read}");
        // The model is asked for the rest only, and told why.
        let asked = without_fields(&rf, &tables);
        assert_eq!(
            asked["json_schema"]["schema"]["required"],
            json!(["invoice_number"])
        );
        assert!(
            asked["json_schema"]["schema"]["properties"]
                .get("line_items")
                .is_none()
        );
        let r = readings(&read, &tables).expect("readings");
        assert!(r.contains("`line_items` (40 rows)"), "{r}");
        // The stored result takes the analysis' rows.
        let (result, set) = with_tables(
            json!({"invoice_number": "INV-78"}),
            &tables,
            inner_schema(&rf),
            &text,
            &OnceCell::new(),
        );
        assert_eq!(set, [json!({"field": "line_items", "rows": 40})]);
        assert_eq!(result["line_items"].as_array().map(Vec::len), Some(40));
        assert!(validate_instance(inner_schema(&rf), &result).is_ok());
    }
}
