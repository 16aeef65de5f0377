//! Scoring one proposal against its labels: field recall (expected fields present in the
//! proposed schema, matched by normalised name or a listed alias), field precision (proposed
//! properties that match a label; every other one counts against it), their F1, and value
//! accuracy (extracted values equal to the expected ones after normalisation of case,
//! whitespace, number formats and dates). A property matches at most one label, by the label's
//! own name before any alias. The properties left then try the acceptable labels (the
//! document's other real fields, same order): one that matches counts for precision and not
//! against it; recall and value accuracy stay over the expected fields alone.
//!
//! A label still unmatched then tries the properties' **descriptions**: a field named in the
//! canonical language keeps the document's own label as its description (`credit_reason`,
//! described `Grund der Gutschrift`; docs/analysis.md), and the labels' aliases name the field
//! in the document's language (`grund_der_gutschrift`), so a translated name is matched by the
//! label it was made from. A description is compared folded like a name (accents dropped), without
//! the form of the value after it (`Datum (YYYY-MM-DD)`), and must equal the label's name or an
//! alias whole: a sentence describing a field matches nothing.
//!
//! Normalisation never guesses one reading of an ambiguous value: `03/04/2026` may be 3 April
//! or 4 March and `1.234` may be 1.234 or 1234, so each reading is a candidate and the value
//! matches when any candidate equals the expected value.

use super::labels::ExpectedField;
use chrono::NaiveDate;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A field name reduced to lowercase ASCII letters and digits: `Invoice Number`,
/// `invoice_number` and `invoiceNumber` all become `invoicenumber`.
pub fn norm_name(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

/// Text compared without case, surrounding punctuation or repeated whitespace.
pub fn norm_text(s: &str) -> String {
    let collapsed = s.split_whitespace().collect::<Vec<_>>().join(" ");
    collapsed
        .trim_matches(|c: char| c == '"' || c == '\'' || c == '.' || c == ',' || c == ';')
        .trim()
        .to_lowercase()
}

/// Forms of address a name may open with (`Mr`, `Mme`, `Hr.`, `dhr.`, `Sra.`): the labels keep
/// them where the document writes them, a proposal may leave them out, and the reverse.
const FORMS_OF_ADDRESS: [&str; 26] = [
    "mr", "mrs", "ms", "miss", "m", "mme", "mlle", "hr", "herr", "herrn", "frau", "fr", "sr",
    "sra", "srta", "d", "dna", "don", "sig", "sigra", "dhr", "mevr", "mevrouw", "exmo", "exma",
    "mx",
];

/// `text` (normalised by [`norm_text`]) without a leading form of address, when a name
/// follows it.
fn without_form_of_address(text: &str) -> &str {
    let Some((first, rest)) = text.split_once(' ') else {
        return text;
    };
    let word: String = first.chars().filter(|c| c.is_alphanumeric()).collect();
    let word = word.replace('ñ', "n");
    if FORMS_OF_ADDRESS.contains(&word.as_str()) && rest.chars().any(char::is_alphabetic) {
        rest.trim_start()
    } else {
        text
    }
}

/// Every number `s` may denote: currency symbols and codes, `%`, spaces and apostrophes used
/// as thousands separators are dropped; `1,234.50`, `1.234,50` and `1 234,50` read as 1234.5;
/// a lone separator followed by exactly three digits (`1.234`, `1,234`) reads both ways.
pub fn number_candidates(s: &str) -> Vec<f64> {
    let t = s.trim();
    // The number itself: from the first to the last digit. Around it only a sign, currency or
    // unit (`£`, `EUR`, `kg`, `kWh`, `%`) of a few letters; inside only separators.
    let (Some(first), Some(last)) = (
        t.find(|c: char| c.is_ascii_digit()),
        t.rfind(|c: char| c.is_ascii_digit()),
    ) else {
        return Vec::new();
    };
    let (before, middle, after) = (&t[..first], &t[first..=last], &t[last + 1..]);
    let short = |x: &str| {
        x.chars().filter(|c| c.is_alphabetic()).count() <= 5
            && !x.chars().any(|c| c.is_ascii_digit())
    };
    let separators =
        |c: char| c.is_ascii_digit() || matches!(c, '.' | ',' | ' ' | '\'' | '\u{a0}' | '\u{202f}');
    if !short(before) || !short(after) || !middle.chars().all(separators) {
        return Vec::new();
    }
    let negative = before.contains('-')
        || after.trim_start().starts_with('-')
        || (before.contains('(') && after.contains(')'));
    let kept: String = middle
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == '.' || *c == ',')
        .collect();
    let sign = if negative { -1.0 } else { 1.0 };
    let parse = |x: &str| x.parse::<f64>().ok().map(|n| n * sign);
    let (dots, commas) = (kept.matches('.').count(), kept.matches(',').count());
    let mut out = Vec::new();
    match (dots, commas) {
        (0, 0) => out.extend(parse(&kept)),
        (_, 0) | (0, _) => {
            let sep = if dots > 0 { '.' } else { ',' };
            let groups: Vec<&str> = kept.split(sep).collect();
            let thousands = groups.len() > 1
                && groups[1..].iter().all(|g| g.len() == 3)
                && !groups[0].is_empty()
                && groups[0].len() <= 3;
            if groups.len() == 2 {
                out.extend(parse(&kept.replace(sep, ".")));
            }
            if thousands {
                out.extend(parse(&kept.replace(sep, "")));
            }
        }
        _ => {
            // Both present: the last one is the decimal separator.
            let last_dot = kept.rfind('.').unwrap_or(0);
            let last_comma = kept.rfind(',').unwrap_or(0);
            let (thousands, decimal) = if last_dot > last_comma {
                (',', '.')
            } else {
                ('.', ',')
            };
            if kept.matches(decimal).count() == 1 {
                out.extend(parse(&kept.replace(thousands, "").replace(decimal, ".")));
            }
        }
    }
    out
}

