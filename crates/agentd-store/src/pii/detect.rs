//! Rules that find personal data in text. Each rule is a regular expression plus, where one
//! exists, a checksum that removes look-alikes: IBANs must pass ISO 13616 mod-97, payment cards
//! the Luhn check and a known issuer prefix. Names are found only where a label says a person
//! follows ("Name:", "Patient:", "Kunde:", "Bill to:" …) or where a JSON key says so
//! (`"customer_name": "…"`); free-text names without such a cue are **not** found (see the
//! limits in the docs). Configurable national-id patterns come from `[pii] national_id_patterns`.

use regex::Regex;
use std::sync::LazyLock;

/// What a detected value is; the token prefix the provider sees (`EMAIL_1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Email,
    Phone,
    Iban,
    Card,
    /// A national or patient id (configured patterns and labelled ids).
    Id,
    Person,
}

impl Kind {
    /// The token prefix.
    pub fn prefix(self) -> &'static str {
        match self {
            Kind::Email => "EMAIL",
            Kind::Phone => "PHONE",
            Kind::Iban => "IBAN",
            Kind::Card => "CARD",
            Kind::Id => "ID",
            Kind::Person => "PERSON",
        }
    }

    /// The kind of a token prefix.
    pub fn from_prefix(p: &str) -> Option<Kind> {
        Some(match p {
            "EMAIL" => Kind::Email,
            "PHONE" => Kind::Phone,
            "IBAN" => Kind::Iban,
            "CARD" => Kind::Card,
            "ID" => Kind::Id,
            "PERSON" => Kind::Person,
            _ => return None,
        })
    }
}

/// One finding: a byte range of the text and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub start: usize,
    pub end: usize,
    pub kind: Kind,
}

fn re(s: &str) -> Regex {
    Regex::new(s).expect("detector regex compiles") // checked: constant patterns; every one is compiled by the unit tests
}

