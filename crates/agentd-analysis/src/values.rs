//! Values as documents write them: amounts in local formats (`133.100,00`, `1,234.50`,
//! `1 234,50`, `1'234.50`), dates (`14/10/2026`, `05.11.2026`, `5. November 2026`,
//! `14 de octubre de 2026`, month names in en/de/fr/es/it/nl/pt), and OCR repairs of digit
//! runs (`2O,OO` → `20,00`, `l4.11.2026` → `14.11.2026`). Every function takes any UTF-8 and
//! never panics: slicing goes through regex matches or `str::get`.

use chrono::NaiveDate;
use regex::Regex;
use std::sync::LazyLock;

/// How a document writes the decimal separator; decides `1.234` and `1,234`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DecimalStyle {
    /// `1,234.50`: a point before the decimals.
    Point,
    /// `1.234,50`: a comma before the decimals.
    Comma,
    /// Not known: a lone `,ddd` reads as thousands, a lone `.ddd` as decimals.
    #[default]
    Unknown,
}

/// Which of the two numbers of `03/04/2026` is the day.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DateOrder {
    /// `03/04/2026` is 3 April (most of the world).
    #[default]
    DayFirst,
    /// `03/04/2026` is March 4 (the United States).
    MonthFirst,
}

/// Characters that may stand between the digits of one number.
fn separator(c: char) -> bool {
    matches!(c, '.' | ',' | ' ' | '\'' | '’' | '\u{a0}' | '\u{202f}')
}

/// The side of the account an amount is marked with after it, as statements write it:
/// `3.412,08 H` (Haben), `86,00 S` (Soll), `1,204.55 CR`, `54.37 DR` — `Some(true)` for a
/// credit, `Some(false)` for a debit.
pub fn account_side(s: &str) -> Option<bool> {
    let last = s.split_whitespace().last()?;
    let before = s.trim_end().strip_suffix(last)?.trim_end();
    if !before.ends_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    match last.trim_end_matches('.').to_ascii_lowercase().as_str() {
        "h" | "cr" | "haben" => Some(true),
        "s" | "dr" | "soll" => Some(false),
        _ => None,
    }
}

/// A currency written beside an amount, as its ISO code.
pub fn currency_of(s: &str) -> Option<&'static str> {
    let up = s.to_uppercase();
    let codes = [
        ("€", "EUR"),
        ("EUR", "EUR"),
        ("£", "GBP"),
        ("GBP", "GBP"),
        ("US$", "USD"),
        ("USD", "USD"),
        ("$", "USD"),
        ("CHF", "CHF"),
        ("¥", "JPY"),
        ("JPY", "JPY"),
        ("ARS", "ARS"),
        ("MXN", "MXN"),
        ("BRL", "BRL"),
        ("R$", "BRL"),
        ("SEK", "SEK"),
        ("NOK", "NOK"),
        ("DKK", "DKK"),
        ("PLN", "PLN"),
        ("CAD", "CAD"),
        ("AUD", "AUD"),
        ("INR", "INR"),
        ("₹", "INR"),
    ];
    codes
        .iter()
        .find(|(sym, _)| up.contains(sym))
        .map(|(_, code)| *code)
}

/// A number read from a value such as `1.763,58 €`, `£2,418.36`, `-12.50`, `(3.00)`, `76,684 kg`
/// or `20 %`: around the digits only a sign, a currency and at most two short unit words.
/// `None` when the value is not one number (`55 12 09`, `12 x 41.50`, `RE-2026`).
pub fn parse_number(s: &str, style: DecimalStyle) -> Option<f64> {
    let t = s.trim();
    let first = t.find(|c: char| c.is_ascii_digit())?;
    let last = t.rfind(|c: char| c.is_ascii_digit())?;
    let before = t.get(..first)?;
    let middle = t.get(first..=last)?;
    let after = t.get(last + 1..)?;
    // A letter or a hyphen after letters right before the digits makes a code (`LX71`,
    // `DN-40001`, `SKU-1021`), not a number.
    let mut back = before.chars().rev();
    // Letters glued to the digits are a currency code (`USD1,234.00`) or part of a code.
    let glued: String = before
        .chars()
        .rev()
        .take_while(|c| c.is_alphabetic())
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let currency_prefix = glued.chars().count() >= 2 && currency_of(&glued).is_some();
    match (back.next(), back.next()) {
        (Some(c), _) if c.is_alphabetic() && !currency_prefix => return None,
        (Some('-'), Some(c)) if c.is_alphanumeric() => return None,
        _ => {}
    }
    // So does a capital right after them (`40HC`, `1257L`, `2611W`); `12kg` is a quantity.
    if after
        .chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() && c.is_uppercase())
    {
        return None;
    }
    let words_ok = |x: &str| {
        let words: Vec<&str> = x
            .split(|c: char| !c.is_alphabetic())
            .filter(|w| !w.is_empty())
            .collect();
        words.len() <= 2 && words.iter().all(|w| w.chars().count() <= 5)
    };
    let before_ok = before
        .chars()
        .all(|c| c.is_alphabetic() || c.is_whitespace() || "-−+($€£¥₹".contains(c))
        && words_ok(before);
    let after_ok = after
        .chars()
        .all(|c| c.is_alphabetic() || c.is_whitespace() || "-−)%$€£¥₹./".contains(c))
        && words_ok(after);
    if !before_ok || !after_ok || !middle.chars().all(|c| c.is_ascii_digit() || separator(c)) {
        return None;
    }
    let negative = before.contains('-')
        || before.contains('−')
        || after.trim_start().starts_with('-')
        || (before.contains('(') && after.contains(')'));
    let magnitude = digits_value(middle, style)?;
    Some(if negative { -magnitude } else { magnitude })
}