/// Month-name prefixes in the set's languages (English, German, French, Spanish, Italian,
/// Dutch, Portuguese); the longest prefix a word starts with wins.
const MONTHS: [(&str, u32); 48] = [
    ("jan", 1),
    ("jän", 1),
    ("janv", 1),
    ("janu", 1),
    ("ene", 1),
    ("gen", 1),
    ("feb", 2),
    ("febr", 2),
    ("fév", 2),
    ("fev", 2),
    ("mar", 3),
    ("marc", 3),
    ("mär", 3),
    ("mae", 3),
    ("maa", 3),
    ("apr", 4),
    ("avr", 4),
    ("abr", 4),
    ("may", 5),
    ("mai", 5),
    ("mag", 5),
    ("mei", 5),
    ("jun", 6),
    ("juin", 6),
    ("giu", 6),
    ("jul", 7),
    ("juil", 7),
    ("lug", 7),
    ("aug", 8),
    ("aoû", 8),
    ("aou", 8),
    ("ago", 8),
    ("sep", 9),
    ("sept", 9),
    ("set", 9),
    ("oct", 10),
    ("octo", 10),
    ("okt", 10),
    ("ott", 10),
    ("out", 10),
    ("nov", 11),
    ("dec", 12),
    ("dez", 12),
    ("déc", 12),
    ("dic", 12),
    ("dice", 12),
    ("deze", 12),
    ("dece", 12),
];

/// The month a word names (full or abbreviated, in any of the set's languages).
fn month_of(word: &str) -> Option<u32> {
    let w = word.to_lowercase();
    // "mars" (French) and "march" both start with "mar"; "juin"/"juil" need four letters.
    let mut best: Option<(usize, u32)> = None;
    for (prefix, m) in MONTHS {
        if w.starts_with(prefix) && best.is_none_or(|(len, _)| prefix.len() > len) {
            best = Some((prefix.len(), m));
        }
    }
    best.map(|(_, m)| m)
}

/// The day of an ordinal written with a suffix: `4th`, `1st`, `1er`, `1º` → `4`, `1`, `1`.
fn ordinal_day(token: &str) -> Option<&str> {
    let digits = token.find(|c: char| !c.is_ascii_digit())?;
    let (day, suffix) = token.split_at(digits);
    let suffixes = ["st", "nd", "rd", "th", "er", "re", "e", "º", "ª", "o", "a"];
    (!day.is_empty() && day.len() <= 2 && suffixes.contains(&suffix.to_lowercase().as_str()))
        .then_some(day)
}

