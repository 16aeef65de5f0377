//! A candidate from a label–value pair ([`from_pair`]), in steps: the pair's reading (its
//! label, the label's own name, what the lexicon knows of it, the value as written), the
//! value's reading (a code, a date, a boolean, a number and its unit), and its name (the
//! lexicon's, renamed for the document's kind).

use crate::glossary;
use crate::labels::{self, Pair};
use crate::lexicon::{self, Class};
use crate::values::{self, DateOrder, DecimalStyle};
use crate::{
    Candidate, DocKind, MAX_VALUE_CHARS, Source, ValueKind, clip, column_cut, date_name,
    expand_number, identifier_name, number_value, own_name, party_name, periods, refund_words,
    without_included, without_trailing_date, without_trailing_phone,
};
use serde_json::Value;

/// A candidate from a label–value pair: its name, kind and normalised value.
pub(crate) fn from_pair(
    p: &Pair,
    kind: DocKind,
    style: DecimalStyle,
    order: DateOrder,
    language: Option<&str>,
) -> Option<Candidate> {
    let r = Reading::new(p, kind, style, order, language)?;
    let (value, vkind) = r.value();
    let name = r.name(vkind);
    Some(Candidate {
        name,
        label: clip(&r.label, 60),
        value,
        raw: r.raw,
        kind: vkind,
        item_fields: Vec::new(),
        line: p.line + 1,
        source: Source::Label(p.how),
    })
}

/// A pair as the steps read it: its label, the label's own name and what the lexicon knows
/// of it, the value as written and with its digits repaired.
struct Reading {
    kind: DocKind,
    style: DecimalStyle,
    order: DateOrder,
    /// The label without its punctuation, enumeration, date and "included".
    label: String,
    /// The label's own name (snake_case).
    own: String,
    /// The canonical name and class the label has, when known.
    known: Option<(&'static str, Class)>,
    /// The label's name in the canonical language when the lexicon does not list it but the
    /// glossary translates it ([`crate::glossary::canonical`]) to a name the lexicon does not
    /// know either.
    translated: Option<String>,
    class: Option<Class>,
    /// The value as written, up to a column gap, without what follows a party's name.
    raw: String,
    /// `raw` with its digits' OCR repairs.
    repaired: String,
}

impl Reading {
    /// The pair's reading; none when it has no value or its label no name.
    fn new(
        p: &Pair,
        kind: DocKind,
        style: DecimalStyle,
        order: DateOrder,
        language: Option<&str>,
    ) -> Option<Self> {
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
        let mut known = known(&own, &label, kind);
        let mut translated = None;
        // The English label the lexicon knows is read as that label (its class too).
        match known
            .is_none()
            .then(|| glossary::canonical(&own, language))
            .flatten()
        {
            Some(glossary::Canonical::Known(name, class)) => known = Some((name, class)),
            Some(glossary::Canonical::English(name)) => translated = Some(name),
            None => {}
        }
        let class = known.map(|k| k.1);
        let raw = without_what_follows_a_name(raw, class, &own);
        let repaired = values::repair_digits(&raw);
        Some(Self {
            kind,
            style,
            order,
            label,
            own,
            known,
            translated,
            class,
            raw,
            repaired,
        })
    }

    /// The value normalised and its kind.
    fn value(&self) -> (Value, ValueKind) {
        let raw = &self.raw;
        let class = self.class;
        let date = self.date();
        let unit_first = self.number_before_unit();
        let measured =
            matches!(class, Some(Class::Amount | Class::Quantity)) || unit_first.is_some();
        let number = self.number(unit_first, measured);
        let is_identifier = self.is_identifier(measured);
        if let Some(code) = self.named_code() {
            (
                Value::String(values::repair_code(&code)),
                ValueKind::Identifier,
            )
        } else if let Some(coded) = self.dated_code() {
            (
                Value::String(values::repair_code(&coded)),
                ValueKind::Identifier,
            )
        } else if is_identifier && date.is_none() || class == Some(Class::Identifier) {
            (Value::String(self.code()), ValueKind::Identifier)
        } else if let Some(d) = date {
            (Value::String(d.to_string()), ValueKind::Date)
        } else if let Some(b) = values::parse_bool(raw) {
            (Value::Bool(b), ValueKind::Boolean)
        } else if let Some(n) =
            number.filter(|_| !matches!(class, Some(Class::Party | Class::Text)))
        {
            (number_value(self.amount(n)), ValueKind::Number)
        } else if labels::looks_like_code(raw) && raw.split_whitespace().count() == 1 {
            (Value::String(raw.clone()), ValueKind::Identifier)
        } else {
            (Value::String(raw.clone()), ValueKind::Text)
        }
    }

