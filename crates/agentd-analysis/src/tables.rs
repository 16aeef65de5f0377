//! Tables written with spaces: a header line of at least three column names, then rows whose
//! pieces sit under those columns (`Pos.  Bezeichnung  Menge  Einzelpreis  Gesamt`). Cells are
//! assigned to the column whose span they overlap most, so empty cells (a bank statement's
//! "Paid in" on a debit row) stay empty instead of shifting the row.

use super::labels::{Segment, segments};
use super::lexicon;
use super::lexicon::snake;
use super::values::{DateOrder, DecimalStyle, parse_date, parse_number, repair_digits};
use serde_json::{Map, Value};

/// Most rows of a table kept.
pub const MAX_ROWS: usize = 200;
/// Most columns of a table.
const MAX_COLUMNS: usize = 10;

/// A table found in the text.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// 0-based line of the header.
    pub header_line: usize,
    /// The header as written (pieces joined by two spaces).
    pub header: String,
    /// Each column's header as written.
    pub labels: Vec<String>,
    /// The first row's cells as written (a one-row table is a row of label–value pairs).
    pub first_row: Vec<String>,
    /// Column names, snake_case (canonical where the lexicon knows the header).
    pub columns: Vec<String>,
    /// JSON type of each column: "number", "date" or "string".
    pub types: Vec<&'static str>,
    /// Rows as objects of column → value (at most [`MAX_ROWS`]).
    pub rows: Vec<Value>,
    /// Every row line, also those past [`MAX_ROWS`].
    pub row_lines: Vec<usize>,
    /// The cells as written of the first [`MAX_ROWS`] rows.
    pub raw_rows: Vec<Vec<String>>,
}

fn is_header(segs: &[Segment]) -> bool {
    segs.len() >= 3
        && segs.len() <= MAX_COLUMNS
        && segs.iter().all(|s| {
            let letters = s.text.chars().filter(|c| c.is_alphabetic()).count();
            let digits = s.text.chars().filter(|c| c.is_ascii_digit()).count();
            letters >= 1 && digits <= 2 && s.text.chars().count() <= 30 && !s.text.contains(':')
        })
}

fn is_rule(line: &str) -> bool {
    let t = line.trim();
    !t.is_empty()
        && t.chars()
            .all(|c| matches!(c, '-' | '=' | '_' | '*' | '·' | '─' | ' '))
}

impl Table {
    /// Rows naming a measured result (`Haemoglobin  13.8  g/dL`): (the row's first text cell,
    /// its result cell) for a table with a result column (`Result`, `Wert`, `Résultat`, …), or,
    /// when `results` (a lab report), the first number of rows whose first cell is text. At
    /// most 30 rows.
    pub fn named_results(&self, results: bool) -> Vec<(String, String)> {
        let result_col = self.columns.iter().position(|c| c == "result");
        if result_col.is_none() && !results {
            return Vec::new();
        }
        let Some(name_col) = self.types.iter().position(|t| *t == "string") else {
            return Vec::new();
        };
        self.raw_rows
            .iter()
            .take(30)
            .filter_map(|r| {
                let name = r.get(name_col)?.trim();
                if name.is_empty() || !name.chars().next().is_some_and(char::is_alphabetic) {
                    return None;
                }
                let value = match result_col {
                    Some(k) => r.get(k)?.trim().to_string(),
                    None => r
                        .iter()
                        .enumerate()
                        .filter(|(k, _)| self.types.get(*k) == Some(&"number"))
                        .map(|(_, c)| c.trim().to_string())
                        .find(|c| !c.is_empty())?,
                };
                (!value.is_empty()).then(|| (name.to_string(), value))
            })
            .collect()
    }
}

