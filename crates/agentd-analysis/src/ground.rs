//! Grounding: whether each value of an extraction is in the document, after the normalisation
//! the analysis uses — an amount `1763.58` is grounded by `1.763,58 €`, a date `2026-11-05` by
//! `05.11.2026` or `5. November 2026`, `DE89370400440532013000` by `DE89 3704 0044 0532 0130 00`,
//! a number by its OCR-damaged form (`2O,OO`). Text is compared without case, accents or
//! repeated spaces. Booleans and empty values are not checked (they are judgements or
//! absences, not copies).

use super::values::{self, DateOrder, DecimalStyle};
use chrono::NaiveDate;
use regex::Regex;
use serde_json::Value;
use std::collections::HashSet;
use std::sync::LazyLock;

/// Characters of a document indexed (a value only past them counts as not found).
pub const MAX_CHARS: usize = 1_000_000;
/// Values checked at most per extraction; later ones are not flagged.
pub const MAX_VALUES: usize = 2_000;

/// What a text contains, normalised for lookups.
pub struct Index {
    /// Every reading of every number, sorted.
    numbers: Vec<f64>,
    dates: HashSet<NaiveDate>,
    /// Folded, whitespace collapsed (also the OCR-repaired text).
    text: String,
    /// Folded, letters and digits only.
    compact: String,
}

