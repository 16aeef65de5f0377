//! A table's total row: `Total for year   £41,250.00   £5,737.80` under `Pay   Tax deducted`,
//! or `Total des opérations :   653,46   2 460,55` right below a statement's `Débit   Crédit`
//! columns. Each amount, under the column it sits beneath, is that column's total: a
//! statement's debit and credit columns give `total_debits` and `total_credits`, a column of
//! amounts that is no item column (`Pay`, `Tax deducted`) its own field; an item table's
//! columns (quantity, unit price, amount) give nothing (their total is the document's total).

use super::labels::{known, segments, without_parentheses};
use super::lexicon::{self, Class, snake};
use super::tables::Table;
use super::values::{DecimalStyle, fold, parse_number, repair_digits};

/// Words a total row's label starts with.
const TOTAL_WORDS: [&str; 8] = [
    "total", "totale", "totaal", "totales", "gesamt", "summe", "somme", "sum",
];

/// A column's total: the field's name, the column's header as written, the amount as written
/// and its value, the 0-based line.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnTotal {
    pub name: String,
    pub label: String,
    pub raw: String,
    pub value: f64,
    pub line: usize,
}

/// Whether `label` opens with a word for "total" (`Total for year`, `Total des opérations :`,
/// `Gesamt`).
fn total_label(label: &str) -> bool {
    let t = label.trim().trim_end_matches(':').trim();
    let first = t.split_whitespace().next().map(fold).unwrap_or_default();
    TOTAL_WORDS.contains(&first.as_str())
}

/// The field a column's total is named by, if any.
fn field_of(header: &str) -> Option<String> {
    let own = snake(&without_parentheses(header), 48);
    match lexicon::column(&own) {
        Some("debit") => return Some("total_debits".into()),
        Some("credit") => return Some("total_credits".into()),
        // Rates add up to nothing: amounts under a tax column (`MwSt`, `IVA`) are the tax.
        Some("vat_rate") => return Some("vat".into()),
        Some(_) => return None,
        None => {}
    }
    if let Some((name, class)) = known(header) {
        return (class == Class::Amount).then(|| name.to_string());
    }
    (!own.is_empty() && own.starts_with(|c: char| c.is_ascii_alphabetic())).then_some(own)
}

/// The totals of `t`'s columns: from its last row or one of the three lines after it, the
/// first whose label is a total's.
pub fn column_totals(t: &Table, lines: &[String], style: DecimalStyle) -> Vec<ColumnTotal> {
    let Some(header) = lines.get(t.header_line).map(|l| segments(l)) else {
        return Vec::new();
    };
    if header.len() < 3 {
        return Vec::new();
    }
    let last = t.row_lines.last().copied().unwrap_or(t.header_line);
    let candidates = t
        .row_lines
        .iter()
        .copied()
        .chain((last + 1..lines.len()).take(3));
    for i in candidates {
        let Some(line) = lines.get(i) else { continue };
        // `Total des opérations :` keeps its colon apart from the amounts.
        let segs = segments(line);
        let Some((first, rest)) = segs.split_first() else {
            continue;
        };
        if !total_label(&first.text) || rest.is_empty() {
            continue;
        }
        let mut out = Vec::new();
        for s in rest {
            let raw = s.text.trim();
            let Some(value) = parse_number(&repair_digits(raw), style) else {
                return Vec::new();
            };
            // The column of numbers whose header's middle is nearest the amount's middle
            // (amounts sit under their header, aligned left, right or centred).
            let middle = |a: usize, b: usize| a + b;
            let at = middle(s.start, s.end);
            let Some(k) = (1..header.len())
                .filter(|k| t.types.get(*k) == Some(&"number"))
                .min_by_key(|k| {
                    header
                        .get(*k)
                        .map_or(usize::MAX, |h| middle(h.start, h.end).abs_diff(at))
                })
            else {
                continue;
            };
            let Some(h) = header.get(k) else { continue };
            if let Some(name) = field_of(&h.text)
                && !out.iter().any(|c: &ColumnTotal| c.name == name)
            {
                out.push(ColumnTotal {
                    name,
                    label: h.text.clone(),
                    raw: raw.to_string(),
                    value,
                    line: i,
                });
            }
        }
        return out;
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::tables::tables;
    use crate::analysis::values::DateOrder;

    fn totals_of(text: &str, style: DecimalStyle) -> Vec<(String, f64)> {
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        let ts = tables(&lines, style, DateOrder::DayFirst);
        let t = ts.first().expect("a table");
        column_totals(t, &lines, style)
            .into_iter()
            .map(|c| (c.name, c.value))
            .collect()
    }

    #[test]
    fn a_total_row_inside_the_table() {
        let text = "Pay and tax details        Pay            Tax deducted\n\
                    In previous employment     £0.00          £0.00\n\
                    In this employment         £41,250.00     £5,737.80\n\
                    Total for year             £41,250.00     £5,737.80\n";
        let got = totals_of(text, DecimalStyle::Point);
        assert_eq!(got.first(), Some(&("pay".to_string(), 41250.0)));
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn a_total_line_below_a_statement() {
        let text = "Date        Libellé                       Débit         Crédit\n\
                    02/09/2026  Loyer                         650,00\n\
                    05/09/2026  Salaire                                     2 460,55\n\
                    Total des opérations :                    653,46        2 460,55\n";
        assert_eq!(
            totals_of(text, DecimalStyle::Comma),
            vec![
                ("total_debits".to_string(), 653.46),
                ("total_credits".to_string(), 2460.55)
            ]
        );
    }

    #[test]
    fn an_item_tables_total_is_no_column_field() {
        let text = "Description        Qty     Unit price     Amount\n\
                    Widget             2       3.00           6.00\n\
                    Total items        2                      6.00\n";
        assert!(totals_of(text, DecimalStyle::Point).is_empty());
    }
}
