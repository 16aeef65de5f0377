//! Reuse before creating (issue 28, item 4): a schema `create_schema` is about to add is first
//! compared, by its top-level field names, with the latest version of each schema the org
//! already has. When one fits — the same kind of document — the run reuses it: as it is when it
//! holds every field the run wanted, else as a new version with the missing fields added
//! ([`extend`]). An org that receives fifty invoices then has one invoice schema, not fifty.
//!
//! The fit ([`fit`]) is by field names, compared without case, `_` or spaces (the analysis
//! names known labels in English in every language, so a German and a French invoice meet),
//! and by the kind of document the analysis found (`crate::analysis::DocKind`; recorded on the
//! schema, migration 0088): a schema made for the same kind of document fits when it shares a
//! field name; one made for **another** known kind never fits; one whose kind (or the new
//! document's) is not known fits when it shares at least [`MIN_SHARED`] names and at least
//! [`MIN_SHARE`] of the smaller of the two field sets. Field names alone are not enough: the
//! offline provider's proposals for two utility bills share one field of 13 to 16, while an
//! invoice and a receipt share `date`, `total` and `tax`, and an invoice and a purchase order
//! or a utility bill share most of theirs — in one org, those joined the invoice schema, which
//! grew to the field cap. `agentd eval --reuse` measures it over uploads of the same kind, and
//! with `--mixed` over every kind in one org.

use crate::store::schemas::{ReuseCandidate, SchemaRow};
use serde_json::{Map, Value};

/// Schemas compared at most: the org's newest (the latest version of each).
pub const MAX_COMPARED: i64 = 200;

/// Shared field names a fit needs at least.
pub const MIN_SHARED: usize = 3;

/// The share of the smaller field set that must be shared.
pub const MIN_SHARE: f64 = 0.5;

/// Fields a reused schema grows to at most; more proposed fields are left out (and named).
pub const MAX_FIELDS: usize = 60;

/// How a schema fits the fields of a new one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fit {
    /// Made for the same kind of document.
    pub same_kind: bool,
    /// Field names both have.
    pub shared: usize,
    /// `shared` over the smaller field count.
    pub share: f64,
}

/// The inner schema's `properties` of a `response_format`.
fn properties(rf: &Value) -> Option<&Map<String, Value>> {
    rf.pointer("/json_schema/schema/properties")
        .and_then(Value::as_object)
}

/// The top-level field names of a `response_format`.
pub fn fields(rf: &Value) -> Vec<String> {
    properties(rf)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// A field name as compared: lower case, letters and digits only (`Invoice_Number`,
/// `invoice number` and `invoicenumber` are one name).
fn key(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

/// Whether two schemas were made for the same kind of document.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kinds {
    Same,
    /// Both kinds known, and not the same: never a fit.
    Different,
    /// One of them (or both) of no known kind: the field names decide.
    Unknown,
}

impl Kinds {
    /// The kinds of a new document and of an existing schema (`None`: not known).
    pub fn of(new: Option<&str>, existing: Option<&str>) -> Kinds {
        match (new, existing) {
            (Some(a), Some(b)) if a == b => Kinds::Same,
            (Some(_), Some(_)) => Kinds::Different,
            _ => Kinds::Unknown,
        }
    }
}

/// How `existing` fits `proposed` (both field names, of schemas made for documents of `kinds`),
/// or `None` when it does not.
pub fn fit(proposed: &[String], existing: &[String], kinds: Kinds) -> Option<Fit> {
    if kinds == Kinds::Different {
        return None;
    }
    let same_kind = kinds == Kinds::Same;
    let mut theirs: Vec<String> = existing.iter().map(|n| key(n)).collect();
    theirs.sort();
    theirs.dedup();
    let mut ours: Vec<String> = proposed.iter().map(|n| key(n)).collect();
    ours.sort();
    ours.dedup();
    let shared = ours
        .iter()
        .filter(|k| theirs.binary_search(k).is_ok())
        .count();
    let smaller = ours.len().min(theirs.len());
    if smaller == 0 {
        return None;
    }
    let share = shared as f64 / smaller as f64;
    let fits = (same_kind && shared >= 1) || (shared >= MIN_SHARED && share >= MIN_SHARE);
    fits.then_some(Fit {
        same_kind,
        shared,
        share,
    })
}

/// The schema of `rows` that fits `proposed` (a `response_format`, for a document of `kind`,
/// `None` when not known) best: one of the same kind first, then the largest share, then the most shared fields, then
/// an active one, then the newest (`rows` come newest first).
pub fn best<'a>(
    proposed: &Value,
    kind: Option<&str>,
    rows: &'a [ReuseCandidate],
) -> Option<(&'a ReuseCandidate, Fit)> {
    let ours = fields(proposed);
    let mut best: Option<(&ReuseCandidate, Fit)> = None;
    for c in rows {
        let kinds = Kinds::of(kind, c.document_kind.as_deref());
        let Some(f) = fit(&ours, &fields(&c.row.response_format), kinds) else {
            continue;
        };
        let better = match &best {
            None => true,
            Some((b, bf)) => {
                let rank =
                    |r: &SchemaRow, f: &Fit| (f.same_kind, f.share, f.shared, r.status == "active");
                let (x, y) = (rank(&c.row, &f), rank(&b.row, bf));
                x.0 && !y.0
                    || (x.0 == y.0
                        && (x.1 > y.1
                            || (x.1 == y.1 && (x.2 > y.2 || (x.2 == y.2 && x.3 && !y.3)))))
            }
        };
        if better {
            best = Some((c, f));
        }
    }
    best
}