fn year_of(n: &str) -> Option<i32> {
    let y: i32 = n.parse().ok()?;
    match n.len() {
        4 => Some(y),
        2 => Some(2000 + y),
        _ => None,
    }
}

/// Every date `s` may denote: ISO `2026-11-02` (a time part is ignored), `02.11.2026`,
/// `11/02/2026` (both day-month orders), `2 November 2026`, `Nov 2, 2026`, `2. November 2026`,
/// `2 nov. 2026`, `4th November 2026`, `5 de noviembre de 2026`, two-digit years as 20xx.
pub fn date_candidates(s: &str) -> Vec<NaiveDate> {
    let s = s.trim();
    // `get`: the tenth byte of an extracted value may fall inside a character.
    if let Some(head) = s
        .get(..10)
        .filter(|h| h.as_bytes()[4] == b'-' && h.as_bytes()[7] == b'-')
        && let Ok(d) = NaiveDate::parse_from_str(head, "%Y-%m-%d")
    {
        return vec![d];
    }
    let mut numbers: Vec<&str> = Vec::new();
    let mut words: Vec<&str> = Vec::new();
    for token in s.split(|c: char| !c.is_alphanumeric()) {
        if token.is_empty() {
            continue;
        }
        if token.chars().all(|c| c.is_ascii_digit()) {
            numbers.push(token);
        } else if token.chars().all(char::is_alphabetic) {
            words.push(token);
        } else if let Some(day) = ordinal_day(token) {
            numbers.push(day);
        } else {
            return Vec::new();
        }
    }
    let ymd = |y: i32, m: u32, d: u32| NaiveDate::from_ymd_opt(y, m, d);
    let mut out = Vec::new();
    let months: Vec<u32> = words.iter().filter_map(|w| month_of(w)).collect();
    match (months.as_slice(), numbers.as_slice()) {
        ([m], [a, b]) => {
            // "2 November 2026" or "November 2, 2026": the four-digit number is the year.
            let (day, year) = if a.len() == 4 { (b, a) } else { (a, b) };
            if let (Ok(d), Some(y)) = (day.parse::<u32>(), year_of(year)) {
                out.extend(ymd(y, *m, d));
            }
        }
        ([], [a, b, c]) if words.is_empty() => {
            let n = |x: &str| x.parse::<u32>().ok();
            if a.len() == 4 {
                if let (Ok(y), Some(m), Some(d)) = (a.parse::<i32>(), n(b), n(c)) {
                    out.extend(ymd(y, m, d));
                }
            } else if let (Some(y), Some(x), Some(z)) = (year_of(c), n(a), n(b)) {
                out.extend(ymd(y, z, x));
                out.extend(ymd(y, x, z));
            }
        }
        _ => {}
    }
    out.dedup();
    out
}

/// True when `expected` is a date written `YYYY-MM-DD`.
fn as_iso_date(expected: &str) -> Option<NaiveDate> {
    (expected.len() == 10)
        .then(|| NaiveDate::parse_from_str(expected, "%Y-%m-%d").ok())
        .flatten()
}

fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Whether an extracted value equals the expected one after normalisation. `actual` is
/// `None` when the extraction has no such key.
pub fn values_match(expected: &Value, actual: Option<&Value>) -> bool {
    let actual = actual.unwrap_or(&Value::Null);
    let blank = match actual {
        Value::Null => true,
        Value::String(s) => s.trim().is_empty(),
        _ => false,
    };
    match expected {
        Value::Null => blank,
        _ if blank => false,
        Value::Number(e) => {
            let e = e.as_f64().unwrap_or(f64::NAN);
            let candidates = match actual {
                Value::Number(a) => a.as_f64().into_iter().collect(),
                Value::String(s) => number_candidates(s),
                // A table is labelled by its number of rows.
                Value::Array(rows) => vec![rows.len() as f64],
                _ => Vec::new(),
            };
            candidates
                .iter()
                .any(|a| (a - e).abs() <= 0.005 + e.abs() * 1e-9)
        }
        Value::Bool(e) => match actual {
            Value::Bool(a) => a == e,
            Value::String(s) => {
                let yes = ["true", "yes", "ja", "oui", "y", "1"];
                let no = ["false", "no", "nein", "non", "n", "0"];
                let t = norm_text(s);
                (*e && yes.contains(&t.as_str())) || (!*e && no.contains(&t.as_str()))
            }
            _ => false,
        },
        Value::String(e) => {
            let Some(a) = text_of(actual) else {
                return false;
            };
            if let Some(d) = as_iso_date(e) {
                return date_candidates(&a).contains(&d);
            }
            let (a, e) = (norm_text(&a), norm_text(e));
            a == e || without_form_of_address(&a) == without_form_of_address(&e)
        }
        Value::Array(_) | Value::Object(_) => expected == actual,
    }
}