    /// The date the value is or says.
    fn date(&self) -> Option<chrono::NaiveDate> {
        let (raw, repaired, order, class) = (&self.raw, &self.repaired, self.order, self.class);
        values::parse_date(raw, order)
            .or_else(|| values::parse_date(repaired, order))
            // A date label's value may say more than the date (`KW 46/2026, spätestens
            // 13.11.2026`): its one date.
            .or_else(|| {
                let is_date =
                    class == Some(Class::Date) || (class.is_none() && date_name(&self.own));
                match values::dates_in(repaired, order).as_slice() {
                    [d] if is_date => d.readings.first().copied(),
                    _ => None,
                }
            })
            // A value that opens with a date and goes on in words says where or how
            // (`09/12/2026 au dépôt de Lyon-Gerland`): the date, under a label the lexicon does
            // not know as something else.
            .or_else(|| {
                let first = values::dates_in(repaired, order).into_iter().next()?;
                let rest = repaired.get(first.end..)?.trim_start();
                let opens = first.start == 0
                    && matches!(class, None | Some(Class::Date))
                    && rest.starts_with(|c: char| c.is_lowercase());
                opens.then(|| first.readings.first().copied()).flatten()
            })
    }

    /// `1 284 kWh (index relevé …)`, `150 € por siniestro`: a number and its unit open the
    /// value of a label the lexicon does not know. The number before the first other
    /// character (`1 284` of `1 284 kWh (index relevé 48 912 → 50 196)`), when a unit follows
    /// it.
    fn number_before_unit(&self) -> Option<f64> {
        if self.class.is_some() {
            return None;
        }
        let repaired = &self.repaired;
        let at = repaired.find(|c: char| !(c.is_ascii_digit() || " .,".contains(c)))?;
        let n = values::parse_number(repaired.get(..at)?.trim(), self.style)?;
        let unit = repaired.get(at..)?.split_whitespace().next()?;
        unit_word(&unit.trim_end_matches([',', '.', ';']).to_lowercase()).then_some(n)
    }

    /// The number the value is: also one that opens a measured value (an amount, a quantity, a
    /// number before its unit), but not a code or words with digits.
    fn number(&self, unit_first: Option<f64>, measured: bool) -> Option<f64> {
        let (raw, repaired, style) = (&self.raw, &self.repaired, self.style);
        values::parse_number(raw, style)
            .or_else(|| values::parse_number(repaired, style))
            .or_else(|| {
                measured
                    .then(|| values::leading_number(repaired, style).or(unit_first))
                    .flatten()
            })
            .filter(|_| !self.lettered_code() && !self.wordy(unit_first.is_some()))
    }

    /// `47781203-K`, `B-17552209`: a code with a letter after a dash is no negative number.
    fn lettered_code(&self) -> bool {
        let raw = &self.raw;
        labels::looks_like_code(raw)
            && raw.split_whitespace().count() == 1
            && raw.contains(['-', '/'])
            && raw.chars().any(char::is_alphabetic)
            && values::currency_of(raw).is_none()
    }

    /// `VW Golf 1.5 TSI`, `OL-SO 482`: words before the digits under a label the lexicon does
    /// not know make a name or a code, not a number (a currency is no word here).
    fn wordy(&self, unit_first: bool) -> bool {
        self.class.is_none() && !unit_first && {
            let head: String = self
                .raw
                .chars()
                .take_while(|c| !c.is_ascii_digit())
                .collect();
            let words: Vec<&str> = head
                .split(|c: char| !c.is_alphabetic())
                .filter(|w| !w.is_empty())
                .collect();
            !words.is_empty() && words.iter().all(|w| values::currency_of(w).is_none())
        }
    }

    /// Whether the value numbers something: under an identifier's label, or digits too many
    /// for an amount.
    fn is_identifier(&self, measured: bool) -> bool {
        let repaired = &self.repaired;
        let long_digits =
            digits_only(repaired) && (repaired.len() >= 7 || repaired.starts_with('0'));
        // `6 014 227 893`, `24 110 558 902 417`: ten digits or more in groups, with no decimals or
        // currency, number an account or a meter; no amount on a document is that large.
        let grouped_digits = {
            let groups: Vec<&str> = repaired.split(' ').collect();
            groups.len() >= 2
                && groups.iter().all(|g| !g.is_empty() && digits_only(g))
                && groups.iter().map(|g| g.len()).sum::<usize>() >= 10
        };
        self.class == Some(Class::Identifier)
            || (self.class.is_none() && identifier_name(&self.own))
            || long_digits
            || (grouped_digits && !measured)
    }