/// The value of a run of digits and separators (`1.234,50`, `1 234`, `0.1342`).
fn digits_value(middle: &str, style: DecimalStyle) -> Option<f64> {
    // Spaces (and apostrophes) only ever group thousands: every group after the first has
    // three digits, the last may carry the decimals.
    let spaced: Vec<&str> = middle
        .split([' ', '\u{a0}', '\u{202f}', '\'', '’'])
        .collect();
    if spaced.len() > 1 {
        let head_ok = !spaced[0].is_empty()
            && spaced[0].chars().count() <= 3
            && spaced[0].chars().all(|c| c.is_ascii_digit());
        let tail_ok = spaced[1..].iter().enumerate().all(|(i, g)| {
            let digits: String = g.chars().take_while(char::is_ascii_digit).collect();
            let rest = g.get(digits.len()..).unwrap_or("");
            digits.len() == 3
                && (rest.is_empty()
                    || (i == spaced.len() - 2
                        && (rest.starts_with(',') || rest.starts_with('.'))
                        && rest.chars().skip(1).all(|c| c.is_ascii_digit())
                        && rest.chars().count() > 1))
        });
        if !head_ok || !tail_ok {
            return None;
        }
        // What is left besides digits is one decimal separator, if any.
        let joined: String = spaced.concat();
        let style = if joined.contains(',') {
            DecimalStyle::Comma
        } else if joined.contains('.') {
            DecimalStyle::Point
        } else {
            style
        };
        return digits_value(&joined, style);
    }
    let dots = middle.matches('.').count();
    let commas = middle.matches(',').count();
    let plain = |x: &str| x.parse::<f64>().ok();
    match (dots, commas) {
        (0, 0) => plain(middle),
        (_, 0) | (0, _) => {
            let sep = if dots > 0 { '.' } else { ',' };
            let groups: Vec<&str> = middle.split(sep).collect();
            if groups.iter().any(|g| g.is_empty()) {
                return None;
            }
            let thousands_shape = groups[0].len() <= 3 && groups[1..].iter().all(|g| g.len() == 3);
            if groups.len() > 2 {
                return thousands_shape.then(|| plain(&groups.concat())).flatten();
            }
            let as_decimal = || plain(&middle.replace(sep, "."));
            if !thousands_shape || groups[0] == "0" {
                return as_decimal();
            }
            // `1.234` / `1,234`: the document's style decides; unknown, a comma groups
            // thousands and a point marks decimals.
            let thousands = match (style, sep) {
                (DecimalStyle::Point, ',') | (DecimalStyle::Comma, '.') => true,
                (DecimalStyle::Point, _) | (DecimalStyle::Comma, _) => false,
                (DecimalStyle::Unknown, c) => c == ',',
            };
            if thousands {
                plain(&groups.concat())
            } else {
                as_decimal()
            }
        }
        _ => {
            // Both: the last one is the decimal separator, the other groups thousands.
            let last_dot = middle.rfind('.')?;
            let last_comma = middle.rfind(',')?;
            let (thousands, decimal) = if last_dot > last_comma {
                (',', '.')
            } else {
                ('.', ',')
            };
            if middle.matches(decimal).count() != 1 {
                return None;
            }
            let (int, frac) = middle.split_once(decimal)?;
            let groups: Vec<&str> = int.split(thousands).collect();
            let ok = !groups[0].is_empty()
                && groups[0].len() <= 3
                && groups[1..].iter().all(|g| g.len() == 3);
            ok.then(|| plain(&format!("{}.{frac}", groups.concat())))
                .flatten()
        }
    }
}

