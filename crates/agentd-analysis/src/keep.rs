//! Key fields first (issue 48, item 2): a **keep score** per candidate, from what the analysis
//! knows, and the **doubles** among a proposal's names.
//!
//! [`score`] adds up four things, each documented on its constant:
//! - the label's strength: how the value was found ([`Source`]; a `Label: value` line is the
//!   strongest, a table's rows the weakest — a table is this document's detail);
//! - whether the field is one of the detected kind's **core fields** ([`core_fields`]: the
//!   kind's own number, its issuer and addressee, its dates and amounts);
//! - its position: a label in the last tenth of the text that is no core field is the
//!   footer's detail (a phone line, a legal notice's amount);
//! - whether a schema of the org for that kind already has it — only the caller knows that
//!   (`org_has`); the analysis stays pure.
//!
//! A proposal keeps the fields at or above [`THRESHOLD`] and lists the others as "also found"
//! with [`Keep::reason`]. The weights were set on the dev part of `samples/eval` (which
//! documents: docs/evaluation.md, "Key fields first").

use super::{Candidate, DocKind, Source, ValueKind, labels::How, lexicon};

/// A field at or above this score is kept in the proposal.
pub const THRESHOLD: f64 = 0.4;

/// A `Label: value` (or `=`) line.
const SEPARATOR: f64 = 0.5;
/// Label and value apart by spaces.
const SPACED: f64 = 0.45;
/// The label alone on its line, the value below.
const NEXT_LINE: f64 = 0.4;
/// The letter head's first line, a pattern found anywhere (an IBAN, a date line).
const HEADING_OR_PATTERN: f64 = 0.45;
/// A table's rows: the document's detail, not a field every document of the kind has.
const TABLE: f64 = 0.15;
/// One of the kind's core fields.
const CORE: f64 = 0.4;
/// A contact or payment detail (`phone`, `address`, `bank`, `clerk`).
const DETAIL: f64 = -0.25;
/// A field in the last tenth of the text that is no core field.
const FOOTER: f64 = -0.05;
/// A schema of the org for the kind already has the field.
const ORG_HAS: f64 = 0.5;

/// A candidate's keep score and, when it is below [`THRESHOLD`], why it was left out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Keep {
    pub score: f64,
    /// `table`, `detail`, `footer` or `weak_label` when the field is left out.
    pub reason: Option<&'static str>,
}

impl Keep {
    /// The field stays in the proposal.
    pub fn kept(&self) -> bool {
        self.reason.is_none()
    }
}

/// The reason in words, for the reviewer.
pub fn why(reason: &str) -> &'static str {
    match reason {
        "table" => "a table's rows: this document's detail, not a field of every document like it",
        "detail" => "a contact or payment detail, not a key field of this kind",
        "footer" => "found at the end of the document and not a core field of this kind",
        "double" => "another name for a field the proposal has",
        _ => "a weak label, not a core field of this kind",
    }
}

/// Names (or name endings) of contact and payment details.
const DETAILS: &[&str] = &[
    "phone",
    "telephone",
    "fax",
    "email",
    "website",
    "address",
    "bank",
    "clerk",
    "server",
    "till",
    "laboratory",
    "description",
    "comment",
    "transfer_payment",
];

fn detail(name: &str) -> bool {
    DETAILS
        .iter()
        .any(|d| name == *d || name.ends_with(&format!("_{d}")))
}

/// The fields every document of `kind` has: its own number, its issuer and addressee, and
/// the dates and amounts of the kind (from the expected labels of the dev part, as notions,
/// not words of a document).
pub fn core_fields(kind: DocKind) -> Vec<&'static str> {
    let mut out = vec![kind.issuer_field(), kind.number_field()];
    out.extend(kind.addressee_field());
    let own: &[&str] = match kind {
        DocKind::Invoice | DocKind::UtilityBill => &[
            "invoice_date",
            "date",
            "due_date",
            "total",
            "amount_due",
            "net_amount",
            "vat",
            "period_start",
            "period_end",
            "customer_number",
            "account_number",
        ],
        DocKind::CreditNote => &[
            "date",
            "issue_date",
            "total",
            "net_amount",
            "vat",
            "original_invoice",
            "customer_number",
        ],
        DocKind::Receipt => &[
            "date",
            "total",
            "amount_paid",
            "change",
            "vat",
            "card_last_four",
            "item_count",
            "payment_method",
            "vat_id",
            "transaction_number",
        ],
        DocKind::BankStatement => &[
            "iban",
            "account_number",
            "opening_balance",
            "closing_balance",
            "total_credits",
            "total_debits",
            "period_start",
            "period_end",
            "statement_date",
        ],
        DocKind::Payslip => &[
            "employee_number",
            "gross_pay",
            "net_pay",
            "total_deductions",
            "income_tax",
            "payment_date",
            "period_start",
            "period_end",
        ],
        DocKind::LabReport => &[
            "patient_name",
            "patient_id",
            "sample_id",
            "reported",
            "collected",
        ],
        DocKind::PurchaseOrder => &["supplier", "order_date", "delivery_date", "total"],
        DocKind::DeliveryNote => &["carrier", "shipper", "delivery_date", "order_reference"],
        DocKind::BillOfLading => &[
            "shipper",
            "consignee",
            "vessel",
            "voyage_number",
            "port_of_loading",
            "port_of_discharge",
        ],
        DocKind::InsuranceClaim => &["policy_number", "start_date", "end_date", "premium"],
        DocKind::TaxForm => &["tax_year", "tax_id", "income_tax", "tax_withheld"],
        DocKind::Contract | DocKind::Other => &["date", "total"],
    };
    out.extend(own);
    out
}

