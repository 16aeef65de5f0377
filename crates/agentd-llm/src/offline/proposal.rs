//! The offline model's auto_create proposal, built from the document analysis
//! ([`crate::analysis`]): the candidates become the schema's fields (English names where the
//! lexicon or the glossary names the label, the label itself otherwise; amounts numbers, dates
//! `YYYY-MM-DD` strings, codes strings, table rows a list), the prompt names each field's label,
//! and the extraction answer takes each field's value from the same analysis of the text the
//! extraction request carries.

use crate::analysis::lexicon::snake;
use crate::analysis::{self, Analysis, Candidate};
use serde_json::{Map, Value, json};

/// Fields proposed at most (the analysis returns up to [`analysis::MAX_CANDIDATES`]).
pub const MAX_FIELDS: usize = 25;

/// A field the offline model proposes.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub name: String,
    /// The JSON type of the value ("string", "number", "boolean", "array").
    pub kind: &'static str,
    pub description: String,
    /// For a list: each item's fields and their JSON types.
    pub items: Vec<(String, &'static str)>,
}

fn json_type(field_type: &str) -> &'static str {
    match field_type {
        "number" => "number",
        "boolean" => "boolean",
        "array" => "array",
        _ => "string",
    }
}

/// A short description: the document's label (or the name in words) and, for dates and
/// lists, the form of the value.
fn describe(name: &str, label: Option<&str>, field_type: &str) -> String {
    let what = label.map_or_else(|| name.replace('_', " "), str::to_string);
    match field_type {
        "date" => format!("{what} (YYYY-MM-DD)"),
        "array" => format!("{what} (one entry per row)"),
        _ => what,
    }
}

/// The fields of the analysis of `text`.
pub fn infer_fields(text: &str) -> Vec<Field> {
    fields_of(&analysis::analyse(text))
}

/// Whether the offline model proposes a candidate: not the issuer's address from the letter
/// head (`supplier_address`, `merchant_address`, …) nor a time of day, which reviewers do not
/// ask for (no labelled document of `samples/eval`'s dev part has one).
fn proposed(name: &str) -> bool {
    const ISSUERS: [&str; 10] = [
        "supplier",
        "merchant",
        "buyer",
        "bank",
        "employer",
        "laboratory",
        "insurer",
        "carrier",
        "issuer",
        "payer",
    ];
    let letterhead_address = name
        .strip_suffix("_address")
        .is_some_and(|who| ISSUERS.contains(&who));
    !letterhead_address && name != "time"
}

/// The fields of an analysis: its candidates but those not [`proposed`], at most
/// [`MAX_FIELDS`].
pub fn fields_of(a: &Analysis) -> Vec<Field> {
    a.candidates
        .iter()
        .filter(|c| proposed(&c.name))
        .take(MAX_FIELDS)
        .map(|c| {
            let label = matches!(
                c.source,
                analysis::Source::Label(_) | analysis::Source::Table
            )
            .then_some(c.label.as_str());
            Field {
                name: c.name.clone(),
                kind: json_type(c.kind.field_type()),
                description: describe(&c.name, label, c.kind.field_type()),
                items: c
                    .item_fields
                    .iter()
                    .map(|(n, t)| (n.clone(), json_type(t)))
                    .collect(),
            }
        })
        .collect()
}

/// The fields of the candidates a first message lists ([`analysis::parse_brief`]): the
/// analysis of the whole document, where the message shows only an excerpt of it.
pub fn fields_listed(listed: &[analysis::Listed]) -> Vec<Field> {
    listed
        .iter()
        .filter(|l| proposed(&l.name))
        .take(MAX_FIELDS)
        .map(|l| Field {
            name: l.name.clone(),
            kind: json_type(&l.field_type),
            description: describe(&l.name, l.label.as_deref(), &l.field_type),
            items: l
                .items
                .iter()
                .map(|(n, t)| (n.clone(), json_type(t)))
                .collect(),
        })
        .collect()
}

