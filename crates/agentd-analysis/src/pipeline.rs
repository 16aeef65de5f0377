//! The passes of [`analyse`](crate::analyse) over a document's lines, in the order it runs
//! them: the label–value pairs first, then the tables' fields, the letter head, and the
//! fields sentences, titles and patterns give when no label did. Each adds candidates to
//! `out`, where the first one found of a name wins ([`push`]).

use crate::labels::{self, How, Pair};
use crate::lexicon::{self, Class};
use crate::tables::{self, Table};
use crate::values::{self, DateOrder, DecimalStyle};
use crate::{
    CUSTOMER_PREFIX, Candidate, DocKind, MAX_CANDIDATES, MAX_CHARS, MAX_LINE_CHARS, MAX_LINES,
    MAX_VALUE_CHARS, Source, ValueKind, card_scheme, clip, date_line, find_iban, from_pair, issuer,
    kind, letterhead_address, number_value, periods, prose, push, push_pair, range_pair, tidy,
    totals,
};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::ops::Range;

/// What the passes read: the document's lines (bounded and tidied) and what is known of the
/// whole text before any field.
pub(crate) struct Doc {
    lines: Vec<String>,
    style: DecimalStyle,
    order: DateOrder,
    pub(crate) kind: DocKind,
    /// The text's language ([`crate::glossary::language_of`]).
    pub(crate) language: Option<&'static str>,
    /// The text was longer than the analysis reads.
    pub(crate) truncated: bool,
    /// The tables of more than one row.
    tables: Vec<Table>,
    /// The tables of one row.
    single: Vec<Table>,
    /// The lines of all tables, headers and rows.
    table_lines: HashSet<usize>,
}

impl Doc {
    /// The document of `text`, read within the bounds (see the crate's docs).
    pub(crate) fn read(text: &str) -> Self {
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
        let language = crate::glossary::language_of(&text);
        let (single, tables): (Vec<_>, Vec<_>) = tables::tables(&lines, style, order)
            .into_iter()
            .partition(|t| t.row_lines.len() == 1);
        let table_lines: HashSet<usize> = tables
            .iter()
            .chain(single.iter())
            .flat_map(|t| std::iter::once(t.header_line).chain(t.row_lines.iter().copied()))
            .collect();
        Self {
            lines,
            style,
            order,
            kind,
            language,
            truncated,
            tables,
            single,
            table_lines,
        }
    }

    /// The lines read (bounded and tidied), for [`crate::origins`].
    pub(crate) fn lines(&self) -> &[String] {
        &self.lines
    }

    /// Every table, of one row or more, for [`crate::origins`].
    pub(crate) fn tables(&self) -> impl Iterator<Item = &Table> {
        self.tables.iter().chain(self.single.iter())
    }

    /// Every label–value pair outside the tables as written, the items a receipt lists too,
    /// for [`crate::origins`].
    pub(crate) fn every_pair(&self) -> Vec<Pair> {
        labels::pairs(
            &self.lines,
            &|i: usize| self.in_table(i),
            self.style,
            self.order,
        )
    }

    /// Whether line `i` (0-based) is a table's header or row.
    fn in_table(&self, i: usize) -> bool {
        self.table_lines.contains(&i)
    }

    /// The candidate of a pair on this document.
    fn candidate(&self, p: &Pair) -> Option<Candidate> {
        from_pair(p, self.kind, self.style, self.order, self.language)
    }

    /// The label–value pairs outside the tables and those of the one-row tables, in the order
    /// of their lines, without the items bought a receipt lists.
    pub(crate) fn pairs(&self) -> Vec<Pair> {
        let mut pairs = labels::pairs(
            &self.lines,
            &|i: usize| self.in_table(i),
            self.style,
            self.order,
        );
        self.one_row_tables(&mut pairs);
        pairs.sort_by_key(|p| p.line);
        self.without_receipt_items(&mut pairs);
        without_quantities(&mut pairs);
        pairs
    }