static NUMBER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\d(?:[\d.,'’]*\d)?").expect("regex"));
static SPACED_NUMBER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\d{1,3}(?:[ \u{a0}\u{202f}]\d{3})+(?:[.,]\d+)?").expect("regex"));

fn compact(s: &str) -> String {
    values::fold(s)
        .chars()
        .filter(|c| c.is_alphanumeric())
        .collect()
}

fn collapsed(s: &str) -> String {
    values::fold(s)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

impl Index {
    /// Indexes `text` (its first [`MAX_CHARS`] characters).
    pub fn new(text: &str) -> Index {
        let text: String = text.chars().take(MAX_CHARS).collect();
        let repaired: String = text
            .lines()
            .map(values::repair_digits)
            .collect::<Vec<_>>()
            .join("\n");
        let mut numbers = Vec::new();
        let mut dates = HashSet::new();
        // The OCR-repaired text only where repairs changed something.
        let texts: Vec<&String> = if repaired == text {
            vec![&text]
        } else {
            vec![&text, &repaired]
        };
        for t in texts {
            for m in NUMBER.find_iter(t).chain(SPACED_NUMBER.find_iter(t)) {
                for style in [DecimalStyle::Point, DecimalStyle::Comma] {
                    numbers.extend(values::parse_number(m.as_str(), style));
                }
            }
            // Every reading of `03/04/2026` is kept whatever the order.
            for d in values::dates_in(t, DateOrder::DayFirst) {
                dates.extend(d.readings);
            }
        }
        numbers.retain(|n: &f64| n.is_finite());
        numbers.sort_by(f64::total_cmp);
        numbers.dedup();
        Index {
            numbers,
            dates,
            text: format!("{}\n{}", collapsed(&text), collapsed(&repaired)),
            compact: format!("{}\n{}", compact(&text), compact(&repaired)),
        }
    }

    fn has_number(&self, n: f64) -> bool {
        let n = n.abs();
        let tol = 0.005 + n * 1e-9;
        let i = self.numbers.partition_point(|x| *x < n - tol);
        self.numbers.get(i).is_some_and(|x| (x - n).abs() <= tol)
    }

    /// Whether the text contains `v` (after normalisation). Null, empty strings and booleans
    /// count as contained.
    pub fn contains(&self, v: &Value) -> bool {
        match v {
            Value::Null | Value::Bool(_) => true,
            Value::Number(n) => n.as_f64().is_some_and(|n| self.has_number(n)),
            Value::String(s) => self.has_text(s),
            Value::Array(_) | Value::Object(_) => true,
        }
    }

    fn has_text(&self, s: &str) -> bool {
        let s = s.trim();
        if s.is_empty() {
            return true;
        }
        let c = collapsed(s);
        if self.text.contains(&c) {
            return true;
        }
        let k = compact(s);
        if !k.is_empty() && self.compact.contains(&k) {
            return true;
        }
        if let Some(d) = values::parse_date(s, DateOrder::DayFirst)
            && (self.dates.contains(&d)
                || values::parse_date(s, DateOrder::MonthFirst)
                    .is_some_and(|m| self.dates.contains(&m)))
        {
            return true;
        }
        [DecimalStyle::Point, DecimalStyle::Comma]
            .into_iter()
            .filter_map(|st| values::parse_number(s, st))
            .any(|n| self.has_number(n))
    }
}

/// The top-level field a pointer of [`ungrounded`] names (`/total` → `total`, unescaped), or
/// `None` for a value inside a table or an object (`/line_items/0/amount`).
pub fn top_level_field(pointer: &str) -> Option<String> {
    let field = pointer.strip_prefix('/').filter(|f| !f.contains('/'))?;
    Some(field.replace("~1", "/").replace("~0", "~"))
}

/// The JSON pointers (`/total`, `/line_items/0/amount`) of the values of `result` that `text`
/// does not contain, in document order of the result.
pub fn ungrounded(result: &Value, text: &str) -> Vec<String> {
    let index = Index::new(text);
    let mut out = Vec::new();
    let mut seen = 0usize;
    walk(result, String::new(), &index, &mut out, &mut seen);
    out
}

fn walk(v: &Value, path: String, index: &Index, out: &mut Vec<String>, seen: &mut usize) {
    if *seen >= MAX_VALUES {
        return;
    }
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let key = k.replace('~', "~0").replace('/', "~1");
                walk(x, format!("{path}/{key}"), index, out, seen);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                walk(x, format!("{path}/{i}"), index, out, seen);
            }
        }
        leaf => {
            *seen += 1;
            if !index.contains(leaf) {
                out.push(if path.is_empty() { "/".into() } else { path });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn normalised_values_are_grounded() {
        let text = "Gesamtbetrag: 1.763,58 €\nRechnungsdatum: 05.11.2026\nLieferung 5. November 2026\n\
                    IBAN DE89 3704 0044 0532 0130 00\nKunde: Hansen  Logistik AG\nGEG. BAR 2O,OO\n\
                    Weight 76 684 kg";
        let result = json!({
            "total": 1763.58, "invoice_date": "2026-11-05", "delivery": "05/11/2026",
            "iban": "DE89370400440532013000", "customer": "hansen logistik ag", "paid": 20,
            "weight": 76684, "approved": true, "note": null,
            "lines": [{"amount": "1763.58"}],
        });
        assert_eq!(ungrounded(&result, text), Vec::<String>::new());
    }

    #[test]
    fn values_the_document_lacks_are_flagged() {
        let text = "Total: 1,250.00\nDate: 2026-11-02\nCustomer: Blue Fox";
        let result = json!({
            "total": 0.0, "date": "2026-12-02", "customer": "Red Fox",
            "items": [{"sku": "X-1"}], "total_ok": 1250,
        });
        let mut flagged = ungrounded(&result, text);
        flagged.sort();
        assert_eq!(
            flagged,
            vec!["/customer", "/date", "/items/0/sku", "/total"]
        );
    }

    #[test]
    fn a_pointer_names_a_top_level_field_or_none() {
        let flagged = ungrounded(&json!({"a/b~": "x", "t": [{"c": "y"}]}), "");
        let fields: Vec<Option<String>> = flagged.iter().map(|p| top_level_field(p)).collect();
        assert_eq!(fields, [Some("a/b~".to_string()), None]);
        assert_eq!(top_level_field("/"), Some(String::new()));
        assert_eq!(top_level_field("total"), None);
    }

    #[test]
    fn odd_input_does_not_panic() {
        let _ = ungrounded(&json!({"a/b": "ß", "c~": [1, "🙂"]}), "🙂 ß ١٢ 1,,2 ..");
        assert_eq!(ungrounded(&json!("x"), ""), vec!["/"]);
    }
}