/// A strict OpenAI `response_format` for `fields` (every field required and nullable).
pub fn response_format(name: &str, fields: &[Field]) -> Value {
    let mut props = Map::new();
    for f in fields {
        let p = if f.kind == "array" {
            let mut item = Map::new();
            for (n, t) in &f.items {
                item.insert(n.clone(), json!({"type": [t, "null"]}));
            }
            let required: Vec<&String> = item.keys().collect();
            json!({"type": ["array", "null"], "description": f.description,
                   "items": {"type": "object", "properties": item, "required": required,
                             "additionalProperties": false}})
        } else {
            json!({"type": [f.kind, "null"], "description": f.description})
        };
        props.insert(f.name.clone(), p);
    }
    if fields.is_empty() {
        props.insert(
            "summary".into(),
            json!({"type": ["string", "null"], "description": "What the document is about"}),
        );
    }
    let required: Vec<&String> = props.keys().collect();
    let schema_name = {
        let s = snake(name, 48);
        if s.is_empty() {
            "document".to_string()
        } else {
            s
        }
    };
    json!({"type": "json_schema", "json_schema": {"name": schema_name, "strict": true, "schema": {
        "type": "object", "properties": props, "required": required, "additionalProperties": false}}})
}

/// `create_schema`'s compact `fields` argument for `fields`: name → type, a list as
/// `[{item field: type}]` (a third of the size of the strict `response_format`).
pub fn fields_arg(fields: &[Field]) -> Value {
    let mut m = Map::new();
    for f in fields {
        let v = if f.kind == "array" {
            let item: Map<String, Value> =
                f.items.iter().map(|(n, t)| (n.clone(), json!(t))).collect();
            json!([item])
        } else {
            json!(f.kind)
        };
        m.insert(f.name.clone(), v);
    }
    if m.is_empty() {
        m.insert("summary".into(), json!("string"));
    }
    Value::Object(m)
}

/// The prompt's text: each field with the label it is found under.
pub fn prompt_content(fields: &[Field]) -> String {
    let list: Vec<String> = fields
        .iter()
        .map(|f| format!("- {}: {}", f.name, f.description))
        .collect();
    format!(
        "Extract these fields. Null when absent; identifiers exactly as written; dates \
         YYYY-MM-DD; amounts as plain numbers.\n{}",
        list.join("\n")
    )
}

