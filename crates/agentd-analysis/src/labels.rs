//! Label–value lines: `Label: value`, `Clé : valeur`, `Label = value`, a label and a value
//! apart by a run of spaces (`Total Paid Out     £1,359.90`, `SUMME  EUR   13,97`), a known
//! label and a value one space apart (`Rechnungsnummer RE-1183`), a label alone on its line
//! with the value on the next, and several pairs on one line (`Datum: l4.11.2026   Zeit: 18:07`,
//! `SIRET : 812 … — TVA : FR 45 …`).

use super::lexicon;
use super::lexicon::snake;
use super::values::{
    DateOrder, DecimalStyle, fold, leading_number, parse_date, parse_number, repair_digits,
};

/// How a pair was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum How {
    /// `Label: value` or `Label = value`.
    Separator,
    /// Label and value apart by a run of spaces (or one space after a known label).
    Spaced,
    /// The label alone on its line, the value on the next.
    NextLine,
}

/// A label and its value as written on one line (or two).
#[derive(Debug, Clone, PartialEq)]
pub struct Pair {
    pub label: String,
    pub value: String,
    /// 0-based index of the line the label is on.
    pub line: usize,
    pub how: How,
}

/// A piece of a line between runs of two or more spaces or a tab: its first and past-the-end
/// column (in characters) and its text.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    pub start: usize,
    pub end: usize,
    pub text: String,
}

/// The segments of `line` (tabs count as a run of spaces). A currency sign or code in a column
/// of its own before an amount (`Subtotaal      €  704,00`, `Total   USD    1,250.00`) is one
/// segment with it: right-aligned amounts after a left-aligned sign leave a gap between them.
pub fn segments(line: &str) -> Vec<Segment> {
    let mut out: Vec<Segment> = Vec::new();
    for s in spaced_pieces(line) {
        let joins = out.last().is_some_and(|prev| currency_sign(&prev.text))
            && s.text
                .trim_start_matches(['-', '+'])
                .starts_with(|c: char| c.is_ascii_digit());
        match out.last_mut() {
            Some(prev) if joins => {
                prev.text = format!("{} {}", prev.text, s.text);
                prev.end = s.end;
            }
            _ => out.push(s),
        }
    }
    out
}

/// Whether a segment is only a currency: a sign (`€`, `$`, `R$`) or an upper-case code (`EUR`).
fn currency_sign(text: &str) -> bool {
    let t = text.trim();
    let short = (1..=3).contains(&t.chars().count());
    let shaped = t
        .chars()
        .all(|c| c.is_ascii_uppercase() || !c.is_alphanumeric());
    short && shaped && super::values::currency_of(t).is_some()
}

/// The pieces of `line` between runs of two or more spaces or a tab.
fn spaced_pieces(line: &str) -> Vec<Segment> {
    let chars: Vec<char> = line.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        if i >= chars.len() {
            break;
        }
        let start = i;
        let mut end = i;
        while i < chars.len() {
            let gap = chars[i] == '\t'
                || (chars[i].is_whitespace()
                    && chars.get(i + 1).is_some_and(|c| c.is_whitespace()));
            if gap {
                break;
            }
            if !chars[i].is_whitespace() {
                end = i + 1;
            }
            i += 1;
        }
        out.push(Segment {
            start,
            end,
            text: chars[start..end].iter().collect(),
        });
    }
    out
}

/// Words that start a section heading (`Section A: Policy`), not a label.
const HEADINGS: [&str; 8] = [
    "section",
    "part",
    "abschnitt",
    "teil",
    "page",
    "seite",
    "partie",
    "seccion",
];

/// Whether `label` reads as a field label: 1–50 characters starting with a letter, at most six
/// words, mostly letters, not a URL scheme or a section heading.
pub fn label_ok(label: &str) -> bool {
    let l = without_enumeration(label.trim()).trim();
    // A qualifier in parentheses (`(A - B)`, `(taux 2,1 %)`) adds no words nor length; a long
    // label of words only (`Impuesto sobre la renta de las personas físicas`) may have eight.
    let bare = without_parentheses(l);
    let n = bare.chars().count();
    if n == 0 || n > 50 || !l.chars().next().is_some_and(char::is_alphabetic) {
        return false;
    }
    // A date in the label (`Somme qui vous a été remboursée le 25/07/2026`) is no word of it.
    let numeric_date = |w: &&str| {
        w.chars().any(|c| c.is_ascii_digit())
            && w.chars()
                .all(|c| c.is_ascii_digit() || matches!(c, '.' | '/' | '-'))
            && w.chars().filter(|c| matches!(c, '.' | '/' | '-')).count() == 2
    };
    let words: Vec<&str> = bare
        .split_whitespace()
        .filter(|w| !numeric_date(w))
        .collect();
    let only_words = words.iter().all(|w| {
        w.chars()
            .all(|c| c.is_alphabetic() || matches!(c, '.' | '\'' | '-'))
    });
    if words.len() > 6 && !(only_words && words.len() <= 8) {
        return false;
    }
    // A rate in the label (`VAT @ 23%`, `IVA 21 %`) is no more a value than a date is.
    let rate = |w: &str| {
        w == "@"
            || (w.ends_with('%')
                && w.trim_end_matches('%')
                    .chars()
                    .all(|c| c.is_ascii_digit() || matches!(c, '.' | ',' | '(' | ')')))
    };
    let kept: String = l.split_whitespace().filter(|w| !rate(w)).collect();
    let visible = kept.chars().count();
    let letters = kept.chars().filter(|c| c.is_alphabetic()).count();
    if letters * 2 < visible {
        return false;
    }
    let first = fold(words.first().copied().unwrap_or(""));
    if matches!(first.as_str(), "http" | "https" | "mailto" | "www") {
        return false;
    }
    !(HEADINGS.contains(&first.as_str()) && words.len() <= 2)
}