/// The keep score of `c` on a document of `kind` whose last candidate is on line
/// `last_line`; `org_has` when a schema of the org for the kind already has the field.
pub fn score(c: &Candidate, kind: DocKind, last_line: usize, org_has: bool) -> Keep {
    let core = core_fields(kind).contains(&c.name.as_str());
    let mut s = match c.source {
        Source::Label(How::Separator) => SEPARATOR,
        Source::Label(How::Spaced) => SPACED,
        Source::Label(How::NextLine) => NEXT_LINE,
        Source::Heading | Source::Pattern => HEADING_OR_PATTERN,
        Source::Table => TABLE,
    };
    let mut reason = match c.kind {
        ValueKind::List => "table",
        _ => "weak_label",
    };
    if core {
        s += CORE;
    }
    if !core && detail(&c.name) {
        s += DETAIL;
        reason = "detail";
    }
    if !core && c.kind != ValueKind::List && last_line >= 10 && c.line * 10 > last_line * 9 {
        s += FOOTER;
        if reason == "weak_label" {
            reason = "footer";
        }
    }
    if org_has {
        s += ORG_HAS;
    }
    Keep {
        score: s,
        reason: (s < THRESHOLD).then_some(reason),
    }
}

/// Names that mean one concept, whatever the language (the first is the canonical one).
const SYNONYMS: &[&[&str]] = &[
    &["date", "datum", "fecha", "data"],
    &["line_items", "description", "line", "items"],
];

fn synonym_group(name: &str) -> Option<usize> {
    SYNONYMS.iter().position(|g| g.contains(&name))
}

