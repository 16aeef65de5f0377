//! A deterministic analysis of a document's text, before any model sees it: the fields the text
//! offers as **candidates** — label–value lines in any language and punctuation, table rows,
//! totals and tax lines, dates and amounts in local formats, identifiers, the issuing party —
//! with OCR repairs, and a guess of the document's kind. The offline provider builds its
//! proposal from the candidates; the model path shows them to the model in the run's first
//! message (`agent/context.rs`), so its job becomes choosing, naming and typing them; and
//! [`ground`] checks extracted values against the text with the same normalisation.
//!
//! **Names.** A candidate's `name` is English snake_case when the lexicon knows the label in
//! any of en/de/fr/es/it/nl/pt (`Rechnungsnummer`, `N° de facture` → `invoice_number`), so
//! documents of one kind in several languages get one schema; a label it does not list is named
//! in English word by word by the [`glossary`] from the document's language (`Grund der
//! Gutschrift` → `reason`, `Titulaire du contrat` → `contract_holder`), and one with a word the
//! glossary lacks, or in English, keeps its own snake_case name (`Standing charges` →
//! `standing_charges`). The label as written is kept beside it (`label`), for the prompt, the
//! reviewer and the schema's description.
//!
//! **Bounds.** Only the first [`MAX_CHARS`] characters and [`MAX_LINES`] lines are read, lines
//! are cut at [`MAX_LINE_CHARS`], and at most [`MAX_CANDIDATES`] candidates come out. No input
//! is sliced by byte offsets it did not produce; any UTF-8 is accepted.
//!
//! **Crate.** `agentd-analysis` (layer 14 of ARCHITECTURE.md § Layers) uses no other agentd
//! crate.

pub mod glossary;
pub mod ground;
pub mod keep;
pub mod kind;
pub mod labels;
pub mod lexicon;
pub mod origins;
pub mod periods;
pub mod prose;
pub mod tables;
pub mod totals;
pub mod values;

mod candidate;
mod pipeline;

pub use kind::DocKind;

use candidate::from_pair;
use labels::How;
use pipeline::Doc;
use serde::Serialize;
use serde_json::{Value, json};
use values::{DateOrder, DecimalStyle};

/// Characters of a text analysed (the rest is ignored).
pub const MAX_CHARS: usize = 200_000;
/// Lines of a text analysed.
pub const MAX_LINES: usize = 5_000;
/// Characters of one line analysed.
pub const MAX_LINE_CHARS: usize = 400;
/// Candidates returned at most.
pub const MAX_CANDIDATES: usize = 40;
/// Characters of a value the brief shows (longer ones are left out, never cut).
const MAX_SHOWN: usize = 48;
/// Characters of a value kept as written.
const MAX_VALUE_CHARS: usize = 200;

/// What a candidate's value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ValueKind {
    Text,
    /// A number, reference or code, kept as written.
    Identifier,
    Number,
    /// A date, normalised to `YYYY-MM-DD`.
    Date,
    Boolean,
    /// Table rows, a list of objects.
    List,
}

impl ValueKind {
    /// The type `create_schema` takes for it.
    pub fn field_type(self) -> &'static str {
        match self {
            ValueKind::Text | ValueKind::Identifier => "string",
            ValueKind::Number => "number",
            ValueKind::Date => "date",
            ValueKind::Boolean => "boolean",
            ValueKind::List => "array",
        }
    }
}

/// Where in the text a candidate was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// A label–value pair (see [`labels::How`]).
    Label(How),
    /// The rows of a table.
    Table,
    /// The first line of the letter head.
    Heading,
    /// A pattern found anywhere (an IBAN).
    Pattern,
}

/// One field the text offers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    /// snake_case; English where the lexicon knows the label (see the module docs).
    pub name: String,
    /// The label as written (a table's header line; a description for a heading or pattern).
    pub label: String,
    /// The value normalised: a number, a `YYYY-MM-DD` date, a boolean, text, or rows.
    pub value: Value,
    /// The value as written (bounded; empty for tables).
    pub raw: String,
    pub kind: ValueKind,
    /// For a list: each item's fields and their types.
    pub item_fields: Vec<(String, &'static str)>,
    /// 1-based line of the text.
    pub line: usize,
    pub source: Source,
}