/// The amount after a count of instalments (`12 x £34.35`, `4 × 103,05 €` → `£34.35`,
/// `103,05 €`), when the value is that and nothing else.
pub fn instalment(value: &str) -> Option<&str> {
    let t = value.trim();
    let at = t.find(|c: char| !c.is_ascii_digit())?;
    let (count, rest) = (t.get(..at)?, t.get(at..)?.trim_start());
    let rest = rest.strip_prefix(['x', 'X', '×'])?.trim();
    let digits = rest.chars().filter(char::is_ascii_digit).count();
    // Digits and a currency only (`30x20x11` is a size).
    let other: String = rest
        .chars()
        .filter(|c| !(c.is_ascii_digit() || " .,€$£".contains(*c)))
        .collect();
    let currency = other.is_empty() || matches!(other.as_str(), "EUR" | "GBP" | "USD" | "CHF");
    ((1..=3).contains(&count.len()) && digits > 0 && currency).then_some(rest)
}

/// Whether a value is typed enough to stand after a label with no separator: a number, a
/// date, or a code with digits.
fn typed(value: &str, style: DecimalStyle, order: DateOrder) -> bool {
    let v = instalment(value).unwrap_or(value).trim();
    if v.is_empty() || !v.chars().any(|c| c.is_ascii_digit()) {
        return false;
    }
    let repaired = repair_digits(v);
    parse_number(v, style).is_some()
        || parse_number(&repaired, style).is_some()
        || parse_date(v, order).is_some()
        || parse_date(&repaired, order).is_some()
        || super::periods::range(v, order).is_some()
        || looks_like_code(v)
}

/// One token (or an IBAN in groups) of letters, digits and `-/.#`, with a digit.
pub fn looks_like_code(v: &str) -> bool {
    let v = v.trim();
    let compact: String = v.chars().filter(|c| !c.is_whitespace()).collect();
    let words = v.split_whitespace().count();
    let code_chars = compact
        .chars()
        .all(|c| c.is_alphanumeric() || matches!(c, '-' | '/' | '.' | '#' | '_'));
    // One digit among letters is more likely OCR noise in a word (`B0nn`) than a code.
    let digits = compact.chars().filter(|c| c.is_ascii_digit()).count();
    let structured = compact.contains(['-', '/', '#']);
    let has_digit = digits >= 2 || (digits == 1 && (structured || compact.chars().count() <= 3));
    let grouped = words <= 8
        && v.split_whitespace()
            .all(|w| w.chars().count() <= 5 && w.chars().all(|c| c.is_ascii_alphanumeric()));
    code_chars
        && has_digit
        && compact.chars().count() <= 40
        && (words == 1 || (grouped && compact.chars().count() >= 8))
}

/// Where a first `:`/`=` separator of a label is, with its byte length: not a time (`18:07`),
/// a ratio, or a URL (`https://`).
fn separator_at(line: &str) -> Option<(usize, usize)> {
    let chars: Vec<(usize, char)> = line.char_indices().collect();
    for (k, (i, c)) in chars.iter().enumerate() {
        if !matches!(c, ':' | '：' | '=') {
            continue;
        }
        let prev = k.checked_sub(1).and_then(|p| chars.get(p)).map(|x| x.1);
        let next = chars.get(k + 1).map(|x| x.1);
        let between_digits =
            prev.is_some_and(|p| p.is_ascii_digit()) && next.is_some_and(|n| n.is_ascii_digit());
        if between_digits || (*c == ':' && next == Some('/')) {
            continue;
        }
        return Some((*i, c.len_utf8()));
    }
    None
}

/// `label: value` at the start of `text`, the value cut where a second pair starts.
fn separated(text: &str) -> Option<(String, String, Option<String>)> {
    let (at, len) = separator_at(text)?;
    let label = text.get(..at)?.trim();
    let after = text.get(at + len..)?;
    let value = after.trim();
    // `0p: KAREN` is `Op: KAREN` read by an OCR.
    if !label_ok(label) && !label_ok(&super::values::repair_letters(label)) {
        return None;
    }
    // `Deliver to:          Order ref: SO-22817`: the label's own value is elsewhere (below),
    // what follows the wide gap is the next pair.
    let wide = after.starts_with("   ") || after.starts_with('\t');
    if wide && starts_pair(value) {
        return Some((label.to_string(), String::new(), Some(value.to_string())));
    }
    let (value, rest) = split_second_pair(value);
    Some((label.to_string(), value, rest))
}

/// Whether `text` starts with `Label:` (a short label, at most four words).
fn starts_pair(text: &str) -> bool {
    // A label spans no column gap (`K-20788      Bezug:` is a value, then a label).
    separator_at(text).is_some_and(|(at, _)| {
        text.get(..at).is_some_and(|l| {
            label_ok(l) && l.split_whitespace().count() <= 4 && !l.trim().contains("   ")
        })
    })
}

