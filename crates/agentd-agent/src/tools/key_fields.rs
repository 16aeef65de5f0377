//! Key fields first (issue 48, item 2): `create_schema` keeps the proposal's key fields and
//! lists the others as **also found**, on every path (the offline heuristic, the one call, a
//! model's own call). A field named after a candidate of the run's document whose keep score
//! ([`analysis::keep::score`]) is below the threshold leaves the schema, and so does a
//! **double** ([`analysis::keep::doubles`]: `datum` beside `date`, `iban_accredito` beside
//! `iban`). What left is recorded on the run (`agent_runs.also_found`, migration 0113) with
//! its JSON schema, so the reviewer can add it back with one action
//! (`POST /v1/documents/{id}/fields`). A field no candidate names (a model's own) is judged
//! only as a double. When the org reuses schemas, a field a schema of the org for the same
//! kind already has is kept (the score's `org_has`).

use super::schemas::inner_schema;
use super::{ToolCtx, ToolError, schema_forms, schema_reuse};
use crate::analysis::{self, keep};
use crate::store::auto_create;
use crate::store::schemas as store;
use serde::Serialize;
use serde_json::{Value, json};

/// Fewest fields a proposal keeps: below that, what would be also found stays.
pub const MIN_KEPT: usize = 4;

/// A field the proposal left out, for the reviewer.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AlsoFound {
    pub name: String,
    /// The document's label (the name for a field no candidate names).
    pub label: String,
    /// `table`, `detail`, `footer`, `weak_label` or `double`.
    pub reason: &'static str,
    /// The reason in words.
    pub why: String,
    /// 1-based line of the document, when a candidate names it.
    pub line: Option<usize>,
    /// The keep score, when a candidate names it.
    pub score: Option<f64>,
    /// The field's JSON schema as proposed: what adding it puts back.
    pub schema: Value,
}