/// Declares each pattern as a `static` compiled on first use.
macro_rules! patterns {
    ($($(#[$doc:meta])* $name:ident = $re:expr;)*) => {
        $($(#[$doc])* static $name: LazyLock<Regex> = LazyLock::new(|| re($re));)*
    };
}

patterns! {
    EMAIL = r"(?i)\b[a-z0-9][a-z0-9._%+-]*@[a-z0-9-]+(?:\.[a-z0-9-]+)*\.[a-z]{2,24}\b";
    IBAN = r"\b[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b";
    CARD = r"\b[0-9](?:[ -]?[0-9]){12,18}\b";
    /// International (+CC …) or national (leading 0, or US (555) 123-4567) numbers with separators.
    PHONE = r"(?:\+[0-9]{1,3}[ .\-/]?(?:\(0?[0-9]{0,5}\)[ .\-/]?)?[0-9]{1,8}(?:[ .\-/][0-9]{1,8}){0,5}|\([0-9]{3}\) ?[0-9]{3}[ .\-][0-9]{4}|\b0[0-9]{1,5}(?:[ /.\-][0-9]{2,8}){1,4})\b";
    /// A label announcing a phone number: catches bare digit runs after "Tel:".
    PHONE_LABELLED = r"(?im)\b(?:tel(?:efon|ephone)?|phone|mobile?|handy|fax|cell)\.?(?: ?(?:no|nr|number)\.?)?[ \t]*[:：][ \t]*(\+?[0-9][0-9 ()./-]{5,22}[0-9])";
    SSN = r"\b[0-9]{3}-[0-9]{2}-[0-9]{4}\b";
    /// UK National Insurance number.
    NINO = r"\b[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?[0-9]{2} ?[0-9]{2} ?[0-9]{2} ?[A-D]\b";
    /// A label announcing a personal id (patient, member, insurance, tax, passport); the value
    /// has single spaces only, so it ends at a column gap (`DOB: 14/03/1961      Sex: F`).
    ID_LABELLED = r"(?im)\b(?:patient(?:en)?[ -]?(?:id|nr|no|number|nummer)|mrn|member[ -]?(?:id|no|number)|versicherten[ -]?(?:nr|nummer)|insurance[ -]?(?:id|no|number)|ssn|social security(?: number)?|nhs[ -]?(?:no|nr|number)|tax[ -]?id|steuer[ -]?id|passport(?: no| number)?|date of birth|dob|geburtsdatum|geb\.)\.?[ \t]*[:：#][ \t]*([A-Za-z0-9](?: ?[A-Za-z0-9./-]){2,30}[A-Za-z0-9])";
    /// A labelled id's value where it stands (after a type name in a candidates line).
    ID_VALUE = r"^[A-Za-z0-9](?: ?[A-Za-z0-9./-]){2,30}[A-Za-z0-9]";
    /// A label announcing a person, then 1–4 capitalised words (an optional title first; the
    /// surname first with a comma, `HARGREAVES, Eleanor`), one space or tab between words so
    /// that a column gap ends the name.
    PERSON_LABELLED = r"(?im)\b(?:name|full name|patient(?:in)?|customer|client|bill to|billed to|ship to|sold to|attn|attention|contact(?: person)?|account holder|cardholder|recipient|employee|driver|consignee|kunde|kundin|ansprechpartner(?:in)?|empfänger(?:in)?|kontoinhaber(?:in)?|inhaber(?:in)?|rechnungsempfänger|nom|destinataire|titulaire)\s*[:：][ \t]*((?:(?:mr|mrs|ms|dr|prof|herr|frau|m|mme)\.?[ \t]+)?\p{Lu}[\p{L}'’-]+,?(?:[ \t]\p{Lu}[\p{L}'’.-]*){1,3})";
    /// JSON keys whose string values are personal.
    PERSON_KEYS = r#"(?i)"(?:full_name|first_name|last_name|given_name|family_name|customer_name|patient_name|contact_name|account_holder|cardholder|recipient_name|employee_name|email|email_address|phone|phone_number|telephone|mobile|iban|date_of_birth|dob|ssn|patient_id)"\s*:\s*"((?:[^"\\]|\\.){2,80})""#;
    /// Company suffixes: a labelled "name" ending with one is an organisation, not a person.
    COMPANY = r"(?i)\b(?:gmbh|ag|inc|llc|ltd|limited|corp|corporation|co|kg|sa|sarl|bv|plc|company|group|bank|clinic|labs?|laboratory|hospital|shop|store|market|services|logistics)\.?$";
    /// A UUID (any version, either case): an id of agentd's own rows, never personal, but its
    /// all-digit groups look like a national phone number (`…-0327-7067-…`).
    UUID = r"(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b";
}

/// Finds personal data. `extra_ids` are configured national-id patterns. A number matched by
/// its shape alone (card, IBAN, SSN, phone) inside a UUID does not count; a labelled one does
/// (`Patient ID: <uuid>`). Digits, Latin letters and the separators numbers are written with
/// in other forms whose NFKC form is one ASCII character — full-width `０３０ １２３４５６７`
/// (common in Japanese and Chinese documents), the ideographic space — are matched as that
/// ASCII character, and each finding is the original text's span (review D18).
pub fn detect(text: &str, extra_ids: &[Regex]) -> Vec<Finding> {
    match Folded::of(text) {
        None => detect_ascii(text, extra_ids),
        Some(folded) => detect_ascii(&folded.text, extra_ids)
            .into_iter()
            .filter_map(|f| {
                Some(Finding {
                    start: folded.original(f.start)?,
                    end: folded.original(f.end)?,
                    kind: f.kind,
                })
            })
            .collect(),
    }
}

/// A copy of a text with every character [`fold`] changes replaced by its ASCII form, one
/// character for one, and where each character starts in both.
struct Folded {
    text: String,
    /// `(byte offset in the copy, byte offset in the original)` of every character, in order,
    /// and both lengths last.
    starts: Vec<(usize, usize)>,
}

impl Folded {
    /// The copy of `text`, or `None` when no character of it folds (the text is its own copy).
    fn of(text: &str) -> Option<Folded> {
        if text.is_ascii() || !text.chars().any(|c| fold(c).is_some()) {
            return None;
        }
        let mut copy = String::with_capacity(text.len());
        let mut starts = Vec::with_capacity(text.len() + 1);
        for (at, c) in text.char_indices() {
            starts.push((copy.len(), at));
            copy.push(fold(c).unwrap_or(c));
        }
        starts.push((copy.len(), text.len()));
        Some(Folded { text: copy, starts })
    }

    /// The original's byte offset of the copy's byte offset `at` (a character boundary of the
    /// copy, where every match starts and ends); `None` for any other offset.
    fn original(&self, at: usize) -> Option<usize> {
        let i = self.starts.binary_search_by_key(&at, |&(c, _)| c).ok()?;
        self.starts.get(i).map(|&(_, o)| o)
    }
}

/// The ASCII character `c` is matched as: its NFKC form when that is one ASCII letter, digit,
/// space or one of `+-()./:#@_,` (full-width `１` is `1`, `－` is `-`, the ideographic space
/// is a space); `None` for ASCII and everything else.
fn fold(c: char) -> Option<char> {
    use unicode_normalization::UnicodeNormalization;
    if c.is_ascii() {
        return None;
    }
    let mut nfkc = std::iter::once(c).nfkc();
    let (Some(a), None) = (nfkc.next(), nfkc.next()) else {
        return None;
    };
    (a.is_ascii_alphanumeric() || " +-()./:#@_,".contains(a)).then_some(a)
}

/// [`detect`] on a text whose numbers are written in ASCII.
fn detect_ascii(text: &str, extra_ids: &[Regex]) -> Vec<Finding> {
    let uuids: Vec<(usize, usize)> = UUID.find_iter(text).map(|m| (m.start(), m.end())).collect();
    let in_uuid = |m: &regex::Match| uuids.iter().any(|&(s, e)| s <= m.start() && m.end() <= e);
    let mut out: Vec<Finding> = Vec::new();
    let mut push = |start: usize, end: usize, kind: Kind| out.push(Finding { start, end, kind });
    for m in EMAIL.find_iter(text) {
        push(m.start(), m.end(), Kind::Email);
    }
    for m in IBAN.find_iter(text).filter(|m| !in_uuid(m)) {
        if iban_valid(m.as_str()) {
            push(m.start(), m.end(), Kind::Iban);
        }
    }
    for m in CARD.find_iter(text).filter(|m| !in_uuid(m)) {
        if card_valid(m.as_str()) {
            push(m.start(), m.end(), Kind::Card);
        }
    }
    for m in SSN
        .find_iter(text)
        .chain(NINO.find_iter(text))
        .filter(|m| !in_uuid(m))
    {
        push(m.start(), m.end(), Kind::Id);
    }
    for r in extra_ids {
        for m in r.find_iter(text) {
            push(m.start(), m.end(), Kind::Id);
        }
    }
    for c in ID_LABELLED.captures_iter(text) {
        let Some(g) = c.get(1) else { continue };
        let (mut start, mut end) = (g.start(), g.end());
        // The analysis' candidates line (`dob: date = 1961-03-14`): the label's value follows
        // its type name (taken for the value, "date" would be replaced in every request).
        if placeholder(g.as_str()) {
            let after = text.get(end..).unwrap_or_default();
            let Some(v) = after
                .strip_prefix(" = ")
                .and_then(|rest| ID_VALUE.find(rest))
            else {
                continue;
            };
            start = end + 3 + v.start();
            end = end + 3 + v.end();
        }
        // A labelled UUID is longer than the pattern takes: the whole of it is the id.
        let end = uuids
            .iter()
            .find(|&&(s, e)| s == start && end < e)
            .map_or(end, |&(_, e)| e);
        push(start, end, Kind::Id);
    }
    for c in PHONE_LABELLED.captures_iter(text) {
        let Some(g) = c.get(1) else { continue };
        if digits(g.as_str()) >= 6 {
            push(g.start(), g.end(), Kind::Phone);
        }
    }
    // An IBAN's shape with a wrong checksum is no IBAN, but its digit groups are no phone
    // number either; nor are digit groups glued into a code (`RCP-0448-2291-B`).
    let iban_shaped: Vec<(usize, usize)> =
        IBAN.find_iter(text).map(|m| (m.start(), m.end())).collect();
    let in_iban = |m: &regex::Match| {
        iban_shaped
            .iter()
            .any(|&(s, e)| s <= m.start() && m.end() <= e)
    };
    for m in PHONE
        .find_iter(text)
        .filter(|m| !in_uuid(m) && !in_iban(m) && !inside_code(text, m.start(), m.end()))
    {
        let n = digits(m.as_str());
        if (7..=15).contains(&n) && !looks_like_date(m.as_str()) {
            push(m.start(), m.end(), Kind::Phone);
        }
    }
    for c in PERSON_LABELLED.captures_iter(text) {
        let Some(g) = c.get(1) else { continue };
        let v = g.as_str().trim_end_matches('.');
        if !COMPANY.is_match(v) {
            push(g.start(), g.start() + v.len(), Kind::Person);
        }
    }
    for c in PERSON_KEYS.captures_iter(text) {
        let Some(g) = c.get(1) else { continue };
        if placeholder(g.as_str()) {
            continue;
        }
        let kind = kind_of_key(c.get(0).map_or("", |m| m.as_str()));
        push(g.start(), g.end(), kind);
    }
    resolve_overlaps(out)
}

/// A value under a personal key that carries nothing personal: a type name or a placeholder,
/// as a model writes in a schema's field map (`{"patient_id": "string"}`). Made a token, such
/// a value would be replaced wherever it stands — every `"string"` of every schema.
pub fn placeholder(value: &str) -> bool {
    const WORDS: [&str; 20] = [
        "string",
        "str",
        "text",
        "number",
        "numeric",
        "integer",
        "int",
        "float",
        "decimal",
        "boolean",
        "bool",
        "date",
        "datetime",
        "date-time",
        "time",
        "null",
        "none",
        "object",
        "array",
        "unknown",
    ];
    let v = value.trim();
    if v.starts_with('<') && v.ends_with('>') {
        return true;
    }
    let v = v.strip_suffix('?').unwrap_or(v);
    v.eq_ignore_ascii_case("n/a") || WORDS.iter().any(|w| v.eq_ignore_ascii_case(w))
}

/// The kind of a JSON key that holds personal data (`customer_name`, `email`, …).
pub fn personal_key(key: &str) -> Option<Kind> {
    static KEY: LazyLock<Regex> = LazyLock::new(|| {
        re(
            r"(?i)^(?:full_name|first_name|last_name|given_name|family_name|customer_name|patient_name|contact_name|account_holder|cardholder|recipient_name|employee_name|email|email_address|phone|phone_number|telephone|mobile|iban|date_of_birth|dob|ssn|patient_id)$",
        )
    });
    KEY.is_match(key).then(|| kind_of_key(key))
}

fn kind_of_key(m: &str) -> Kind {
    let k = m.to_ascii_lowercase();
    if k.contains("email") {
        Kind::Email
    } else if k.contains("phone") || k.contains("mobile") {
        Kind::Phone
    } else if k.contains("iban") {
        Kind::Iban
    } else if k.contains("ssn")
        || k.contains("patient_id")
        || k.contains("dob")
        || k.contains("birth")
    {
        Kind::Id
    } else {
        Kind::Person
    }
}

/// Keeps the earliest, then longest, of overlapping findings.
fn resolve_overlaps(mut v: Vec<Finding>) -> Vec<Finding> {
    v.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
    let mut out: Vec<Finding> = Vec::with_capacity(v.len());
    for f in v {
        match out.last() {
            Some(last) if f.start < last.end => {}
            _ => out.push(f),
        }
    }
    out
}

/// Whether `text[start..end]` is glued into a longer code: a letter or digit joined to it by a
/// `-` or `_` on either side (`RCP-0448-2291-B`, `INV_0301 234567`), or a letter right before
/// it. A phone number stands apart from its neighbours.
fn inside_code(text: &str, start: usize, end: usize) -> bool {
    let before = text.get(..start).unwrap_or("");
    let after = text.get(end..).unwrap_or("");
    let mut b = before.chars().rev();
    let joined_before = match b.next() {
        Some('-' | '_') => b.next().is_some_and(char::is_alphanumeric),
        Some(c) => c.is_alphabetic(),
        None => false,
    };
    let mut a = after.chars();
    let joined_after = match a.next() {
        Some('-' | '_') => a.next().is_some_and(char::is_alphanumeric),
        _ => false,
    };
    joined_before || joined_after
}

fn digits(s: &str) -> usize {
    s.bytes().filter(u8::is_ascii_digit).count()
}

/// `01.02.2024`, `2024-01-02`: dates share the phone rule's shape.
fn looks_like_date(s: &str) -> bool {
    static DATE: LazyLock<Regex> = LazyLock::new(|| {
        re(
            r"^(?:[0-9]{1,2}[./-][0-9]{1,2}[./-][0-9]{2,4}|[0-9]{4}-[0-9]{2}-[0-9]{2})(?:[ T]+[0-9]{1,2})?$",
        )
    });
    DATE.is_match(s.trim())
}

/// ISO 13616: move the first four characters to the end, letters → numbers, mod 97 == 1.
/// Counted and rotated by characters, never by byte index: the text is anyone's (a full-width
/// `１` is three bytes).
pub fn iban_valid(s: &str) -> bool {
    let c: Vec<char> = s.chars().filter(|c| !c.is_whitespace()).collect();
    if !(15..=34).contains(&c.len()) {
        return false;
    }
    let (head, tail) = c.split_at(4);
    let rearranged = tail.iter().chain(head).copied();
    let mut rem: u32 = 0;
    for ch in rearranged {
        let v = match ch {
            '0'..='9' => ch as u32 - '0' as u32,
            'A'..='Z' => ch as u32 - 'A' as u32 + 10,
            _ => return false,
        };
        rem = if v >= 10 {
            (rem * 100 + v) % 97
        } else {
            (rem * 10 + v) % 97
        };
    }
    rem == 1
}

/// Luhn checksum, 13–19 digits, and an issuer prefix (Visa, Mastercard, Amex, Discover, JCB,
/// Diners, Maestro) so that random digit runs rarely pass.
pub fn card_valid(s: &str) -> bool {
    let d: Vec<u32> = s.chars().filter_map(|c| c.to_digit(10)).collect();
    if !(13..=19).contains(&d.len()) || d.iter().all(|x| *x == d[0]) {
        return false;
    }
    let p2 = d[0] * 10 + d[1];
    let p4 = p2 * 100 + d[2] * 10 + d[3];
    let issuer = d[0] == 4
        || (51..=55).contains(&p2)
        || (2221..=2720).contains(&p4)
        || p2 == 34
        || p2 == 37
        || p4 == 6011
        || p2 == 65
        || (3528..=3589).contains(&p4)
        || p2 == 36
        || p2 == 50
        || (56..=69).contains(&p2);
    if !issuer {
        return false;
    }
    let sum: u32 = d
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &x)| {
            if i % 2 == 1 {
                let y = x * 2;
                if y > 9 { y - 9 } else { y }
            } else {
                x
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(text: &str) -> Vec<(Kind, String)> {
        detect(text, &[])
            .into_iter()
            .map(|f| (f.kind, text[f.start..f.end].to_string()))
            .collect()
    }

    /// A lab report's header (`../samples/eval/lab_report_table_en.txt`): the surname first
    /// with a comma is a person, a labelled date of birth ends at the column gap (not
    /// `… Sex`), an NHS number is an id, and a date with its hour is no phone number.
    #[test]
    fn a_lab_reports_header() {
        let text = "Patient: HARGREAVES, Eleanor        DOB: 14/03/1961      Sex: F\n\
                    NHS No: 943 476 5919                MRN: RPS-0088213\n\
                    Specimen received: 09/11/2026 10:12       Reported: 10/11/2026 16:40\n";
        let mut got = found(text);
        got.sort();
        assert_eq!(
            got,
            vec![
                (Kind::Id, "14/03/1961".to_string()),
                (Kind::Id, "943 476 5919".to_string()),
                (Kind::Id, "RPS-0088213".to_string()),
                (Kind::Person, "HARGREAVES, Eleanor".to_string()),
            ]
        );
    }

    /// A UUID whose groups are all digits looks like a phone number (`0327-7067`), a card or an
    /// SSN by shape; inside a UUID none of them counts, but a labelled id still does.
    #[test]
    fn numbers_inside_a_uuid_are_not_personal() {
        for id in [
            "01a20b4e-0327-7067-a558-b250dde540bf",
            "12345678-1234-1234-1234-123456789012",
            "01a20b4c-0612-7345-9b6c-0612345678ab",
        ] {
            let text = format!("schema_id={id} (prompt_revid: {id}:2)");
            assert_eq!(found(&text), vec![], "{id}");
        }
        let id = "01a20b4e-0327-7067-a558-b250dde540bf";
        assert_eq!(
            found(&format!("Patient ID: {id}")),
            vec![(Kind::Id, id.to_string())]
        );
        // Beside a UUID, a phone number is still one.
        assert_eq!(
            found("id 01a20b4e-0327-7067-a558-b250dde540bf, tel 030 1234567"),
            vec![(Kind::Phone, "030 1234567".to_string())]
        );
    }

    /// Digit groups inside a code or an IBAN-shaped run are not a phone number; a phone
    /// number written apart still is.
    #[test]
    fn digit_groups_inside_codes_and_iban_shapes_are_not_phones() {
        for text in [
            "Beleg RCP-0448-2291-B vom 3.11.",
            "Ref. AB-0301-234567",
            "order_0301 234567_x",
            "IBAN DE00 3704 0044 0532 0130 00 (checksum wrong)",
        ] {
            assert_eq!(found(text), vec![], "{text}");
        }
        for (text, phone) in [
            ("Tel. 030 1234567", "030 1234567"),
            ("call 030-1234567.", "030-1234567"),
            ("(030 1234567)", "030 1234567"),
        ] {
            assert_eq!(
                found(text),
                vec![(Kind::Phone, phone.to_string())],
                "{text}"
            );
        }
    }

    #[test]
    fn checksums_decide_ibans_and_cards() {
        let iban: fn(&str) -> bool = iban_valid;
        let card: fn(&str) -> bool = card_valid;
        for (valid, s, ok) in [
            (iban, "DE89 3704 0044 0532 0130 00", true),
            (iban, "GB82WEST12345698765432", true),
            (iban, "DE89 3704 0044 0532 0130 01", false),
            (iban, "DE12", false),
            (card, "4111 1111 1111 1111", true),
            (card, "5500-0000-0000-0004", true),
            (card, "4111 1111 1111 1112", false),
            // Passes Luhn but no issuer starts with 9.
            (card, "9000000000000008", false),
        ] {
            assert_eq!(valid(s), ok, "{s}");
        }
    }

    #[test]
    fn finds_each_kind() {
        let f = found(
            "Name: Jane Doe\nEmail: jane.doe@example.com\nTel: +49 30 1234567\n\
             IBAN: DE89 3704 0044 0532 0130 00\nCard 4111 1111 1111 1111\nSSN 078-05-1120",
        );
        let kinds: Vec<Kind> = f.iter().map(|x| x.0).collect();
        assert_eq!(
            kinds,
            [
                Kind::Person,
                Kind::Email,
                Kind::Phone,
                Kind::Iban,
                Kind::Card,
                Kind::Id
            ]
        );
        assert_eq!(f[0].1, "Jane Doe");
        assert_eq!(f[2].1, "+49 30 1234567");
    }

    #[test]
    fn a_type_name_under_a_personal_key_is_not_personal() {
        let f = found(
            r#"{"fields": {"patient_id": "string", "email": "string", "dob": "date", "phone": "<phone>"}}"#,
        );
        assert!(f.is_empty(), "{f:?}");
        let f = found(r#"{"patient_id": "P-55102", "email": "string"}"#);
        assert_eq!(f, [(Kind::Id, "P-55102".to_string())]);
    }

    /// N1 (review 2026-11-26): full-width digits are `\p{Nd}`, three bytes each; `iban_valid`
    /// sliced at byte 4, inside the first one, and panicked on every redaction pass.
    #[test]
    fn full_width_digits_are_found_as_their_ascii_forms_without_panicking() {
        // Review D18: found, and each finding is the original's full-width span.
        for (text, kind, value) in [
            (
                "DE８９ ３７０４ ００４４ ０５３２ ０１３０ ００",
                Kind::Iban,
                "DE８９ ３７０４ ００４４ ０５３２ ０１３０ ００",
            ),
            (
                "ＤＥ８９３７０４００４４０５３２０１３０００ x",
                Kind::Iban,
                "ＤＥ８９３７０４００４４０５３２０１３０００",
            ),
            (
                "Tel: ０３０ １２３４５６７",
                Kind::Phone,
                "０３０ １２３４５６７",
            ),
            (
                "電話：０３０　１２３４５６７",
                Kind::Phone,
                "０３０　１２３４５６７",
            ),
            (
                "Phone: +４９ ３０ １２３４５６７",
                Kind::Phone,
                "+４９ ３０ １２３４５６７",
            ),
            (
                "Card ４１１１ １１１１ １１１１ １１１１",
                Kind::Card,
                "４１１１ １１１１ １１１１ １１１１",
            ),
            ("SSN ０７８-０５-１１２０", Kind::Id, "０７８-０５-１１２０"),
            (
                "SSN ０７８－０５－１１２０",
                Kind::Id,
                "０７８－０５－１１２０",
            ),
            (
                "Ｍａｉｌ ａｎｎａ＠ｅｘａｍｐｌｅ．ｃｏｍ",
                Kind::Email,
                "ａｎｎａ＠ｅｘａｍｐｌｅ．ｃｏｍ",
            ),
        ] {
            assert_eq!(found(text), vec![(kind, value.to_string())], "{text}");
        }
        // A checksum that fails on the ASCII form fails on the full-width one.
        for text in ["DE１２ABCDABCDABCD", "IBAN: DE１２ABCDABCDABCD", "０１２３"] {
            assert_eq!(found(text), vec![], "{text}");
        }
        // Mixed with ASCII and other scripts, spans stay on character boundaries.
        let mixed = "é Tel: ０３０ 1234567 — ４１１１ 1111 １１１１ 1111 ü";
        assert_eq!(
            found(mixed),
            vec![
                (Kind::Phone, "０３０ 1234567".to_string()),
                (Kind::Card, "４１１１ 1111 １１１１ 1111".to_string())
            ]
        );
        // The checksums themselves take any text.
        assert!(!iban_valid("DE１２ABCDABCDABCD"));
        assert!(!iban_valid("é１２ABCDABCDABCDABCD"));
        assert!(!card_valid("４１１１ １１１１ １１１１ １１１１"));
        // ASCII neighbours still count.
        assert_eq!(
            found("１ DE89 3704 0044 0532 0130 00 ２"),
            vec![(Kind::Iban, "DE89 3704 0044 0532 0130 00".to_string())]
        );
    }

    #[test]
    fn leaves_business_numbers_alone() {
        let f = found(
            "Invoice No: INV-2024-0042\nDate: 12.03.2024\nTotal: 1.234,56 EUR\n\
             Order 4500012345\nVAT ID: DE123456789\nBill to: ACME GmbH",
        );
        assert!(f.is_empty(), "{f:?}");
    }
}
