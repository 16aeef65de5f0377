//! The detector's labelled corpus (English and German documents) and its precision/recall
//! test. Each document lists every personal value it holds; anything else the detector flags
//! is a false positive. Business data (invoice numbers, VAT ids, amounts, dates, order numbers,
//! company names) is there on purpose as negatives.

use super::detect::{Kind, detect};
use Kind::*;

/// (document, expected findings).
pub const CORPUS: &[(&str, &[(Kind, &str)])] = &[
    (
        "INVOICE INV-2024-0042\nDate: 2024-03-12\nBill to: Jane Doe\n12 Baker Street, London\n\
         Email: jane.doe@example.com\nPhone: +44 20 7946 0958\nVAT: GB123456789\n\
         Total due: 1,234.56 GBP\nPay to IBAN GB82 WEST 1234 5698 7654 32",
        &[
            (Person, "Jane Doe"),
            (Email, "jane.doe@example.com"),
            (Phone, "+44 20 7946 0958"),
            (Iban, "GB82 WEST 1234 5698 7654 32"),
        ],
    ),
    (
        "RECHNUNG Nr. RE-2024-117\nRechnungsdatum: 05.02.2024\nKunde: Herr Klaus Müller\n\
         Hauptstraße 5, 10115 Berlin\nTelefon: 030 1234567\nE-Mail: k.mueller@beispiel.de\n\
         USt-IdNr.: DE123456789\nGesamtbetrag: 1.190,00 EUR\n\
         Bitte überweisen Sie auf DE89 3704 0044 0532 0130 00",
        &[
            (Person, "Herr Klaus Müller"),
            (Phone, "030 1234567"),
            (Email, "k.mueller@beispiel.de"),
            (Iban, "DE89 3704 0044 0532 0130 00"),
        ],
    ),
    (
        "LAB REPORT\nPatient: Maria Schmidt\nPatient ID: PT-778812\nDate of birth: 1984-07-21\n\
         Hemoglobin 13.5 g/dL (12.0-15.5)\nWBC 6.1 10^9/L\nPhysician: Dr. Alan Grant, City Lab",
        &[
            (Person, "Maria Schmidt"),
            (Id, "PT-778812"),
            (Id, "1984-07-21"),
        ],
    ),
    (
        "RIVERSIDE PATHOLOGY SERVICES\n\
         Patient: HARGREAVES, Eleanor        DOB: 14/03/1961      Sex: F\n\
         NHS No: 943 476 5919                MRN: RPS-0088213\n\
         Specimen received: 09/11/2026 10:12       Reported: 10/11/2026 16:40\n\
         Lab No: 26B-448120\nSodium   138   mmol/L   133 - 146",
        &[
            (Person, "HARGREAVES, Eleanor"),
            (Id, "14/03/1961"),
            (Id, "943 476 5919"),
            (Id, "RPS-0088213"),
        ],
    ),
    (
        "Laborbefund\nPatientin: Anna Becker\nVersichertennummer: A123456789\n\
         Geburtsdatum: 02.03.1975\nGlukose 95 mg/dl\nKreatinin 0,9 mg/dl",
        &[
            (Person, "Anna Becker"),
            (Id, "A123456789"),
            (Id, "02.03.1975"),
        ],
    ),
    (
        "RECEIPT #88213\nSUPERMART 24\n2x MILK 1.99\nBREAD 2.49\nTOTAL 6.47\n\
         VISA ************1111\nAUTH 004512\nThank you!",
        &[],
    ),
    (
        "Card payment\nCardholder: John Smith\nCard number: 4111 1111 1111 1111\nExp 09/27\n\
         Amount: 45.00 USD\nMerchant ref 20240312-7781",
        &[(Person, "John Smith"), (Card, "4111 1111 1111 1111")],
    ),
    (
        "BANK STATEMENT\nAccount holder: Peter Jansen\nIBAN: NL91 ABNA 0417 1643 00\n\
         Statement period 01.01.2024 - 31.01.2024\nOpening balance 2,450.00\n\
         03.01 Grocery store -54.20\n15.01 Salary ACME BV +3,100.00\nClosing balance 5,495.80",
        &[(Person, "Peter Jansen"), (Iban, "NL91 ABNA 0417 1643 00")],
    ),
    (
        "PURCHASE ORDER PO-55120\nVendor: Globex Corporation\nShip to: Warehouse 7, Dock B\n\
         Contact: Sarah Connor\ncontact phone: (555) 123-4567\nItem SKU-4410 qty 12 @ 8.50\n\
         Delivery by 2024-04-30",
        &[(Person, "Sarah Connor"), (Phone, "(555) 123-4567")],
    ),
    (
        "SHIPPING MANIFEST BOL 7781-2231\nConsignee: Initech GmbH\nContainer MSKU 123456-7\n\
         Pallets 14, gross weight 8,420 kg\nHS code 8471.30.0000\nPort of loading Hamburg",
        &[],
    ),
    (
        "Employee record\nEmployee: Robert Brown\nSSN: 078-05-1120\nMobile: +1 415 555 0134\n\
         Start date 2023-09-01\nDepartment R&D, cost center 4410",
        &[
            (Person, "Robert Brown"),
            (Id, "078-05-1120"),
            (Phone, "+1 415 555 0134"),
        ],
    ),
    (
        "Mahnung\nSehr geehrte Damen und Herren,\nRechnung 2024-331 über 980,00 EUR ist offen.\n\
         Ansprechpartnerin: Julia Wagner, Tel. +49 (0)89 123456-78\nMit freundlichen Grüßen",
        &[(Person, "Julia Wagner"), (Phone, "+49 (0)89 123456-78")],
    ),
    (
        "Quarterly report Q1 2024\nRevenue 4.2m EUR (+12%)\nOrders 18,223; returns 2.1%\n\
         Ticket volume 1,204; median response 3h 20m\nNext review 2024-07-15",
        &[],
    ),
    (
        "{\"customer_name\": \"Lena Fischer\", \"email\": \"lena@fischer.example\", \
         \"invoice_number\": \"INV-77\", \"total\": 120.5}",
        &[(Person, "Lena Fischer"), (Email, "lena@fischer.example")],
    ),
    (
        "Facture n° F-2024-019\nClient: Marie Dubois\nTéléphone: +33 1 42 68 53 00\n\
         IBAN FR14 2004 1010 0505 0001 3M02 606\nTotal TTC 540,00 EUR",
        &[
            (Person, "Marie Dubois"),
            (Phone, "+33 1 42 68 53 00"),
            (Iban, "FR14 2004 1010 0505 0001 3M02 606"),
        ],
    ),
    (
        "Tracking 1Z999AA10123456784\nOrder 4500012345 shipped 2024-03-02\nRef DE-2024-0001\n\
         Serial 5500000000000004X is not a card\nBatch 0000000000000000",
        &[],
    ),
    (
        "Support ticket #4411\nFrom: support-bot@helpdesk.example\nUser Tom Baker reports a crash.\n\
         Device id 3F2A-99B1",
        &[(Email, "support-bot@helpdesk.example")],
    ),
];