impl Candidate {
    /// A value found by a pattern rather than under a label (a date line, a due date in a
    /// sentence, a masked card): `label` says in words what matched.
    fn pattern(
        name: &str,
        label: &str,
        value: Value,
        raw: String,
        kind: ValueKind,
        line: usize,
    ) -> Self {
        Self {
            name: name.into(),
            label: label.into(),
            value,
            raw,
            kind,
            item_fields: Vec::new(),
            line,
            source: Source::Pattern,
        }
    }
}

/// What the analysis found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Analysis {
    pub kind: DocKind,
    /// The language the text is written in, when its words tell one
    /// ([`glossary::language_of`]): what labels the lexicon does not list are translated from.
    pub language: Option<&'static str>,
    pub candidates: Vec<Candidate>,
    /// The text was longer than the analysis reads.
    pub truncated: bool,
}

impl Analysis {
    /// The candidate named `name`.
    pub fn get(&self, name: &str) -> Option<&Candidate> {
        self.candidates.iter().find(|c| c.name == name)
    }
}

/// A JSON number for `n`: an integer when it is one.
pub fn number_value(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        json!(n as i64)
    } else {
        json!(n)
    }
}

fn clip(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// What a field of the customer's block is named with before its name (`customer_tax_id`).
pub const CUSTOMER_PREFIX: &str = "customer_";

/// Analyses `text` (any UTF-8; see the module docs for the bounds). Each pass over its lines
/// adds the fields it finds, and the first one found of a name wins: the label–value pairs
/// come first, the fields a sentence, a title or a pattern gives last.
pub fn analyse(text: &str) -> Analysis {
    let doc = Doc::read(text);
    let mut out: Vec<Candidate> = Vec::new();
    doc.labelled(doc.pairs(), &mut out);
    doc.amount_rows(&mut out);
    doc.below_year_to_date(&mut out);
    doc.amount_columns(&mut out);
    doc.column_totals(&mut out);
    doc.results(&mut out);
    let summary_rows = doc.statement_balances(&mut out);
    doc.rows(&summary_rows, &mut out);
    doc.letter_head(&mut out);
    doc.named_in_sentences(&mut out);
    doc.tax_year(&mut out);
    doc.due_in_sentence(&mut out);
    doc.paid_in_sentence(&mut out);
    doc.month_in_title(&mut out);
    doc.card_line(&mut out);
    doc.card_last_four(&mut out);
    doc.item_count(&mut out);
    doc.date_line(&mut out);
    doc.place_and_date(&mut out);
    doc.addressee(&mut out);
    doc.period_in_sentence(&mut out);
    doc.title_number(&mut out);
    doc.iban(&mut out);
    pipeline::without_breakdowns(&mut out);
    pipeline::ranked(&mut out);
    Analysis {
        kind: doc.kind,
        language: doc.language,
        candidates: out,
        truncated: doc.truncated,
    }
}

/// The date a line is, or opens with before a time of day (a receipt's `15-11-2026 09:12`,
/// `21.11.2026  10:42   Bed.: 31`), also in the short words that say on which day at what
/// time (`Le 21/11/2026 à 08:14`, `Am 12.03.2026 um 18:44`, `el 21/11/2026 a las 08:14`).
fn date_line(line: &str, order: DateOrder) -> Option<chrono::NaiveDate> {
    let l = values::repair_digits(line.trim());
    values::parse_date(&l, order).or_else(|| {
        let small = |w: &&str| w.chars().count() <= 3 && w.chars().all(char::is_alphabetic);
        let mut words = l.split_whitespace().peekable();
        // One short word before the date at most (`Le`, `Am`, `On`).
        if words.next_if(small).is_some() && words.peek().is_some_and(small) {
            return None;
        }
        let date = words.next()?;
        // Two short words between the date and the time at most (`à`, `um`, `a las`).
        let between = std::iter::from_fn(|| words.next_if(small)).count();
        let time = words.next()?.split_once(':').is_some_and(|(h, m)| {
            (1..=2).contains(&h.len())
                && m.len() >= 2
                && h.chars()
                    .chain(m.chars())
                    .all(|c| c.is_ascii_digit() || c == ':')
        });
        (between <= 2 && time)
            .then(|| values::parse_date(date, order))
            .flatten()
    })
}

/// A line as the readers expect it: no-break spaces as spaces, dot leaders
/// (`Subtotal ........ 12.00`) and the bars of a drawn table (`| Date | Amount |`) as column
/// gaps, a word spaced out for show (`T O T A L`) as a word.
fn tidy(line: &str) -> String {
    use regex::Regex;
    use std::sync::LazyLock;
    static LEADERS: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"[ \t]*[.·_…]{3,}[ \t]*").expect("regex"));
    // Letters spaced out for show (`B A C K S T U B E   M 0 L L`): four or more single
    // characters one space apart, at least two of them letters, are one word.
    static SPACED_OUT: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"\b\w(?: \w){3,}\b").expect("regex"));
    let l = line.replace(['\u{a0}', '\u{202f}'], " ");
    let l = LEADERS.replace_all(&l, "  ").into_owned();
    let l = SPACED_OUT
        .replace_all(&l, |c: &regex::Captures| {
            let m = c.get(0).map_or("", |m| m.as_str());
            match m.chars().filter(|c| c.is_alphabetic()).count() >= 2 {
                true => m.replace(' ', ""),
                false => m.to_string(),
            }
        })
        .into_owned();
    if l.matches('|').count() >= 2 {
        l.replace('|', "  ")
    } else {
        l
    }
}