    /// `CMD-26-1554 du 29/10/2026` under a label the lexicon does not know: the code.
    fn dated_code(&self) -> Option<String> {
        let coded = without_trailing_date(&self.raw, self.order);
        let dated_code = self.class.is_none()
            && coded != self.raw
            && labels::looks_like_code(&coded)
            && coded.split_whitespace().count() == 1;
        dated_code.then_some(coded)
    }

    /// `Rechnung RE-2026-4471 vom 28.10.2026` under `Bezug`: the number a known label names in
    /// the value.
    fn named_code(&self) -> Option<String> {
        self.class
            .is_none()
            .then(|| {
                let c = without_trailing_date(&self.raw, self.order);
                let (head, code) = c.trim().rsplit_once(' ')?;
                let numbered = labels::known(head).is_some_and(|(_, k)| k == Class::Identifier);
                (numbered
                    && labels::looks_like_code(code)
                    && code.chars().any(|c| c.is_ascii_digit()))
                .then(|| code.to_string())
            })
            .flatten()
    }

    /// A code keeps its letters; its digit groups get their OCR repairs (`O7731` → `07731`,
    /// `GPN-2O26-1147` → `GPN-2026-1147`); a date after it is the date of what it numbers
    /// (`F-26-0917 du 20 octobre 2026`).
    fn code(&self) -> String {
        // `#58312`: the sign says "number", it is not part of it.
        let unsigned = |s: &str| {
            s.strip_prefix('#')
                .filter(|r| r.starts_with(|c: char| c.is_ascii_alphanumeric()))
                .map_or_else(|| s.to_string(), str::to_string)
        };
        if digits_only(&self.repaired) {
            self.repaired.clone()
        } else {
            unsigned(&values::repair_code(&without_trailing_date(
                &self.raw, self.order,
            )))
        }
    }