/// The decimal style a text uses, from its amounts with two decimals (`12,50` vs `12.50`).
pub fn decimal_style(text: &str) -> DecimalStyle {
    static TWO_DECIMALS: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"\d([.,])\d{2}(?:[^\d.,]|$)").expect("regex"));
    let (mut point, mut comma) = (0usize, 0usize);
    for c in TWO_DECIMALS.captures_iter(text).take(2000) {
        // The tail of a dotted code (`1234.56.782.H.56.01`) is no amount: its digits follow a
        // separator after a letter.
        let start = c.get(0).map_or(0, |m| m.start());
        let mut before = text.get(..start).unwrap_or("").chars().rev();
        let lead = before.by_ref().take_while(char::is_ascii_digit).count();
        let coded = lead < 8 && {
            let mut rest = text.get(..start).unwrap_or("").chars().rev().skip(lead);
            matches!(rest.next(), Some('.' | ',')) && rest.next().is_some_and(char::is_alphabetic)
        };
        if coded {
            continue;
        }
        match c.get(1).map(|m| m.as_str()) {
            Some(".") => point += 1,
            Some(",") => comma += 1,
            _ => {}
        }
    }
    if point == comma {
        // No amount with decimals decides: whole amounts grouped in thousands do
        // (`€ 48.312` groups with a point, so a comma would mark decimals).
        static GROUPED: LazyLock<Regex> = LazyLock::new(|| {
            Regex::new(r"(?:^|[^\d.,])\d{1,3}([.,])\d{3}(?:[^\d.,]|[.,](?:[^\d]|$)|$)")
                .expect("regex")
        });
        for c in GROUPED.captures_iter(text).take(2000) {
            match c.get(1).map(|m| m.as_str()) {
                Some(".") => comma += 1,
                Some(",") => point += 1,
                _ => {}
            }
        }
    }
    match point.cmp(&comma) {
        std::cmp::Ordering::Greater => DecimalStyle::Point,
        std::cmp::Ordering::Less => DecimalStyle::Comma,
        std::cmp::Ordering::Equal => DecimalStyle::Unknown,
    }
}

/// Month names and their abbreviations' stems in English, German, French, Spanish, Italian,
/// Dutch and Portuguese (accents folded, lowercase).
const MONTHS: [(u32, &[&str]); 12] = [
    (
        1,
        &[
            "january", "januar", "janner", "janvier", "enero", "gennaio", "januari", "janeiro",
        ],
    ),
    (
        2,
        &[
            "february",
            "februar",
            "fevrier",
            "febrero",
            "febbraio",
            "februari",
            "fevereiro",
        ],
    ),
    (
        3,
        &["march", "marz", "mars", "marzo", "maart", "marco", "mrt"],
    ),
    (4, &["april", "avril", "abril", "aprile"]),
    (5, &["may", "mai", "mayo", "maggio", "mei", "maio"]),
    (6, &["june", "juni", "juin", "junio", "giugno", "junho"]),
    (7, &["july", "juli", "juillet", "julio", "luglio", "julho"]),
    (8, &["august", "aout", "agosto", "augustus"]),
    (
        9,
        &[
            "september",
            "septembre",
            "septiembre",
            "settembre",
            "setembro",
        ],
    ),
    (
        10,
        &[
            "october", "oktober", "octobre", "octubre", "ottobre", "outubro",
        ],
    ),
    (11, &["november", "novembre", "noviembre", "novembro"]),
    (
        12,
        &[
            "december",
            "dezember",
            "decembre",
            "diciembre",
            "dicembre",
            "dezembro",
        ],
    ),
];

/// Lowercase with accents removed (`Février` → `fevrier`, `März` → `marz`).
pub fn fold(s: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    s.nfkd()
        .filter(|c| !unicode_normalization::char::is_combining_mark(*c))
        .flat_map(char::to_lowercase)
        .collect()
}

