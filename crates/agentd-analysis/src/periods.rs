//! Dates that come in a form of their own: a **range** as one value (`01/10/2026 - 31/10/2026`,
//! `du 01/09/2026 au 30/09/2026`, `01-10-2026 t/m 31-10-2026`, `1. Jan. bis 31. Dez. 2026`),
//! which is two fields, its start and its end; a **dated label** (`Solde précédent au
//! 31/08/2026`, `Beginsaldo per 01-10-2026`), whose date is not part of the label's name; and
//! the **place and date** a letter or form is signed with (`Fait à Nantes, le 12 janvier 2026`,
//! `Roma, 12 marzo 2026`, `Köln, den 09.10.2026`), the document's date of issue.

use super::values::{DateOrder, dates_in, fold};
use chrono::NaiveDate;

/// Words that join the two ends of a range, folded (`-`, `to`, `bis`, `au`, `al`, `a`, `tot`,
/// `t/m`, `até`, `through`).
const JOINERS: [&str; 19] = [
    "-", "–", "—", "/", "to", "till", "until", "through", "thru", "bis", "au", "al", "a", "hasta",
    "tot", "t/m", "tm", "ate", "fino al",
];

/// Words that may open a range (`du`, `from`, `vom`, `del`, `dal`, `van`, `de`, `desde`).
const OPENERS: [&str; 12] = [
    "du", "from", "vom", "von", "del", "dal", "van", "de", "desde", "da", "periode", "period",
];

/// The start and end of a value that is a date range and nothing else (a count of days in
/// parentheses may follow: `01/10/2026 - 31/10/2026 (31 días)`). Byte offsets come from
/// [`dates_in`] on the same string.
pub fn range(value: &str, order: DateOrder) -> Option<(NaiveDate, NaiveDate)> {
    let v = value.trim();
    let found = dates_in(v, order);
    let [a, b] = found.as_slice() else {
        return None;
    };
    let before = fold(v.get(..a.start)?.trim().trim_end_matches(':'));
    let between = fold(v.get(a.end..b.start)?.trim());
    let after = v.get(b.end..)?.trim();
    let opener_ok = before.is_empty() || OPENERS.contains(&before.as_str());
    let joiner_ok = JOINERS.contains(&between.as_str());
    // A note after a comma or a dash (`…, verlängert sich um je ein Jahr`) is not the range's.
    let after_ok = after.is_empty()
        || (after.starts_with('(') && after.ends_with(')'))
        || after.starts_with([',', ';'])
        || after.starts_with("- ")
        || after.starts_with("– ")
        || after
            .trim_matches(|c: char| c == '.' || c == ',')
            .is_empty();
    let (start, end) = (*a.readings.first()?, *b.readings.first()?);
    (opener_ok && joiner_ok && after_ok && start <= end).then_some((start, end))
}

/// Words that tie a date to a label (`au`, `per`, `am`, `as of`), dropped with the date.
const DATE_TIES: [&str; 20] = [
    "au", "per", "am", "as", "of", "at", "on", "vom", "zum", "du", "del", "al", "a", "em", "op",
    "le", "ab", "from", "since", "dal",
];

/// A label without the dates written in it and the words tying them to it (`Solde précédent au
/// 31/08/2026` → `Solde précédent`, `Beginsaldo per 01-10-2026` → `Beginsaldo`); the label
/// itself when it has no date or would be left empty.
pub fn undated_label(label: &str, order: DateOrder) -> String {
    let found = dates_in(label, order);
    if found.is_empty() {
        return label.to_string();
    }
    let mut out = String::new();
    let mut from = 0;
    for d in &found {
        out.push_str(label.get(from..d.start).unwrap_or(""));
        out.push(' ');
        from = d.end;
    }
    out.push_str(label.get(from..).unwrap_or(""));
    let mut words: Vec<&str> = out.split_whitespace().collect();
    while words
        .last()
        .is_some_and(|w| DATE_TIES.contains(&fold(w).as_str()))
    {
        words.pop();
    }
    let kept = words.join(" ");
    if kept.chars().any(char::is_alphabetic) {
        kept
    } else {
        label.to_string()
    }
}