/// `existing` (a `response_format`) with the fields of `proposed` it lacks added after its own
/// (each also `required` when `existing` lists its fields there, as the strict form does), up
/// to [`MAX_FIELDS`]. Returns the new `response_format`, the names added and the names left
/// out for the cap.
pub fn extend(existing: &Value, proposed: &Value) -> (Value, Vec<String>, Vec<String>) {
    let mut out = existing.clone();
    let (mut added, mut left_out) = (Vec::new(), Vec::new());
    let Some(theirs) = properties(proposed) else {
        return (out, added, left_out);
    };
    let Some(schema) = out
        .pointer_mut("/json_schema/schema")
        .and_then(Value::as_object_mut)
    else {
        return (out, added, left_out);
    };
    let mut have: Vec<String> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().map(|k| key(k)).collect())
        .unwrap_or_default();
    let mut count = have.len();
    let mut new_props = Vec::new();
    for (name, def) in theirs {
        let k = key(name);
        if have.contains(&k) {
            continue;
        }
        if count >= MAX_FIELDS {
            left_out.push(name.clone());
            continue;
        }
        have.push(k);
        count += 1;
        new_props.push((name.clone(), def.clone()));
    }
    let required_lists_all = match (schema.get("required"), schema.get("properties")) {
        (Some(Value::Array(r)), Some(Value::Object(p))) => r.len() >= p.len(),
        _ => false,
    };
    if let Some(Value::Object(p)) = schema.get_mut("properties") {
        for (name, def) in &new_props {
            p.insert(name.clone(), def.clone());
            added.push(name.clone());
        }
    }
    if required_lists_all && let Some(Value::Array(r)) = schema.get_mut("required") {
        r.extend(new_props.iter().map(|(n, _)| Value::String(n.clone())));
    }
    (out, added, left_out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rf(fields: &[&str]) -> Value {
        let props: Map<String, Value> = fields
            .iter()
            .map(|f| (f.to_string(), json!({"type": ["string", "null"]})))
            .collect();
        json!({"type": "json_schema", "json_schema": {"name": "x", "strict": true, "schema": {
            "type": "object", "properties": props, "required": fields,
            "additionalProperties": false}}})
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn documents_of_one_kind_fit_and_of_another_do_not() {
        let invoice = names(&[
            "invoice_number",
            "issue_date",
            "due_date",
            "supplier",
            "total",
            "tax",
            "iban",
        ]);
        let other_invoice = names(&["Invoice Number", "issue_date", "total", "vat_id", "tax"]);
        let f = fit(&other_invoice, &invoice, Kinds::Unknown).expect("fits");
        assert_eq!(f.shared, 4);
        let receipt = names(&[
            "merchant",
            "date",
            "total",
            "tax",
            "payment_method",
            "items",
        ]);
        assert_eq!(
            fit(&receipt, &invoice, Kinds::Unknown),
            None,
            "two shared names of six"
        );
        assert_eq!(
            fit(&names(&["total"]), &invoice, Kinds::Unknown),
            None,
            "too few shared"
        );
        assert_eq!(fit(&[], &invoice, Kinds::Unknown), None);
        // Made for the same kind of document: one shared field is enough.
        let water = names(&["account_holder", "meter_number", "volume_m3"]);
        let power = names(&["account_holder", "kwh", "tariff", "supplier"]);
        assert_eq!(fit(&water, &power, Kinds::Unknown), None);
        assert!(fit(&water, &power, Kinds::Same).is_some_and(|f| f.same_kind));
        assert_eq!(
            fit(&names(&["x"]), &power, Kinds::Same),
            None,
            "nothing shared"
        );
        // Made for another kind of document: no fit, however many names are shared (an invoice
        // and a purchase order share most of theirs).
        let order = names(&["invoice_number", "issue_date", "supplier", "total", "tax"]);
        assert!(fit(&order, &invoice, Kinds::Unknown).is_some());
        assert_eq!(fit(&order, &invoice, Kinds::Different), None);
    }

    #[test]
    fn kinds_differ_only_when_both_are_known() {
        assert_eq!(Kinds::of(Some("invoice"), Some("invoice")), Kinds::Same);
        assert_eq!(
            Kinds::of(Some("invoice"), Some("purchase_order")),
            Kinds::Different
        );
        assert_eq!(Kinds::of(None, Some("invoice")), Kinds::Unknown);
        assert_eq!(Kinds::of(Some("invoice"), None), Kinds::Unknown);
        assert_eq!(Kinds::of(None, None), Kinds::Unknown);
    }

    #[test]
    fn extending_adds_only_the_missing_fields_and_keeps_strict_required() {
        let old = rf(&["invoice_number", "total"]);
        let new = rf(&["Invoice_Number", "total", "iban"]);
        let (out, added, left) = extend(&old, &new);
        assert_eq!(added, vec!["iban"]);
        assert!(left.is_empty());
        let mut have = fields(&out);
        have.sort();
        assert_eq!(have, vec!["iban", "invoice_number", "total"]);
        assert_eq!(
            out.pointer("/json_schema/schema/required").unwrap(),
            &json!(["invoice_number", "total", "iban"])
        );
        let (same, none, _) = extend(&old, &rf(&["total"]));
        assert!(none.is_empty());
        assert_eq!(same, old);
    }

    #[test]
    fn a_reused_schema_grows_to_the_cap_and_names_what_it_left_out() {
        let many: Vec<String> = (0..MAX_FIELDS).map(|i| format!("f{i}")).collect();
        let old = rf(&many.iter().map(String::as_str).collect::<Vec<_>>());
        let (out, added, left) = extend(&old, &rf(&["f1", "extra"]));
        assert!(added.is_empty());
        assert_eq!(left, vec!["extra"]);
        assert_eq!(fields(&out).len(), MAX_FIELDS);
    }
}