/// The month a word names: a full name, or a prefix of at least three letters that names one
/// month in every language it starts (`Nov`, `sept.`, `févr`, `Okt`; not `ma` or `jui`).
pub fn month_of(word: &str) -> Option<u32> {
    let w = fold(word.trim_end_matches('.'));
    if w.chars().count() < 3 || !w.chars().all(char::is_alphabetic) {
        return None;
    }
    let mut found: Option<u32> = None;
    for (m, names) in MONTHS {
        if names.iter().any(|n| n.starts_with(w.as_str())) {
            match found {
                Some(f) if f != m => return None,
                _ => found = Some(m),
            }
        }
    }
    found
}

fn year(y: &str) -> Option<i32> {
    let n: i32 = y.parse().ok()?;
    match y.len() {
        4 if (1900..=2199).contains(&n) => Some(n),
        2 => Some(2000 + n),
        _ => None,
    }
}

static ISO: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})\b").expect("regex"));
static NUMERIC: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b(\d{1,2})([./-])(\d{1,2})([./-])(\d{4}|\d{2})\b").expect("regex")
});
static DAY_MONTH_YEAR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(\d{1,2})(?:st|nd|rd|th|er|º|\.)?[ \t\-/]*(?:de[ \t]+)?(\p{L}{3,10})\.?,?[ \t\-/]*(?:de[ \t]+|del[ \t]+)?(\d{4})\b")
        .expect("regex")
});
static MONTH_DAY_YEAR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(\p{L}{3,10})\.?[ \t]+(\d{1,2})(?:st|nd|rd|th)?,?[ \t]+(\d{4})\b")
        .expect("regex")
});

/// A date found in a text: where (byte range of the text, from a regex match) and its readings
/// (two for `03/04/2026`, the preferred one first).
#[derive(Debug, Clone, PartialEq)]
pub struct FoundDate {
    pub start: usize,
    pub end: usize,
    pub readings: Vec<NaiveDate>,
}

/// Every date written in `text`, in order, the preferred reading first.
pub fn dates_in(text: &str, order: DateOrder) -> Vec<FoundDate> {
    let mut out: Vec<FoundDate> = Vec::new();
    // Accepted spans by start (disjoint): a new span overlaps one only if it overlaps the
    // last one starting before its end.
    let mut taken: std::collections::BTreeMap<usize, usize> = std::collections::BTreeMap::new();
    let mut push = |start: usize, end: usize, readings: Vec<NaiveDate>| {
        let overlaps = taken
            .range(..end)
            .next_back()
            .is_some_and(|(_, e)| *e > start);
        if !readings.is_empty() && !overlaps {
            taken.insert(start, end);
            out.push(FoundDate {
                start,
                end,
                readings,
            });
        }
    };
    let ymd = |y: i32, m: u32, d: u32| NaiveDate::from_ymd_opt(y, m, d);
    let num = |c: &regex::Captures, i: usize| -> Option<u32> { c.get(i)?.as_str().parse().ok() };
    for c in ISO.captures_iter(text).take(5000) {
        let (Some(all), Some(y)) = (c.get(0), c.get(1).and_then(|y| year(y.as_str()))) else {
            continue;
        };
        let r = num(&c, 2).zip(num(&c, 3)).and_then(|(m, d)| ymd(y, m, d));
        push(all.start(), all.end(), r.into_iter().collect());
    }
    for c in NUMERIC.captures_iter(text).take(5000) {
        let Some(all) = c.get(0) else { continue };
        // `1.234.567` is a number, not a date: both separators must be the same character.
        if c.get(2).map(|m| m.as_str()) != c.get(4).map(|m| m.as_str()) {
            continue;
        }
        let (Some(a), Some(b), Some(y)) = (
            num(&c, 1),
            num(&c, 3),
            c.get(5).and_then(|y| year(y.as_str())),
        ) else {
            continue;
        };
        let day_first = ymd(y, b, a);
        let month_first = ymd(y, a, b);
        let readings: Vec<NaiveDate> = match order {
            DateOrder::DayFirst => [day_first, month_first],
            DateOrder::MonthFirst => [month_first, day_first],
        }
        .into_iter()
        .flatten()
        .fold(Vec::new(), |mut v, d| {
            if !v.contains(&d) {
                v.push(d);
            }
            v
        });
        push(all.start(), all.end(), readings);
    }
    for c in DAY_MONTH_YEAR.captures_iter(text).take(5000) {
        let Some(all) = c.get(0) else { continue };
        let m = c.get(2).and_then(|w| month_of(w.as_str()));
        let y = c.get(3).and_then(|y| year(y.as_str()));
        let r = m
            .zip(y)
            .zip(num(&c, 1))
            .and_then(|((m, y), d)| ymd(y, m, d));
        push(all.start(), all.end(), r.into_iter().collect());
    }
    for c in MONTH_DAY_YEAR.captures_iter(text).take(5000) {
        let Some(all) = c.get(0) else { continue };
        let m = c.get(1).and_then(|w| month_of(w.as_str()));
        let y = c.get(3).and_then(|y| year(y.as_str()));
        let r = m
            .zip(y)
            .zip(num(&c, 2))
            .and_then(|((m, y), d)| ymd(y, m, d));
        push(all.start(), all.end(), r.into_iter().collect());
    }
    out.sort_by_key(|d| d.start);
    out
}