/// `value` up to a gap (three spaces, a tab, ` — `, ` · `, ` | `) after which another
/// `Label: value` starts; that rest is returned too.
fn split_second_pair(value: &str) -> (String, Option<String>) {
    const GAPS: [&str; 6] = ["   ", "\t", " — ", " – ", " · ", " | "];
    let mut best: Option<(usize, usize)> = None;
    for gap in GAPS {
        for (i, _) in value.match_indices(gap) {
            if best.is_none_or(|(b, _)| i < b) {
                let rest = value.get(i + gap.len()..).unwrap_or("").trim_start();
                // Another `Label: value`, or a known label and a code (`Trans 004418`).
                let spaced_known = spaced(rest, 0, DecimalStyle::Unknown, DateOrder::DayFirst)
                    .is_some_and(|p| known(&p.label).is_some());
                if starts_pair(rest) || (gap != " — " && gap != " – " && spaced_known) {
                    best = Some((i, gap.len()));
                }
            }
        }
    }
    match best {
        Some((i, len)) => (
            value.get(..i).unwrap_or("").trim().to_string(),
            value
                .get(i + len..)
                .map(|r| r.trim().to_string())
                .filter(|r| !r.is_empty()),
        ),
        None => (value.to_string(), None),
    }
}

/// The canonical field of a label, if the lexicon knows it (OCR-repaired, qualifiers in
/// parentheses dropped, abbreviations with a `.` expanded when unambiguous).
pub fn known(label: &str) -> Option<(&'static str, lexicon::Class)> {
    let s = snake(
        &without_parentheses(&super::values::repair_letters(without_rate(
            without_enumeration(label),
        ))),
        64,
    );
    lexicon::field(&s).or_else(|| {
        if label.contains('.') {
            lexicon::abbreviated(&s)
        } else {
            None
        }
    })
}

/// A label without the rate in it and what follows (`DI CUI IVA 4% SU 7,50` → `DI CUI IVA`,
/// `IVA 21 %` → `IVA`, `VAT @ 20%` → `VAT @`): the base a rate applies to is no part of the
/// name. A label that is only a rate stays.
pub fn without_rate(label: &str) -> &str {
    let Some(at) = label.find('%') else {
        return label;
    };
    let before = label.get(..at).unwrap_or(label).trim_end();
    // Back over the rate's number (`4`, `5,5`, `9.25`).
    let cut = before
        .trim_end_matches(|c: char| c.is_ascii_digit() || matches!(c, '.' | ','))
        .trim_end();
    match cut.chars().any(char::is_alphabetic) {
        true => cut,
        false => label,
    }
}

/// `A. TOTAL DEVENGADO` → `TOTAL DEVENGADO`, `2) Dietas` → `Dietas`, `IV. Retenciones` →
/// `Retenciones`: a label without the letter, roman or arabic number that enumerates it (only
/// when a `.` or `)` follows it and words are left).
pub fn without_enumeration(label: &str) -> &str {
    let t = label.trim_start();
    let Some((head, rest)) = t.split_once(char::is_whitespace) else {
        return label;
    };
    let Some(mark) = head.strip_suffix(['.', ')']) else {
        return label;
    };
    let roman = !mark.is_empty() && mark.len() <= 4 && mark.chars().all(|c| "IVX".contains(c));
    let letter = mark.chars().count() == 1 && mark.chars().all(|c| c.is_ascii_alphabetic());
    let number = !mark.is_empty() && mark.len() <= 2 && mark.chars().all(|c| c.is_ascii_digit());
    let rest = rest.trim_start();
    if (roman || letter || number) && rest.chars().next().is_some_and(char::is_alphabetic) {
        rest
    } else {
        label
    }
}

/// `Pension (5%)` → `Pension`; `(total)` stays (nothing would be left).
pub fn without_parentheses(label: &str) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    for c in label.chars() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    if out.trim().is_empty() {
        label.to_string()
    } else {
        out.trim().to_string()
    }
}