/// How one expected field fared.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FieldScore {
    /// The label's field name.
    pub field: String,
    /// The schema property it matched, if any.
    pub matched: Option<String>,
    pub expected: Value,
    /// The extracted value of the matched property (null when absent).
    pub got: Value,
    pub value_ok: bool,
}

/// A document's scores.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Score {
    pub fields_expected: usize,
    /// Expected fields present in the proposed schema.
    pub fields_found: usize,
    /// Expected fields whose extracted value matched.
    pub values_correct: usize,
    /// Top-level properties of the proposed schema.
    pub fields_proposed: usize,
    /// `fields_found / fields_expected` (0 when nothing is expected).
    pub field_recall: f64,
    /// Proposed properties that matched an acceptable label (none of the expected).
    #[serde(default)]
    pub fields_acceptable: usize,
    /// Of those, the ones whose extracted value matched (a table's by its number of rows).
    #[serde(default)]
    pub acceptable_values_correct: usize,
    /// `(fields_found + fields_acceptable) / fields_proposed`: a property no label names —
    /// expected or acceptable — counts against it (0 when nothing was proposed).
    pub field_precision: f64,
    /// `fields_found / fields_proposed`: precision against the expected fields alone.
    #[serde(default)]
    pub strict_precision: f64,
    /// The harmonic mean of precision and recall (0 when both are 0).
    pub field_f1: f64,
    /// `values_correct / fields_expected`: a value cannot be right for a field not proposed.
    pub value_accuracy: f64,
    pub fields: Vec<FieldScore>,
    /// The acceptable labels a property matched (unmatched ones are not listed).
    #[serde(default)]
    pub acceptable: Vec<FieldScore>,
    /// Proposed properties no label matched.
    pub unmatched: Vec<String>,
}

/// `k / n`, 0 when `n` is 0.
pub fn ratio(k: usize, n: usize) -> f64 {
    if n == 0 { 0.0 } else { k as f64 / n as f64 }
}

/// The harmonic mean of precision and recall (0 when both are 0).
pub fn f1(precision: f64, recall: f64) -> f64 {
    if precision + recall == 0.0 {
        0.0
    } else {
        2.0 * precision * recall / (precision + recall)
    }
}

/// A property's description as a name (see the module docs): folded, without a trailing
/// `(…)` saying the value's form; empty when there is none.
pub fn norm_description(description: &str) -> String {
    let d = description.trim();
    let d = match d.strip_suffix(')').and_then(|h| h.rsplit_once(" (")) {
        Some((head, _)) => head,
        None => d,
    };
    norm_name(&crate::analysis::lexicon::snake(d, 200))
}