/// The date a whole value denotes (`05.11.2026`, `5. November 2026`, `Nov 5, 2026`,
/// `Mon, 2026-11-05`), the preferred reading; `None` when the value is more than a date.
pub fn parse_date(value: &str, order: DateOrder) -> Option<NaiveDate> {
    let v = value.trim();
    let found = dates_in(v, order);
    let [d] = found.as_slice() else { return None };
    // What is left around the date: at most a weekday or a time of day.
    let rest = format!("{} {}", v.get(..d.start)?, v.get(d.end..)?);
    let leftover_ok = rest.split_whitespace().all(|w| {
        let w = w.trim_matches(|c: char| c == ',' || c == '.' || c == '(' || c == ')');
        w.is_empty()
            || w.chars().all(|c| c.is_ascii_digit() || c == ':')
            || (w.chars().all(char::is_alphabetic) && w.chars().count() <= 10 && is_weekday(w))
            // `05/11/2026 à 08:15`, `um 18:07 Uhr`, `alle ore 9:30`.
            || matches!(
                fold(w).as_str(),
                "am" | "pm" | "h" | "uhr" | "a" | "at" | "um" | "om" | "as" | "alle" | "ore" | "las"
            )
    });
    leftover_ok.then(|| d.readings.first().copied()).flatten()
}

fn is_weekday(w: &str) -> bool {
    const DAYS: [&str; 35] = [
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
        "montag",
        "dienstag",
        "mittwoch",
        "donnerstag",
        "freitag",
        "samstag",
        "sonntag",
        "lundi",
        "mardi",
        "mercredi",
        "jeudi",
        "vendredi",
        "samedi",
        "dimanche",
        "lunes",
        "martes",
        "miercoles",
        "jueves",
        "viernes",
        "sabado",
        "domingo",
        "lunedi",
        "martedi",
        "mercoledi",
        "giovedi",
        "venerdi",
        "maandag",
        "dinsdag",
    ];
    let f = fold(w);
    f.chars().count() >= 2 && DAYS.iter().any(|d| d.starts_with(f.as_str()))
}

/// Whether `text`'s numeric dates are written month first: some `a/b/yyyy` has `b > 12` and
/// none has `a > 12`.
pub fn date_order(text: &str) -> DateOrder {
    let (mut month_first, mut day_first) = (false, false);
    for c in NUMERIC.captures_iter(text).take(2000) {
        let n = |i: usize| c.get(i).and_then(|m| m.as_str().parse::<u32>().ok());
        match (n(1), n(3)) {
            (Some(a), Some(b)) if b > 12 && a <= 12 => month_first = true,
            (Some(a), Some(b)) if a > 12 && b <= 12 => day_first = true,
            _ => {}
        }
    }
    if month_first && !day_first {
        DateOrder::MonthFirst
    } else {
        DateOrder::DayFirst
    }
}

/// OCR repairs in digit runs: in a word made of digits, number punctuation and the letters OCR
/// confuses with digits, `O`/`o` → `0`, `l`/`I`/`|` → `1`, and `S`/`B` between digits → `5`/`8`
/// (`2O,OO` → `20,00`, `l4.11.2026` → `14.11.2026`, `O7731` → `07731`). Words with other
/// letters (`S-26-118042`, `RE-1183`) are left alone.
pub fn repair_digits(s: &str) -> String {
    s.split(' ')
        .map(repair_digit_word)
        .collect::<Vec<_>>()
        .join(" ")
}