/// Every label–value pair of `lines`, skipping the lines in `skip` (table rows).
pub fn pairs(
    lines: &[String],
    skip: &dyn Fn(usize) -> bool,
    style: DecimalStyle,
    order: DateOrder,
) -> Vec<Pair> {
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if skip(i) {
            continue;
        }
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        if let Some(found) = party_columns(lines, i, skip) {
            out.extend(found);
            continue;
        }
        // `KASSA 04   BON 2217   KASSIER: 118`: pieces before wide gaps that are each a known
        // label and its value one space apart are pairs of their own; the rest is read on.
        let segs = segments(trimmed);
        if let Some(found) = counted_total(&segs, i, style) {
            out.extend(found);
            continue;
        }
        let mut k = 0;
        let mut found = Vec::new();
        // Only when a label follows (`incl. VAT 20%   15.63` is one pair); an amount with its
        // currency or its side of the account (`2.118,40 EUR`, `3.412,08 H`, `12.50 CR`) is no
        // label (`Alter Kontostand vom 30.09.2026   3.412,08 H` is one pair).
        let labelled_rest = |k: usize| {
            segs.get(k + 1..).is_some_and(|r| {
                r.iter().any(|s| {
                    let marked = super::values::currency_of(&s.text).is_some()
                        || super::values::account_side(&s.text).is_some();
                    let amount = marked && parse_number(&repair_digits(&s.text), style).is_some();
                    s.text.chars().any(char::is_alphabetic) && !amount
                })
            })
        };
        while k + 1 < segs.len() && !segs[k].text.contains(':') && labelled_rest(k) {
            if let Some(p) = spaced(&segs[k].text, i, style, order)
                && known(&p.label).is_some()
            {
                found.push(p);
            }
            k += 1;
        }
        if found.is_empty() {
            k = 0;
        }
        out.extend(found);
        let rest_of_line;
        let trimmed = if k > 0 {
            rest_of_line = segs
                .get(k..)
                .unwrap_or(&[])
                .iter()
                .map(|s| s.text.as_str())
                .collect::<Vec<_>>()
                .join("   ");
            rest_of_line.as_str()
        } else {
            trimmed
        };
        // `RELEVÉ DE COMPTE N° 9        Date d'arrêté : 30/09/2026`: the piece before a wide gap
        // is read on its own, the pairs after it as a line of their own.
        let (head, trimmed) = match head_piece(trimmed) {
            Some((head, tail)) if separated(tail).is_some() => (Some(head), tail),
            _ => (None, trimmed),
        };
        if let Some(p) = head.and_then(|h| spaced(h, i, style, order)) {
            out.push(p);
        }
        if separator_at(trimmed).is_some() && separated(trimmed).is_some() {
            let mut rest = Some(trimmed.to_string());
            let mut guard = 0;
            while let Some(text) = rest.take() {
                guard += 1;
                let Some((label, value, more)) = separated(&text) else {
                    // The rest may be a known label and its code (`Trans 004418`).
                    if let Some(p) = spaced(&text, i, style, order)
                        && known(&p.label).is_some()
                    {
                        out.push(p);
                    }
                    break;
                };
                if value.is_empty() {
                    if let Some(v) = next_line_value(lines, i, skip) {
                        out.push(Pair {
                            label,
                            value: v,
                            line: i,
                            how: How::NextLine,
                        });
                    }
                } else {
                    let (value, inner) = tail_pair(&value, i, style, order);
                    out.push(Pair {
                        label,
                        value,
                        line: i,
                        how: How::Separator,
                    });
                    out.extend(inner);
                }
                if guard < 8 {
                    rest = more;
                }
            }
            continue;
        }
        // `Gewerbepark Ost 3 | 89231 Neu-Ulm | USt-IdNr. DE 287 441 905`: a letter head's
        // address with a known identifier and its code as a later piece.
        // `P.IVA 02234560981 - C.F. 02234560981`: ids joined by a dash are pieces too.
        let pieces: Vec<&str> = segs
            .iter()
            .flat_map(|s| s.text.split(" - ").flat_map(|t| t.split(" – ")))
            .collect();
        if k == 0 && pieces.len() >= 2 && known(&segs[0].text).is_none() {
            let dashed = pieces.len() > segs.len();
            let ids: Vec<Pair> = pieces
                .iter()
                .skip(usize::from(!dashed))
                .filter_map(|s| spaced(s, i, style, order))
                .filter(|p| known(&p.label).is_some_and(|(_, c)| c == lexicon::Class::Identifier))
                .collect();
            if !ids.is_empty() {
                out.extend(ids);
                continue;
            }
        }
        if let Some(p) = spaced(trimmed, i, style, order) {
            out.push(p);
            continue;
        }
        // `BILL OF LADING …        B/L No. NBLU 26114877`: a title, then a known label and its
        // number as the line's last piece.
        if k == 0
            && segs.len() >= 2
            && let Some(p) = segs
                .last()
                .and_then(|s| spaced(&s.text, i, style, order))
                .filter(|p| known(&p.label).is_some_and(|(_, c)| c == lexicon::Class::Identifier))
        {
            out.push(p);
            continue;
        }
        // A known label alone on its line, its value below (any short text for a party).
        let head = party_head(trimmed);
        let class = known(trimmed)
            .map(|k| k.1)
            .or(head.is_some().then_some(lexicon::Class::Party));
        let words = if head.is_some() { 6 } else { 4 };
        let label = head.unwrap_or_else(|| trimmed.to_string());
        if class.is_some()
            && trimmed.split_whitespace().count() <= words
            && let Some(v) = next_line_value(lines, i, skip)
            && (typed(&v, style, order)
                || (class == Some(lexicon::Class::Party) && party_line(&v) && known(&v).is_none()))
        {
            out.push(Pair {
                label,
                value: v,
                line: i,
                how: How::NextLine,
            });
        }
    }
    out
}

/// Whether a line below a party's label reads as its name: at most 60 characters, or a name
/// of at most 60 before a comma that starts its address (`Cerámicas del Levante S.L., Calle
/// Ribera 14, 46011 Valencia, Spain`).
fn party_line(v: &str) -> bool {
    let name = v
        .match_indices(", ")
        .map(|(at, _)| at)
        .find(|at| {
            v.get(at + 2..)
                .is_some_and(|r| r.chars().any(|c| c.is_ascii_digit()))
        })
        .and_then(|at| v.get(..at))
        .unwrap_or(v);
    name.chars().count() <= 60
}

