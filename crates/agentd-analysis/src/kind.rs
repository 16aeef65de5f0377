//! A guess of what kind of document a text is, from words that name it (`Rechnung`,
//! `Kontoauszug`, `bill of lading`) in en/de/fr/es/it/nl/pt. Words in the first lines (the
//! title) count three times, and a name of several words once per word.

use super::values::fold;
use serde::Serialize;

/// What a document is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DocKind {
    Invoice,
    CreditNote,
    Receipt,
    BankStatement,
    Payslip,
    LabReport,
    PurchaseOrder,
    DeliveryNote,
    BillOfLading,
    UtilityBill,
    InsuranceClaim,
    TaxForm,
    Contract,
    Other,
}

impl DocKind {
    /// The snake_case name (`bank_statement`).
    pub fn as_str(self) -> &'static str {
        match self {
            DocKind::Invoice => "invoice",
            DocKind::CreditNote => "credit_note",
            DocKind::Receipt => "receipt",
            DocKind::BankStatement => "bank_statement",
            DocKind::Payslip => "payslip",
            DocKind::LabReport => "lab_report",
            DocKind::PurchaseOrder => "purchase_order",
            DocKind::DeliveryNote => "delivery_note",
            DocKind::BillOfLading => "bill_of_lading",
            DocKind::UtilityBill => "utility_bill",
            DocKind::InsuranceClaim => "insurance_claim",
            DocKind::TaxForm => "tax_form",
            DocKind::Contract => "contract",
            DocKind::Other => "document",
        }
    }

    /// The name of the party that issued a document of this kind (the first line of a letter
    /// head): who sells on an invoice, the shop on a receipt, the bank on a statement.
    pub fn issuer_field(self) -> &'static str {
        match self {
            DocKind::Invoice | DocKind::CreditNote | DocKind::UtilityBill => "supplier",
            DocKind::DeliveryNote => "supplier",
            DocKind::Receipt => "merchant",
            DocKind::PurchaseOrder => "buyer",
            DocKind::BankStatement => "bank",
            DocKind::Payslip => "employer",
            DocKind::LabReport => "laboratory",
            DocKind::InsuranceClaim => "insurer",
            DocKind::BillOfLading => "carrier",
            _ => "issuer",
        }
    }

    /// The name of the document's own number (what a bare `N°` or `No.` labels).
    pub fn number_field(self) -> &'static str {
        match self {
            DocKind::Invoice | DocKind::UtilityBill => "invoice_number",
            DocKind::CreditNote => "credit_note_number",
            DocKind::Receipt => "receipt_number",
            DocKind::PurchaseOrder => "po_number",
            DocKind::DeliveryNote => "delivery_note_number",
            DocKind::BillOfLading => "bill_of_lading_number",
            DocKind::InsuranceClaim => "claim_number",
            DocKind::BankStatement => "statement_number",
            _ => "document_number",
        }
    }

    /// The name of whom a document of this kind is addressed to (the name in its address
    /// block), when it has one.
    pub fn addressee_field(self) -> Option<&'static str> {
        match self {
            DocKind::Invoice | DocKind::CreditNote | DocKind::UtilityBill => Some("customer"),
            DocKind::Payslip => Some("employee_name"),
            DocKind::InsuranceClaim => Some("policyholder"),
            DocKind::TaxForm => Some("taxpayer"),
            DocKind::BankStatement => Some("account_holder"),
            DocKind::DeliveryNote => Some("consignee"),
            _ => None,
        }
    }

    /// The name of a list of table rows in a document of this kind.
    pub fn rows_field(self) -> &'static str {
        match self {
            DocKind::BankStatement => "transactions",
            DocKind::LabReport => "results",
            DocKind::BillOfLading => "containers",
            DocKind::Payslip => "pay_items",
            _ => "line_items",
        }
    }
}