fn repair_digit_word(w: &str) -> String {
    let chars: Vec<char> = w.chars().collect();
    let digits = chars.iter().filter(|c| c.is_ascii_digit()).count();
    let lookalike = |c: char| matches!(c, 'O' | 'o' | 'l' | 'I' | '|');
    let between_digits = |i: usize| {
        i > 0
            && chars.get(i - 1).is_some_and(char::is_ascii_digit)
            && chars.get(i + 1).is_some_and(char::is_ascii_digit)
    };
    let allowed = |i: usize, c: char| {
        c.is_ascii_digit()
            || matches!(c, '.' | ',' | ':' | '/' | '-' | '\'')
            || lookalike(c)
            || (matches!(c, 'S' | 'B') && between_digits(i))
    };
    let suspicious = chars
        .iter()
        .any(|c| lookalike(*c) || matches!(c, 'S' | 'B'));
    if digits == 0 || !suspicious || !chars.iter().enumerate().all(|(i, c)| allowed(i, *c)) {
        return w.to_string();
    }
    chars
        .iter()
        .map(|c| match c {
            'O' | 'o' => '0',
            'l' | 'I' | '|' => '1',
            'S' => '5',
            'B' => '8',
            other => *other,
        })
        .collect()
}

/// OCR repairs in a code (`GPN-2O26-1147` → `GPN-2026-1147`, `FG-2l3-KC` → `FG-213-KC`,
/// `5l3 228 904 OOO17` → `513 228 904 00017`): each group between spaces, `-` and `/` that has
/// at least two digits (one in a code of six or more) and otherwise only letters OCR confuses
/// with digits (`O`, `o`, `l`,
/// `I`, `|`) gets them as digits; groups of letters (`GPN`, `KC`) stay.
pub fn repair_code(s: &str) -> String {
    let mut out = String::new();
    let mut group = String::new();
    // In a long number (`GB 3l4 2299 O8`), a short group with one digit is a number too.
    let need = if s.chars().filter(char::is_ascii_digit).count() >= 6 {
        1
    } else {
        2
    };
    let flush = |group: &mut String, out: &mut String| {
        let digits = group.chars().filter(char::is_ascii_digit).count();
        let lookalike = |c: char| matches!(c, 'O' | 'o' | 'l' | 'I' | '|');
        let repairable =
            digits >= need && group.chars().all(|c| c.is_ascii_digit() || lookalike(c));
        if repairable {
            out.extend(group.chars().map(|c| match c {
                'O' | 'o' => '0',
                'l' | 'I' | '|' => '1',
                other => other,
            }));
        } else {
            out.push_str(group);
        }
        group.clear();
    };
    for c in s.chars() {
        if c.is_whitespace() || matches!(c, '-' | '/') {
            flush(&mut group, &mut out);
            out.push(c);
        } else {
            group.push(c);
        }
    }
    flush(&mut group, &mut out);
    out
}

/// The number a value starts with when a few words follow it (`€ 250 per schade`,
/// `4 500 000 € par sinistre`, `58 m³ (actual)`): the longest run of leading words (at most
/// five) that reads as a number, when at most four words follow.
pub fn leading_number(s: &str, style: DecimalStyle) -> Option<f64> {
    let words: Vec<&str> = s.split_whitespace().collect();
    (1..=words.len().min(5)).rev().find_map(|k| {
        let rest = words.len() - k;
        if rest == 0 || rest > 4 {
            return None;
        }
        parse_number(&words[..k].join(" "), style)
    })
}

/// OCR repairs in a label word: single digits inside a word of letters read as the letters
/// they resemble (`T0TAL` → `TOTAL`, `Te1` → `Tel`, `0akland` → `Oakland`, `M1LCH` → `MILCH`).
/// Words with a run of digits (`Win10`, `Last4`, `CO2`) are left alone.
pub fn repair_letters(s: &str) -> String {
    s.split(' ')
        .map(repair_letter_word)
        .collect::<Vec<_>>()
        .join(" ")
}