/// `Vessel / Voyage` over `NORDIC SWAN / 2647S`: two labels joined by ` / ` and as many values
/// joined the same way are that many pairs.
pub fn slashed(p: &Pair) -> Option<Vec<Pair>> {
    let labels: Vec<&str> = p.label.split(" / ").map(str::trim).collect();
    let values: Vec<&str> = p.value.split(" / ").map(str::trim).collect();
    let ok = (2..=3).contains(&labels.len())
        && labels.len() == values.len()
        && labels.iter().all(|l| label_ok(l))
        && values.iter().all(|v| !v.is_empty());
    ok.then(|| {
        labels
            .iter()
            .zip(&values)
            .map(|(l, v)| Pair {
                label: (*l).to_string(),
                value: (*v).to_string(),
                line: p.line,
                how: p.how,
            })
            .collect()
    })
}

/// Words around a party's label that say what of it follows (`Employer's full name and
/// address`, `Name und Anschrift des Arbeitgebers`).
const PARTY_FILLER: [&str; 16] = [
    "full",
    "name",
    "names",
    "and",
    "address",
    "details",
    "of",
    "the",
    "s",
    "und",
    "name",
    "anschrift",
    "des",
    "nom",
    "et",
    "adresse",
];

/// The party a lone heading names (`Employer's full name and address` → `Employer`, `Azienda`
/// → `Azienda`): a word for a company, or a known party label with only words like "name" and
/// "address" around it.
pub fn party_head(label: &str) -> Option<String> {
    let t = label.trim().trim_end_matches(':').trim();
    if lexicon::company_word(&snake(t, 64)) {
        return Some(t.to_string());
    }
    let words: Vec<&str> = t.split_whitespace().collect();
    if words.len() < 2 || words.len() > 6 {
        return None;
    }
    words.iter().enumerate().find_map(|(k, w)| {
        let bare = w.trim_end_matches("'s").trim_end_matches("’s");
        let party = known(bare).is_some_and(|(_, c)| c == lexicon::Class::Party);
        let rest_filler = words
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != k)
            .all(|(_, o)| PARTY_FILLER.contains(&snake(o, 32).as_str()));
        (party && rest_filler).then(|| bare.to_string())
    })
}

/// A pair written at the end of a value, in parentheses or after a dash (`MediPlus GmbH
/// (Lieferanten-Nr. 200318)`, `Textil Tarrasa, S.A. — Cód. proveedor 30077`, `Acme S.L. (CIF
/// B-17552209)`): the value without it, and the pair.
fn tail_pair(
    value: &str,
    i: usize,
    style: DecimalStyle,
    order: DateOrder,
) -> (String, Option<Pair>) {
    let split = if value.ends_with(')') {
        value
            .rfind('(')
            .and_then(|at| Some((value.get(..at)?, value.get(at + 1..value.len() - 1)?)))
    } else {
        [" — ", " – "].iter().find_map(|d| {
            let at = value.rfind(d)?;
            Some((value.get(..at)?, value.get(at + d.len()..)?))
        })
    };
    let Some((head, tail)) = split else {
        return (value.to_string(), None);
    };
    let (head, tail) = (head.trim(), tail.trim());
    let pair = match separated(tail) {
        Some((label, v, None)) if !v.is_empty() && typed(&v, style, order) => Some(Pair {
            label,
            value: v,
            line: i,
            how: How::Separator,
        }),
        _ => spaced(tail, i, style, order),
    };
    match pair {
        Some(p) if !head.is_empty() => (head.to_string(), Some(p)),
        _ => (value.to_string(), None),
    }
}

/// Labels side by side (`Expéditeur          Destinataire`, `Invoice Number      Invoice
/// Date`): a line of two to four known labels, each taking the piece of the next line that
/// starts under it (a table of two columns is not a table: those have three or more).
fn party_columns(lines: &[String], i: usize, skip: &dyn Fn(usize) -> bool) -> Option<Vec<Pair>> {
    let heads = segments(lines.get(i)?);
    if !(2..=4).contains(&heads.len()) {
        return None;
    }
    let party = |t: &str| {
        let t = t.trim().trim_end_matches(':').trim();
        !t.contains(':') && !t.chars().any(|c| c.is_ascii_digit()) && known(t).is_some()
    };
    let (j, next) = lines
        .iter()
        .enumerate()
        .skip(i + 1)
        .take(2)
        .find(|(_, l)| !l.trim().is_empty())?;
    if skip(j) {
        return None;
    }
    let cells = segments(next);
    // `Destinatario   Luogo di destinazione` over two names that start under them: a known
    // party's label beside a label the lexicon does not know is a pair of columns too.
    let labelish = |t: &str| {
        let t = t.trim().trim_end_matches(':').trim();
        !t.contains(':')
            && !t.chars().any(|c| c.is_ascii_digit())
            && label_ok(t)
            && t.split_whitespace().count() <= 4
    };
    // Values, not the next row of labels (`Risicoadres   Lindenlaan 23, …` under
    // `Verzekeringnemer   mevr. S.M. Bakker-Visser` is a pair below a pair).
    let aligned = cells.len() == heads.len()
        && cells
            .iter()
            .zip(&heads)
            .all(|(c, h)| c.start.abs_diff(h.start) <= 2)
        && !heads.iter().any(|h| h.text.contains(':'))
        && !cells
            .iter()
            .any(|c| c.text.contains(':') || known(&c.text).is_some())
        && spaced(next.trim(), j, DecimalStyle::Unknown, DateOrder::DayFirst).is_none();
    let all_parties = heads.iter().all(|h| party(&h.text));
    let first_party = heads.first().is_some_and(|h| {
        let t = h.text.trim().trim_end_matches(':').trim();
        known(t).is_some_and(|(_, c)| c == lexicon::Class::Party)
    });
    if !(all_parties || (first_party && aligned && heads.iter().all(|h| labelish(&h.text)))) {
        return None;
    }
    let mut out = Vec::new();
    for cell in &cells {
        // The column whose label starts nearest the cell's start.
        let Some(h) = heads.iter().min_by_key(|h| h.start.abs_diff(cell.start)) else {
            continue;
        };
        let label = h.text.trim().trim_end_matches(':').trim().to_string();
        if h.start.abs_diff(cell.start) > 6 || out.iter().any(|p: &Pair| p.label == label) {
            continue;
        }
        out.push(Pair {
            label,
            value: cell.text.clone(),
            line: i,
            how: How::NextLine,
        });
    }
    Some(out)
}