/// The date of a place-and-date line (`Fait à Nantes, le 12 janvier 2026`, `Roma, 12 marzo
/// 2026`, `Madrid, a 3 de mayo de 2026`, `Köln, den 09.10.2026`): a place of one to four
/// capitalised words, a comma, then only the date.
pub fn place_date(line: &str, order: DateOrder) -> Option<NaiveDate> {
    let t = line.trim();
    if t.chars().count() > 80 {
        return None;
    }
    let (place, rest) = t.split_once(',')?;
    let mut place_words: Vec<&str> = place.split_whitespace().collect();
    // `Fait à Nantes`, `Done at London`, `Gegeben zu Bonn`.
    if place_words.len() >= 3 {
        let head = fold(&place_words[..2].join(" "));
        if matches!(
            head.as_str(),
            "fait a" | "done at" | "signed at" | "hecho en" | "fatto a" | "feito em"
        ) {
            place_words.drain(..2);
        }
    }
    let place_ok = !place_words.is_empty()
        && place_words.len() <= 4
        && place_words.iter().all(|w| {
            w.chars().next().is_some_and(char::is_uppercase)
                && w.chars()
                    .all(|c| c.is_alphabetic() || matches!(c, '-' | '\'' | '.'))
        });
    if !place_ok {
        return None;
    }
    let rest = rest.trim();
    let found = dates_in(rest, order);
    let [d] = found.as_slice() else {
        return None;
    };
    let lead = fold(rest.get(..d.start)?.trim());
    let tail = rest.get(d.end..)?.trim().trim_end_matches('.');
    let lead_ok = matches!(
        lead.as_str(),
        "" | "le" | "den" | "am" | "a" | "el" | "il" | "li" | "on" | "the" | "em" | "op"
    );
    (lead_ok && tail.is_empty())
        .then(|| d.readings.first().copied())
        .flatten()
}

/// A range running text opens with a word (`… pour la période du 01/01/2026 au 31/12/2026,
/// pour …`, `valid from 1 May 2026 to 30 April 2027`): the first in `line` whose two dates are
/// joined by a joiner and opened by an opener.
pub fn range_in_text(line: &str, order: DateOrder) -> Option<(NaiveDate, NaiveDate)> {
    let found = dates_in(line, order);
    for w in found.windows(2) {
        let [a, b] = w else { continue };
        let between = fold(line.get(a.end..b.start)?.trim());
        let opener = line
            .get(..a.start)?
            .split_whitespace()
            .next_back()
            .map(fold)
            .unwrap_or_default();
        let (Some(start), Some(end)) = (a.readings.first(), b.readings.first()) else {
            continue;
        };
        if JOINERS.contains(&between.as_str()) && OPENERS.contains(&opener.as_str()) && start <= end
        {
            return Some((*start, *end));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ymd(y: i32, m: u32, d: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, d).expect("a date")
    }

    #[test]
    fn ranges_in_several_languages() {
        let o = DateOrder::DayFirst;
        let oct = Some((ymd(2026, 10, 1), ymd(2026, 10, 31)));
        assert_eq!(range("01/10/2026 - 31/10/2026", o), oct);
        assert_eq!(range("01/10/2026 - 31/10/2026 (31 días)", o), oct);
        assert_eq!(range("01-10-2026 t/m 31-10-2026", o), oct);
        assert_eq!(range("du 01/10/2026 au 31/10/2026", o), oct);
        assert_eq!(range("01/10/2026 a 31/10/2026", o), oct);
        assert_eq!(range("1 October 2026 to 31 October 2026", o), oct);
        assert_eq!(range("01.10.2026 – 31.10.2026", o), oct);
        // Not a range: one date, a date and more, ends in the wrong order.
        assert_eq!(range("01/10/2026", o), None);
        assert_eq!(range("01/10/2026 paid 31/10/2026", o), None);
        assert_eq!(range("31/10/2026 - 01/10/2026", o), None);
    }

    #[test]
    fn dates_leave_labels() {
        let o = DateOrder::DayFirst;
        assert_eq!(
            undated_label("Solde précédent au 31/08/2026", o),
            "Solde précédent"
        );
        assert_eq!(undated_label("Beginsaldo per 01-10-2026", o), "Beginsaldo");
        assert_eq!(undated_label("Saldo final", o), "Saldo final");
        assert_eq!(undated_label("31/08/2026", o), "31/08/2026");
    }

    #[test]
    fn place_and_date_lines() {
        let o = DateOrder::DayFirst;
        assert_eq!(
            place_date("Fait à Nantes, le 12 janvier 2026", o),
            Some(ymd(2026, 1, 12))
        );
        assert_eq!(place_date("Roma, 12 marzo 2026", o), Some(ymd(2026, 3, 12)));
        assert_eq!(
            place_date("Köln, den 09.10.2026", o),
            Some(ymd(2026, 10, 9))
        );
        assert_eq!(
            place_date("Madrid, a 3 de mayo de 2026", o),
            Some(ymd(2026, 5, 3))
        );
        assert_eq!(place_date("Paris, 14 rue des Lilas", o), None);
        assert_eq!(place_date("paid on delivery, 12/01/2026", o), None);
        assert_eq!(place_date("Total, 12/01/2026 and more", o), None);
    }
}
