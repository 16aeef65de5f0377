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
pub fn total_label(label: &str) -> bool {
    let t = label.trim().trim_end_matches(':').trim();
    let first = t.split_whitespace().next().map(fold).unwrap_or_default();
    TOTAL_WORDS.contains(&first.as_str())
}

/// The field a column's total is named by, if any.
fn field_of(header: &str) -> Option<String> {
    let own = snake(&without_parentheses(header), 48);
    // A period's and the year's columns (`Current   YTD`) name no field: the row's label does.
    if super::tables::year_to_date(header)
        || matches!(own.as_str(), "current" | "this_period" | "current_period")
    {
        return None;
    }
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

/// Words that make a statement's row a balance (`SOLDE CRÉDITEUR AU 30/09/2026`, `Saldo
/// anterior`, `Opening balance`).
const BALANCE_WORDS: [&str; 5] = ["solde", "saldo", "balance", "kontostand", "saldi"];

/// A balance written as a row of a statement's table: the row's index, whether it opens the
/// statement (before every movement) or closes it (after them), its text, the amount as
/// written and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct BalanceRow {
    pub row: usize,
    pub opening: bool,
    pub label: String,
    pub raw: String,
    pub value: f64,
}

/// A row's text cells (neither a number nor empty) and its number cells with their column.
fn row_cells(t: &Table, k: usize, style: DecimalStyle) -> (Vec<String>, Vec<(usize, String, f64)>) {
    let (mut text, mut numbers) = (Vec::new(), Vec::new());
    for (c, cell) in t.raw_rows.get(k).into_iter().flatten().enumerate() {
        let cell = cell.trim();
        if cell.is_empty() {
            continue;
        }
        match parse_number(&repair_digits(cell), style) {
            Some(v) if t.types.get(c) != Some(&"date") => numbers.push((c, cell.to_string(), v)),
            _ => text.push(cell.to_string()),
        }
    }
    (text, numbers)
}

/// Whether row `k` of `t` is a total's (`TOTAL DES MOUVEMENTS   1 214,27   2 631,06`).
pub fn total_row(t: &Table, k: usize, style: DecimalStyle) -> bool {
    let (text, numbers) = row_cells(t, k, style);
    !numbers.is_empty() && text.iter().any(|c| total_label(c))
}

/// The balances written as rows of a statement's table, one amount each: those before the
/// first movement open it, those after the last close it (a running balance between is
/// neither). A balance in the debit column is below zero.
pub fn balance_rows(t: &Table, style: DecimalStyle) -> Vec<BalanceRow> {
    let balance = |k: usize| -> Option<BalanceRow> {
        let (text, numbers) = row_cells(t, k, style);
        let [(column, raw, value)] = numbers.as_slice() else {
            return None;
        };
        let label = text.join(" ");
        let words = fold(&label);
        let named = words
            .split(|c: char| !c.is_alphanumeric())
            .any(|w| BALANCE_WORDS.contains(&w));
        let debit = t.columns.get(*column).is_some_and(|c| c == "debit");
        named.then(|| BalanceRow {
            row: k,
            opening: false,
            label,
            raw: raw.clone(),
            value: if debit { -value.abs() } else { *value },
        })
    };
    // Each row read once: its balance, if it is one.
    let mut balances: Vec<Option<BalanceRow>> = (0..t.raw_rows.len()).map(balance).collect();
    let movement =
        |k: usize| balances.get(k).is_some_and(Option::is_none) && !total_row(t, k, style);
    let (Some(first), Some(last)) = (
        (0..balances.len()).find(|k| movement(*k)),
        (0..balances.len()).rev().find(|k| movement(*k)),
    ) else {
        return Vec::new();
    };
    let closing = balances.split_off(last + 1);
    balances
        .into_iter()
        .take(first)
        .flatten()
        .map(|b| BalanceRow { opening: true, ..b })
        .chain(closing.into_iter().flatten())
        .collect()
}