/// The text before a line's first separator when a wide gap (three spaces, a tab) parts it
/// from the label of that separator: `(head, rest)`.
fn head_piece(line: &str) -> Option<(&str, &str)> {
    let (at, _) = separator_at(line)?;
    let before = line.get(..at)?;
    let (gap, len) = ["   ", "\t"]
        .iter()
        .filter_map(|g| before.rfind(g).map(|i| (i, g.len())))
        .max_by_key(|x| x.0)?;
    let head = line.get(..gap)?.trim();
    let tail = line.get(gap + len..)?.trim();
    (!head.is_empty() && !tail.is_empty()).then_some((head, tail))
}

/// The value on the line after a lone label: the next non-empty line within two, when it is a
/// short single piece of text and not a pair itself.
fn next_line_value(lines: &[String], i: usize, skip: &dyn Fn(usize) -> bool) -> Option<String> {
    let (j, next) = lines
        .iter()
        .enumerate()
        .skip(i + 1)
        .take(2)
        .find(|(_, l)| !l.trim().is_empty())?;
    let next = next.trim();
    let single = segments(next).len() == 1;
    let is_pair = separator_at(next).is_some_and(|(at, _)| next.get(..at).is_some_and(label_ok));
    (!skip(j) && single && !is_pair && next.chars().count() <= 80 && !next.ends_with(':'))
        .then(|| next.to_string())
}