    /// A table of one row (`Invoice No.   Date` over `INV-1   2026-01-01`) is labels over values.
    fn one_row_tables(&self, pairs: &mut Vec<Pair>) {
        for t in &self.single {
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
    }

    /// On a receipt, a line with a label the lexicon does not know and an amount far right is an
    /// item bought (`PAN BARRA     0,85`), not a field.
    fn without_receipt_items(&self, pairs: &mut Vec<Pair>) {
        pairs.retain(|p| {
            self.kind != DocKind::Receipt
                || p.how != How::Spaced
                || labels::known(&p.label).is_some()
        });
    }

    /// The addressee's block (`Spett.le` over a name, its address, `P.IVA …`; `Cliente:` and
    /// the customer's name, then its `NIF: …`): a tax id in it is the customer's, not the
    /// issuer's. The block runs to the next blank line (eight lines at most).
    fn customer_blocks(&self, pairs: &[Pair]) -> Vec<Range<usize>> {
        let lines = &self.lines;
        let block = |i: usize| {
            let end = (i..lines.len().min(i + 8))
                .find(|k| lines.get(*k).is_some_and(|l| l.trim().is_empty()))
                .unwrap_or(lines.len().min(i + 8));
            i..end
        };
        if self.kind.addressee_field() == Some("customer") {
            prose::addressee(lines)
                .map(|(i, _)| i)
                .into_iter()
                .chain(
                    pairs
                        .iter()
                        .filter(|p| {
                            labels::known(&p.label).is_some_and(|(name, _)| name == "customer")
                        })
                        .map(|p| p.line),
                )
                .map(block)
                .collect()
        } else {
            Vec::new()
        }
    }

    /// The pairs as fields: two labels over two values joined by ` / ` (`Vessel / Voyage`) as
    /// each pair, a range as its start and its end, a tax id in the customer's block as the
    /// customer's.
    pub(crate) fn labelled(&self, pairs: Vec<Pair>, out: &mut Vec<Candidate>) {
        let customer_blocks = self.customer_blocks(&pairs);
        let pairs: Vec<labels::Pair> = pairs
            .into_iter()
            .flat_map(|p| labels::slashed(&p).unwrap_or_else(|| vec![p]))
            .collect();
        for p in pairs {
            if let Some([start, end]) = range_pair(&p, self.kind, self.order) {
                push(out, start);
                push(out, end);
            } else if let Some(mut c) = self.candidate(&p) {
                if matches!(c.name.as_str(), "vat_id" | "tax_id" | "tax_number")
                    && customer_blocks.iter().any(|b| b.contains(&p.line))
                {
                    c.name = format!("{CUSTOMER_PREFIX}{}", c.name);
                }
                push_pair(out, c, self.language);
            }
        }
    }

    /// A table's row named by a known amount label is a field (`SALAIRE BRUT   1 925,96`,
    /// `IVA 21 %   12,53 €`): its last cell.
    pub(crate) fn amount_rows(&self, out: &mut Vec<Candidate>) {
        let style = self.style;
        for t in self.tables.iter().chain(self.single.iter()) {
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
                    if let Some(c) = self.candidate(&p) {
                        push(out, c);
                    }
                }
            }
        }
    }

    /// A known amount just below a table with a year-to-date column, one number under the
    /// column before it and one under it (`NET PAY   1,906.71   39,399.83`): the first.
    pub(crate) fn below_year_to_date(&self, out: &mut Vec<Candidate>) {
        let (lines, style) = (&self.lines, self.style);
        for t in &self.tables {
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
            for i in (after..lines.len().min(after + 4)).filter(|i| !self.in_table(*i)) {
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
                    if let Some(c) = self.candidate(&p) {
                        push(out, c);
                    }
                }
            }
        }
    }

    /// A matrix whose columns are known amounts (`Festsetzung  Einkommensteuer
    /// Solidaritätszuschlag  Kirchensteuer` over `festgesetzt werden  14.872,00 €  0,00 €
    /// 1.338,48 €`): each column's first row is that field (no column is an item table's).
    pub(crate) fn amount_columns(&self, out: &mut Vec<Candidate>) {
        for t in &self.tables {
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
                if let Some(c) = self.candidate(&p) {
                    push(out, c);
                }
            }
        }
    }

    /// A total row under columns of amounts (`Total for year   £41,250.00   £5,737.80`).
    pub(crate) fn column_totals(&self, out: &mut Vec<Candidate>) {
        for t in &self.tables {
            for c in totals::column_totals(t, &self.lines, self.style) {
                // The total line read as one pair (`Total des opérations : 653,46   2 460,55`) is
                // these fields, not a text.
                out.retain(|o| !(o.line == c.line + 1 && o.kind == ValueKind::Text));
                // A row read as its own pair already (`TOTALE COMPETENZE   2.428,57`).
                let value = number_value(c.value.abs());
                if out.iter().any(|o| o.line == c.line + 1 && o.value == value) {
                    continue;
                }
                push(
                    out,
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
    }

    /// Rows of results (a lab report's analytes) are fields of their own: `Haemoglobin  13.8`.
    /// (Only there: a purchase order's `Wert` column is an amount, not a result.)
    pub(crate) fn results(&self, out: &mut Vec<Candidate>) {
        let kind = self.kind;
        let results_kinds = matches!(kind, DocKind::LabReport | DocKind::Other);
        for t in self.tables.iter().filter(|_| results_kinds) {
            for (label, value) in t.named_results(kind == DocKind::LabReport) {
                let p = labels::Pair {
                    label,
                    value,
                    line: t.header_line,
                    how: How::Spaced,
                };
                if let Some(c) = self.candidate(&p) {
                    push(out, c);
                }
            }
        }
    }

    /// The document's main table: the rows field.
    fn main_table(&self) -> Option<&Table> {
        self.tables.iter().max_by_key(|t| t.row_lines.len())
    }

    /// A statement's balances and totals written as rows of its table (`SOLDE CRÉDITEUR AU
    /// 30/09/2026   1 845,12`) are fields, not movements: the balances are added, and the
    /// rows of both (indexes in the main table's rows) returned.
    pub(crate) fn statement_balances(&self, out: &mut Vec<Candidate>) -> Vec<usize> {
        let style = self.style;
        let mut summary_rows: Vec<usize> = Vec::new();
        if let (DocKind::BankStatement, Some(t)) = (self.kind, self.main_table()) {
            for b in totals::balance_rows(t, style) {
                summary_rows.push(b.row);
                push(
                    out,
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
        summary_rows
    }

    /// The main table's rows, but for the `summary_rows` (a statement's balances and totals),
    /// as the document's rows field.
    pub(crate) fn rows(&self, summary_rows: &[usize], out: &mut Vec<Candidate>) {
        if let Some(t) = self.main_table() {
            let rows: Vec<Value> = t
                .rows
                .iter()
                .enumerate()
                .filter(|(k, _)| !summary_rows.contains(k))
                .map(|(_, r)| r.clone())
                .collect();
            push(
                out,
                Candidate {
                    name: self.kind.rows_field().into(),
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
    }

    /// The issuing party in the letter head, and its address below it.
    pub(crate) fn letter_head(&self, out: &mut Vec<Candidate>) {
        if let Some(c) = issuer(&self.lines, self.kind, self.style, self.order) {
            if let Some(a) = letterhead_address(&self.lines, &c, self.kind) {
                push(out, c);
                push(out, a);
            } else {
                push(out, c);
            }
        }
    }

    /// Amounts a sentence names (`Der Erstattungsbetrag von 1.342,88 € wird …`) and numbers
    /// it names (`titulaire du contrat n° RCP-0448-2291-B`).
    pub(crate) fn named_in_sentences(&self, out: &mut Vec<Candidate>) {
        for (i, l) in self
            .lines
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.in_table(*i))
        {
            for p in prose::named_amounts(l, i)
                .into_iter()
                .chain(prose::numbered_refs(l, i))
            {
                if let Some(c) = self.candidate(&p) {
                    push(out, c);
                }
            }
        }
    }

    /// The year a tax form is for (`Bescheid für 2025`, or the year its title ends in) when no
    /// label gave it.
    pub(crate) fn tax_year(&self, out: &mut Vec<Candidate>) {
        let lines = &self.lines;
        if self.kind == DocKind::TaxForm
            && out.iter().all(|c| c.name != "tax_year")
            && let Some((i, y)) = prose::tax_year(lines).or_else(|| prose::title_year(lines))
        {
            push(
                out,
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
    }

    /// A due date a sentence sets (`U moet het bedrag uiterlijk op 31 oktober 2026 betalen.`).
    pub(crate) fn due_in_sentence(&self, out: &mut Vec<Candidate>) {
        let lines = &self.lines;
        if out.iter().all(|c| c.name != "due_date")
            && let Some((i, d)) = lines
                .iter()
                .enumerate()
                .filter(|(i, _)| !self.in_table(*i))
                .find_map(|(i, l)| prose::due_in_sentence(l, self.order).map(|d| (i, d)))
        {
            push(
                out,
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
    }

    /// When a payslip's pay was sent (`Überweisung am 30.10.2026 auf IBAN …`).
    pub(crate) fn paid_in_sentence(&self, out: &mut Vec<Candidate>) {
        let lines = &self.lines;
        if self.kind == DocKind::Payslip
            && out
                .iter()
                .all(|c| !matches!(c.name.as_str(), "payment_date" | "pay_date"))
            && let Some((i, d)) = lines
                .iter()
                .enumerate()
                .filter(|(i, _)| !self.in_table(*i))
                .find_map(|(i, l)| prose::paid_in_sentence(l, self.order).map(|d| (i, d)))
        {
            push(
                out,
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
    }

    /// A payslip's month in its title (`für Oktober 2026`).
    pub(crate) fn month_in_title(&self, out: &mut Vec<Candidate>) {
        if self.kind == DocKind::Payslip
            && out
                .iter()
                .all(|c| !matches!(c.name.as_str(), "pay_period" | "period_start" | "period"))
            && let Some((i, month)) = prose::title_month(&self.lines)
        {
            push(
                out,
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
    }

    /// A receipt's card line (`VISA DEBIT   GBP 5.72`) says how it was paid as well as how much.
    pub(crate) fn card_line(&self, out: &mut Vec<Candidate>) {
        if self.kind == DocKind::Receipt
            && out.iter().all(|c| c.name != "payment_method")
            && let Some(c) = out.iter().find(|c| {
                c.name == "amount_paid"
                    && matches!(c.source, Source::Label(_))
                    && card_scheme(&c.label)
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
                out,
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
    }

    /// A receipt's masked card number (`****5519`): its last four digits.
    pub(crate) fn card_last_four(&self, out: &mut Vec<Candidate>) {
        if self.kind == DocKind::Receipt
            && out.iter().all(|c| c.name != "card_last_four")
            && let Some((i, digits)) = prose::card_last_four(&self.lines)
        {
            push(
                out,
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
    }

    /// A receipt's count of items on a line of its own (`5 ARTICLES`).
    pub(crate) fn item_count(&self, out: &mut Vec<Candidate>) {
        if self.kind == DocKind::Receipt
            && out.iter().all(|c| c.name != "item_count")
            && let Some((i, n)) = prose::item_count(&self.lines)
        {
            push(
                out,
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
    }

    /// A date alone on its line (a receipt's `15-11-2026 09:12`) when nothing else is a date.
    pub(crate) fn date_line(&self, out: &mut Vec<Candidate>) {
        let lines = &self.lines;
        if out.iter().all(|c| c.kind != ValueKind::Date)
            && let Some((i, d)) = lines
                .iter()
                .enumerate()
                .filter(|(i, _)| !self.in_table(*i))
                .find_map(|(i, l)| date_line(l, self.order).map(|d| (i, d)))
        {
            push(
                out,
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
    }

    /// A place-and-date line (`Fait à Nantes, le 12 janvier 2026`) is the date of issue when no
    /// label gave one.
    pub(crate) fn place_and_date(&self, out: &mut Vec<Candidate>) {
        let lines = &self.lines;
        if out
            .iter()
            .all(|c| c.name != "issue_date" && c.name != "date")
            && let Some((i, d)) = lines
                .iter()
                .enumerate()
                .find_map(|(i, l)| periods::place_date(l, self.order).map(|d| (i, d)))
        {
            push(
                out,
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
    }

    /// The name in the address block (`Herrn` over `Tobias Reinke`): whom the document is for.
    pub(crate) fn addressee(&self, out: &mut Vec<Candidate>) {
        let lines = &self.lines;
        if let Some(field) = self.kind.addressee_field()
            && out.iter().all(|c| c.name != field)
            && let Some((i, name)) = prose::addressee(lines).or_else(|| prose::titled_name(lines))
        {
            push(
                out,
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
    }

    /// A range in running text (`… pour la période du 01/01/2026 au 31/12/2026, …`) when no
    /// label gave one.
    pub(crate) fn period_in_sentence(&self, out: &mut Vec<Candidate>) {
        let lines = &self.lines;
        let (first, last) = if self.kind == DocKind::InsuranceClaim {
            ("start_date", "end_date")
        } else {
            ("period_start", "period_end")
        };
        if out.iter().all(|c| c.name != first)
            && let Some((i, (start, end))) = lines
                .iter()
                .enumerate()
                .filter(|(i, _)| !self.in_table(*i))
                .find_map(|(i, l)| periods::range_in_text(l, self.order).map(|r| (i, r)))
        {
            for (name, d) in [(first, start), (last, end)] {
                push(
                    out,
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
    }

    /// A title that numbers the document (`NOTA DI CREDITO N. 14/NC DEL 12/11/2026`).
    pub(crate) fn title_number(&self, out: &mut Vec<Candidate>) {
        let (lines, kind) = (&self.lines, self.kind);
        if let Some((i, code, date)) = prose::title_number(lines, self.order) {
            let number = kind.number_field();
            if out.iter().all(|c| c.name != number) {
                push(
                    out,
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
                    out,
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
    }

    /// An IBAN anywhere in the text, when no label gave one.
    pub(crate) fn iban(&self, out: &mut Vec<Candidate>) {
        if out.iter().all(|c| c.name != "iban")
            && let Some((line, iban)) = find_iban(&self.lines)
        {
            push(
                out,
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
    }
}

/// A label that opens with a quantity (`2 x Fish & Chips`, `x Pint`) is an item bought.
fn without_quantities(pairs: &mut Vec<Pair>) {
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
}

/// Amounts that add up to the line below them are its breakdown (a payslip's contributions
/// over `Summe SV-Beiträge`, a bill's charges over its total): the sum is the field. A part
/// the lexicon names (`Lohnsteuer`, `VAT`) or a subtotal of its own stays, and so does a net
/// amount and its tax (`Prima neta` and `Recargos e impuestos` over the premium).
pub(crate) fn without_breakdowns(out: &mut Vec<Candidate>) {
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
}

/// Fields the lexicon names come first, so that a cap on the fields (here or in a
/// proposal) drops the labels it does not know before them.
pub(crate) fn ranked(out: &mut Vec<Candidate>) {
    out.sort_by_key(|c| lexicon::class_of(&c.name).is_none());
    out.truncate(MAX_CANDIDATES);
}