fn repair_letter_word(w: &str) -> String {
    // A capital `I` after a letter and before a small one is an `l` (`CIient`, `KiIométrage`,
    // `RègIement`).
    let chars: Vec<char> = w.chars().collect();
    let fixed: Vec<char> = (0..chars.len())
        .map(|i| {
            let c = chars[i];
            let after_letter = i > 0 && chars[i - 1].is_alphabetic();
            let before_small = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            if c == 'I' && after_letter && before_small {
                'l'
            } else {
                c
            }
        })
        .collect();
    let w: String = fixed.iter().collect();
    let w = w.as_str();
    let chars = fixed;
    // A digit after a capital inside a word of mixed case is a name's own (`HbA1c`, `SpO2`):
    // an OCR slip makes a digit of a small letter among small ones (`Tota1`, `Te1`).
    let inner_capital_digit = (1..chars.len())
        .any(|i| chars[i].is_ascii_digit() && chars[i - 1].is_uppercase() && i - 1 > 0);
    if inner_capital_digit && chars.iter().any(|c| c.is_lowercase()) {
        return w.to_string();
    }
    let letters = chars.iter().filter(|c| c.is_alphabetic()).count();
    let digits: Vec<usize> = (0..chars.len())
        .filter(|i| chars[*i].is_ascii_digit())
        .collect();
    let single = digits.iter().all(|&i| {
        (i == 0 || !chars[i - 1].is_ascii_digit())
            && !chars.get(i + 1).is_some_and(char::is_ascii_digit)
    });
    // `F00DS`, `WH0LEMEAL`: zeros in a word of capitals are O's, even two together.
    let capitals = chars
        .iter()
        .filter(|c| c.is_alphabetic())
        .all(|c| c.is_uppercase());
    let zeros_in_capitals = capitals && digits.iter().all(|&i| chars[i] == '0');
    // `N0`, `0p`: a letter and a zero.
    let short = chars.len() == 2 && letters == 1 && digits.iter().all(|&i| chars[i] == '0');
    let mappable = digits.iter().all(|&i| matches!(chars[i], '0' | '1' | '5'));
    let enough_letters = (letters >= 2 && digits.len() * 2 <= letters)
        || (zeros_in_capitals && letters >= 2 && digits.len() < letters)
        || short;
    if digits.is_empty() || !enough_letters || (!single && !zeros_in_capitals) || !mappable {
        return w.to_string();
    }
    let upper = chars
        .iter()
        .filter(|c| c.is_alphabetic())
        .all(|c| c.is_uppercase());
    chars
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let capital = upper || (i == 0 && chars.get(1).is_some_and(|n| n.is_lowercase()));
            match (c, capital) {
                ('0', true) => 'O',
                ('0', false) => 'o',
                ('1', true) => 'I',
                ('1', false) => 'l',
                ('5', true) => 'S',
                ('5', false) => 's',
                (other, _) => *other,
            }
        })
        .collect()
}