/// A value up to a column gap (three spaces or more, or a tab) when words stand after it: they
/// are the next column's (`PERRIN, Julien          tél. portable sur demande`, `01 Nov 2026
/// Place and date of issue: …`). Amounts after the gap stay: the line is a row of columns of
/// amounts (`Total des opérations :   653,46      2 460,55`), read as such elsewhere.
fn column_cut(value: &str) -> String {
    let Some(cut) = [value.find("   "), value.find('\t')]
        .into_iter()
        .flatten()
        .min()
    else {
        return value.to_string();
    };
    let (head, rest) = (
        value.get(..cut).unwrap_or(value).trim(),
        value.get(cut..).unwrap_or_default().trim_start(),
    );
    let words_after = rest.starts_with(char::is_alphabetic)
        && values::currency_of(rest.split_whitespace().next().unwrap_or_default()).is_none();
    match !head.is_empty() && words_after {
        true => head.to_string(),
        false => value.to_string(),
    }
}

/// Adds a candidate of a label–value pair; when its (canonical) name is taken, under the
/// label's own name instead (`CIF` of the employer is `tax_id`, the employee's `NIF` below it
/// stays `nif`), unless that is taken too.
fn push_pair(out: &mut Vec<Candidate>, mut c: Candidate, language: Option<&str>) {
    if out.iter().any(|o| o.name == c.name) {
        let own = own_name(&lexicon::snake(
            &labels::without_parentheses(&values::repair_letters(&c.label)),
            48,
        ));
        // In the canonical language, as any name (never a name of the document's language
        // beside the canonical ones).
        let own = match glossary::canonical(&own, language) {
            Some(canonical) => canonical.name().to_string(),
            None => own,
        };
        let usable = own
            .chars()
            .next()
            .is_some_and(|ch| ch.is_ascii_alphabetic())
            && own.split('_').count() <= 6;
        if !usable || own == c.name {
            return;
        }
        c.name = own;
    }
    push(out, c);
}

/// Whether a (snake) label speaks of a refund (`somme_qui_vous_a_ete_remboursee`,
/// `wird_erstattet`, `te_ontvangen_teruggave`).
fn refund_words(own: &str) -> bool {
    [
        "rembours",
        "erstatt",
        "refund",
        "devolu",
        "devolv",
        "rimbors",
        "teruggaaf",
        "teruggave",
        "terugbetaal",
        "reembols",
    ]
    .iter()
    .any(|w| own.contains(w))
}

/// Whether a label names a card scheme or a card payment (`VISA DEBIT`, `MASTERCARD`,
/// `Girocard`, `CB EMV`, `PINNEN`), not cash.
fn card_scheme(label: &str) -> bool {
    let f = values::fold(label);
    let words: Vec<&str> = f.split(|c: char| !c.is_alphanumeric()).collect();
    [
        "visa",
        "mastercard",
        "maestro",
        "amex",
        "girocard",
        "debit",
        "credit",
        "cb",
        "pinnen",
        "card",
        "carte",
        "karte",
        "tarjeta",
        "carta",
        "cartao",
        "contactless",
        "pin",
    ]
    .iter()
    .any(|w| words.contains(w))
}