/// Every table of `lines`.
pub fn tables(lines: &[String], style: DecimalStyle, order: DateOrder) -> Vec<Table> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let header = segments(&lines[i]);
        if !is_header(&header) {
            i += 1;
            continue;
        }
        // Each column owns the span from its start to the next one's start.
        let spans: Vec<(usize, usize)> = header
            .iter()
            .enumerate()
            .map(|(k, s)| (s.start, header.get(k + 1).map_or(usize::MAX, |n| n.start)))
            .collect();
        let mut rows: Vec<Vec<String>> = Vec::new();
        let mut row_lines = Vec::new();
        let mut j = i + 1;
        while j < lines.len() {
            let line = &lines[j];
            if is_rule(line) && rows.is_empty() {
                j += 1;
                continue;
            }
            let segs = segments(line);
            let has_digit = line.chars().any(|c| c.is_ascii_digit());
            let pair_like = segs.len() == 1 && line.contains(':');
            if segs.len() < 2 || !has_digit || pair_like {
                break;
            }
            let mut cells = vec![String::new(); header.len()];
            for s in &segs {
                // A number goes under the header it overlaps most: amounts right-aligned under
                // right-aligned headers (`Current      YTD` over `2,496.00    51,168.00`)
                // reach back into the span of the column before.
                let under_header = parse_number(&repair_digits(&s.text), style)
                    .and_then(|_| {
                        header
                            .iter()
                            .enumerate()
                            .map(|(k, h)| {
                                (k, s.end.min(h.end).saturating_sub(s.start.max(h.start)))
                            })
                            .filter(|(_, overlap)| *overlap > 0)
                            .max_by_key(|(_, overlap)| *overlap)
                    })
                    .map(|(k, _)| k);
                let best = under_header.unwrap_or_else(|| {
                    spans
                        .iter()
                        .enumerate()
                        .map(|(k, (a, b))| {
                            let overlap = s.end.min(*b).saturating_sub(s.start.max(*a));
                            let distance = if overlap > 0 { 0 } else { s.start.abs_diff(*a) };
                            (k, overlap, distance)
                        })
                        .max_by(|x, y| x.1.cmp(&y.1).then(y.2.cmp(&x.2)))
                        .map(|(k, _, _)| k)
                        .unwrap_or(0)
                });
                if let Some(cell) = cells.get_mut(best) {
                    if !cell.is_empty() {
                        cell.push(' ');
                    }
                    cell.push_str(&s.text);
                }
            }
            rows.push(cells);
            row_lines.push(j);
            j += 1;
        }
        // A header none of whose columns is a known one needs several rows to be a table
        // (a letter head of three words over an address line is not).
        // Two known field labels over one row are labels over their values (`Data de emissão
        // Data de vencimento   Requisição` over `05-11-2026   05-12-2026   REQ-8812`).
        let known = header
            .iter()
            .any(|s| lexicon::column(&snake(&s.text, 40)).is_some())
            || (rows.len() == 1 && {
                let labels_known = header
                    .iter()
                    .filter(|s| super::labels::known(&s.text).is_some())
                    .count();
                // One known label will do when every column has one short cell below it
                // (`Personal-Nr.  Eintritt  Steuerklasse` over `4711  01.04.2019  III`).
                let filled = rows.first().is_some_and(|r| {
                    r.iter()
                        .all(|c| !c.trim().is_empty() && c.chars().count() <= 25)
                }) && segments(&lines[i + 1]).len() == header.len();
                labels_known >= 2 || (labels_known == 1 && header.len() >= 3 && filled)
            });
        if rows.is_empty() || (!known && rows.len() < 3) {
            i += 1;
            continue;
        }
        let mut columns: Vec<String> = Vec::new();
        for s in &header {
            let sn = snake(&s.text, 40);
            let name =
                lexicon::column(&sn)
                    .map(str::to_string)
                    .unwrap_or_else(|| match sn.as_str() {
                        "" => "column".into(),
                        // Words JSON Schema reads as keywords in a compact field map.
                        "type" | "items" | "properties" | "enum" | "format" | "required" => {
                            format!("{sn}_value")
                        }
                        _ => sn,
                    });
            let name = if columns.contains(&name) {
                format!("{name}_{}", columns.len() + 1)
            } else {
                name
            };
            columns.push(name);
        }
        let types: Vec<&'static str> = (0..columns.len())
            .map(|k| column_type(rows.iter().filter_map(|r| r.get(k)), style, order))
            .collect();
        let json_rows = rows
            .iter()
            .take(MAX_ROWS)
            .map(|r| {
                let mut m = Map::new();
                for (k, name) in columns.iter().enumerate() {
                    let cell = r.get(k).map(String::as_str).unwrap_or("");
                    m.insert(name.clone(), cell_value(cell, types[k], style, order));
                }
                Value::Object(m)
            })
            .collect();
        out.push(Table {
            header_line: i,
            header: header
                .iter()
                .map(|s| s.text.as_str())
                .collect::<Vec<_>>()
                .join("  "),
            labels: header.iter().map(|s| s.text.clone()).collect(),
            first_row: rows.first().cloned().unwrap_or_default(),
            raw_rows: rows.iter().take(MAX_ROWS).cloned().collect(),
            columns,
            types,
            rows: json_rows,
            row_lines,
        });
        i = j;
    }
    out
}

/// Whether a column header names the year to date (`YTD`, `Cumul`, `Acumulado`): its amounts
/// add up the year's, not the document's own.
pub fn year_to_date(label: &str) -> bool {
    const WORDS: [&str; 18] = [
        "ytd",
        "y_t_d",
        "year_to_date",
        "ytd_amount",
        "ytd_total",
        "cumul",
        "cumuls",
        "cumul_annuel",
        "cumule",
        "acumulado",
        "acumulados",
        "acumulado_anual",
        "kumuliert",
        "kumulativ",
        "jahressumme",
        "progressivo",
        "progressivi",
        "cumulativo",
    ];
    WORDS.contains(&snake(label, 40).as_str())
}