/// Matches labels to properties: each label takes an unused property of its own name first,
/// then the labels still unmatched try their aliases (`date` labelled on one field and listed
/// as an alias of another goes to its own field), then the properties' descriptions (`described`,
/// [`norm_description`]; empty where none). Returns each label's property index.
fn match_labels(
    labels: &[ExpectedField],
    normed: &[String],
    described: &[String],
    used: &mut [bool],
) -> Vec<Option<usize>> {
    let mut matched: Vec<Option<usize>> = vec![None; labels.len()];
    for (i, f) in labels.iter().enumerate() {
        let own = norm_name(&f.name);
        if let Some(j) = (0..normed.len()).find(|&j| !used[j] && normed[j] == own) {
            used[j] = true;
            matched[i] = Some(j);
        }
    }
    for (i, f) in labels.iter().enumerate() {
        if matched[i].is_some() {
            continue;
        }
        let aliases: Vec<String> = f.aliases.iter().map(|n| norm_name(n)).collect();
        if let Some(j) = (0..normed.len()).find(|&j| !used[j] && aliases.contains(&normed[j])) {
            used[j] = true;
            matched[i] = Some(j);
        }
    }
    for (i, f) in labels.iter().enumerate() {
        if matched[i].is_some() {
            continue;
        }
        let own = norm_name(&f.name);
        let names: Vec<String> = f.aliases.iter().map(|n| norm_name(n)).collect();
        let fits = |d: &String| !d.is_empty() && (*d == own || names.contains(d));
        if let Some(j) = (0..normed.len()).find(|&j| !used[j] && described.get(j).is_some_and(fits))
        {
            used[j] = true;
            matched[i] = Some(j);
        }
    }
    matched
}

/// How each label fared, given its matched property.
fn field_scores(
    labels: &[ExpectedField],
    matched: &[Option<usize>],
    properties: &[String],
    values: &Map<String, Value>,
) -> Vec<FieldScore> {
    labels
        .iter()
        .zip(matched)
        .map(|(f, m)| {
            let property = m.and_then(|j| properties.get(j)).cloned();
            let got = property
                .as_ref()
                .and_then(|p| values.get(p))
                .cloned()
                .unwrap_or(Value::Null);
            let value_ok = property.is_some() && values_match(&f.value, Some(&got));
            FieldScore {
                field: f.name.clone(),
                matched: property,
                expected: f.value.clone(),
                got,
                value_ok,
            }
        })
        .collect()
}

/// Scores a proposal: `properties` are the proposed schema's top-level property names,
/// `extracted` the extraction result object (or null when there is none); `acceptable` are
/// the document's other fields a reviewer would accept. Properties without descriptions; see
/// [`score_described`].
pub fn score(
    expected: &[ExpectedField],
    acceptable: &[ExpectedField],
    properties: &[String],
    extracted: &Value,
) -> Score {
    score_described(expected, acceptable, properties, &[], extracted)
}

/// [`score`] with the properties' `descriptions` (same order; missing or empty ones are none),
/// which a label still unmatched tries last (see the module docs).
pub fn score_described(
    expected: &[ExpectedField],
    acceptable: &[ExpectedField],
    properties: &[String],
    descriptions: &[String],
    extracted: &Value,
) -> Score {
    let empty = Map::new();
    let values = extracted.as_object().unwrap_or(&empty);
    let normed: Vec<String> = properties.iter().map(|p| norm_name(p)).collect();
    let described: Vec<String> = descriptions.iter().map(|d| norm_description(d)).collect();
    let mut used = vec![false; properties.len()];
    let matched = match_labels(expected, &normed, &described, &mut used);
    let fields = field_scores(expected, &matched, properties, values);
    let also = match_labels(acceptable, &normed, &described, &mut used);
    let accepted: Vec<FieldScore> = field_scores(acceptable, &also, properties, values)
        .into_iter()
        .filter(|f| f.matched.is_some())
        .collect();
    let n = fields.len();
    let found = fields.iter().filter(|f| f.matched.is_some()).count();
    let correct = fields.iter().filter(|f| f.value_ok).count();
    let unmatched: Vec<String> = properties
        .iter()
        .zip(&used)
        .filter(|(_, u)| !**u)
        .map(|(p, _)| p.clone())
        .collect();
    let precision = ratio(found + accepted.len(), properties.len());
    let recall = ratio(found, n);
    Score {
        fields_expected: n,
        fields_found: found,
        values_correct: correct,
        fields_proposed: properties.len(),
        fields_acceptable: accepted.len(),
        acceptable_values_correct: accepted.iter().filter(|f| f.value_ok).count(),
        field_recall: recall,
        field_precision: precision,
        strict_precision: ratio(found, properties.len()),
        field_f1: f1(precision, recall),
        value_accuracy: ratio(correct, n),
        fields,
        acceptable: accepted,
        unmatched,
    }
}