/// The doubles among `names`: pairs `(double, kept)` where `double` is another name for
/// `kept` — two names of one synonym group (`datum` beside `date`, `description` beside
/// `line_items`), or a name that is another's with `_number`/`_no`/`_nr` or a word of the
/// document's language after it (`bill_of_lading` beside `bill_of_lading_number`, `iban`
/// beside `iban_accredito`) when both hold the same value, or when only the shorter is found
/// and the lexicon calls it an identifier. `value` gives a name's value when
/// the analysis found it. The name kept is the canonical one of a group, the one with
/// `_number`, or the shorter (the lexicon's) one; each double is listed once.
pub fn doubles(names: &[String], value: &dyn Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let taken = |out: &Vec<(String, String)>, n: &str| out.iter().any(|(d, _)| d == n);
    for (i, a) in names.iter().enumerate() {
        for b in names.iter().skip(i + 1) {
            if a == b || taken(&out, a) || taken(&out, b) {
                continue;
            }
            if let (Some(ga), Some(gb)) = (synonym_group(a), synonym_group(b))
                && ga == gb
            {
                let pos = |n: &str| SYNONYMS[ga].iter().position(|s| *s == n).unwrap_or(0);
                let (d, k) = if pos(a) < pos(b) { (b, a) } else { (a, b) };
                out.push((d.clone(), k.clone()));
                continue;
            }
            let (short, long) = if a.len() < b.len() { (a, b) } else { (b, a) };
            let Some(rest) = long
                .strip_prefix(short.as_str())
                .and_then(|r| r.strip_prefix('_'))
            else {
                continue;
            };
            if rest.contains('_') {
                continue;
            }
            // A name no candidate holds that adds a word to an identifier's (`iban_accredito`
            // beside `iban`) names the same identifier.
            let identifier = lexicon::class_of(short) == Some(lexicon::Class::Identifier);
            let same = match (value(short), value(long)) {
                (Some(x), Some(y)) => x == y,
                (Some(_), None) => identifier,
                _ => false,
            };
            if ["number", "no", "nr"].contains(&rest) && (same || value(short).is_none()) {
                out.push((short.clone(), long.clone()));
            } else if same {
                out.push((long.clone(), short.clone()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cand(name: &str, source: Source, kind: ValueKind, line: usize) -> Candidate {
        Candidate {
            name: name.into(),
            label: name.into(),
            value: json!("x"),
            raw: "x".into(),
            kind,
            item_fields: Vec::new(),
            line,
            source,
        }
    }

    const SEP: Source = Source::Label(How::Separator);

    #[test]
    fn a_core_field_is_kept_wherever_it_is() {
        let c = cand("total", SEP, ValueKind::Number, 40);
        let k = score(&c, DocKind::Invoice, 40, false);
        assert!(k.kept(), "{k:?}");
        assert!(
            k.score
                > score(
                    &cand("x", SEP, ValueKind::Text, 5),
                    DocKind::Invoice,
                    40,
                    false
                )
                .score
        );
    }

    #[test]
    fn tables_details_and_footers_are_also_found_with_their_reason() {
        let t = score(
            &cand("line_items", Source::Table, ValueKind::List, 10),
            DocKind::Invoice,
            40,
            false,
        );
        assert_eq!(t.reason, Some("table"));
        let p = score(
            &cand("phone", SEP, ValueKind::Text, 2),
            DocKind::Invoice,
            40,
            false,
        );
        assert_eq!(p.reason, Some("detail"));
        let a = score(
            &cand("supplier_address", SEP, ValueKind::Text, 2),
            DocKind::Invoice,
            40,
            false,
        );
        assert_eq!(a.reason, Some("detail"));
        let f = score(
            &cand(
                "capital_social",
                Source::Label(How::NextLine),
                ValueKind::Text,
                39,
            ),
            DocKind::Receipt,
            40,
            false,
        );
        assert_eq!(f.reason, Some("footer"));
        // a plain label in the body stays
        assert!(
            score(
                &cand("heffingskortingen", SEP, ValueKind::Number, 12),
                DocKind::TaxForm,
                40,
                false
            )
            .kept()
        );
        // a detail that is the kind's core field stays (the bank on a statement)
        assert!(
            score(
                &cand("bank", Source::Heading, ValueKind::Text, 1),
                DocKind::BankStatement,
                40,
                false
            )
            .kept()
        );
    }

    #[test]
    fn what_the_orgs_schema_has_is_kept() {
        let c = cand("line_items", Source::Table, ValueKind::List, 10);
        assert!(!score(&c, DocKind::Invoice, 40, false).kept());
        assert!(score(&c, DocKind::Invoice, 40, true).kept());
    }

    #[test]
    fn doubles_are_merged_into_one_name() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let none = |_: &str| None;
        assert_eq!(
            doubles(&names(&["date", "total", "datum"]), &none),
            vec![("datum".to_string(), "date".to_string())]
        );
        assert_eq!(
            doubles(&names(&["bill_of_lading", "bill_of_lading_number"]), &none),
            vec![(
                "bill_of_lading".to_string(),
                "bill_of_lading_number".to_string()
            )]
        );
        assert_eq!(
            doubles(&names(&["description", "line_items"]), &none),
            vec![("description".to_string(), "line_items".to_string())]
        );
        let iban = |_: &str| Some("IT60X0542811101000000123456".to_string());
        assert_eq!(
            doubles(&names(&["iban", "iban_accredito"]), &iban),
            vec![("iban_accredito".to_string(), "iban".to_string())]
        );
        // two names that only share a first word, with different values, are two fields
        let v = |n: &str| Some(n.to_string());
        assert!(
            doubles(
                &names(&["total", "total_vat", "invoice_number", "invoice_date"]),
                &v
            )
            .is_empty()
        );
        // a name no candidate holds beside an identifier's: the same identifier
        let only_iban = |n: &str| (n == "iban").then(|| "DE89".to_string());
        assert_eq!(
            doubles(&names(&["iban", "iban_accredito"]), &only_iban),
            vec![("iban_accredito".to_string(), "iban".to_string())]
        );
        let only_total = |n: &str| (n == "total").then(|| "65.4".to_string());
        assert!(doubles(&names(&["total", "total_vat"]), &only_total).is_empty());
        // a number beside a name of another value is no double
        let v2 = |n: &str| Some(if n == "order" { "A" } else { "B" }.to_string());
        assert!(doubles(&names(&["order", "order_date"]), &v2).is_empty());
    }
}