/// Adds `c` unless a candidate of that name exists (the first one found wins).
fn push(out: &mut Vec<Candidate>, c: Candidate) {
    if out.len() < MAX_CANDIDATES * 2 && !out.iter().any(|o| o.name == c.name) {
        out.push(c);
    }
}

/// Name endings of identifiers in labels the lexicon does not know.
fn identifier_name(name: &str) -> bool {
    [
        "_number",
        "_no",
        "_nr",
        "_id",
        "_code",
        "_ref",
        "_reference",
        "nummer",
        "_num",
    ]
    .iter()
    .any(|e| name.ends_with(e))
        || matches!(name, "id" | "no" | "nr" | "ref" | "code")
        // `Référence client`, `Numero cliente`, `Code article`: the word for a number first.
        || ["reference_", "referencia_", "riferimento_", "numero_", "code_", "codigo_", "codice_"]
            .iter()
            .any(|s| name.starts_with(s))
}

/// A label's own name, tidied: `n_o_mecanografico` (`N.º mecanográfico`) → `n_mecanografico`;
/// rates and currency codes dropped (`seguranca_social_11` → `seguranca_social`,
/// `total_compra_eur` → `total_compra`) when words are left.
fn own_name(snake: &str) -> String {
    let s = match snake.strip_prefix("n_o_") {
        Some(rest) => format!("n_{rest}"),
        None => snake.to_string(),
    };
    let kept: Vec<&str> = s
        .split('_')
        .filter(|w| !w.chars().all(|c| c.is_ascii_digit()))
        .filter(|w| !matches!(*w, "eur" | "usd" | "gbp" | "chf"))
        .collect();
    if kept
        .iter()
        .any(|w| w.chars().any(|c| c.is_ascii_alphabetic()))
    {
        kept.join("_")
    } else {
        s
    }
}

/// `F-26-0917 du 20 octobre 2026` → `F-26-0917`: a code without the date written after it
/// (`du`, `vom`, `of`, `dated`, `del`, `dal`, `van`, `de`).
fn without_trailing_date(raw: &str, order: DateOrder) -> String {
    let found = values::dates_in(raw, order);
    let Some(d) = found.last() else {
        return raw.to_string();
    };
    if !raw.get(d.end..).unwrap_or("x").trim().is_empty() {
        return raw.to_string();
    }
    let head = raw.get(..d.start).unwrap_or("").trim_end();
    let mut words: Vec<&str> = head.split_whitespace().collect();
    let tie = words.last().map(|w| values::fold(w));
    if matches!(
        tie.as_deref(),
        Some("du" | "vom" | "of" | "dated" | "del" | "dal" | "van" | "de" | "from")
    ) {
        words.pop();
    } else {
        return raw.to_string();
    }
    let code = words.join(" ");
    if code.chars().any(|c| c.is_ascii_digit()) {
        code
    } else {
        raw.to_string()
    }
}

/// A label without a last word saying it is included (`Insurance Premium Tax included`, `IVA
/// INCLUIDO`, `MwSt. inbegriffen`): the same field.
fn without_included(label: &str) -> String {
    let words: Vec<&str> = label.split_whitespace().collect();
    let included = words.last().is_some_and(|w| {
        matches!(
            values::fold(w.trim_end_matches(['.', ')', ':'])).as_str(),
            "included"
                | "incl"
                | "inclus"
                | "incluse"
                | "incluido"
                | "incluida"
                | "incluso"
                | "inclusa"
                | "incluidos"
                | "inbegriffen"
                | "inkl"
                | "inclusief"
        )
    });
    if included && words.len() >= 2 {
        words.get(..words.len() - 1).unwrap_or_default().join(" ")
    } else {
        label.to_string()
    }
}

/// Names of labels the lexicon does not know that read as dates (`preleve_le`, `edite_le`,
/// `date_of_birth`, `bill_date`).
fn date_name(name: &str) -> bool {
    let words: Vec<&str> = name.split('_').collect();
    words.iter().any(|w| {
        matches!(
            *w,
            "date" | "datum" | "fecha" | "data" | "le" | "am" | "on" | "op" | "em" | "el" | "il"
        )
    })
}