/// Precision and recall over the corpus: `(tp, fp, fn)`, with the misses and false alarms.
pub fn score() -> (usize, usize, usize, Vec<String>) {
    let (mut tp, mut fp, mut fnn) = (0, 0, 0);
    let mut notes = Vec::new();
    for (text, expected) in CORPUS {
        let found: Vec<(Kind, &str)> = detect(text, &[])
            .into_iter()
            .map(|f| (f.kind, &text[f.start..f.end]))
            .collect();
        for f in &found {
            if expected.contains(f) {
                tp += 1;
            } else {
                fp += 1;
                notes.push(format!("false positive {f:?}"));
            }
        }
        for e in *expected {
            if !found.contains(e) {
                fnn += 1;
                notes.push(format!("missed {e:?}"));
            }
        }
    }
    (tp, fp, fnn, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precision_and_recall_on_the_corpus() {
        let (tp, fp, fnn, notes) = score();
        let precision = tp as f64 / (tp + fp).max(1) as f64;
        let recall = tp as f64 / (tp + fnn).max(1) as f64;
        println!(
            "pii corpus: {} documents, tp {tp}, fp {fp}, fn {fnn}: precision {precision:.3}, recall {recall:.3}",
            CORPUS.len()
        );
        for n in &notes {
            println!("  {n}");
        }
        assert!(precision >= 0.95, "precision {precision:.3}: {notes:?}");
        assert!(recall >= 0.9, "recall {recall:.3}: {notes:?}");
    }
}