/// Yes/no words in the document's languages.
pub fn parse_bool(s: &str) -> Option<bool> {
    match fold(s.trim().trim_end_matches('.')).as_str() {
        "yes" | "y" | "true" | "ja" | "oui" | "si" | "sim" | "jawel" => Some(true),
        "no" | "n" | "false" | "nein" | "non" | "nao" | "nee" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Option<f64> {
        parse_number(s, DecimalStyle::Unknown)
    }

    #[test]
    fn amounts_in_local_formats() {
        assert_eq!(n("1.763,58 €"), Some(1763.58));
        assert_eq!(n("133.100,00"), Some(133100.0));
        assert_eq!(n("1,234.50"), Some(1234.5));
        assert_eq!(n("1 234,50"), Some(1234.5));
        assert_eq!(n("1\u{a0}234,50 EUR"), Some(1234.5));
        assert_eq!(n("1'234.50 CHF"), Some(1234.5));
        assert_eq!(n("£2,418.36"), Some(2418.36));
        assert_eq!(n("$0.1342 per kWh"), Some(0.1342));
        assert_eq!(n("76,684 kg"), Some(76684.0));
        assert_eq!(n("-12.50"), Some(-12.5));
        assert_eq!(n("(3.00)"), Some(-3.0));
        assert_eq!(n("20 %"), Some(20.0));
        assert_eq!(n("506,10 €"), Some(506.1));
        assert_eq!(parse_number("1.234", DecimalStyle::Comma), Some(1234.0));
        assert_eq!(parse_number("1.234", DecimalStyle::Point), Some(1.234));
        assert_eq!(n("55 12 09"), None);
        assert_eq!(n("DN-40001"), None);
        assert_eq!(n("LX71 KPD"), None);
        assert_eq!(n("40HC"), None);
        assert_eq!(n("12kg"), Some(12.0));
        assert_eq!(n("EUR 12,50"), Some(12.5));
        assert_eq!(n("USD1,234.00"), Some(1234.0));
        assert_eq!(n("- 12.50"), Some(-12.5));
        assert_eq!(n("12    41.50"), None);
        assert_eq!(n("RE-2026-1183"), None);
        assert_eq!(n("Hansen Logistik AG, Am Sandtorkai 41"), None);
        assert_eq!(n("1.2.3,4,5"), None);
    }

    #[test]
    fn dates_in_many_forms_and_languages() {
        let d = |s: &str| parse_date(s, DateOrder::DayFirst).map(|d| d.to_string());
        let day = Some("2026-11-05".to_string());
        assert_eq!(d("05.11.2026"), day);
        assert_eq!(d("2026-11-05"), day);
        assert_eq!(d("5. November 2026"), day);
        assert_eq!(d("5 novembre 2026"), day);
        assert_eq!(d("5 de noviembre de 2026"), day);
        assert_eq!(d("Nov 5, 2026"), day);
        assert_eq!(d("November 5th, 2026"), day);
        assert_eq!(d("5 nov. 2026"), day);
        assert_eq!(d("05-NOV-2026"), day);
        assert_eq!(d("5 november 2026"), day);
        assert_eq!(d("5 de novembro de 2026"), day);
        assert_eq!(d("Thursday, 5 November 2026"), day);
        assert_eq!(d("05/11/26"), day);
        assert_eq!(d("14 de octubre de 2026"), Some("2026-10-14".into()));
        assert_eq!(d("1er mars 2026"), Some("2026-03-01".into()));
        assert_eq!(d("3. März 2026"), Some("2026-03-03".into()));
        assert_eq!(d("12 maart 2026"), Some("2026-03-12".into()));
        assert_eq!(d("12 giugno 2026"), Some("2026-06-12".into()));
        assert_eq!(
            parse_date("11/05/2026", DateOrder::MonthFirst).map(|d| d.to_string()),
            day
        );
        assert_eq!(d("October 2026"), None);
        assert_eq!(d("01/10/2026 to 31/10/2026"), None);
        assert_eq!(d("1.234.567"), None);
        assert_eq!(d("32.13.2026"), None);
    }

    #[test]
    fn month_words_are_unambiguous() {
        assert_eq!(month_of("Nov"), Some(11));
        assert_eq!(month_of("févr."), Some(2));
        assert_eq!(month_of("Okt"), Some(10));
        assert_eq!(month_of("sept"), Some(9));
        assert_eq!(month_of("jui"), None);
        assert_eq!(month_of("ma"), None);
        assert_eq!(month_of("marketing"), None);
    }

    #[test]
    fn date_order_from_the_text() {
        assert_eq!(date_order("Due 11/24/2026"), DateOrder::MonthFirst);
        assert_eq!(
            date_order("Due 24/11/2026 and 11/05/2026"),
            DateOrder::DayFirst
        );
        assert_eq!(date_order("no dates"), DateOrder::DayFirst);
    }

    #[test]
    fn ocr_repairs() {
        assert_eq!(repair_digits("2O,OO"), "20,00");
        assert_eq!(repair_digits("l4.11.2026"), "14.11.2026");
        assert_eq!(repair_digits("O7731"), "07731");
        assert_eq!(repair_digits("1,8l"), "1,81");
        assert_eq!(repair_digits("1S0"), "150");
        assert_eq!(repair_digits("S-26-118042"), "S-26-118042");
        assert_eq!(repair_digits("B0nn"), "B0nn");
        assert_eq!(repair_digits("Total OK"), "Total OK");
        assert_eq!(repair_letters("T0TAL"), "TOTAL");
        assert_eq!(repair_letters("Te1"), "Tel");
        assert_eq!(repair_letters("0akland"), "Oakland");
        assert_eq!(repair_letters("Vie1en"), "Vielen");
        assert_eq!(repair_letters("M1LCH 3,5%"), "MILCH 3,5%");
        assert_eq!(repair_letters("Win10 Last4 CO2"), "Win10 Last4 CO2");
    }

    #[test]
    fn a_digit_after_an_inner_capital_is_kept() {
        assert_eq!(repair_letters("HbA1c"), "HbA1c");
        assert_eq!(repair_letters("SpO2 Tota1"), "SpO2 Total");
        assert_eq!(repair_letters("C1ient"), "Client");
    }

    #[test]
    fn decimal_style_votes() {
        assert_eq!(decimal_style("a 12,50 b 3,10 c 1.00"), DecimalStyle::Comma);
        assert_eq!(decimal_style("£2,418.36 and 1.12"), DecimalStyle::Point);
    }

    #[test]
    fn nothing_panics_on_odd_input() {
        for s in [
            "",
            "€",
            "—1",
            "1—",
            "Ωmega 12,5 ß",
            "٣٤٥",
            "1,,2",
            ",5",
            "1.",
            "🙂 12 🙂",
        ] {
            let _ = n(s);
            let _ = parse_date(s, DateOrder::DayFirst);
            let _ = repair_digits(s);
            let _ = repair_letters(s);
            let _ = dates_in(s, DateOrder::MonthFirst);
        }
    }
}