/// A party's name without what follows it after a comma that starts an address or a note
/// (the rest has a digit) or after a dash (when a number follows): `Kliniken Südwest gGmbH, Zentraleinkauf, Postfach
/// 1140, 71011 Böblingen` → `Kliniken Südwest gGmbH`; `Hoteles Costa Brava Group, S.L.` stays.
fn party_name(raw: &str) -> String {
    let mut v = raw;
    for d in [" — ", " – ", " - "] {
        if let Some((head, tail)) = v.split_once(d)
            && !head.trim().is_empty()
            && tail.chars().any(|c| c.is_ascii_digit())
        {
            v = head;
        }
    }
    let mut cut = v.len();
    for (at, _) in v.match_indices(',') {
        let rest = v.get(at + 1..).unwrap_or("");
        if rest.chars().any(|c| c.is_ascii_digit()) && at > 0 {
            cut = at;
            break;
        }
    }
    let v = v.get(..cut).unwrap_or(v).trim();
    without_trailing_phone(v)
}

/// `Gary Lunn 07700 900481` → `Gary Lunn`: a name without the phone number written after it
/// (its last words only digits, `+`, `(`, `)`, `-`, `/` or `.`, six digits or more between
/// them, after a word with letters).
fn without_trailing_phone(v: &str) -> String {
    let words: Vec<&str> = v.split_whitespace().collect();
    // Behind the redaction boundary the number is its token (`PHONE_1`).
    let token = |w: &str| {
        w.strip_prefix("PHONE_")
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
    };
    let phone_word = |w: &&str| {
        token(w)
            || w.chars().any(|c| c.is_ascii_digit())
                && w.chars()
                    .all(|c| c.is_ascii_digit() || matches!(c, '+' | '(' | ')' | '-' | '/' | '.'))
    };
    let tail = words.iter().rev().take_while(|w| phone_word(w)).count();
    let digits: usize = words
        .iter()
        .rev()
        .take(tail)
        .map(|w| w.chars().filter(char::is_ascii_digit).count())
        .sum();
    let head = words.get(..words.len() - tail).unwrap_or_default();
    let lettered = head.iter().any(|w| w.chars().any(char::is_alphabetic));
    let tokens = words.iter().rev().take(tail).any(|w| token(w));
    if tail == 0 || (digits < 6 && !tokens) || !lettered {
        return v.to_string();
    }
    head.join(" ")
}

/// `manifest_no` → `manifest_number` (English abbreviations of "number").
fn expand_number(name: &str) -> String {
    for short in ["_no", "_nr", "_num", "_nbr"] {
        if let Some(stem) = name.strip_suffix(short)
            && !stem.is_empty()
        {
            return format!("{stem}_number");
        }
    }
    name.to_string()
}

/// A label whose value is a date range (`Periodo: 01/10/2026 - 31/10/2026`) as two candidates,
/// its start and its end: `start_date`/`end_date` on an insurance document,
/// `period_start`/`period_end` elsewhere.
fn range_pair(p: &labels::Pair, kind: DocKind, order: DateOrder) -> Option<[Candidate; 2]> {
    let (start, end) = periods::range(&p.value, order)?;
    let label = p.label.trim().trim_end_matches([':', '=']).trim();
    let (first, last) = if kind == DocKind::InsuranceClaim {
        ("start_date", "end_date")
    } else {
        ("period_start", "period_end")
    };
    let one = |name: &str, d: chrono::NaiveDate| Candidate {
        name: name.to_string(),
        label: clip(label, 60),
        value: Value::String(d.to_string()),
        raw: clip(p.value.trim(), MAX_VALUE_CHARS),
        kind: ValueKind::Date,
        item_fields: Vec::new(),
        line: p.line + 1,
        source: Source::Label(p.how),
    };
    Some([one(first, start), one(last, end)])
}

/// Company-name endings in many countries.
const COMPANY_SUFFIXES: [&str; 24] = [
    "ltd", "limited", "llc", "inc", "corp", "co", "plc", "gmbh", "ag", "kg", "ug", "sa", "sas",
    "sarl", "sl", "srl", "spa", "bv", "b.v", "nv", "lda", "oy", "ab", "as",
];