fn column_type<'a>(
    cells: impl Iterator<Item = &'a String>,
    style: DecimalStyle,
    order: DateOrder,
) -> &'static str {
    let (mut numbers, mut dates, mut filled) = (0, 0, 0);
    for c in cells.filter(|c| !c.trim().is_empty()) {
        filled += 1;
        let r = repair_digits(c);
        if parse_number(&r, style).is_some() {
            numbers += 1;
        } else if parse_date(&r, order).is_some() {
            dates += 1;
        }
    }
    if filled > 0 && numbers == filled {
        "number"
    } else if filled > 0 && dates == filled {
        "date"
    } else {
        "string"
    }
}

fn cell_value(cell: &str, ty: &str, style: DecimalStyle, order: DateOrder) -> Value {
    let c = cell.trim();
    if c.is_empty() {
        return Value::Null;
    }
    let r = repair_digits(c);
    match ty {
        "number" => parse_number(&r, style)
            .map(super::number_value)
            .unwrap_or(Value::Null),
        "date" => parse_date(&r, order)
            .map(|d| Value::String(d.to_string()))
            .unwrap_or(Value::Null),
        _ => Value::String(c.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lines(t: &str) -> Vec<String> {
        t.lines().map(str::to_string).collect()
    }

    #[test]
    fn rows_under_their_columns() {
        let t = "Pos.  Bezeichnung                 Menge   Einzelpreis    Gesamt\n\
                 1     Präzisionswelle Ø 25 mm      40      18,75 €       750,00 €\n\
                 2     Lagerbuchse PA6              120       2,10 €       252,00 €\n\
                 \n\
                 Nettobetrag: 1.482,00 €";
        let tabs = tables(&lines(t), DecimalStyle::Comma, DateOrder::DayFirst);
        assert_eq!(tabs.len(), 1);
        let tab = &tabs[0];
        assert_eq!(
            tab.columns,
            vec![
                "position",
                "description",
                "quantity",
                "unit_price",
                "amount"
            ]
        );
        assert_eq!(tab.rows[0]["description"], json!("Präzisionswelle Ø 25 mm"));
        assert_eq!(tab.rows[0]["amount"], json!(750));
        assert_eq!(tab.rows[1]["unit_price"], json!(2.1));
        assert_eq!(tab.row_lines, vec![1, 2]);
    }

    #[test]
    fn empty_cells_stay_empty() {
        let t = "Date        Description            Paid out    Paid in     Balance\n\
                 02 Oct      DD  THAMES WATER          38.20                 2,380.16\n\
                 15 Oct      BGC  SALARY                           2,710.44    4,076.43";
        let tabs = tables(&lines(t), DecimalStyle::Point, DateOrder::DayFirst);
        let rows = &tabs[0].rows;
        assert_eq!(rows[0]["debit"], json!(38.2));
        assert_eq!(rows[0]["credit"], Value::Null);
        assert_eq!(rows[1]["credit"], json!(2710.44));
        assert_eq!(rows[1]["balance"], json!(4076.43));
    }

    #[test]
    fn a_number_goes_under_the_header_it_sits_beneath() {
        let t = "EARNINGS            Rate      Hours       Current          YTD\n\
                 Regular Pay        31.20      80.00      2,496.00    51,168.00\n\
                 Gross Earnings                           2,556.00    52,083.00";
        let tabs = tables(&lines(t), DecimalStyle::Point, DateOrder::DayFirst);
        let rows = &tabs[0].rows;
        assert_eq!(rows[0]["current"], json!(2496));
        assert_eq!(rows[0]["ytd"], json!(51168));
        assert_eq!(rows[1]["current"], json!(2556));
        assert_eq!(rows[1]["ytd"], json!(52083));
        assert!(year_to_date(&tabs[0].labels[4]));
        assert!(!year_to_date(&tabs[0].labels[3]));
    }

    #[test]
    fn prose_and_letter_heads_are_no_table() {
        let t = "Thank you for your order.\nTotal: 12.00";
        assert!(tables(&lines(t), DecimalStyle::Point, DateOrder::DayFirst).is_empty());
        let t = "  SUPERMARKT  FR1SCHE  ECKE\n Hauptstr. l2  -  B0nn\n Te1: 0228 / 55 12 09";
        assert!(tables(&lines(t), DecimalStyle::Comma, DateOrder::DayFirst).is_empty());
    }
}