/// Leaves out of `built` what is not a key field and records it on the run; returns what left.
/// Keeps at least [`MIN_KEPT`] fields (or all there are but the doubles).
pub(crate) async fn keep_key_fields(
    ctx: &mut ToolCtx<'_>,
    a: Option<&analysis::Analysis>,
    built: &mut schema_forms::Built,
) -> Result<Vec<AlsoFound>, ToolError> {
    let org_fields = match (a, ctx.run_id) {
        (Some(a), Some(run_id)) if ctx.subject.reuses_schemas() => {
            let rows =
                store::reuse_candidates(ctx.conn, ctx.org_id, run_id, schema_reuse::MAX_COMPARED)
                    .await?;
            rows.iter()
                .filter(|r| r.document_kind.as_deref() == Some(a.kind.as_str()))
                .flat_map(|r| schema_reuse::fields(&r.row.response_format))
                .collect()
        }
        _ => Vec::new(),
    };
    let out = split(a, &org_fields, &mut built.response_format);
    if !out.is_empty() {
        built.notes.push(format!(
            "also found, not in the schema (the reviewer can add them): {}",
            out.iter()
                .map(|f| f.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if let Some(run_id) = ctx.run_id {
        auto_create::set_also_found(ctx.conn, ctx.org_id, run_id, &json!(out)).await?;
    }
    Ok(out)
}

/// The pure part of [`keep_key_fields`]: removes from `response_format`'s top-level properties
/// the doubles and the candidates below the threshold, and returns them.
pub fn split(
    a: Option<&analysis::Analysis>,
    org_fields: &[String],
    response_format: &mut Value,
) -> Vec<AlsoFound> {
    let names: Vec<String> = inner_schema(response_format)
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    let candidate = |n: &str| a.and_then(|a| a.get(n));
    let value = |n: &str| candidate(n).map(|c| c.value.to_string());
    let mut out: Vec<(String, AlsoFound)> = Vec::new();
    for (double, kept) in keep::doubles(&names, &value) {
        let c = candidate(&double);
        out.push((
            double.clone(),
            AlsoFound {
                label: c.map_or_else(|| double.clone(), |c| c.label.clone()),
                name: double,
                reason: "double",
                why: format!("{} ({kept})", keep::why("double")),
                line: c.map(|c| c.line),
                score: None,
                schema: Value::Null,
            },
        ));
    }
    if let Some(a) = a {
        let last = a.candidates.iter().map(|c| c.line).max().unwrap_or(0);
        for n in &names {
            let Some(c) = a.get(n).filter(|_| !out.iter().any(|(d, _)| d == n)) else {
                continue;
            };
            let k = keep::score(c, a.kind, last, org_fields.contains(n));
            if let Some(reason) = k.reason {
                out.push((
                    n.clone(),
                    AlsoFound {
                        name: n.clone(),
                        label: c.label.clone(),
                        reason,
                        why: keep::why(reason).to_string(),
                        line: Some(c.line),
                        score: Some((k.score * 100.0).round() / 100.0),
                        schema: Value::Null,
                    },
                ));
            }
        }
    }
    // A schema of fewer than MIN_KEPT fields is no "every detail": the best-scored of what
    // would leave stay (a double never does), and a schema is never left empty.
    let doubles = out.iter().filter(|(_, f)| f.reason == "double").count();
    let mut room = MIN_KEPT.min(names.len() - doubles);
    room = room.saturating_sub(names.len() - out.len());
    if room > 0 {
        let mut by_score: Vec<usize> = (0..out.len())
            .filter(|i| out[*i].1.reason != "double")
            .collect();
        by_score.sort_by(|a, b| {
            let s = |i: usize| out[i].1.score.unwrap_or(0.0);
            s(*b).total_cmp(&s(*a))
        });
        let mut back: Vec<usize> = by_score.into_iter().take(room).collect();
        back.sort_unstable();
        for i in back.into_iter().rev() {
            out.remove(i);
        }
    }
    if out.is_empty() {
        return Vec::new();
    }
    let Some(schema) = response_format.pointer_mut("/json_schema/schema") else {
        return Vec::new();
    };
    for (name, f) in out.iter_mut() {
        if let Some(p) = schema
            .get_mut("properties")
            .and_then(Value::as_object_mut)
            .and_then(|p| p.remove(name.as_str()))
        {
            f.schema = p;
        }
        if let Some(r) = schema.get_mut("required").and_then(Value::as_array_mut) {
            r.retain(|v| v.as_str() != Some(name.as_str()));
        }
    }
    out.into_iter().map(|(_, f)| f).collect()
}

/// `result` with `"also_found"` (the names) when fields were left out.
pub(crate) fn with_also_found(mut result: Value, also: &[AlsoFound]) -> Value {
    if !also.is_empty() {
        result["also_found"] = json!(also.iter().map(|f| &f.name).collect::<Vec<_>>());
    }
    result
}

/// `response_format` with the also-found field `f` put back (required, as the others are).
pub fn with_field(response_format: &Value, name: &str, field: &Value) -> Value {
    let mut rf = response_format.clone();
    if let Some(schema) = rf.pointer_mut("/json_schema/schema") {
        if let Some(p) = schema.get_mut("properties").and_then(Value::as_object_mut) {
            p.insert(name.to_string(), field.clone());
        }
        if let Some(r) = schema.get_mut("required").and_then(Value::as_array_mut)
            && !r.iter().any(|v| v.as_str() == Some(name))
        {
            r.push(json!(name));
        }
    }
    rf
}

/// Most characters of a document's text the analysis reads.
pub const MAX_CHARS: usize = analysis::MAX_CHARS;

/// What the analysis of `text` says of the field `name`: the document's kind (none for a
/// document of no known kind) and the field's value (null when the analysis has none) — what
/// adding an also-found field puts in the proposal.
pub fn from_analysis(text: &str, name: &str) -> (Option<&'static str>, Value) {
    let a = analysis::analyse(text);
    let kind = (a.kind != analysis::DocKind::Other).then(|| a.kind.as_str());
    (kind, a.get(name).map_or(Value::Null, |c| c.value.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rf(names: &[&str]) -> Value {
        let props: serde_json::Map<String, Value> = names
            .iter()
            .map(|n| (n.to_string(), json!({"type": ["string", "null"]})))
            .collect();
        json!({"type": "json_schema", "json_schema": {"name": "x", "strict": true, "schema": {
            "type": "object", "properties": props, "required": names,
            "additionalProperties": false}}})
    }

    fn kept(rf: &Value) -> Vec<String> {
        let mut k: Vec<String> = inner_schema(rf)["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        k.sort();
        k
    }

    const TEXT: &str = "ACME SUPPLIES LTD\nInvoice Number: INV-7\nInvoice Date: 2026-11-02\n\
                        Customer: Blue Fox\nPhone: 0113 496 0000\nVAT: 10.00\nTotal: 60.00\n";

    #[test]
    fn details_and_doubles_leave_with_their_schema_and_come_back_whole() {
        let a = analysis::analyse(TEXT);
        let mut f = rf(&[
            "invoice_number",
            "invoice_date",
            "customer",
            "vat",
            "total",
            "phone",
            "invoice",
        ]);
        let out = split(Some(&a), &[], &mut f);
        let names: Vec<(&str, &str)> = out.iter().map(|f| (f.name.as_str(), f.reason)).collect();
        assert_eq!(
            names,
            vec![("invoice", "double"), ("phone", "detail")],
            "{out:?}"
        );
        assert_eq!(
            kept(&f),
            ["customer", "invoice_date", "invoice_number", "total", "vat"]
        );
        let required = inner_schema(&f)["required"].as_array().unwrap().clone();
        assert!(!required.contains(&json!("phone")), "{required:?}");
        let phone = out.iter().find(|f| f.name == "phone").unwrap();
        assert_eq!(phone.label, "Phone");
        let back = with_field(&f, "phone", &phone.schema);
        assert!(kept(&back).contains(&"phone".to_string()));
        assert!(
            inner_schema(&back)["required"]
                .as_array()
                .unwrap()
                .contains(&json!("phone"))
        );
        // The org's schema of the kind has it: it stays.
        let mut f = rf(&[
            "invoice_number",
            "invoice_date",
            "customer",
            "vat",
            "total",
            "phone",
        ]);
        assert!(split(Some(&a), &["phone".to_string()], &mut f).is_empty());
    }

    #[test]
    fn a_small_schema_keeps_four_fields_but_never_a_double() {
        let a = analysis::analyse(TEXT);
        let mut f = rf(&["invoice_number", "phone", "invoice"]);
        let out = split(Some(&a), &[], &mut f);
        assert_eq!(
            out.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
            ["invoice"]
        );
        assert_eq!(kept(&f), ["invoice_number", "phone"]);
    }
}
