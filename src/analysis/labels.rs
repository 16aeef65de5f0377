//! Label–value lines: `Label: value`, `Clé : valeur`, `Label = value`, a label and a value
//! apart by a run of spaces (`Total Paid Out     £1,359.90`, `SUMME  EUR   13,97`), a known
//! label and a value one space apart (`Rechnungsnummer RE-1183`), a label alone on its line
//! with the value on the next, and several pairs on one line (`Datum: l4.11.2026   Zeit: 18:07`,
//! `SIRET : 812 … — TVA : FR 45 …`).

use super::lexicon;
use super::lexicon::snake;
use super::values::{DateOrder, DecimalStyle, fold, parse_date, parse_number, repair_digits};

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

/// The segments of `line` (tabs count as a run of spaces).
pub fn segments(line: &str) -> Vec<Segment> {
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
    let l = label.trim();
    let n = l.chars().count();
    if n == 0 || n > 50 || !l.chars().next().is_some_and(char::is_alphabetic) {
        return false;
    }
    let words: Vec<&str> = l.split_whitespace().collect();
    if words.len() > 6 {
        return false;
    }
    let visible = l.chars().filter(|c| !c.is_whitespace()).count();
    let letters = l.chars().filter(|c| c.is_alphabetic()).count();
    if letters * 2 < visible {
        return false;
    }
    let first = fold(words.first().copied().unwrap_or(""));
    if matches!(first.as_str(), "http" | "https" | "mailto" | "www") {
        return false;
    }
    !(HEADINGS.contains(&first.as_str()) && words.len() <= 2)
}

/// Whether a value is typed enough to stand after a label with no separator: a number, a
/// date, or a code with digits.
fn typed(value: &str, style: DecimalStyle, order: DateOrder) -> bool {
    let v = value.trim();
    if v.is_empty() || !v.chars().any(|c| c.is_ascii_digit()) {
        return false;
    }
    let repaired = repair_digits(v);
    parse_number(v, style).is_some()
        || parse_number(&repaired, style).is_some()
        || parse_date(v, order).is_some()
        || parse_date(&repaired, order).is_some()
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
    let value = text.get(at + len..)?.trim();
    if !label_ok(label) {
        return None;
    }
    let (value, rest) = split_second_pair(value);
    Some((label.to_string(), value, rest))
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
                let pair_follows = separator_at(rest).is_some_and(|(at, _)| {
                    rest.get(..at)
                        .is_some_and(|l| label_ok(l) && l.split_whitespace().count() <= 4)
                });
                if pair_follows {
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
        &without_parentheses(&super::values::repair_letters(label)),
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
        if separator_at(trimmed).is_some() && separated(trimmed).is_some() {
            let mut rest = Some(trimmed.to_string());
            let mut guard = 0;
            while let Some(text) = rest.take() {
                guard += 1;
                let Some((label, value, more)) = separated(&text) else {
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
                    out.push(Pair {
                        label,
                        value,
                        line: i,
                        how: How::Separator,
                    });
                }
                if guard < 8 {
                    rest = more;
                }
            }
            continue;
        }
        if let Some(p) = spaced(trimmed, i, style, order) {
            out.push(p);
            continue;
        }
        // A known label alone on its line, its value below.
        if known(trimmed).is_some()
            && trimmed.split_whitespace().count() <= 4
            && let Some(v) = next_line_value(lines, i, skip)
            && typed(&v, style, order)
        {
            out.push(Pair {
                label: trimmed.to_string(),
                value: v,
                line: i,
                how: How::NextLine,
            });
        }
    }
    out
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
fn spaced(line: &str, i: usize, style: DecimalStyle, order: DateOrder) -> Option<Pair> {
    let segs = segments(line);
    if segs.len() >= 2 {
        let (last, head) = segs.split_last()?;
        let pure_number = |s: &str| parse_number(&repair_digits(s), style).is_some();
        if head.iter().any(|s| pure_number(&s.text)) {
            return None;
        }
        let label = head
            .iter()
            .map(|s| s.text.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        // Every piece of the label has a letter (`Hauptstr. l2  -  B0nn` is an address).
        let lettered = head.iter().all(|s| s.text.chars().any(char::is_alphabetic));
        if !lettered || !label_ok(&label) || !typed(&last.text, style, order) {
            return None;
        }
        return Some(Pair {
            label,
            value: last.text.clone(),
            line: i,
            how: How::Spaced,
        });
    }
    // One space: the words before the first one with a digit, when the lexicon knows them.
    let words: Vec<&str> = line.split(' ').filter(|w| !w.is_empty()).collect();
    let k = words
        .iter()
        .position(|w| w.chars().any(|c| c.is_ascii_digit()))?;
    if k == 0 || k > 4 {
        return None;
    }
    let label = words.get(..k)?.join(" ");
    let value = words.get(k..)?.join(" ");
    let number_word = lexicon::number_word(&snake(&label, 64));
    (label_ok(&label) && (known(&label).is_some() || number_word) && typed(&value, style, order))
        .then_some(Pair {
            label,
            value,
            line: i,
            how: How::Spaced,
        })
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
                pair("SUMME EUR", "13,97", How::Spaced),
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
}