/// Amounts that are parts of a sum written below them: `k ≥ 2` amounts on consecutive lines
/// (at most one line between two of them) whose values add up, to the cent, to the amount on
/// the line right after them (`Krankenversicherung 341,78` … `Arbeitslosenversicherung 52,74`
/// over `Summe SV-Beiträge 844,82`). `amounts` are `(0-based line, value)` in any order;
/// returns the lines of the parts. The sum is the field a reader files; its parts are the
/// document's breakdown of it, as a table's rows are. At most [`MAX_PARTS`] parts a sum; each
/// sum's parts are one group, in line order.
pub fn parts_of_sums(amounts: &[(usize, f64)]) -> Vec<Vec<usize>> {
    let mut sorted: Vec<(usize, f64)> = amounts
        .iter()
        .copied()
        .filter(|(_, v)| v.is_finite())
        .collect();
    sorted.sort_by_key(|(l, _)| *l);
    sorted.dedup_by_key(|(l, _)| *l);
    let mut parts = Vec::new();
    for (t, &(line, total)) in sorted.iter().enumerate() {
        if total.abs() < 0.005 {
            continue;
        }
        // The amounts right above, nearest first, while no more than one line separates two.
        let mut above: Vec<(usize, f64)> = Vec::new();
        let mut next = line;
        for &(l, v) in sorted.get(..t).unwrap_or_default().iter().rev() {
            if next - l > 2 || above.len() == MAX_PARTS {
                break;
            }
            above.push((l, v));
            next = l;
        }
        let (mut sum, mut sum_abs) = (0.0, 0.0);
        for (k, &(_, v)) in above.iter().enumerate() {
            sum += v;
            sum_abs += v.abs();
            let adds_up = (sum - total).abs() < 0.005 || (sum_abs - total.abs()).abs() < 0.005;
            if k >= 1 && adds_up {
                let mut group: Vec<usize> = above.iter().take(k + 1).map(|(l, _)| *l).collect();
                group.reverse();
                parts.push(group);
                break;
            }
        }
    }
    parts
}

/// Whether a (snake) label speaks of a tax (`recargos_e_impuestos`, `assurantiebelasting`,
/// `vat_20`, `mwst`): the second half of a net amount and its tax.
pub fn tax_words(snake: &str) -> bool {
    const STEMS: [&str; 12] = [
        "tax",
        "vat",
        "iva",
        "tva",
        "mwst",
        "ust",
        "steuer",
        "impost",
        "impuest",
        "belasting",
        "btw",
        "gst",
    ];
    // Compounds end with theirs (`versicherungsteuer`, `assurantiebelasting`, `salestax`).
    const ENDS: [&str; 3] = ["steuer", "belasting", "tax"];
    snake
        .split('_')
        .any(|w| STEMS.iter().any(|s| w.starts_with(s)) || ENDS.iter().any(|s| w.ends_with(s)))
}

/// Whether a (snake) label names a total or subtotal anywhere in it (`subtotal`,
/// `total_hors_tva`, `zwischensumme`, `summe_steuern`): a sum of its own, never a mere part.
pub fn sum_words(snake: &str) -> bool {
    // Inside words too (`zwischensumme`), but not the bare `sum` (`consumo`).
    TOTAL_WORDS
        .iter()
        .filter(|w| w.len() > 3)
        .any(|w| snake.contains(w))
}

/// The most amounts one sum is checked against.
pub const MAX_PARTS: usize = 12;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::tables;
    use crate::values::DateOrder;

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

    #[test]
    fn amounts_that_add_up_to_the_next_line_are_its_parts() {
        // A payslip's social insurance block: four contributions over their sum.
        let amounts = [
            (20, 341.78),
            (21, 73.02),
            (22, 377.28),
            (23, 52.74),
            (24, 844.82),
            (26, 2673.87),
        ];
        assert_eq!(parts_of_sums(&amounts), vec![vec![20, 21, 22, 23]]);
        // Deductions written negative add up by their size as well.
        assert_eq!(
            parts_of_sums(&[(3, 100.0), (4, -20.0), (5, 120.0)]),
            vec![vec![3, 4]]
        );
    }

    #[test]
    fn amounts_that_do_not_add_up_or_stand_apart_are_no_parts() {
        // One amount above is a repetition, not a breakdown.
        assert!(parts_of_sums(&[(1, 50.0), (2, 50.0)]).is_empty());
        assert!(parts_of_sums(&[(1, 10.0), (2, 20.0), (3, 31.0)]).is_empty());
        // Three lines apart: another block.
        assert!(parts_of_sums(&[(1, 10.0), (5, 20.0), (6, 30.0)]).is_empty());
        assert!(parts_of_sums(&[(1, 0.0), (2, 0.0), (3, 0.0)]).is_empty());
        assert!(parts_of_sums(&[(1, f64::NAN), (2, 1.0), (3, 1.0)]).is_empty());
    }

    #[test]
    fn tax_words_in_several_languages() {
        for l in [
            "recargos_e_impuestos",
            "assurantiebelasting",
            "vat_20",
            "mwst",
            "tva",
        ] {
            assert!(tax_words(l), "{l}");
        }
        for l in [
            "august_payment",
            "prima_neta",
            "grundpreis",
            "vencimento_base",
        ] {
            assert!(!tax_words(l), "{l}");
        }
    }
}