/// Words (folded, lowercase) that name each kind.
const WORDS: &[(DocKind, &[&str])] = &[
    (
        DocKind::Invoice,
        &[
            "invoice",
            "tax invoice",
            "rechnung",
            "facture",
            "factura",
            "fattura",
            "factuur",
            "fatura",
            "nota fiscal",
            "inv no",
            "invoice number",
        ],
    ),
    (
        DocKind::CreditNote,
        &[
            "credit note",
            "credit memo",
            "gutschrift",
            "avoir",
            "nota de credito",
            "nota di credito",
            "creditnota",
            "rechnungskorrektur",
            // Spain's corrective invoice, which credits all or part of an earlier one.
            "factura rectificativa",
            "factura de abono",
            "nota de abono",
        ],
    ),
    (
        DocKind::Receipt,
        &[
            "receipt",
            "kassenbon",
            "bon-nr",
            "kassenbeleg",
            "quittung",
            "beleg",
            "ticket de caisse",
            "recu",
            "ticket",
            "recibo",
            "ricevuta",
            "scontrino",
            "kassabon",
            "bonnetje",
            "talao",
            "cashier",
            "change",
            "rueckgeld",
            "ruckg",
            "rueckg",
            "kasse",
            "factura simplificada",
            "ticket de compra",
            "efectivo",
            "documento commerciale",
            "resto",
            "contante",
            "pump",
            "unleaded",
            "till",
            "thank you for shopping",
            "thank you for dining",
            "covers",
            "service charge",
            "contactless",
            "auth code",
            "kassier",
            "bon",
            "caisse",
            "rendu",
            "numerario",
            "troco",
            "pin",
            "wisselgeld",
            "merci de votre visite",
            "fatura simplificada",
            "artigos",
        ],
    ),
    (
        DocKind::BankStatement,
        &[
            "bank statement",
            "account statement",
            "statement of account",
            "kontoauszug",
            "releve de compte",
            "releve bancaire",
            "extracto bancario",
            "extracto de cuenta",
            "estratto conto",
            "rekeningafschrift",
            "extrato bancario",
            "extrato",
            "opening balance",
            "closing balance",
            "current account",
            "saldo",
        ],
    ),
    (
        DocKind::Payslip,
        &[
            "payslip",
            "pay slip",
            "pay stub",
            "earnings statement",
            "gehaltsabrechnung",
            "lohnabrechnung",
            "entgeltabrechnung",
            "bulletin de paie",
            "bulletin de salaire",
            "fiche de paie",
            "nomina",
            "recibo de salario",
            "busta paga",
            "cedolino",
            "loonstrook",
            "salarisstrook",
            "recibo de vencimento",
            "lohnsteuer",
            "steuerklasse",
            "nettoverdienst",
            "auszahlungsbetrag",
            "gesamtbrutto",
            "gesamt-brutto",
            "bezuge",
            "devengos",
            "total devengado",
            "liquido total a percibir",
            "total a deducir",
            "netto in busta",
            "totale competenze",
            "totale trattenute",
            "salaire brut",
            "net a payer",
            "net paye",
            "brutoloon",
            "nettoloon",
            "netto loon",
            "abonos",
            "remuneracao",
            "payroll",
            "net pay",
            "gross pay",
            "national insurance",
        ],
    ),
    (
        DocKind::LabReport,
        &[
            "laboratory",
            "lab report",
            "labor",
            "laborbefund",
            "befund",
            "laboratoire",
            "analyses",
            "laboratorio",
            "analisis clinicos",
            "referti",
            "laboratorium",
            "specimen",
            "haemoglobin",
            "hemoglobin",
            "hamoglobin",
            "cholesterol",
            "glucose",
            "reference range",
            "referenzbereich",
        ],
    ),
    (
        DocKind::PurchaseOrder,
        &[
            "purchase order",
            "po number",
            "bestellung",
            "bestellschein",
            "bon de commande",
            "orden de compra",
            "pedido de compra",
            "ordine di acquisto",
            "ordine d'acquisto",
            "inkooporder",
            "bestelbon",
            "nota de encomenda",
            "ordem de compra",
        ],
    ),
    (
        DocKind::DeliveryNote,
        &[
            "delivery note",
            "packing slip",
            "packing list",
            "lieferschein",
            "bon de livraison",
            "albaran",
            "nota de entrega",
            "documento di trasporto",
            "ddt",
            "pakbon",
            "guia de remessa",
        ],
    ),
    (
        DocKind::BillOfLading,
        &[
            "bill of lading",
            "b/l",
            "manifest",
            "cargo manifest",
            "konnossement",
            "frachtbrief",
            "connaissement",
            "lettre de voiture",
            "conocimiento de embarque",
            "polizza di carico",
            "cognossement",
            "vrachtbrief",
            "conhecimento de embarque",
            "port of loading",
            "vessel",
            "consignee",
            "container",
        ],
    ),
    (
        DocKind::UtilityBill,
        &[
            "electricity",
            "electricity bill",
            "gas bill",
            "water bill",
            "energy",
            "kwh",
            "meter",
            "stromrechnung",
            "strom",
            "zahlerstand",
            "electricite",
            "facture d'electricite",
            "factura de luz",
            "electricidad",
            "bolletta",
            "energia",
            "energierekening",
            "fatura de eletricidade",
            "utility",
            "gas naturale",
            "smc",
            "pdr",
            "point de livraison",
            "pdl",
            "consommation",
            "lettura",
            "contatore",
            "stroom",
            "aardgas",
            "eletricidade",
            "electricity supply",
            "kva",
        ],
    ),
    (
        DocKind::InsuranceClaim,
        &[
            "claim form",
            "insurance claim",
            "claim",
            "policyholder",
            "schadenmeldung",
            "schadenanzeige",
            "declaration de sinistre",
            "sinistre",
            "parte de siniestro",
            "siniestro",
            "denuncia di sinistro",
            "schadeformulier",
            "participacao de sinistro",
            "insurance",
            "insurance certificate",
            "certificate of insurance",
            "insurance policy",
            "policy schedule",
            "versicherungsschein",
            "versicherungspolice",
            "versicherung",
            "attestation d'assurance",
            "assurance",
            "poliza",
            "seguro",
            "certificato di assicurazione",
            "assicurazione",
            "polisblad",
            "verzekering",
            "apolice",
        ],
    ),
    (
        DocKind::TaxForm,
        &[
            "tax return",
            "tax form",
            "steuererklarung",
            "einkommensteuer",
            "declaration de revenus",
            "declaracion de la renta",
            "dichiarazione dei redditi",
            "belastingaangifte",
            "declaracao de irs",
            "form 1040",
            "w-2",
            "1099",
            "tax statement",
            "tax assessment",
            "notice of assessment",
            "steuerbescheid",
            "finanzamt",
            "avis d'impot",
            "impot sur le revenu",
            "agencia tributaria",
            "impuesto sobre la renta",
            "agenzia delle entrate",
            "belastingdienst",
            "aanslag inkomstenbelasting",
            "autoridade tributaria",
            "nota de liquidacao",
            "p60",
            "end of year certificate",
            "tax year",
            "paye",
            "inkomstenbelasting",
            "verzamelinkomen",
            "revenu fiscal de reference",
            "base liquidable",
            "modello 730",
            "730",
            "imposta lorda",
            "irs",
            "liquidacao",
        ],
    ),
    (
        DocKind::Contract,
        &[
            "contract",
            "agreement",
            "vertrag",
            "contrat",
            "contrato",
            "contratto",
            "overeenkomst",
        ],
    ),
];