/// The issuing party: the first line of the letter head, when it reads as a name (capitals
/// or a company ending) and not as a title (`INVOICE`), a pair or a number.
fn issuer(
    lines: &[String],
    kind: DocKind,
    style: DecimalStyle,
    order: DateOrder,
) -> Option<Candidate> {
    let (i, line) = lines
        .iter()
        .enumerate()
        .take(8)
        .find(|(_, l)| !l.trim().is_empty())?;
    let mut t = line.trim();
    // A sender line (`Elektro Hansen GmbH & Co. KG · Industriestraße 8 · 33602 Bielefeld`):
    // its first part.
    for sep in [" · ", " | ", " • "] {
        if let Some((head, _)) = t.split_once(sep) {
            t = head.trim();
        }
    }
    // Drop a trailing "— PAYSLIP" and the like: the part before a dash is the name (unless
    // the whole line ends as a company's name: `SOLTEJO - MATERIAIS DE CONSTRUÇÃO, LDA.`).
    let name_part = if has_company_suffix(t) {
        t.to_string()
    } else {
        t.split(" — ")
            .next()
            .and_then(|p| p.split(" - ").next())
            .unwrap_or(t)
            .to_string()
    };
    let name_part = name_part.trim().trim_end_matches(['*', ' ']).to_string();
    let letters: Vec<char> = name_part.chars().filter(|c| c.is_alphabetic()).collect();
    if letters.len() < 3 || name_part.chars().count() > 60 || name_part.contains(':') {
        return None;
    }
    if kind::is_title(&name_part) {
        return None;
    }
    let upper = letters.iter().filter(|c| c.is_uppercase()).count() * 10 >= letters.len() * 8;
    // A shop's number after its name (`ALBERT HEIJN 1432`) is part of the name as printed.
    let words: Vec<&str> = name_part.split_whitespace().collect();
    let store_number = words.len() >= 2
        && words
            .last()
            .is_some_and(|w| w.len() <= 6 && w.chars().all(|c| c.is_ascii_digit()));
    let digits = name_part
        .chars()
        .filter(|c| c.is_ascii_digit())
        .count()
        .saturating_sub(if store_number && upper {
            words.last().map_or(0, |w| w.len())
        } else {
            0
        });
    if !(upper || has_company_suffix(&name_part) || titled_name_over_address(lines, i, &words))
        || digits > 2
    {
        return None;
    }
    if values::parse_date(&name_part, order).is_some()
        || values::parse_number(&name_part, style).is_some()
    {
        return None;
    }
    let name = values::repair_letters(&name_part)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    Some(Candidate {
        name: kind.issuer_field().into(),
        label: "(letter head)".into(),
        value: Value::String(name.clone()),
        raw: name_part,
        kind: ValueKind::Text,
        item_fields: Vec::new(),
        line: i + 1,
        source: Source::Heading,
    })
}

/// Whether the words of a letter head's first line read as a name in title case (`Lumis
/// Énergie`, `Stadtwerke Neuburg`: at most five words, each capitalised or a short joining
/// word, no digit, no word naming a kind of document) and the line below reads as an address
/// (a digit or a comma, no `label:`).
fn titled_name_over_address(lines: &[String], i: usize, words: &[&str]) -> bool {
    const JOINING: [&str; 14] = [
        "de", "des", "du", "la", "le", "of", "the", "and", "&", "und", "y", "e", "di", "van",
    ];
    let titled = (1..=5).contains(&words.len())
        && words
            .first()
            .is_some_and(|w| w.chars().next().is_some_and(char::is_uppercase))
        && words.iter().all(|w| {
            w.chars().next().is_some_and(char::is_uppercase)
                || JOINING.contains(&values::fold(w).as_str())
        })
        && !words.iter().any(|w| w.chars().any(|c| c.is_ascii_digit()))
        && kind::guess(&words.join(" ")) == DocKind::Other;
    let below = lines.get(i + 1).map(|l| l.trim()).unwrap_or("");
    let address = !below.is_empty()
        && (below.chars().any(|c| c.is_ascii_digit()) || below.contains(','))
        && !below.contains(':')
        && below.chars().count() <= 80
        && kind::guess(below) == DocKind::Other;
    titled && address
}

