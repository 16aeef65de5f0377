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
//! documents of one kind in several languages get one schema; an unknown label keeps its own
//! snake_case name (`Standing charges` → `standing_charges`). The label as written is kept beside it
//! (`label`), for the prompt and the reviewer.
//!
//! **Bounds.** Only the first [`MAX_CHARS`] characters and [`MAX_LINES`] lines are read, lines
//! are cut at [`MAX_LINE_CHARS`], and at most [`MAX_CANDIDATES`] candidates come out. No input
//! is sliced by byte offsets it did not produce; any UTF-8 is accepted.
//!
//! **Crate.** `agentd-analysis` (layer 14 of ARCHITECTURE.md § Layers) uses no other agentd
//! crate.

pub mod ground;
pub mod kind;
pub mod labels;
pub mod lexicon;
pub mod periods;
pub mod prose;
pub mod tables;
pub mod totals;
pub mod values;

pub use kind::DocKind;

use labels::How;
use lexicon::Class;
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

/// Analyses `text` (any UTF-8; see the module docs for the bounds).
pub fn analyse(text: &str) -> Analysis {
    let total = text.chars().count();
    let text: String = text.chars().take(MAX_CHARS).collect();
    let truncated = total > MAX_CHARS || text.lines().count() > MAX_LINES;
    let lines: Vec<String> = text
        .lines()
        .take(MAX_LINES)
        .map(|l| tidy(&clip(l, MAX_LINE_CHARS)))
        .collect();
    let style = values::decimal_style(&text);
    let order = values::date_order(&text);
    let kind = kind::guess(&text);
    let mut out: Vec<Candidate> = Vec::new();

    let (single, tables): (Vec<_>, Vec<_>) = tables::tables(&lines, style, order)
        .into_iter()
        .partition(|t| t.row_lines.len() == 1);
    let table_lines: std::collections::HashSet<usize> = tables
        .iter()
        .chain(single.iter())
        .flat_map(|t| std::iter::once(t.header_line).chain(t.row_lines.iter().copied()))
        .collect();
    let in_table = |i: usize| table_lines.contains(&i);
    let mut pairs = labels::pairs(&lines, &in_table, style, order);
    // A table of one row (`Invoice No.   Date` over `INV-1   2026-01-01`) is labels over values.
    for t in &single {
        for (label, value) in t.labels.iter().zip(&t.first_row) {
            if !value.trim().is_empty() && labels::label_ok(label) {
                pairs.push(labels::Pair {
                    label: label.clone(),
                    value: value.clone(),
                    line: t.header_line,
                    how: How::NextLine,
                });
            }
        }
    }
    pairs.sort_by_key(|p| p.line);
    // On a receipt, a line with a label the lexicon does not know and an amount far right is an
    // item bought (`PAN BARRA     0,85`), not a field.
    pairs.retain(|p| {
        kind != DocKind::Receipt || p.how != How::Spaced || labels::known(&p.label).is_some()
    });
    // A label that opens with a quantity (`2 x Fish & Chips`, `x Pint`) is an item bought.
    pairs.retain(|p| {
        let l = p
            .label
            .trim_start()
            .trim_start_matches(|c: char| c.is_ascii_digit());
        !(l.starts_with("x ")
            || l.starts_with("× ")
            || l.starts_with(" x ")
            || l.starts_with(" × "))
    });
    // The addressee's block (`Spett.le` over a name, its address, `P.IVA …`; `Cliente:` and
    // the customer's name, then its `NIF: …`): a tax id in it is the customer's, not the
    // issuer's. The block runs to the next blank line (eight lines at most).
    let block = |i: usize| {
        let end = (i..lines.len().min(i + 8))
            .find(|k| lines.get(*k).is_some_and(|l| l.trim().is_empty()))
            .unwrap_or(lines.len().min(i + 8));
        i..end
    };
    let customer_blocks: Vec<std::ops::Range<usize>> = if kind.addressee_field() == Some("customer")
    {
        prose::addressee(&lines)
            .map(|(i, _)| i)
            .into_iter()
            .chain(
                pairs
                    .iter()
                    .filter(|p| labels::known(&p.label).is_some_and(|(name, _)| name == "customer"))
                    .map(|p| p.line),
            )
            .map(block)
            .collect()
    } else {
        Vec::new()
    };
    let pairs: Vec<labels::Pair> = pairs
        .into_iter()
        .flat_map(|p| labels::slashed(&p).unwrap_or_else(|| vec![p]))
        .collect();
    for p in pairs {
        if let Some([start, end]) = range_pair(&p, kind, order) {
            push(&mut out, start);
            push(&mut out, end);
        } else if let Some(mut c) = from_pair(&p, kind, style, order) {
            if matches!(c.name.as_str(), "vat_id" | "tax_id" | "tax_number")
                && customer_blocks.iter().any(|b| b.contains(&p.line))
            {
                c.name = format!("{CUSTOMER_PREFIX}{}", c.name);
            }
            push_pair(&mut out, c);
        }
    }
    // A table's row named by a known amount label is a field (`SALAIRE BRUT   1 925,96`,
    // `IVA 21 %   12,53 €`): its last cell.
    for t in tables.iter().chain(single.iter()) {
        for (k, r) in t.raw_rows.iter().enumerate().take(50) {
            // The year-to-date column is not the document's amount.
            let cells: Vec<&str> = r
                .iter()
                .enumerate()
                .filter(|(k, _)| !t.labels.get(*k).is_some_and(|l| tables::year_to_date(l)))
                .map(|(_, c)| c.trim())
                .filter(|c| !c.is_empty())
                .collect();
            let (Some(first), Some(last)) = (cells.first(), cells.last()) else {
                continue;
            };
            let amount = labels::known(first).is_some_and(|(_, c)| c == Class::Amount);
            let last = values::repair_digits(last);
            if cells.len() >= 2 && amount && values::parse_number(&last, style).is_some() {
                let p = labels::Pair {
                    label: (*first).to_string(),
                    value: last.clone(),
                    line: t.row_lines.get(k).copied().unwrap_or(t.header_line),
                    how: How::Spaced,
                };
                if let Some(c) = from_pair(&p, kind, style, order) {
                    push(&mut out, c);
                }
            }
        }
    }
    // A known amount just below a table with a year-to-date column, one number under the
    // column before it and one under it (`NET PAY   1,906.71   39,399.83`): the first.
    for t in &tables {
        let header = lines
            .get(t.header_line)
            .map(|l| labels::segments(l))
            .unwrap_or_default();
        let Some(ytd) = header
            .iter()
            .skip(1)
            .find(|h| tables::year_to_date(&h.text))
        else {
            continue;
        };
        let after = t.row_lines.last().map_or(t.header_line, |l| *l) + 1;
        for i in (after..lines.len().min(after + 4)).filter(|i| !in_table(*i)) {
            let Some(line) = lines.get(i) else { break };
            let segs = labels::segments(line);
            let [label, current, year] = segs.as_slice() else {
                continue;
            };
            let number = |s: &labels::Segment| {
                values::parse_number(&values::repair_digits(&s.text), style).is_some()
            };
            let under = |s: &labels::Segment| s.end.min(ytd.end) > s.start.max(ytd.start);
            let amount = labels::known(&label.text).is_some_and(|(_, c)| c == Class::Amount);
            if amount && number(current) && number(year) && under(year) && !under(current) {
                let p = labels::Pair {
                    label: label.text.clone(),
                    value: values::repair_digits(&current.text),
                    line: i,
                    how: How::Spaced,
                };
                if let Some(c) = from_pair(&p, kind, style, order) {
                    push(&mut out, c);
                }
            }
        }
    }
    // A matrix whose columns are known amounts (`Festsetzung  Einkommensteuer
    // Solidaritätszuschlag  Kirchensteuer` over `festgesetzt werden  14.872,00 €  0,00 €
    // 1.338,48 €`): each column's first row is that field (no column is an item table's).
    for t in &tables {
        let amounts: Vec<usize> = t
            .labels
            .iter()
            .enumerate()
            .skip(1)
            .filter(|(_, l)| labels::known(l).is_some_and(|(_, c)| c == Class::Amount))
            .map(|(k, _)| k)
            .collect();
        let item_table = t
            .labels
            .iter()
            .any(|l| lexicon::column(&lexicon::snake(l, 40)).is_some());
        if amounts.len() < 2 || item_table {
            continue;
        }
        for k in amounts {
            let (Some(label), Some(cell)) =
                (t.labels.get(k), t.raw_rows.first().and_then(|r| r.get(k)))
            else {
                continue;
            };
            let p = labels::Pair {
                label: label.clone(),
                value: values::repair_digits(cell.trim()),
                line: t.header_line,
                how: How::Spaced,
            };
            if let Some(c) = from_pair(&p, kind, style, order) {
                push(&mut out, c);
            }
        }
    }
    // A total row under columns of amounts (`Total for year   £41,250.00   £5,737.80`).
    for t in &tables {
        for c in totals::column_totals(t, &lines, style) {
            // The total line read as one pair (`Total des opérations : 653,46   2 460,55`) is
            // these fields, not a text.
            out.retain(|o| !(o.line == c.line + 1 && o.kind == ValueKind::Text));
            // A row read as its own pair already (`TOTALE COMPETENZE   2.428,57`).
            let value = number_value(c.value.abs());
            if out.iter().any(|o| o.line == c.line + 1 && o.value == value) {
                continue;
            }
            push(
                &mut out,
                Candidate {
                    name: c.name,
                    label: clip(&c.label, 60),
                    value,
                    raw: clip(&c.raw, MAX_VALUE_CHARS),
                    kind: ValueKind::Number,
                    item_fields: Vec::new(),
                    line: c.line + 1,
                    source: Source::Label(How::Spaced),
                },
            );
        }
    }
    // Rows of results (a lab report's analytes) are fields of their own: `Haemoglobin  13.8`.
    // (Only there: a purchase order's `Wert` column is an amount, not a result.)
    let results_kinds = matches!(kind, DocKind::LabReport | DocKind::Other);
    for t in tables.iter().filter(|_| results_kinds) {
        for (label, value) in t.named_results(kind == DocKind::LabReport) {
            let p = labels::Pair {
                label,
                value,
                line: t.header_line,
                how: How::Spaced,
            };
            if let Some(c) = from_pair(&p, kind, style, order) {
                push(&mut out, c);
            }
        }
    }
    // A statement's balances and totals written as rows of its table (`SOLDE CRÉDITEUR AU
    // 30/09/2026   1 845,12`) are fields, not movements.
    // The document's main table: the rows field.
    let main_table = tables.iter().max_by_key(|t| t.row_lines.len());
    let mut summary_rows: Vec<usize> = Vec::new();
    if let (DocKind::BankStatement, Some(t)) = (kind, main_table) {
        for b in totals::balance_rows(t, style) {
            summary_rows.push(b.row);
            push(
                &mut out,
                Candidate {
                    name: if b.opening {
                        "opening_balance"
                    } else {
                        "closing_balance"
                    }
                    .into(),
                    label: clip(&b.label, 60),
                    value: number_value(b.value),
                    raw: clip(&b.raw, MAX_VALUE_CHARS),
                    kind: ValueKind::Number,
                    item_fields: Vec::new(),
                    line: t.row_lines.get(b.row).map_or(t.header_line, |l| *l) + 1,
                    source: Source::Label(How::Spaced),
                },
            );
        }
        summary_rows.extend((0..t.raw_rows.len()).filter(|k| totals::total_row(t, *k, style)));
    }
    if let Some(t) = main_table {
        let rows: Vec<Value> = t
            .rows
            .iter()
            .enumerate()
            .filter(|(k, _)| !summary_rows.contains(k))
            .map(|(_, r)| r.clone())
            .collect();
        push(
            &mut out,
            Candidate {
                name: kind.rows_field().into(),
                label: clip(&t.header, MAX_VALUE_CHARS),
                value: Value::Array(rows),
                raw: String::new(),
                kind: ValueKind::List,
                item_fields: t
                    .columns
                    .iter()
                    .cloned()
                    .zip(t.types.iter().copied())
                    .collect(),
                line: t.header_line + 1,
                source: Source::Table,
            },
        );
    }
    if let Some(c) = issuer(&lines, kind, style, order) {
        if let Some(a) = letterhead_address(&lines, &c, kind) {
            push(&mut out, c);
            push(&mut out, a);
        } else {
            push(&mut out, c);
        }
    }
    // Amounts a sentence names (`Der Erstattungsbetrag von 1.342,88 € wird …`) and numbers
    // it names (`titulaire du contrat n° RCP-0448-2291-B`).
    for (i, l) in lines.iter().enumerate().filter(|(i, _)| !in_table(*i)) {
        for p in prose::named_amounts(l, i)
            .into_iter()
            .chain(prose::numbered_refs(l, i))
        {
            if let Some(c) = from_pair(&p, kind, style, order) {
                push(&mut out, c);
            }
        }
    }
    if kind == DocKind::TaxForm
        && out.iter().all(|c| c.name != "tax_year")
        && let Some((i, y)) = prose::tax_year(&lines).or_else(|| prose::title_year(&lines))
    {
        push(
            &mut out,
            Candidate::pattern(
                "tax_year",
                "(year of the form)",
                json!(y),
                y.to_string(),
                ValueKind::Number,
                i + 1,
            ),
        );
    }
    // A due date a sentence sets (`U moet het bedrag uiterlijk op 31 oktober 2026 betalen.`).
    if out.iter().all(|c| c.name != "due_date")
        && let Some((i, d)) = lines
            .iter()
            .enumerate()
            .filter(|(i, _)| !in_table(*i))
            .find_map(|(i, l)| prose::due_in_sentence(l, order).map(|d| (i, d)))
    {
        push(
            &mut out,
            Candidate::pattern(
                "due_date",
                "(date to pay by)",
                Value::String(d.to_string()),
                clip(lines[i].trim(), MAX_VALUE_CHARS),
                ValueKind::Date,
                i + 1,
            ),
        );
    }
    // When a payslip's pay was sent (`Überweisung am 30.10.2026 auf IBAN …`).
    if kind == DocKind::Payslip
        && out
            .iter()
            .all(|c| !matches!(c.name.as_str(), "payment_date" | "pay_date"))
        && let Some((i, d)) = lines
            .iter()
            .enumerate()
            .filter(|(i, _)| !in_table(*i))
            .find_map(|(i, l)| prose::paid_in_sentence(l, order).map(|d| (i, d)))
    {
        push(
            &mut out,
            Candidate::pattern(
                "payment_date",
                "(date pay was sent)",
                Value::String(d.to_string()),
                clip(lines[i].trim(), MAX_VALUE_CHARS),
                ValueKind::Date,
                i + 1,
            ),
        );
    }
    // A payslip's month in its title (`für Oktober 2026`).
    if kind == DocKind::Payslip
        && out
            .iter()
            .all(|c| !matches!(c.name.as_str(), "pay_period" | "period_start" | "period"))
        && let Some((i, month)) = prose::title_month(&lines)
    {
        push(
            &mut out,
            Candidate::pattern(
                "pay_period",
                "(month in the title)",
                Value::String(month.clone()),
                month,
                ValueKind::Text,
                i + 1,
            ),
        );
    }
    // A receipt's card line (`VISA DEBIT   GBP 5.72`) says how it was paid as well as how much.
    if kind == DocKind::Receipt
        && out.iter().all(|c| c.name != "payment_method")
        && let Some(c) = out.iter().find(|c| {
            c.name == "amount_paid" && matches!(c.source, Source::Label(_)) && card_scheme(&c.label)
        })
    {
        // Without a currency written before the amount (`VISA DEBIT   GBP 5.72`).
        let words: Vec<&str> = c
            .label
            .trim()
            .trim_end_matches(':')
            .split_whitespace()
            .collect();
        let keep = words.len()
            - usize::from(
                words.len() > 1
                    && words
                        .last()
                        .is_some_and(|w| values::currency_of(w).is_some()),
            );
        let method = words.get(..keep).unwrap_or_default().join(" ");
        let line = c.line;
        push(
            &mut out,
            Candidate::pattern(
                "payment_method",
                "(card line)",
                Value::String(method.clone()),
                method,
                ValueKind::Text,
                line,
            ),
        );
    }
    if kind == DocKind::Receipt
        && out.iter().all(|c| c.name != "card_last_four")
        && let Some((i, digits)) = prose::card_last_four(&lines)
    {
        push(
            &mut out,
            Candidate::pattern(
                "card_last_four",
                "(masked card number)",
                Value::String(digits.clone()),
                digits,
                ValueKind::Identifier,
                i + 1,
            ),
        );
    }
    if kind == DocKind::Receipt
        && out.iter().all(|c| c.name != "item_count")
        && let Some((i, n)) = prose::item_count(&lines)
    {
        push(
            &mut out,
            Candidate::pattern(
                "item_count",
                "(count of items)",
                json!(n),
                n.to_string(),
                ValueKind::Number,
                i + 1,
            ),
        );
    }
    // A date alone on its line (a receipt's `15-11-2026 09:12`) when nothing else is a date.
    if out.iter().all(|c| c.kind != ValueKind::Date)
        && let Some((i, d)) = lines
            .iter()
            .enumerate()
            .filter(|(i, _)| !in_table(*i))
            .find_map(|(i, l)| date_line(l, order).map(|d| (i, d)))
    {
        push(
            &mut out,
            Candidate::pattern(
                "date",
                "(date line)",
                Value::String(d.to_string()),
                clip(lines[i].trim(), MAX_VALUE_CHARS),
                ValueKind::Date,
                i + 1,
            ),
        );
    }
    if out
        .iter()
        .all(|c| c.name != "issue_date" && c.name != "date")
        && let Some((i, d)) = lines
            .iter()
            .enumerate()
            .find_map(|(i, l)| periods::place_date(l, order).map(|d| (i, d)))
    {
        push(
            &mut out,
            Candidate::pattern(
                "issue_date",
                "(place and date)",
                Value::String(d.to_string()),
                clip(lines[i].trim(), MAX_VALUE_CHARS),
                ValueKind::Date,
                i + 1,
            ),
        );
    }
    // The name in the address block (`Herrn` over `Tobias Reinke`): whom the document is for.
    if let Some(field) = kind.addressee_field()
        && out.iter().all(|c| c.name != field)
        && let Some((i, name)) = prose::addressee(&lines).or_else(|| prose::titled_name(&lines))
    {
        push(
            &mut out,
            Candidate::pattern(
                field,
                "(address block)",
                Value::String(name.clone()),
                name,
                ValueKind::Text,
                i + 1,
            ),
        );
    }
    // A range in running text (`… pour la période du 01/01/2026 au 31/12/2026, …`) when no
    // label gave one.
    let (first, last) = if kind == DocKind::InsuranceClaim {
        ("start_date", "end_date")
    } else {
        ("period_start", "period_end")
    };
    if out.iter().all(|c| c.name != first)
        && let Some((i, (start, end))) = lines
            .iter()
            .enumerate()
            .filter(|(i, _)| !in_table(*i))
            .find_map(|(i, l)| periods::range_in_text(l, order).map(|r| (i, r)))
    {
        for (name, d) in [(first, start), (last, end)] {
            push(
                &mut out,
                Candidate::pattern(
                    name,
                    "(period in a sentence)",
                    Value::String(d.to_string()),
                    clip(lines[i].trim(), MAX_VALUE_CHARS),
                    ValueKind::Date,
                    i + 1,
                ),
            );
        }
    }
    // A title that numbers the document (`NOTA DI CREDITO N. 14/NC DEL 12/11/2026`).
    if let Some((i, code, date)) = prose::title_number(&lines, order) {
        let number = kind.number_field();
        if out.iter().all(|c| c.name != number) {
            push(
                &mut out,
                Candidate::pattern(
                    number,
                    "(title)",
                    Value::String(values::repair_code(&code)),
                    code.clone(),
                    ValueKind::Identifier,
                    i + 1,
                ),
            );
        }
        let date_name = if matches!(kind, DocKind::Invoice | DocKind::UtilityBill) {
            "invoice_date"
        } else {
            "issue_date"
        };
        if let Some(d) = date
            && out
                .iter()
                .all(|c| c.name != date_name && c.name != "issue_date" && c.name != "date")
        {
            push(
                &mut out,
                Candidate::pattern(
                    date_name,
                    "(title)",
                    Value::String(d.to_string()),
                    clip(lines[i].trim(), MAX_VALUE_CHARS),
                    ValueKind::Date,
                    i + 1,
                ),
            );
        }
    }
    if out.iter().all(|c| c.name != "iban")
        && let Some((line, iban)) = find_iban(&lines)
    {
        push(
            &mut out,
            Candidate::pattern(
                "iban",
                "IBAN",
                Value::String(iban.clone()),
                iban,
                ValueKind::Identifier,
                line + 1,
            ),
        );
    }
    // Amounts that add up to the line below them are its breakdown (a payslip's contributions
    // over `Summe SV-Beiträge`, a bill's charges over its total): the sum is the field. A part
    // the lexicon names (`Lohnsteuer`, `VAT`) or a subtotal of its own stays, and so does a net
    // amount and its tax (`Prima neta` and `Recargos e impuestos` over the premium).
    let amount =
        |c: &Candidate| c.kind == ValueKind::Number && matches!(c.source, Source::Label(_));
    let amounts: Vec<(usize, f64)> = out
        .iter()
        .filter(|c| amount(c))
        .filter_map(|c| c.value.as_f64().map(|v| (c.line, v)))
        .collect();
    let label_at = |line: usize| {
        out.iter()
            .find(|c| c.line == line && amount(c))
            .map(|c| lexicon::snake(&c.label, 60))
            .unwrap_or_default()
    };
    let parts: Vec<usize> = totals::parts_of_sums(&amounts)
        .into_iter()
        .filter(|g| !(g.len() == 2 && g.iter().any(|l| totals::tax_words(&label_at(*l)))))
        .flatten()
        .collect();
    out.retain(|c| {
        !(amount(c)
            && parts.contains(&c.line)
            && lexicon::class_of(&c.name).is_none()
            && !totals::sum_words(&lexicon::snake(&c.label, 60)))
    });
    // Fields the lexicon names come first, so that a cap on the fields (here or in a
    // proposal) drops the labels it does not know before them.
    out.sort_by_key(|c| lexicon::class_of(&c.name).is_none());
    out.truncate(MAX_CANDIDATES);
    Analysis {
        kind,
        candidates: out,
        truncated,
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
fn push_pair(out: &mut Vec<Candidate>, mut c: Candidate) {
    if out.iter().any(|o| o.name == c.name) {
        let own = own_name(&lexicon::snake(
            &labels::without_parentheses(&values::repair_letters(&c.label)),
            48,
        ));
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

/// A candidate from a label–value pair: its name, kind and normalised value.
fn from_pair(
    p: &labels::Pair,
    kind: DocKind,
    style: DecimalStyle,
    order: DateOrder,
) -> Option<Candidate> {
    let raw = column_cut(&clip(p.value.trim(), MAX_VALUE_CHARS));
    if raw.is_empty() {
        return None;
    }
    let label = without_included(&periods::undated_label(
        labels::without_enumeration(p.label.trim().trim_end_matches([':', '=']).trim()),
        order,
    ));
    // `12 x £34.35` (twelve instalments of £34.35): the amount of one.
    let raw = labels::instalment(&raw).map_or(raw.clone(), str::to_string);
    let own = own_name(&lexicon::snake(
        &labels::without_parentheses(&values::repair_letters(&label)),
        48,
    ));
    if own.is_empty() {
        return None;
    }
    // A bare `N°` / `No.` labels the document's own number.
    // A bare `Azienda`, `Empresa`, `Firma` names the party that issued the document.
    let company_word = lexicon::company_word(&own);
    let known = if lexicon::number_word(&own) {
        Some((kind.number_field(), Class::Identifier))
    } else if company_word && labels::known(&label).is_none() {
        Some((kind.issuer_field(), Class::Party))
    } else if kind == DocKind::TaxForm && labels::known(&label).is_none() && refund_words(&own) {
        // `Somme qui vous a été remboursée`, `Ihnen wird erstattet`: a refund in a sentence.
        Some(("refund_amount", Class::Amount))
    } else {
        labels::known(&label)
    };
    let class = known.map(|k| k.1);
    // A person or firm ends where its address or a note starts (`Kliniken Südwest gGmbH,
    // Zentraleinkauf, Postfach 1140`, `Mme Sophie Durand, née le 11/02/1990`).
    // A contact under a label the lexicon does not know (`Site contact: Gary Lunn 07700
    // 900481`) is a person too.
    let person = class.is_none()
        && matches!(
            own.rsplit('_').next(),
            Some("contact" | "name" | "person" | "ansprechpartner" | "contacto" | "contatto")
        );
    let raw = if class == Some(Class::Party) {
        party_name(&raw)
    } else if person {
        without_trailing_phone(&raw)
    } else {
        raw
    };
    let repaired = values::repair_digits(&raw);
    let date = values::parse_date(&raw, order)
        .or_else(|| values::parse_date(&repaired, order))
        // A date label's value may say more than the date (`KW 46/2026, spätestens
        // 13.11.2026`): its one date.
        .or_else(|| {
            let is_date = class == Some(Class::Date) || (class.is_none() && date_name(&own));
            match values::dates_in(&repaired, order).as_slice() {
                [d] if is_date => d.readings.first().copied(),
                _ => None,
            }
        })
        // A value that opens with a date and goes on in words says where or how
        // (`09/12/2026 au dépôt de Lyon-Gerland`): the date, under a label the lexicon does
        // not know as something else.
        .or_else(|| {
            let first = values::dates_in(&repaired, order).into_iter().next()?;
            let rest = repaired.get(first.end..)?.trim_start();
            let opens = first.start == 0
                && matches!(class, None | Some(Class::Date))
                && rest.starts_with(|c: char| c.is_lowercase());
            opens.then(|| first.readings.first().copied()).flatten()
        });
    // `47781203-K`, `B-17552209`: a code with a letter after a dash is no negative number.
    let lettered_code = labels::looks_like_code(&raw)
        && raw.split_whitespace().count() == 1
        && raw.contains(['-', '/'])
        && raw.chars().any(char::is_alphabetic)
        && values::currency_of(&raw).is_none();
    // `1 284 kWh (index relevé …)`, `150 € por siniestro`: a number and its unit open the
    // value of a label the lexicon does not know.
    // The number before the first other character (`1 284` of `1 284 kWh (index relevé 48 912
    // → 50 196)`), and what follows it.
    let before_unit = repaired
        .find(|c: char| !(c.is_ascii_digit() || " .,".contains(c)))
        .and_then(|at| {
            let n = values::parse_number(repaired.get(..at)?.trim(), style)?;
            Some((n, repaired.get(at..)?))
        });
    let unit_first = class.is_none() && {
        let rest = before_unit.map(|(_, r)| r);
        rest.and_then(|r| r.split_whitespace().next())
            .map(|u| u.trim_end_matches([',', '.', ';']).to_lowercase())
            .is_some_and(|u| {
                matches!(
                    u.as_str(),
                    "kwh"
                        | "mwh"
                        | "smc"
                        | "m3"
                        | "m³"
                        | "kg"
                        | "km"
                        | "l"
                        | "€"
                        | "eur"
                        | "gj"
                        | "kvarh"
                        | "usd"
                        | "$"
                        | "£"
                        | "gbp"
                        | "chf"
                        // Things counted: `46 pallets`, `12 Kolli`.
                        | "pallets"
                        | "pallet"
                        | "packages"
                        | "pkgs"
                        | "pcs"
                        | "pieces"
                        | "cartons"
                        | "ctns"
                        | "boxes"
                        | "colli"
                        | "kolli"
                        | "bultos"
                        | "palets"
                        | "paletten"
                        | "packstücke"
                        | "colis"
                        | "palettes"
                        | "pezzi"
                        | "bancali"
                )
            })
    };
    let measured = matches!(class, Some(Class::Amount | Class::Quantity)) || unit_first;
    // `VW Golf 1.5 TSI`, `OL-SO 482`: words before the digits under a label the lexicon does
    // not know make a name or a code, not a number (a currency is no word here).
    let wordy = class.is_none() && !unit_first && {
        let head: String = raw.chars().take_while(|c| !c.is_ascii_digit()).collect();
        let words: Vec<&str> = head
            .split(|c: char| !c.is_alphabetic())
            .filter(|w| !w.is_empty())
            .collect();
        !words.is_empty() && words.iter().all(|w| values::currency_of(w).is_none())
    };
    let number = values::parse_number(&raw, style)
        .or_else(|| values::parse_number(&repaired, style))
        .or_else(|| {
            measured
                .then(|| {
                    values::leading_number(&repaired, style)
                        .or_else(|| unit_first.then(|| before_unit.map(|(n, _)| n)).flatten())
                })
                .flatten()
        })
        .filter(|_| !lettered_code && !wordy);
    let digits_only = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    let long_digits = digits_only(&repaired) && (repaired.len() >= 7 || repaired.starts_with('0'));
    // `6 014 227 893`, `24 110 558 902 417`: ten digits or more in groups, with no decimals or
    // currency, number an account or a meter; no amount on a document is that large.
    let grouped_digits = {
        let groups: Vec<&str> = repaired.split(' ').collect();
        groups.len() >= 2
            && groups.iter().all(|g| !g.is_empty() && digits_only(g))
            && groups.iter().map(|g| g.len()).sum::<usize>() >= 10
    };
    let is_identifier = class == Some(Class::Identifier)
        || (class.is_none() && identifier_name(&own))
        || long_digits
        || (grouped_digits && !measured);
    // `CMD-26-1554 du 29/10/2026` under a label the lexicon does not know: the code.
    let coded = without_trailing_date(&raw, order);
    let dated_code = class.is_none()
        && coded != raw
        && labels::looks_like_code(&coded)
        && coded.split_whitespace().count() == 1;
    // `Rechnung RE-2026-4471 vom 28.10.2026` under `Bezug`: the number a known label names in
    // the value.
    let named_code = class
        .is_none()
        .then(|| {
            let c = without_trailing_date(&raw, order);
            let (head, code) = c.trim().rsplit_once(' ')?;
            let numbered = labels::known(head).is_some_and(|(_, k)| k == Class::Identifier);
            (numbered && labels::looks_like_code(code) && code.chars().any(|c| c.is_ascii_digit()))
                .then(|| code.to_string())
        })
        .flatten();
    let (value, vkind) = if let Some(code) = named_code {
        (
            Value::String(values::repair_code(&code)),
            ValueKind::Identifier,
        )
    } else if dated_code {
        (
            Value::String(values::repair_code(&coded)),
            ValueKind::Identifier,
        )
    } else if is_identifier && date.is_none() || class == Some(Class::Identifier) {
        // A code keeps its letters; its digit groups get their OCR repairs (`O7731` → `07731`,
        // `GPN-2O26-1147` → `GPN-2026-1147`); a date after it is the date of what it numbers
        // (`F-26-0917 du 20 octobre 2026`).
        // `#58312`: the sign says "number", it is not part of it.
        let unsigned = |s: &str| {
            s.strip_prefix('#')
                .filter(|r| r.starts_with(|c: char| c.is_ascii_alphanumeric()))
                .map_or_else(|| s.to_string(), str::to_string)
        };
        let v = if digits_only(&repaired) {
            repaired.clone()
        } else {
            unsigned(&values::repair_code(&without_trailing_date(&raw, order)))
        };
        (Value::String(v), ValueKind::Identifier)
    } else if let Some(d) = date {
        (Value::String(d.to_string()), ValueKind::Date)
    } else if let Some(b) = values::parse_bool(&raw) {
        (Value::Bool(b), ValueKind::Boolean)
    } else if let Some(n) = number.filter(|_| !matches!(class, Some(Class::Party | Class::Text))) {
        // A deduction or a tax printed negative (`Total des retenues  -412,51`) is an amount;
        // only a balance keeps its sign.
        // Under a label the lexicon does not know, only a balance or a result keeps its sign
        // (`Heffingskortingen € -3.987`, `Déjà réglé -380,00` are amounts).
        let signed = known.map_or_else(
            || {
                own.split('_').any(|w| {
                    matches!(
                        w,
                        "saldo"
                            | "balance"
                            | "solde"
                            | "resultado"
                            | "result"
                            | "resultat"
                            | "differenz"
                            | "verschil"
                            | "difference"
                            | "diferencia"
                    )
                })
            },
            |(canonical, _)| {
                matches!(
                    canonical,
                    "opening_balance" | "closing_balance" | "amount_due" | "refund_amount"
                )
            },
        );
        // A balance marked as a debit (`1.250,00 S`, `86.00 DR`) is below zero.
        let n = if values::account_side(&raw) == Some(false) {
            -n.abs()
        } else {
            n
        };
        // A credit note prints what it credits below zero (`Base imponible: -178,00 €`): the
        // sign is the document's.
        let n = if signed
            || kind == DocKind::CreditNote
            || !matches!(class, Some(Class::Amount) | None)
        {
            n
        } else {
            n.abs()
        };
        (number_value(n), ValueKind::Number)
    } else if labels::looks_like_code(&raw) && raw.split_whitespace().count() == 1 {
        (Value::String(raw.clone()), ValueKind::Identifier)
    } else {
        (Value::String(raw.clone()), ValueKind::Text)
    };
    let mut name = match known {
        Some((canonical, _)) => canonical.to_string(),
        None => expand_number(&own),
    };
    // `VAT: 20 %` is a rate, not an amount.
    if matches!(name.as_str(), "vat" | "tax_amount") && raw.contains('%') {
        name = if name == "vat" {
            "vat_rate".into()
        } else {
            "tax_rate".into()
        };
    }
    // On an invoice, the date it was issued is the invoice's date, and the holder of the
    // contract billed (`Titular`) its customer.
    if matches!(kind, DocKind::Invoice | DocKind::UtilityBill) {
        match name.as_str() {
            "issue_date" => name = "invoice_date".into(),
            "account_holder" => name = "customer".into(),
            _ => {}
        }
    }
    // On a credit note, an invoice's number is the invoice it credits, and its total credit
    // (`Total credit:`) is its total, not a statement's sum of credits.
    if kind == DocKind::CreditNote && name == "invoice_number" {
        name = "original_invoice".into();
    }
    if kind == DocKind::CreditNote && name == "total_credits" {
        name = "total".into();
    }
    // On an invoice or a credit note, whom it is sent to is the customer.
    if matches!(kind, DocKind::Invoice | DocKind::CreditNote) && name == "consignee" {
        name = "customer".into();
    }
    // On a statement, the bank's client is the account's holder.
    if kind == DocKind::BankStatement && name == "customer" {
        name = "account_holder".into();
    }
    if kind == DocKind::Payslip && name == "amount_due" {
        name = "net_pay".into();
    }
    // Pay words name a payslip's fields only (`Total ilíquido` on an invoice is its own
    // total), and on a payslip a gross total is the gross pay (`Gesamt-Brutto`).
    if kind != DocKind::Payslip
        && matches!(name.as_str(), "gross_pay" | "net_pay" | "total_deductions")
    {
        name = expand_number(&own);
    }
    // A receipt's `Subtotal` is what the items add up to (tax and service may be in it or
    // follow), not a net amount.
    if kind == DocKind::Receipt && name == "net_amount" && own.starts_with("sub") {
        name = "subtotal".into();
    }
    // A tax form has no total: what it asks to pay is the amount due.
    if kind == DocKind::TaxForm && name == "total" {
        name = "amount_due".into();
    }
    // `Aan:`, `To:`, `An:` name whom the document is addressed to.
    if known.is_none()
        && matches!(own.as_str(), "aan" | "to" | "an")
        && let Some(field) = kind.addressee_field()
    {
        name = field.into();
    }
    if kind == DocKind::Payslip && name == "total" {
        let f = values::fold(&label);
        if ["brut", "gross", "lord", "bruto"]
            .iter()
            .any(|w| f.contains(w))
        {
            name = "gross_pay".into();
        }
    }
    // `Freight: PREPAID` says who pays the freight, not how much.
    if name == "shipping_cost" && vkind == ValueKind::Text {
        name = "freight_terms".into();
    }
    // A policy's contract number is the policy's number.
    if kind == DocKind::InsuranceClaim && name == "contract_number" {
        name = "policy_number".into();
    }
    // On a policy, the date a cover runs out (`Scadenza`, `Vervaldatum`) is its end.
    if kind == DocKind::InsuranceClaim && name == "due_date" {
        name = "end_date".into();
    }
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        name = format!("field_{name}");
    }
    Some(Candidate {
        name,
        label: clip(&label, 60),
        value,
        raw,
        kind: vkind,
        item_fields: Vec::new(),
        line: p.line + 1,
        source: Source::Label(p.how),
    })
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