/// A label and a typed value apart by a run of spaces, or one space after a known label.
/// Around the label: a box number before it (`1a Total ordinary dividends`) and the working
/// after it (`Arbeitspreis   2.868 kWh x 32,18 ct/kWh   922,92 €`) are not part of it; after the
/// value, a reference range in parentheses or a `*` flag (`13,4 g/dL   (12,0 – 16,0)`) is
/// dropped. A known label takes a value with a few words after its amount (`Eigen risico
/// € 250 per schade`), and a known party or text label any short value (`Verzekeringnemer
/// mevr. S.M. Bakker-Visser`).
fn spaced(line: &str, i: usize, style: DecimalStyle, order: DateOrder) -> Option<Pair> {
    let mut segs = segments(line);
    while segs.len() > 2
        && segs.last().is_some_and(|s| {
            let t = s.text.trim();
            (t.starts_with('(') && t.ends_with(')')) || t.chars().all(|c| c == '*')
        })
    {
        segs.pop();
    }
    if segs.len() >= 2 {
        let (last, head) = segs.split_last()?;
        // A piece that starts with a letter is no number (`IVA 21 %` is a label).
        // A rate alone between the label and the amount (`IRPF   12,00 %   244,32`) is working,
        // not a column of numbers (a rate and a base, `4,70 %  sobre 1.826,00`, are a table's).
        let rate_only = head.len() == 2 && head.last().is_some_and(|s| s.text.ends_with('%'));
        let pure_number = |s: &str| {
            let lettered = s.chars().next().is_some_and(char::is_alphabetic);
            let rate = rate_only && s.ends_with('%');
            !lettered && !rate && parse_number(&repair_digits(s), style).is_some()
        };
        // A form's box number in a column of its own (`4   Federal income tax withheld`).
        let head = match head {
            [first, rest @ ..]
                if !rest.is_empty()
                    && is_box_number(&first.text)
                    && rest.iter().all(|s| s.text.chars().any(char::is_alphabetic)) =>
            {
                rest
            }
            _ => head,
        };
        if head.iter().any(|s| pure_number(&s.text)) {
            return None;
        }
        // The working after the label (`2.868 kWh x 32,18 ct/kWh`) is not part of it.
        let digit_start = |s: &Segment| s.text.chars().next().is_some_and(|c| c.is_ascii_digit());
        let kept = head
            .iter()
            .skip(1)
            .position(digit_start)
            .map_or(head.len(), |k| k + 1);
        let head = head.get(..kept)?;
        let label = without_box_number(
            &head
                .iter()
                .map(|s| s.text.as_str())
                .collect::<Vec<_>>()
                .join(" "),
        );
        // Every piece of the label has a letter (`Hauptstr. l2  -  B0nn` is an address).
        let lettered = head.iter().all(|s| s.text.chars().any(char::is_alphabetic));
        if !lettered || !label_ok(&label) {
            return None;
        }
        let value = last.text.trim();
        let class = known(&label).map(|k| k.1);
        // A date label's value may go on after its date (`01/12/2026 a las 00:00 horas`).
        let one_date = class == Some(lexicon::Class::Date)
            && super::values::dates_in(&repair_digits(value), order).len() == 1;
        // An amount and what it is for (`4 500 000 € par sinistre`, `150 € por siniestro`).
        let amount_first = leading_number(value, style).is_some() && {
            let rest = value.trim_start_matches(|c: char| c.is_ascii_digit() || " .,".contains(c));
            rest.split_whitespace().next().is_some_and(|u| {
                matches!(
                    u.trim_end_matches([',', '.']).to_lowercase().as_str(),
                    "€" | "eur" | "euro" | "euros" | "$" | "usd" | "£" | "gbp" | "chf"
                )
            })
        };
        let ok = typed(value, style, order)
            || one_date
            || amount_first
            || (matches!(
                class,
                Some(lexicon::Class::Amount | lexicon::Class::Quantity)
            ) && leading_number(value, style).is_some())
            || ((matches!(class, Some(lexicon::Class::Party | lexicon::Class::Text))
                || address_label(&label))
                && value.chars().any(char::is_alphabetic)
                && value.chars().count() <= 60
                && known(value).is_none());
        if !ok {
            return None;
        }
        return Some(Pair {
            label,
            value: value.to_string(),
            line: i,
            how: How::Spaced,
        });
    }
    // One space: the words before the first one with a digit, when the lexicon knows them
    // (without a word that opens a range: `Période du 01/09/2026 au 30/09/2026`).
    let words: Vec<&str> = line.split(' ').filter(|w| !w.is_empty()).collect();
    // A digit an OCR put in a word of letters (`SC0NTRINO N. 0l27`) does not start the value.
    let k = words.iter().position(|w| {
        super::values::repair_letters(w)
            .chars()
            .any(|c| c.is_ascii_digit())
    })?;
    if k == 0 || k > 4 {
        return None;
    }
    let mut label = words.get(..k)?.join(" ");
    let mut value = words.get(k..)?.join(" ");
    // A VAT number's country prefix is the code's (`USt-IdNr. DE 287 441 905`, `VAT No. GB 284
    // 6120 53`), and so is a carrier's or an owner's prefix (`B/L No. NBLU 26114877`).
    if known(&label).is_none()
        && k >= 2
        && words.get(k - 1).is_some_and(|w| {
            (2..=4).contains(&w.len()) && w.chars().all(|c| c.is_ascii_uppercase())
        })
        && words.get(..k - 1).is_some_and(|l| {
            known(&l.join(" ")).is_some_and(|(_, c)| c == lexicon::Class::Identifier)
        })
    {
        label = words.get(..k - 1)?.join(" ");
        value = words.get(k - 1..)?.join(" ");
    }
    if known(&label).is_none()
        && k >= 2
        && words
            .get(k - 1)
            .is_some_and(|w| RANGE_OPENERS.contains(&fold(w).as_str()))
    {
        label = words.get(..k - 1)?.join(" ");
    }
    let number_word = lexicon::number_word(&snake(&label, 64));
    (label_ok(&label) && (known(&label).is_some() || number_word) && typed(&value, style, order))
        .then_some(Pair {
            label,
            value,
            line: i,
            how: How::Spaced,
        })
}

/// A total with its count of items between (`T0TAL  5  ARTICLES   18,83 EUR`,
/// `TOTALE  4  PEZZI   10,85`): the total's pair and the count's.
fn counted_total(segs: &[Segment], i: usize, style: DecimalStyle) -> Option<[Pair; 2]> {
    let [label, count, word, amount] = segs else {
        return None;
    };
    let named = |s: &Segment, name: &str| known(&s.text).is_some_and(|(n, _)| n == name);
    let count_ok = repair_digits(&count.text)
        .chars()
        .all(|c| c.is_ascii_digit());
    let amount_ok = parse_number(&repair_digits(&amount.text), style).is_some();
    (named(label, "total") && named(word, "item_count") && count_ok && amount_ok).then(|| {
        let pair = |label: &Segment, value: &Segment| Pair {
            label: label.text.clone(),
            value: value.text.clone(),
            line: i,
            how: How::Spaced,
        };
        [pair(label, amount), pair(word, count)]
    })
}

/// Whether a label names an address (`Insured address`, `Risicoadres`, `Lieferanschrift`):
/// its last word ends in an address word.
fn address_label(label: &str) -> bool {
    let s = snake(label, 64);
    let last = s.rsplit('_').next().unwrap_or("");
    [
        "address",
        "adresse",
        "anschrift",
        "direccion",
        "domicilio",
        "indirizzo",
        "adres",
        "endereco",
        "morada",
    ]
    .iter()
    .any(|w| last.ends_with(w))
}

/// Words that open a date range after a label (`Période du`, `Period from`).
const RANGE_OPENERS: [&str; 8] = ["du", "from", "vom", "von", "del", "dal", "van", "desde"];

/// A form's box number: one or two digits and at most one small letter (`4`, `1a`, `12`).
fn is_box_number(word: &str) -> bool {
    let w = word.trim();
    let digits = w.chars().take_while(char::is_ascii_digit).count();
    let tail: Vec<char> = w.chars().skip(digits).collect();
    (1..=2).contains(&digits) && tail.len() <= 1 && tail.iter().all(char::is_ascii_lowercase)
}