/// Whether `word` occurs in `text` as whole words (both folded).
fn contains_words(text: &str, word: &str) -> bool {
    let mut from = 0;
    while let Some(pos) = text.get(from..).and_then(|t| t.find(word)) {
        let at = from + pos;
        let end = at + word.len();
        let before = text.get(..at).and_then(|t| t.chars().next_back());
        let after = text.get(end..).and_then(|t| t.chars().next());
        let boundary = |c: Option<char>| c.is_none_or(|c| !c.is_alphanumeric());
        if boundary(before) && boundary(after) {
            return true;
        }
        from = end;
    }
    false
}

/// Whether `line` is only a document title (`INVOICE`, `Purchase Order`, `Kontoauszug`).
pub fn is_title(line: &str) -> bool {
    let f = fold(&line.split_whitespace().collect::<Vec<_>>().join(" "));
    WORDS.iter().any(|(_, words)| words.contains(&f.as_str()))
}

/// The kind of document `text` most likely is ([`DocKind::Other`] when no word names one).
pub fn guess(text: &str) -> DocKind {
    // The first lines, and a title on a line of its own below a letter's address block.
    let head: String = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(25)
        .enumerate()
        .filter(|(k, l)| *k < 6 || is_title(l.trim()))
        .map(|(_, l)| l)
        .collect::<Vec<_>>()
        .join("\n");
    let head = fold(&head);
    let body = fold(&text.chars().take(20_000).collect::<String>());
    // On a tie, the kind named first wins (the title: `AVOIR N° …` over a `Facture d'origine`
    // below it).
    let mut best = (DocKind::Other, 0usize, usize::MAX);
    for (kind, words) in WORDS {
        let mut score = 0;
        let mut first = usize::MAX;
        for w in *words {
            // A longer name is the more specific one: `recibo de vencimento` (a payslip) over
            // `recibo` (a receipt).
            let weight = w.split_whitespace().count();
            if contains_words(&head, w) {
                score += 3 * weight;
                first = first.min(head.find(w).unwrap_or(usize::MAX));
            }
            if contains_words(&body, w) {
                score += weight;
            }
        }
        if score > best.1 || (score == best.1 && score > 0 && first < best.2) {
            best = (*kind, score, first);
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_in_several_languages() {
        assert_eq!(
            guess("ACME\nRECHNUNG\nRechnungsnummer: 1"),
            DocKind::Invoice
        );
        assert_eq!(guess("HÔTEL\nFACTURE\nTotal TTC : 1"), DocKind::Invoice);
        assert_eq!(
            guess("Banco\nExtracto de cuenta\nSaldo inicial: 1"),
            DocKind::BankStatement
        );
        assert_eq!(
            guess("SUPERMARKT\nBON-NR: 1\nSUMME 3,00\nRUECKG. 1,00"),
            DocKind::Receipt
        );
        assert_eq!(guess("ACME — PAYSLIP\nNet Pay: 1"), DocKind::Payslip);
        assert_eq!(
            guess("LABORATORY REPORT\nHaemoglobin: 13"),
            DocKind::LabReport
        );
        assert_eq!(
            guess("PURCHASE ORDER\nPO Number: 1"),
            DocKind::PurchaseOrder
        );
        assert_eq!(
            guess("BILL OF LADING\nVessel: X\nPort of Loading: Y"),
            DocKind::BillOfLading
        );
        assert_eq!(
            guess("CLEARSTREAM ENERGY\nElectricity bill\nUsage: 693 kWh"),
            DocKind::UtilityBill
        );
        assert_eq!(guess("hello world"), DocKind::Other);
    }
}