fn types_of(p: &Value) -> Vec<&str> {
    match &p["type"] {
        Value::String(s) => vec![s.as_str()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    }
}

/// A table cell in the type its item property asks for: the analysis of an extraction's text
/// (an excerpt, redacted) may read a column differently from the proposal's (`-65,00` as
/// text where the schema says number), and a schema reused from another document may type a
/// column otherwise, so a cell is converted, or null when it cannot be.
fn cell(v: Value, p: &Value, style: analysis::values::DecimalStyle) -> Value {
    let types = types_of(p);
    let ok = |t: &str| types.is_empty() || types.contains(&t);
    match v {
        Value::Null => Value::Null,
        Value::String(s) if !ok("string") && (ok("number") || ok("integer")) => {
            analysis::values::parse_number(&s, style).map_or(Value::Null, analysis::number_value)
        }
        Value::String(_) if !ok("string") => Value::Null,
        Value::Number(n) if !ok("number") && !ok("integer") && ok("string") => {
            Value::String(n.to_string())
        }
        Value::Bool(b) if !ok("boolean") && ok("string") => Value::String(b.to_string()),
        other => other,
    }
}

/// A candidate's value in the type a schema property asks for (null when it cannot be).
fn typed(c: &Candidate, p: &Value, text: &str) -> Value {
    let types = types_of(p);
    match &c.value {
        Value::Array(rows) if types.contains(&"array") => {
            let item_props = p.pointer("/items/properties").and_then(Value::as_object);
            let style = analysis::values::decimal_style(text);
            let rows = rows
                .iter()
                .map(|r| match item_props {
                    Some(props) => Value::Object(
                        props
                            .iter()
                            .map(|(k, p)| {
                                let v = r.get(k).cloned().unwrap_or(Value::Null);
                                (k.clone(), cell(v, p, style))
                            })
                            .collect(),
                    ),
                    None => r.clone(),
                })
                .collect();
            Value::Array(rows)
        }
        Value::Array(_) => Value::Null,
        Value::Number(_) if types.contains(&"number") || types.contains(&"integer") => {
            c.value.clone()
        }
        Value::Bool(_) if types.contains(&"boolean") => c.value.clone(),
        _ if types.contains(&"string") || types.is_empty() => match &c.value {
            Value::String(s) => Value::String(s.clone()),
            _ => Value::String(c.raw.clone()),
        },
        _ => Value::Null,
    }
}

/// The extraction answer: each property's value from the analysis of `text`, found by the
/// property's name or by its label (a schema someone else named after the document's label).
pub fn extract(text: &str, schema: &Value) -> Value {
    extract_from(&analysis::analyse(text), text, schema)
}

/// [`extract`] from an analysis of `text` already made.
pub fn extract_from(a: &analysis::Analysis, text: &str, schema: &Value) -> Value {
    let mut out = Map::new();
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, p) in props {
            let by_label = || {
                a.candidates
                    .iter()
                    .find(|c| snake(&analysis::labels::without_parentheses(&c.label), 48) == *name)
            };
            // A field a refine renamed keeps its old name in its description.
            let renamed = || {
                let d = p.get("description").and_then(Value::as_str)?;
                let (_, was) = d.rsplit_once(super::refine::RENAMED_FROM)?;
                a.get(was.trim_end_matches(')'))
            };
            let v = match a.get(name).or_else(by_label).or_else(renamed) {
                Some(c) => typed(c, p, text),
                None if name == "summary" => Value::String(text.chars().take(200).collect()),
                None => Value::Null,
            };
            out.insert(name.clone(), v);
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn infers_fields_and_extracts_values() {
        let text = "ACME Corp\nInvoice Number: INV-2041\nInvoice Date: 2026-03-14\nTotal Due: $1,234.50\nCustomer: Blue Fox Ltd\n";
        let f = infer_fields(text);
        let names: Vec<_> = f.iter().map(|f| (f.name.as_str(), f.kind)).collect();
        assert_eq!(
            names,
            vec![
                ("invoice_number", "string"),
                ("invoice_date", "string"),
                ("total", "number"),
                ("customer", "string"),
                // The letter head's company.
                ("supplier", "string"),
            ]
        );
        let rf = response_format("invoice", &f);
        let v = extract(text, &rf["json_schema"]["schema"]);
        assert_eq!(v["total"], json!(1234.5));
        assert_eq!(v["invoice_number"], json!("INV-2041"));
        assert_eq!(v["invoice_date"], json!("2026-03-14"));
        assert_eq!(v["customer"], json!("Blue Fox Ltd"));
        assert_eq!(v["supplier"], json!("ACME Corp"));
    }

    #[test]
    fn a_cell_takes_its_item_propertys_type() {
        use crate::analysis::values::DecimalStyle;
        let number = json!({"type": ["number", "null"]});
        let text = json!({"type": ["string", "null"]});
        assert_eq!(
            cell(json!("-65,00"), &number, DecimalStyle::Comma),
            json!(-65)
        );
        assert_eq!(
            cell(json!("n/a"), &number, DecimalStyle::Comma),
            json!(null)
        );
        assert_eq!(cell(json!(12.5), &text, DecimalStyle::Point), json!("12.5"));
        assert_eq!(cell(json!("x"), &text, DecimalStyle::Point), json!("x"));
    }

    #[test]
    fn a_schema_named_after_labels_is_filled_too() {
        let text = "Rechnungsnummer: RE-1\nGesamtbetrag: 1.763,58 €\n";
        let schema = json!({"properties": {"rechnungsnummer": {"type": "string"},
            "gesamtbetrag": {"type": ["number", "null"]}, "other": {"type": "string"}}});
        assert_eq!(
            extract(text, &schema),
            json!({"rechnungsnummer": "RE-1", "gesamtbetrag": 1763.58, "other": null})
        );
    }

    #[test]
    fn tables_become_a_list_field() {
        let text = "INVOICE\nDescription      Qty    Unit    Amount\nWidget           2      3.00    6.00\nGadget           1      4.50    4.50\n\nTotal: 10.50\n";
        let f = infer_fields(text);
        let list = f.iter().find(|f| f.name == "line_items").expect("a list");
        assert_eq!(list.kind, "array");
        // That the schema is strict, and that the compact form builds one the same extraction
        // fills, is checked where the schema tools live (agentd-agent's `tools::schema_forms`).
        let rf = response_format("invoice", &f);
        let v = extract(text, &rf["json_schema"]["schema"]);
        assert_eq!(v["line_items"][1]["amount"], json!(4.5));
        assert_eq!(v["line_items"][0]["description"], json!("Widget"));
    }
}