/// The issuer's address: the lines right below its name, up to a blank line, that read as an
/// address (a digit or a comma, no label, not a title), at most three, joined with ", ".
fn letterhead_address(lines: &[String], issuer: &Candidate, kind: DocKind) -> Option<Candidate> {
    let start = issuer.line; // 1-based line of the name = 0-based index of the next line
    let mut parts = Vec::new();
    for l in lines.iter().skip(start).take(3) {
        let t = l.trim();
        let pair = t.contains(':') || t.contains('=');
        let address_like = t.chars().any(|c| c.is_ascii_digit()) || t.contains(',');
        let names_a_kind = kind::guess(t) != DocKind::Other;
        // `P.IVA 09881230156`, `Tel. 0228 55 12 09`: a label, not the address.
        let first_words: Vec<&str> = t
            .split_whitespace()
            .take_while(|w| !w.chars().any(|c| c.is_ascii_digit()))
            .collect();
        let labelled = !first_words.is_empty()
            && first_words.len() <= 3
            && labels::known(&first_words.join(" ")).is_some();
        if t.is_empty()
            || pair
            || !address_like
            || names_a_kind
            || labelled
            || kind::is_title(t)
            || t.chars().count() > 80
        {
            break;
        }
        parts.push(t.split_whitespace().collect::<Vec<_>>().join(" "));
    }
    if parts.is_empty() {
        return None;
    }
    let value = parts.join(", ");
    Some(Candidate {
        name: format!("{}_address", kind.issuer_field()),
        label: "(letter head)".into(),
        value: Value::String(value.clone()),
        raw: value,
        kind: ValueKind::Text,
        item_fields: Vec::new(),
        line: start + 1,
        source: Source::Heading,
    })
}

/// Whether a name ends as a company's (`… GmbH`, `…, Lda.`) or has a company form after a
/// comma with words after it (`SEGUROS MEDITERRÁNEO, S.A. de Seguros y Reaseguros`).
fn has_company_suffix(name: &str) -> bool {
    let words: Vec<String> = name
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|w| !w.is_empty())
        .map(|w| values::fold(w.trim_end_matches('.')))
        .collect();
    let last = words
        .last()
        .is_some_and(|w| COMPANY_SUFFIXES.contains(&w.as_str()));
    let after_comma = name.split_once(',').is_some_and(|(_, rest)| {
        rest.split_whitespace()
            .next()
            .map(|w| values::fold(w.trim_end_matches('.')))
            .is_some_and(|w| COMPANY_SUFFIXES.contains(&w.as_str()) || w == "s.a" || w == "s.l")
    });
    last || after_comma
}

/// The first IBAN in the text that passes the ISO 13616 mod-97 check, as written.
fn find_iban(lines: &[String]) -> Option<(usize, String)> {
    use regex::Regex;
    use std::sync::LazyLock;
    // Behind the redaction boundary an IBAN is its token (`IBAN_1`), rehydrated in the answer.
    static TOKEN: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"\bIBAN_\d{1,4}\b").expect("regex"));
    let token = lines
        .iter()
        .enumerate()
        .find_map(|(i, l)| TOKEN.find(l).map(|m| (i, m.as_str().to_string())));
    static IBAN: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b").expect("regex")
    });
    for (i, l) in lines.iter().enumerate() {
        for m in IBAN.find_iter(l) {
            let compact: String = m.as_str().chars().filter(|c| !c.is_whitespace()).collect();
            if iban_ok(&compact) {
                return Some((i, m.as_str().trim().to_string()));
            }
        }
    }
    // Right after the word `IBAN` a code of an IBAN's shape is one even when its check digits
    // fail (a typo or an OCR slip is still the field's value).
    static LABELLED: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"\bIBAN:?\s+([A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?)\b")
            .expect("regex")
    });
    let labelled = lines.iter().enumerate().find_map(|(i, l)| {
        let m = LABELLED.captures(l)?.get(1)?;
        let n = m.as_str().chars().filter(|c| !c.is_whitespace()).count();
        (15..=34)
            .contains(&n)
            .then(|| (i, m.as_str().trim().to_string()))
    });
    token.or(labelled)
}