/// `1a Total ordinary dividends` → `Total ordinary dividends`: a form's box number before a
/// label.
fn without_box_number(label: &str) -> String {
    let t = label.trim();
    if let Some((first, rest)) = t.split_once(' ')
        && is_box_number(first)
        && rest
            .trim_start()
            .chars()
            .next()
            .is_some_and(char::is_alphabetic)
    {
        return rest.trim().to_string();
    }
    t.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(text: &str) -> Vec<(String, String, How)> {
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        pairs(
            &lines,
            &|_| false,
            DecimalStyle::Unknown,
            DateOrder::DayFirst,
        )
        .into_iter()
        .map(|p| (p.label, p.value, p.how))
        .collect()
    }

    fn pair(l: &str, v: &str, h: How) -> (String, String, How) {
        (l.into(), v.into(), h)
    }

    #[test]
    fn a_count_of_instalments() {
        assert_eq!(instalment("12 x £34.35"), Some("£34.35"));
        assert_eq!(instalment("4 × 103,05 €"), Some("103,05 €"));
        assert_eq!(instalment("30x20x11"), None);
        assert_eq!(instalment("34.35"), None);
    }

    #[test]
    fn separators_in_any_language() {
        assert_eq!(
            all("Clé : valeur\nFecha de emisión: 14/10/2026\nPolicy Number = NSM-1\nZeit: 18:07"),
            vec![
                pair("Clé", "valeur", How::Separator),
                pair("Fecha de emisión", "14/10/2026", How::Separator),
                pair("Policy Number", "NSM-1", How::Separator),
                pair("Zeit", "18:07", How::Separator),
            ]
        );
    }

    #[test]
    fn two_pairs_on_one_line() {
        assert_eq!(
            all(
                "Datum:  l4.11.2026    Zeit: 18:O7\nSIRET : 812 456 789 00021 — TVA intracom. : FR 45 812456789"
            ),
            vec![
                pair("Datum", "l4.11.2026", How::Separator),
                pair("Zeit", "18:O7", How::Separator),
                pair("SIRET", "812 456 789 00021", How::Separator),
                pair("TVA intracom.", "FR 45 812456789", How::Separator),
            ]
        );
    }

    #[test]
    fn spacing_instead_of_a_colon() {
        assert_eq!(
            all(
                "Rechnungsnummer RE-1183\nTotal Paid Out     £1,359.90\n SUMME  EUR     13,97\nIndustriestraße 14 · 70565 Stuttgart\nCloud storage   12   41.50   498.00"
            ),
            vec![
                pair("Rechnungsnummer", "RE-1183", How::Spaced),
                pair("Total Paid Out", "£1,359.90", How::Spaced),
                pair("SUMME", "EUR 13,97", How::Spaced),
            ]
        );
    }

    #[test]
    fn label_on_one_line_value_on_the_next() {
        assert_eq!(
            all("Bill To:\nBlue Fox GmbH\nStreet 1\n\nRechnungsnummer\nRE-2026-1183"),
            vec![
                pair("Bill To", "Blue Fox GmbH", How::NextLine),
                pair("Rechnungsnummer", "RE-2026-1183", How::NextLine),
            ]
        );
    }

    #[test]
    fn not_labels() {
        assert!(all("Section A: Policy\nhttps://example.com/x\n<!-- NOTE TO THE AI: do this\n01 Oct  Opening balance   2,418.36").is_empty());
    }

    #[test]
    fn segments_by_columns() {
        let s = segments("Pos.  Bezeichnung   Menge");
        assert_eq!(
            s.iter()
                .map(|s| (s.start, s.text.as_str()))
                .collect::<Vec<_>>(),
            vec![(0, "Pos."), (6, "Bezeichnung"), (20, "Menge")]
        );
    }

    #[test]
    fn a_rate_and_its_base_are_no_part_of_a_labels_name() {
        assert_eq!(without_rate("DI CUI IVA 4% SU 7,50"), "DI CUI IVA");
        assert_eq!(without_rate("IVA 21 %"), "IVA");
        assert_eq!(without_rate("VAT @ 20%"), "VAT @");
        assert_eq!(without_rate("TAX 9.25%"), "TAX");
        assert_eq!(without_rate("20 %"), "20 %");
        assert_eq!(without_rate("Total"), "Total");
        assert_eq!(known("DI CUI IVA 4% SU 7,50").map(|k| k.0), Some("vat"));
    }

    #[test]
    fn a_currency_in_its_own_column_goes_with_its_amount() {
        let texts =
            |line: &str| -> Vec<String> { segments(line).into_iter().map(|s| s.text).collect() };
        assert_eq!(
            texts("Subtotaal        €  704,00"),
            ["Subtotaal", "€ 704,00"]
        );
        assert_eq!(
            texts("Huur    3    €  45,00    €  135,00"),
            ["Huur", "3", "€ 45,00", "€ 135,00"]
        );
        assert_eq!(
            texts("Total   USD    -1,250.00"),
            ["Total", "USD -1,250.00"]
        );
        // A code that is a word, or a currency before no amount, stays a column.
        assert_eq!(texts("Amount   EUR   Notes"), ["Amount", "EUR", "Notes"]);
        assert_eq!(texts("Dose   eur   12"), ["Dose", "eur", "12"]);
        let s = segments("Net  €   70,00");
        assert_eq!((s[1].start, s[1].end), (5, 14));
    }
}
