//! Field and schema names as agentd stores them: snake_case ASCII, whatever language or
//! punctuation the model or the document used; and never personal data: a field named after a
//! redaction token (`phone_1`, `PERSON_2`: what the model sees in place of personal data) or
//! after a value of the document (`n_0003_00012877`, an invoice's number) is renamed.

use serde_json::{Map, Value};

/// `Invoice Number` → `invoice_number` (at most 64 characters; `document` when nothing is left).
pub fn schema_name(name: &str) -> String {
    let s = snake(name, 64);
    if s.is_empty() { "document".into() } else { s }
}

pub use crate::analysis::lexicon::snake;

/// The neutral name of a field named after a personal-data token (`phone_1`, `PERSON_2`,
/// `email_12`): the token's class (`phone`, `person_name`); `None` for any other name.
pub fn token_field(name: &str) -> Option<&'static str> {
    let (prefix, n) = name.trim().rsplit_once('_')?;
    if n.is_empty() || n.len() > 6 || !n.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    use crate::pii::Kind;
    Some(match Kind::from_prefix(&prefix.to_ascii_uppercase())? {
        Kind::Email => "email",
        Kind::Phone => "phone",
        Kind::Iban => "iban",
        Kind::Card => "card_number",
        Kind::Id => "id_number",
        Kind::Person => "person_name",
    })
}

/// Renames the properties of a strict `response_format`'s schema (nested objects and list
/// items too) that are personal-data tokens or a document value: `renames` maps a property
/// name to its replacement (see [`token_field`]; document values come from the analysis).
/// Returns a note per rename, for the tool's result.
pub fn rename_fields(
    response_format: &mut Value,
    renames: &dyn Fn(&str) -> Option<String>,
) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(schema) = response_format.pointer_mut("/json_schema/schema") {
        rename_in(schema, "fields", renames, &mut notes);
    }
    notes
}

fn rename_in(
    node: &mut Value,
    path: &str,
    renames: &dyn Fn(&str) -> Option<String>,
    notes: &mut Vec<String>,
) {
    let Some(obj) = node.as_object_mut() else {
        return;
    };
    if let Some(items) = obj.get_mut("items") {
        rename_in(items, &format!("{path}[]"), renames, notes);
    }
    let Some(props) = obj.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    let old = std::mem::take(props);
    let mut new = Map::new();
    let mut changed: Vec<(String, String)> = Vec::new();
    let taken: Vec<String> = old.keys().cloned().collect();
    for (key, mut value) in old {
        rename_in(&mut value, &format!("{path}.{key}"), renames, notes);
        let target = renames(&key).filter(|t| *t != key).map(|base| {
            let mut name = base.clone();
            let mut k = 1;
            while new.contains_key(&name) || (taken.contains(&name) && name != key) {
                k += 1;
                name = format!("{base}_alt{k}");
            }
            name
        });
        match target {
            Some(t) => {
                notes.push(format!(
                    "{path}: renamed field {key:?} to {t:?} (a field is named after what its \
                     value is, never after a personal-data token or a value of the document)"
                ));
                changed.push((key, t.clone()));
                new.insert(t, value);
            }
            None => {
                new.insert(key, value);
            }
        }
    }
    *props = new;
    if let Some(Value::Array(req)) = obj.get_mut("required") {
        for r in req.iter_mut() {
            if let Some((_, t)) = changed.iter().find(|(k, _)| r.as_str() == Some(k.as_str())) {
                *r = Value::String(t.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn token_names_get_their_class() {
        assert_eq!(token_field("phone_1"), Some("phone"));
        assert_eq!(token_field("PERSON_2"), Some("person_name"));
        assert_eq!(token_field("email_12"), Some("email"));
        assert_eq!(token_field("invoice_1"), None);
        assert_eq!(token_field("phone"), None);
        assert_eq!(token_field("phone_"), None);
        assert_eq!(token_field("_1"), None);
        assert_eq!(token_field("ÄÖ_1"), None);
    }

    #[test]
    fn renames_reach_nested_fields_and_required() {
        let mut rf = json!({"type": "json_schema", "json_schema": {"name": "x", "strict": true,
            "schema": {"type": "object", "required": ["phone_1", "phone", "lines"],
                "additionalProperties": false, "properties": {
                "phone_1": {"type": ["string", "null"]},
                "phone": {"type": ["string", "null"]},
                "lines": {"type": ["array", "null"], "items": {"type": "object",
                    "required": ["person_2"], "additionalProperties": false,
                    "properties": {"person_2": {"type": ["string", "null"]}}}}}}}});
        let notes = rename_fields(&mut rf, &|k| token_field(k).map(str::to_string));
        let s = &rf["json_schema"]["schema"];
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(s["properties"].get("phone_1").is_none());
        assert!(s["properties"].get("phone_alt2").is_some());
        assert_eq!(s["required"], json!(["phone_alt2", "phone", "lines"]));
        assert_eq!(
            s["properties"]["lines"]["items"]["required"],
            json!(["person_name"])
        );
        crate::tools::schemas::validate_response_format(&rf).expect("still valid");
    }

    #[test]
    fn snake_keeps_the_letters_of_accented_names() {
        assert_eq!(snake("Numéro de facture", 64), "numero_de_facture");
        assert_eq!(snake("Arrivée", 64), "arrivee");
        assert_eq!(snake("Straße / Größe", 64), "strasse_grosse");
        assert_eq!(snake("Invoice Number", 64), "invoice_number");
        assert_eq!(snake("  Total (€) ", 64), "total");
    }
}