fn iban_ok(iban: &str) -> bool {
    let n = iban.chars().count();
    if !(15..=34).contains(&n) {
        return false;
    }
    let rotated: String = iban.chars().skip(4).chain(iban.chars().take(4)).collect();
    let mut rem: u32 = 0;
    for c in rotated.chars() {
        let v = match c.to_digit(36) {
            Some(v) => v,
            None => return false,
        };
        for d in v.to_string().chars() {
            rem = (rem * 10 + d.to_digit(10).unwrap_or(0)) % 97;
        }
    }
    rem == 1
}

/// The candidates as the model's first message shows them, one line each between
/// `<candidates>` markers (the values are document data): `name: type = value`, with
/// `(label: …)` when the document's label is not the name itself; lists show their item
/// fields and row count; values longer than 48 characters are not shown.
pub fn brief(a: &Analysis) -> String {
    // Document text can neither close nor open the block.
    let safe = |s: &str| s.replace('<', "‹").replace('>', "›").replace('\n', " ");
    let mut out = format!("<candidates kind=\"{}\">\n", a.kind.as_str());
    for c in &a.candidates {
        let ty = if c.kind == ValueKind::List {
            let items: Vec<String> = c
                .item_fields
                .iter()
                .map(|(n, t)| format!("{n}: {t}"))
                .collect();
            format!("array of {{{}}}", items.join(", "))
        } else {
            c.kind.field_type().to_string()
        };
        // A value is shown whole or not at all: a cut one would escape redaction (the boundary
        // replaces personal data it knows by its whole value).
        let value = match &c.value {
            Value::Array(rows) => format!("{} row(s)", rows.len()),
            Value::String(s) if s.chars().count() > MAX_SHOWN => "(long text)".to_string(),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let own = lexicon::snake(&labels::without_parentheses(&c.label), 48);
        let label = if own == c.name || !matches!(c.source, Source::Label(_)) {
            String::new()
        } else {
            format!(" (label: {})", safe(&clip(&c.label, 40)))
        };
        out.push_str(&format!("{}: {ty} = {}{label}\n", c.name, safe(&value)));
    }
    out.push_str("</candidates>");
    out
}

/// How the extraction request's message of the analysis' readings starts
/// (`tools::extraction_model`); the offline model, which reads the document itself, leaves
/// that message out.
pub const READINGS_START: &str = "Readings of the document above by agentd's analysis";

/// A candidate as a [`brief`] lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    pub name: String,
    /// `create_schema`'s type: string, number, date, boolean or array.
    pub field_type: String,
    /// The document's label when it is not the name itself.
    pub label: Option<String>,
    /// For an array: its item fields and their types.
    pub items: Vec<(String, String)>,
}

/// The candidates of the last [`brief`] inside `text` (the first message), in order. The
/// last block is read: the document's text, shown before it, cannot forge one.
pub fn parse_brief(text: &str) -> Vec<Listed> {
    let Some((_, rest)) = text.rsplit_once("<candidates") else {
        return Vec::new();
    };
    let Some((block, _)) = rest.split_once("</candidates>") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in block.lines().skip(1) {
        let Some((name, rest)) = line.split_once(": ") else {
            continue;
        };
        let name = name.trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let (ty, rest) = rest.split_once(" = ").unwrap_or((rest, ""));
        let label = rest
            .rsplit_once(" (label: ")
            .and_then(|(_, l)| l.strip_suffix(')'))
            .map(str::to_string);
        let (field_type, items) = match ty
            .strip_prefix("array of {")
            .and_then(|t| t.strip_suffix('}'))
        {
            Some(inner) => (
                "array".to_string(),
                inner
                    .split(", ")
                    .filter_map(|f| f.split_once(": "))
                    .map(|(n, t)| (n.trim().to_string(), t.trim().to_string()))
                    .collect(),
            ),
            None => (ty.trim().to_string(), Vec::new()),
        };
        out.push(Listed {
            name: name.to_string(),
            field_type,
            label,
            items,
        });
        if out.len() == MAX_CANDIDATES {
            break;
        }
    }
    out
}

/// The candidate names of the last [`brief`] inside `text`, in order.
pub fn names_in_brief(text: &str) -> Vec<String> {
    parse_brief(text).into_iter().map(|l| l.name).collect()
}

#[cfg(test)]
mod tests;