    /// A number with the sign it has on the document: a deduction or a tax printed negative
    /// (`Total des retenues  -412,51`) is an amount; only a balance keeps its sign.
    fn amount(&self, n: f64) -> f64 {
        // Under a label the lexicon does not know, only a balance or a result keeps its sign
        // (`Heffingskortingen € -3.987`, `Déjà réglé -380,00` are amounts).
        let signed = self.known.map_or_else(
            || {
                self.own.split('_').any(|w| {
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
        let n = if values::account_side(&self.raw) == Some(false) {
            -n.abs()
        } else {
            n
        };
        // A credit note prints what it credits below zero (`Base imponible: -178,00 €`): the
        // sign is the document's.
        if signed
            || self.kind == DocKind::CreditNote
            || !matches!(self.class, Some(Class::Amount) | None)
        {
            n
        } else {
            n.abs()
        }
    }

    /// The candidate's name: the lexicon's (or the label's own), renamed for the value and
    /// the document's kind.
    fn name(&self, vkind: ValueKind) -> String {
        let mut name = match self.known {
            Some((canonical, _)) => canonical.to_string(),
            None => match &self.translated {
                Some(t) => t.clone(),
                None => expand_number(&self.own),
            },
        };
        self.rate_name(&mut name);
        self.kind_name(&mut name);
        self.addressee_name(&mut name);
        self.gross_pay_name(&mut name);
        // `Freight: PREPAID` says who pays the freight, not how much.
        if name == "shipping_cost" && vkind == ValueKind::Text {
            name = "freight_terms".into();
        }
        self.policy_name(&mut name);
        if name.starts_with(|c: char| c.is_ascii_digit()) {
            name = format!("field_{name}");
        }
        name
    }

    /// `VAT: 20 %` is a rate, not an amount.
    fn rate_name(&self, name: &mut String) {
        if matches!(name.as_str(), "vat" | "tax_amount") && self.raw.contains('%') {
            *name = if name == "vat" {
                "vat_rate".into()
            } else {
                "tax_rate".into()
            };
        }
    }

    /// A field's name on the document's kind.
    fn kind_name(&self, name: &mut String) {
        let kind = self.kind;
        // On an invoice, the date it was issued is the invoice's date, and the holder of the
        // contract billed (`Titular`) its customer.
        if matches!(kind, DocKind::Invoice | DocKind::UtilityBill) {
            match name.as_str() {
                "issue_date" => *name = "invoice_date".into(),
                "account_holder" => *name = "customer".into(),
                _ => {}
            }
        }
        // On a credit note, an invoice's number is the invoice it credits, and its total credit
        // (`Total credit:`) is its total, not a statement's sum of credits.
        if kind == DocKind::CreditNote && name == "invoice_number" {
            *name = "original_invoice".into();
        }
        if kind == DocKind::CreditNote && name == "total_credits" {
            *name = "total".into();
        }
        // On an invoice or a credit note, whom it is sent to is the customer.
        if matches!(kind, DocKind::Invoice | DocKind::CreditNote) && name == "consignee" {
            *name = "customer".into();
        }
        // On a statement, the bank's client is the account's holder.
        if kind == DocKind::BankStatement && name == "customer" {
            *name = "account_holder".into();
        }
        if kind == DocKind::Payslip && name == "amount_due" {
            *name = "net_pay".into();
        }
        // Pay words name a payslip's fields only (`Total ilíquido` on an invoice is its own
        // total), and on a payslip a gross total is the gross pay (`Gesamt-Brutto`).
        if kind != DocKind::Payslip
            && matches!(name.as_str(), "gross_pay" | "net_pay" | "total_deductions")
        {
            *name = expand_number(&self.own);
        }
        // A receipt's `Subtotal` is what the items add up to (tax and service may be in it or
        // follow), not a net amount.
        if kind == DocKind::Receipt && name == "net_amount" && self.own.starts_with("sub") {
            *name = "subtotal".into();
        }
        // A tax form has no total: what it asks to pay is the amount due.
        if kind == DocKind::TaxForm && name == "total" {
            *name = "amount_due".into();
        }
    }

    /// `Aan:`, `To:`, `An:` name whom the document is addressed to.
    fn addressee_name(&self, name: &mut String) {
        if self.known.is_none()
            && matches!(self.own.as_str(), "aan" | "to" | "an")
            && let Some(field) = self.kind.addressee_field()
        {
            *name = field.into();
        }
    }

    /// A payslip's total that says it is gross (`Gesamt-Brutto`) is the gross pay.
    fn gross_pay_name(&self, name: &mut String) {
        if self.kind == DocKind::Payslip && name == "total" {
            let f = values::fold(&self.label);
            if ["brut", "gross", "lord", "bruto"]
                .iter()
                .any(|w| f.contains(w))
            {
                *name = "gross_pay".into();
            }
        }
    }

    /// A field's name on a policy.
    fn policy_name(&self, name: &mut String) {
        // A policy's contract number is the policy's number.
        if self.kind == DocKind::InsuranceClaim && name == "contract_number" {
            *name = "policy_number".into();
        }
        // On a policy, the date a cover runs out (`Scadenza`, `Vervaldatum`) is its end.
        if self.kind == DocKind::InsuranceClaim && name == "due_date" {
            *name = "end_date".into();
        }
    }
}

/// What a label names (its canonical name and class), when known: the lexicon's reading,
/// after the words that stand for the document's number, its issuer or a refund.
fn known(own: &str, label: &str, kind: DocKind) -> Option<(&'static str, Class)> {
    // A bare `N°` / `No.` labels the document's own number.
    // A bare `Azienda`, `Empresa`, `Firma` names the party that issued the document.
    let company_word = lexicon::company_word(own);
    if lexicon::number_word(own) {
        Some((kind.number_field(), Class::Identifier))
    } else if company_word && labels::known(label).is_none() {
        Some((kind.issuer_field(), Class::Party))
    } else if kind == DocKind::TaxForm && labels::known(label).is_none() && refund_words(own) {
        // `Somme qui vous a été remboursée`, `Ihnen wird erstattet`: a refund in a sentence.
        Some(("refund_amount", Class::Amount))
    } else {
        labels::known(label)
    }
}

/// A person or firm ends where its address or a note starts (`Kliniken Südwest gGmbH,
/// Zentraleinkauf, Postfach 1140`, `Mme Sophie Durand, née le 11/02/1990`).
fn without_what_follows_a_name(raw: String, class: Option<Class>, own: &str) -> String {
    // A contact under a label the lexicon does not know (`Site contact: Gary Lunn 07700
    // 900481`) is a person too.
    let person = class.is_none()
        && matches!(
            own.rsplit('_').next(),
            Some("contact" | "name" | "person" | "ansprechpartner" | "contacto" | "contatto")
        );
    if class == Some(Class::Party) {
        party_name(&raw)
    } else if person {
        without_trailing_phone(&raw)
    } else {
        raw
    }
}

fn digits_only(s: &str) -> bool {
    s.chars().all(|c| c.is_ascii_digit())
}

/// Whether a word (lower case) is a unit a number is measured in or a thing counted.
fn unit_word(u: &str) -> bool {
    matches!(
        u,
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
}
