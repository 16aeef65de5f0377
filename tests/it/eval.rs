//! `agentd eval`: the binary runs the labelled samples through the real queue and worker with
//! the offline provider and prints JSON whose figures agree with its own per-field detail; the
//! scorer gives known answers for known inputs; bad labels and flags exit 2 naming the problem;
//! a run below a stored baseline exits 1 naming the metric and split; the eval's worker leaves
//! every other org's waiting job alone.

use crate::common;
use agentd::eval::labels::{ExpectedField, Split, load_dir, parse_labels};
use agentd::eval::score::{
    date_candidates, norm_name, number_candidates, score, score_described, values_match,
};
use chrono::NaiveDate;
use common::TestDb;
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Output};

fn agentd(db: &TestDb, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentd"))
        .args(args)
        .env("DATABASE_URL", &db.url)
        .env("AGENTD_HTTP__ADDR", "")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run agentd")
}

fn field(name: &str, aliases: &[&str], value: Value) -> ExpectedField {
    ExpectedField {
        name: name.into(),
        aliases: aliases.iter().map(|a| a.to_string()).collect(),
        value,
    }
}

#[test]
fn values_match_after_normalising_case_space_numbers_and_dates() {
    // Text: case, inner whitespace and surrounding punctuation do not matter; content does.
    assert!(values_match(
        &json!("Blue Fox  Analytics GmbH"),
        Some(&json!(" blue fox analytics gmbh."))
    ));
    assert!(!values_match(
        &json!("Blue Fox Analytics GmbH"),
        Some(&json!("Blue Fox Analytics"))
    ));
    // A form of address before a name is no part of it, on either side; other words are.
    assert!(values_match(
        &json!("Mme Inès Carpentier"),
        Some(&json!("Inès Carpentier"))
    ));
    assert!(values_match(
        &json!("Ahmet Yilmaz"),
        Some(&json!("Hr. Ahmet Yilmaz"))
    ));
    assert!(values_match(
        &json!("dhr. R.J. Kamphuis"),
        Some(&json!("R.J. Kamphuis"))
    ));
    assert!(!values_match(
        &json!("Dr. Ana Ruiz"),
        Some(&json!("Ana Ruiz"))
    ));
    assert!(!values_match(
        &json!("Mr Samuel Adeyemi"),
        Some(&json!("Mr Samuel"))
    ));
    // Numbers in English, German, French and Swiss notation, with currency or unit.
    for s in [
        "1,763.58",
        "1.763,58 €",
        "EUR 1 763,58",
        "1'763.58",
        "£1,763.58",
        "1763.58",
    ] {
        assert!(values_match(&json!(1763.58), Some(&json!(s))), "{s}");
    }
    assert!(values_match(&json!(76684), Some(&json!("76,684 kg"))));
    assert!(values_match(&json!(-12.5), Some(&json!("(12.50)"))));
    // A table is labelled by its number of rows.
    assert!(values_match(
        &json!(2),
        Some(&json!([{"d": "a"}, {"d": "b"}]))
    ));
    assert!(!values_match(
        &json!(3),
        Some(&json!([{"d": "a"}, {"d": "b"}]))
    ));
    assert!(!values_match(&json!(1763.58), Some(&json!("1,763.85"))));
    assert!(!values_match(&json!(55120), Some(&json!("PO-55120 and 7"))));
    assert!(values_match(&json!(9.26), Some(&json!(9.26))));
    assert!(!values_match(&json!(9.26), Some(&json!(9.27))));
    // Dates in the usual spellings, both day-month orders for slashes.
    for s in [
        "2026-11-05",
        "05.11.2026",
        "5 November 2026",
        "Nov 5, 2026",
        "5. November 2026",
        "5 novembre 2026",
        "05/11/2026",
        "11/05/2026",
        "2026-11-05T00:00:00Z",
        "5th November 2026",
        "November 5th, 2026",
        "5 de noviembre de 2026",
        "5 de novembro de 2026",
        "5 novembre 2026",
        "5 november 2026",
        "5-nov-2026",
    ] {
        assert!(values_match(&json!("2026-11-05"), Some(&json!(s))), "{s}");
    }
    assert!(!values_match(
        &json!("2026-11-05"),
        Some(&json!("06.11.2026"))
    ));
    assert!(!values_match(
        &json!("2026-11-05"),
        Some(&json!("l5.11.2026"))
    ));
    // Other languages' months; a value whose tenth byte is inside a character is no date.
    assert!(values_match(
        &json!("2026-01-01"),
        Some(&json!("1er janvier 2026"))
    ));
    assert!(values_match(
        &json!("2026-12-17"),
        Some(&json!("17 dicembre 2026"))
    ));
    assert!(values_match(
        &json!("2026-03-05"),
        Some(&json!("5 maart 2026"))
    ));
    assert!(values_match(
        &json!("2026-10-01"),
        Some(&json!("1 de outubro de 2026"))
    ));
    assert!(!values_match(
        &json!("2026-11-05"),
        Some(&json!("2026-11-0é"))
    ));
    assert!(!values_match(
        &json!("2026-11-05"),
        Some(&json!("5xx November 2026"))
    ));
    // Null expected: absent or blank is right, a value is wrong; a value expected: null is wrong.
    assert!(values_match(&Value::Null, None));
    assert!(values_match(&Value::Null, Some(&json!(""))));
    assert!(!values_match(&Value::Null, Some(&json!("x"))));
    assert!(!values_match(&json!("x"), None));
    assert!(values_match(&json!(true), Some(&json!("Yes"))));
    assert!(!values_match(&json!(true), Some(&json!("no"))));
}

#[test]
fn ambiguous_numbers_and_dates_keep_every_reading() {
    assert_eq!(number_candidates("1.234"), vec![1.234, 1234.0]);
    assert_eq!(number_candidates("1,50"), vec![1.5]);
    assert_eq!(number_candidates("1.234.567,8"), vec![1234567.8]);
    assert!(number_candidates("INV-2026-0417").is_empty());
    let d = |y, m, day| NaiveDate::from_ymd_opt(y, m, day).unwrap();
    assert_eq!(
        date_candidates("03/04/26"),
        vec![d(2026, 4, 3), d(2026, 3, 4)]
    );
    assert_eq!(date_candidates("31/10/2026"), vec![d(2026, 10, 31)]);
    assert_eq!(date_candidates("1 mars 2026"), vec![d(2026, 3, 1)]);
    assert!(date_candidates("Net 30").is_empty());
    assert_eq!(norm_name("Invoice Number"), norm_name("invoiceNumber"));
    assert_eq!(norm_name("invoice_number"), "invoicenumber");
}

#[test]
fn score_counts_recall_by_name_or_alias_and_accuracy_over_expected_fields() {
    let expected = vec![
        field("invoice_number", &[], json!("INV-1")),
        field("total_due", &["total"], json!(897.6)),
        field("invoice_date", &[], json!("2026-11-02")),
        field("currency", &[], json!("GBP")),
    ];
    // Three of four found (one by alias); of those, two values right (the date is wrong).
    let props = vec![
        "InvoiceNumber".to_string(),
        "total".into(),
        "invoice_date".into(),
        "vat".into(),
    ];
    let extracted = json!({"InvoiceNumber": "inv-1", "total": "897.60", "invoice_date": "2026-11-03", "vat": 1});
    let s = score(&expected, &[], &props, &extracted);
    assert_eq!(
        (s.fields_expected, s.fields_found, s.values_correct),
        (4, 3, 2)
    );
    assert_eq!(s.field_recall, 0.75);
    assert_eq!(s.value_accuracy, 0.5);
    // Precision: three of the four properties match a label; `vat` matches none.
    assert_eq!(s.fields_proposed, 4);
    assert_eq!(s.field_precision, 0.75);
    assert!((s.field_f1 - 0.75).abs() < 1e-12);
    assert_eq!(s.unmatched, ["vat"]);
    assert_eq!(s.fields[1].matched.as_deref(), Some("total"));
    assert_eq!(s.fields[3].matched, None);
    // A value cannot count for a field the schema does not have, even if the extraction has it.
    let s = score(&expected[3..], &[], &[], &json!({"currency": "GBP"}));
    assert_eq!((s.fields_found, s.values_correct), (0, 0));
    // A property serves one label only; a label's own name wins over another's alias.
    let two = vec![
        field("due_date", &["date"], json!("2026-12-02")),
        field("date", &[], json!("2026-11-02")),
    ];
    let s = score(
        &two,
        &[],
        &["date".to_string()],
        &json!({"date": "2026-11-02"}),
    );
    assert_eq!(s.fields[1].matched.as_deref(), Some("date"));
    assert_eq!(s.fields[0].matched, None);
    assert_eq!((s.fields_found, s.fields_proposed), (1, 1));
    assert_eq!((s.field_precision, s.field_recall), (1.0, 0.5));
    assert!((s.field_f1 - 2.0 / 3.0).abs() < 1e-12);
    // Nothing proposed: precision, recall and F1 are 0, not NaN.
    let s = score(&two, &[], &[], &Value::Null);
    assert_eq!(
        (s.field_precision, s.field_recall, s.field_f1),
        (0.0, 0.0, 0.0)
    );
    // No extraction at all: recall still counts, accuracy is zero.
    let s = score(&expected, &[], &props, &Value::Null);
    assert_eq!((s.fields_found, s.values_correct), (3, 0));
}

#[test]
fn an_acceptable_field_counts_for_precision_and_never_for_recall() {
    let expected = vec![
        field("invoice_number", &[], json!("INV-1")),
        field("total", &["amount"], json!(10.0)),
    ];
    let acceptable = vec![
        field("supplier", &["vendor"], json!("Acme Ltd")),
        field("line_items", &["items"], json!(2)),
        // An acceptable label may share nothing with the expected ones, but a property an
        // expected label takes is not offered to it.
        field("amount_paid", &["amount"], json!(10.0)),
    ];
    let props: Vec<String> = ["invoice_number", "amount", "vendor", "items", "colour"]
        .iter()
        .map(|p| p.to_string())
        .collect();
    let extracted = json!({"invoice_number": "INV-1", "amount": 10, "vendor": "ACME LTD",
        "items": [{"d": "a"}, {"d": "b"}], "colour": "red"});
    let s = score(&expected, &acceptable, &props, &extracted);
    // Recall and accuracy: the expected fields alone.
    assert_eq!(
        (s.fields_found, s.fields_expected, s.values_correct),
        (2, 2, 2)
    );
    assert_eq!(s.field_recall, 1.0);
    // Precision: 2 expected + 2 acceptable of 5; `colour` counts against it; strict: 2 of 5.
    assert_eq!(s.fields_acceptable, 2);
    assert_eq!(s.field_precision, 0.8);
    assert_eq!(s.strict_precision, 0.4);
    assert_eq!(s.unmatched, ["colour"]);
    let names: Vec<_> = s.acceptable.iter().map(|f| f.field.as_str()).collect();
    assert_eq!(names, ["supplier", "line_items"]);
    // A table's value is its number of rows; the supplier's is compared without case.
    assert_eq!(s.acceptable_values_correct, 2);
    let wrong = json!({"vendor": "Other", "items": [{"d": "a"}]});
    let s = score(&expected, &acceptable, &props, &wrong);
    assert_eq!((s.fields_acceptable, s.acceptable_values_correct), (2, 0));
    // Missing acceptable fields cost nothing.
    let s = score(&expected, &acceptable, &props[..2], &extracted);
    assert_eq!((s.field_precision, s.field_recall), (1.0, 1.0));
}

#[test]
fn a_label_unmatched_by_name_takes_the_field_described_by_it() {
    // A field named in the canonical language keeps the document's label as its description;
    // the labels' aliases are in the document's language.
    let expected = vec![
        field(
            "credit_reason",
            &["grund_der_gutschrift"],
            json!("Rücknahme"),
        ),
        field("credit_note_number", &["gutschriftsnummer"], json!("GS-1")),
    ];
    let props: Vec<String> = ["reason", "credit_note_number", "note"]
        .iter()
        .map(|p| p.to_string())
        .collect();
    let described: Vec<String> = [
        "Grund der Gutschrift",
        "Gutschriftsnummer",
        "Gutschriftsnummer of the note (a sentence matches nothing)",
    ]
    .iter()
    .map(|d| d.to_string())
    .collect();
    let extracted = json!({"reason": "Rücknahme", "credit_note_number": "GS-1"});
    let s = score_described(&expected, &[], &props, &described, &extracted);
    let matched: Vec<_> = s.fields.iter().map(|f| f.matched.as_deref()).collect();
    // By name first: the second label takes its own field, not the one its alias describes.
    assert_eq!(matched, [Some("reason"), Some("credit_note_number")]);
    assert_eq!((s.fields_found, s.values_correct), (2, 2));
    assert_eq!(s.unmatched, ["note"]);
    // A date's form after the label is no part of it; accents fold.
    let dated = vec![field(
        "issue_date",
        &["date_d_emission"],
        json!("2026-11-05"),
    )];
    let s = score_described(
        &dated,
        &[],
        &["issued".to_string()],
        &["Date d'émission (YYYY-MM-DD)".to_string()],
        &json!({"issued": "2026-11-05"}),
    );
    assert_eq!(s.fields_found, 1);
    // Without descriptions, names and aliases alone.
    let s = score(&expected, &[], &props, &extracted);
    assert_eq!(s.fields_found, 1);
}

const HEAD: &str = "split = \"dev\"\nlanguage = \"en\"\nkind = \"invoice\"\n";

#[test]
fn labels_errors_name_the_file_and_key() {
    let f = Path::new("x.labels.toml");
    let e = parse_labels(f, &format!("{HEAD}[fields]\ntotal = {{ valeu = 1 }}\n")).unwrap_err();
    assert!(
        e.to_string()
            .contains("x.labels.toml: fields.total.valeu: unknown key"),
        "{e}"
    );
    let e = parse_labels(f, &format!("documnet = \"a.txt\"\n{HEAD}[fields]\na = 1\n")).unwrap_err();
    assert!(e.to_string().contains("unknown key `documnet`"), "{e}");
    let e = parse_labels(f, &format!("{HEAD}[fields]\na = [1, 2]\n")).unwrap_err();
    assert!(e.to_string().contains("fields.a: the value must be"), "{e}");
    let e = parse_labels(f, &format!("{HEAD}description = \"no fields\"\n")).unwrap_err();
    assert!(e.to_string().contains("`[fields]` is required"), "{e}");
    // The split, language and kind are required and must be known values.
    let e = parse_labels(
        f,
        "language = \"en\"\nkind = \"invoice\"\n[fields]\na = 1\n",
    )
    .unwrap_err();
    assert!(
        e.to_string().contains(
            "x.labels.toml: `split` is required: which part of the set the document is in \
             (dev may be tuned on, test never); one of dev, test"
        ),
        "{e}"
    );
    let e = parse_labels(
        f,
        "split = \"train\"\nlanguage = \"en\"\nkind = \"invoice\"\n[fields]\na = 1\n",
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("x.labels.toml: `split` = \"train\" is not one of dev, test"),
        "{e}"
    );
    let e = parse_labels(
        f,
        "split = \"test\"\nlanguage = \"english\"\nkind = \"invoice\"\n[fields]\na = 1\n",
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("`language` = \"english\" is not one of en, de"),
        "{e}"
    );
    let e = parse_labels(
        f,
        "split = \"test\"\nlanguage = \"de\"\nkind = \"rechnung\"\n[fields]\na = 1\n",
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("`kind` = \"rechnung\" is not one of invoice"),
        "{e}"
    );
    let e = parse_labels(
        f,
        "split = 1\nlanguage = \"de\"\nkind = \"invoice\"\n[fields]\na = 1\n",
    )
    .unwrap_err();
    assert!(e.to_string().contains("`split` must be a string"), "{e}");
    // A bare TOML date is read as its ISO string; the header is what the file says.
    let (h, fields) = parse_labels(
        f,
        "split = \"test\"\nlanguage = \"fr\"\nkind = \"receipt\"\n[fields]\nd = 2026-11-02\n",
    )
    .unwrap();
    assert_eq!(fields.expected[0].value, json!("2026-11-02"));
    assert!(fields.acceptable.is_empty());
    // Acceptable fields: same entries, in their own section, never a second label of an
    // expected field.
    let (_, fields) = parse_labels(
        f,
        &format!("{HEAD}[fields]\ntotal = {{ value = 9, aliases = [\"amount\"] }}\n[acceptable]\nsupplier = {{ value = \"Acme\", aliases = [\"vendor\"] }}\nline_items = 3\n"),
    )
    .unwrap();
    assert_eq!(fields.acceptable.len(), 2);
    let rows = fields.acceptable.iter().find(|a| a.name == "line_items");
    assert_eq!(rows.map(|a| &a.value), Some(&json!(3)));
    let e = parse_labels(
        f,
        &format!("{HEAD}[fields]\ntotal = {{ value = 9, aliases = [\"amount\"] }}\n[acceptable]\npaid = {{ value = 9, aliases = [\"Amount\"] }}\n"),
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("x.labels.toml: acceptable.paid: `Amount` already names fields.total"),
        "{e}"
    );
    let e = parse_labels(
        f,
        &format!("{HEAD}[fields]\na = 1\n[acceptable]\nb = {{ vlaue = 2 }}\n"),
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("acceptable.b.vlaue: unknown key"),
        "{e}"
    );
    let e = parse_labels(f, &format!("{HEAD}acceptable = 1\n[fields]\na = 1\n")).unwrap_err();
    assert!(
        e.to_string().contains("`acceptable` must be a table"),
        "{e}"
    );
    assert_eq!(
        (h.split, h.language.as_str(), h.kind.as_str()),
        (Split::Test, "fr", "receipt")
    );
}

#[test]
fn the_shipped_set_has_sixty_samples_in_four_languages_with_a_test_part() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/eval");
    let samples = load_dir(&dir, &[], None).expect("samples/eval loads");
    assert!(samples.len() >= 60, "{} samples", samples.len());
    for s in &samples {
        assert!(!s.text.trim().is_empty(), "{} has no text", s.name);
        assert!(!s.fields.is_empty(), "{} has no labels", s.name);
        // Precision needs the document's other real fields too: without them a proposal's
        // supplier or IBAN would count as junk.
        assert!(
            !s.acceptable.is_empty(),
            "{} has no [acceptable] fields",
            s.name
        );
    }
    let big = samples
        .iter()
        .find(|s| s.name == "multipage_invoice")
        .expect("multipage");
    assert!(big.text.len() > 60_000, "{} bytes", big.text.len());
    // The fourteen documents the heuristics were tuned on are dev, whatever else is added.
    for name in [
        "bank_statement",
        "hotel_facture_fr",
        "insurance_claim",
        "invoice_de",
        "invoice_en",
        "invoice_injection",
        "lab_report",
        "multipage_invoice",
        "payslip",
        "purchase_order",
        "receipt_cafe",
        "receipt_ocr",
        "shipping_manifest",
        "utility_bill",
    ] {
        let s = samples.iter().find(|s| s.name == name).expect(name);
        assert_eq!(s.split, Split::Dev, "{name} was tuned on: it must stay dev");
    }
    let test: Vec<_> = samples.iter().filter(|s| s.split == Split::Test).collect();
    assert!(test.len() >= 30, "{} test samples", test.len());
    // The test part spreads over languages and kinds.
    let langs: std::collections::BTreeSet<&str> =
        test.iter().map(|s| s.language.as_str()).collect();
    for l in ["en", "de", "fr", "es"] {
        assert!(
            langs.contains(l),
            "no {l} document in the test part: {langs:?}"
        );
    }
    let kinds: std::collections::BTreeSet<&str> = test.iter().map(|s| s.kind.as_str()).collect();
    assert!(kinds.len() >= 8, "test kinds: {kinds:?}");
    // --split keeps exactly that part.
    let only_test = load_dir(&dir, &[], Some(Split::Test)).unwrap();
    assert_eq!(only_test.len(), test.len());
    assert!(only_test.iter().all(|s| s.split == Split::Test));
    let e = load_dir(&dir, &["invoice_en".to_string()], Some(Split::Test)).unwrap_err();
    assert!(
        e.to_string()
            .contains("no sample `invoice_en` (it is not in the test split)"),
        "{e}"
    );
}

/// Recomputes a document's recall from the JSON's own proposed fields and label names, so the
/// test checks the arithmetic and the matching, not a remembered number.
fn check_doc(doc: &Value) {
    let fields = doc["fields"].as_array().expect("fields");
    let proposed: Vec<String> = doc["proposed_fields"]
        .as_array()
        .expect("proposed_fields")
        .iter()
        .map(|p| norm_name(p.as_str().unwrap()))
        .collect();
    let found = fields.iter().filter(|f| !f["matched"].is_null()).count();
    for f in fields {
        if let Some(m) = f["matched"].as_str() {
            assert!(proposed.contains(&norm_name(m)), "{f}");
        }
        if f["value_ok"] == json!(true) {
            assert!(values_match(&f["expected"], Some(&f["got"])), "{f}");
        }
    }
    let correct = fields
        .iter()
        .filter(|f| f["value_ok"] == json!(true))
        .count();
    assert_eq!(doc["fields_expected"], json!(fields.len()));
    assert_eq!(doc["fields_found"], json!(found));
    assert_eq!(doc["values_correct"], json!(correct));
    let recall = doc["field_recall"].as_f64().unwrap();
    assert!((recall - found as f64 / fields.len() as f64).abs() < 1e-9);
    let acc = doc["value_accuracy"].as_f64().unwrap();
    assert!((acc - correct as f64 / fields.len() as f64).abs() < 1e-9);
    // Precision: the properties matched to an expected or an acceptable label over all
    // proposed; the rest are listed as unmatched. Strict precision counts the expected alone.
    assert_eq!(doc["fields_proposed"], json!(proposed.len()));
    let acceptable = doc["acceptable"].as_array().expect("acceptable");
    assert_eq!(doc["fields_acceptable"], json!(acceptable.len()));
    for a in acceptable {
        assert!(
            proposed.contains(&norm_name(a["matched"].as_str().expect("matched"))),
            "{a}"
        );
    }
    let unmatched = doc["unmatched"].as_array().expect("unmatched");
    assert_eq!(
        unmatched.len() + found + acceptable.len(),
        proposed.len(),
        "{doc}"
    );
    let precision = doc["field_precision"].as_f64().unwrap();
    let labelled = (found + acceptable.len()) as f64;
    assert!((precision - labelled / proposed.len() as f64).abs() < 1e-9);
    let strict = doc["strict_precision"].as_f64().unwrap();
    assert!((strict - found as f64 / proposed.len() as f64).abs() < 1e-9);
}

#[tokio::test]
async fn eval_runs_offline_through_the_queue_and_prints_consistent_json() {
    let db = TestDb::new().await;
    let out = agentd(
        &db,
        &[
            "eval",
            "--provider",
            "offline",
            "--json",
            "--only",
            "invoice_en,receipt_ocr,invoice_de",
            "--org",
            "eval-test",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let r: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(r["provider"], "offline");
    // auto_create's job file turns guided mode on (llm.guided = "job").
    assert_eq!(r["guided"], true);
    let docs = r["documents"].as_array().unwrap();
    let names: Vec<&str> = docs.iter().map(|d| d["sample"].as_str().unwrap()).collect();
    assert_eq!(names, ["invoice_de", "invoice_en", "receipt_ocr"]);
    for d in docs {
        assert_eq!(d["status"], "proposed", "{d}");
        // Every answer: the loop's rounds and run_extraction's own call(s).
        let (rounds, extractions): (i32, i64) = sqlx::query_as(
            "SELECT r.rounds, (SELECT count(*) FROM agent_steps s
                                WHERE s.run_id = r.id AND s.kind = 'tool_model')
               FROM agent_runs r WHERE r.subject = $1",
        )
        .bind(d["document_id"].as_str().unwrap())
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert!(extractions >= 1, "{d}");
        assert_eq!(
            d["model_calls"],
            json!(i64::from(rounds) + extractions),
            "{d}"
        );
        assert_eq!(d["split"], "dev");
        assert!(d["tool_calls"].as_i64().unwrap() >= 3, "{d}");
        assert!(d["tokens"].as_i64().unwrap() > 0);
        assert_eq!(d["runs"], 1);
        check_doc(d);
    }
    // The offline model proposes the document analysis' candidates: the English invoice's
    // `Key: value` lines and the OCR receipt's repaired labels (`BON-NR`, `SUMME  EUR`,
    // `RUECKG.`, `Datum:  l4.11.2026`) name every labelled field.
    let en = &docs[1];
    assert_eq!(en["field_recall"], json!(1.0), "{en}");
    assert_eq!(docs[2]["field_recall"], json!(1.0), "{}", docs[2]);
    assert_eq!(docs[2]["value_accuracy"], json!(1.0), "{}", docs[2]);
    // Totals are the sums of the rows.
    let t = &r["totals"];
    let sum = |k: &str| docs.iter().map(|d| d[k].as_i64().unwrap()).sum::<i64>();
    assert_eq!(t["documents"], 3);
    assert_eq!(t["proposed"], 3);
    for k in [
        "model_calls",
        "tool_calls",
        "fields_proposed",
        "tokens",
        "fields_expected",
        "fields_found",
        "fields_acceptable",
        "values_correct",
    ] {
        assert_eq!(t[k].as_i64().unwrap(), sum(k), "{k}");
    }
    let recall = t["field_recall"].as_f64().unwrap();
    assert!((recall - sum("fields_found") as f64 / sum("fields_expected") as f64).abs() < 1e-9);
    let labelled = (sum("fields_found") + sum("fields_acceptable")) as f64;
    let precision = t["field_precision"].as_f64().unwrap();
    assert!((precision - labelled / sum("fields_proposed") as f64).abs() < 1e-9);
    let strict = t["strict_precision"].as_f64().unwrap();
    assert!((strict - sum("fields_found") as f64 / sum("fields_proposed") as f64).abs() < 1e-9);
    // The shipped labels name the proposals' other real fields: some match an acceptable one.
    assert!(sum("fields_acceptable") > 0, "{t}");
    // Every proposal's extraction is checked against its schema; the offline model's are valid.
    for d in docs {
        assert_eq!(d["schema_valid"], json!(true), "{d}");
    }
    assert_eq!(
        (t["answers"].as_i64(), t["valid_answers"].as_i64()),
        (Some(3), Some(3))
    );
    // Per split, language and kind: the groups partition the documents.
    assert_eq!(r["by_split"]["dev"], *t);
    assert_eq!(r["by_split"].as_object().unwrap().len(), 1);
    assert_eq!(r["by_language"]["de"]["documents"], 2);
    assert_eq!(r["by_language"]["en"]["documents"], 1);
    assert_eq!(r["by_kind"]["invoice"]["documents"], 2);
    assert_eq!(r["by_kind"]["receipt"]["documents"], 1);
    let de_found: i64 =
        docs[0]["fields_found"].as_i64().unwrap() + docs[2]["fields_found"].as_i64().unwrap();
    assert_eq!(r["by_language"]["de"]["fields_found"], de_found);
    // The documents really went through the queue: three auto_create jobs, all succeeded.
    let jobs: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM agentd_jobs WHERE kind = 'auto_create' AND state = 'succeeded'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(jobs, 3);
    // Then the org's nightly review, with the same provider: the org's first tag made, its
    // three documents untagged and proposed, one proactive_suggestion job, one attempt.
    let n = &r["nightly"];
    assert_eq!(n["state"], "succeeded", "{n}");
    assert_eq!(n["attempts"], 1, "{n}");
    assert_eq!(n["run_status"], "succeeded", "{n}");
    assert_eq!(n["signals"]["untagged_documents"], 3, "{n}");
    assert!(n["model_calls"].as_i64().unwrap() >= 1, "{n}");
    assert!(n["tokens"].as_i64().unwrap() > 0, "{n}");
    // Every suggestion the run wrote is counted, and the offline model's (a tag for each
    // untagged document) are all about documents the overview listed.
    let (written, run_tokens): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM suggestions s WHERE s.run_id = r.id),
                r.input_tokens + r.output_tokens
           FROM agent_runs r JOIN agentd_jobs j ON j.id = r.job_id
          WHERE j.kind = 'proactive_suggestion'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(written >= 1, "{n}");
    assert_eq!(n["suggestions"], written, "{n}");
    assert_eq!(n["by_kind"]["tag_documents"], written, "{n}");
    assert_eq!(n["grounded"], written, "{n}");
    assert_eq!(n["tokens"], run_tokens, "{n}");
    assert_eq!(n["titles"].as_array().map(Vec::len), Some(written as usize));
}

#[tokio::test]
async fn eval_bad_input_exits_2_naming_the_problem() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "Total: 1\n").unwrap();
    std::fs::write(
        dir.path().join("a.labels.toml"),
        format!("{HEAD}[fields]\ntotal = {{ value = 1, alias = [] }}\n"),
    )
    .unwrap();
    let d = dir.path().to_str().unwrap();
    let out = agentd(&db, &["eval", "--dir", d]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("a.labels.toml: fields.total.alias: unknown key"),
        "{err}"
    );
    let out = agentd(&db, &["eval", "--only", "no_such_sample"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no sample `no_such_sample`"));
    let out = agentd(&db, &["eval", "--provider", "claude"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("--provider must be offline, openai or anthropic")
    );
    // Nothing was enqueued by the refused runs.
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM agentd_jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(jobs, 0);
}

#[tokio::test]
async fn eval_guided_turns_guided_mode_on_and_says_so() {
    let db = TestDb::new().await;
    let out = agentd(
        &db,
        &[
            "eval",
            "--provider",
            "offline",
            "--guided",
            "--json",
            "--only",
            "invoice_en",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(r["guided"], true);
    assert_eq!(r["documents"][0]["status"], "proposed");
    check_doc(&r["documents"][0]);
}

/// Runs `agentd eval` on `only` with `extra` flags; returns the output.
fn eval_only(db: &TestDb, only: &str, extra: &[&str]) -> Output {
    let mut args = vec!["eval", "--provider", "offline", "--only", only];
    args.extend_from_slice(extra);
    agentd(db, &args)
}

#[tokio::test]
async fn a_run_below_its_baseline_exits_1_naming_the_metric_and_split() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("base.json");
    let saved_s = saved.to_str().unwrap();
    // A run stored as the baseline, then the same run against it: no regression.
    let out = eval_only(
        &db,
        "invoice_en,receipt_ocr",
        &["--save", saved_s, "--no-nightly"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stored: Value = serde_json::from_slice(&std::fs::read(&saved).unwrap()).unwrap();
    // `--no-nightly`: no nightly review, in the report or the queue.
    assert!(stored.get("nightly").is_none(), "{stored}");
    let nightly: i64 =
        sqlx::query_scalar("SELECT count(*) FROM agentd_jobs WHERE kind = 'proactive_suggestion'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(nightly, 0);
    let dev = &stored["by_split"]["dev"];
    let recall = dev["field_recall"].as_f64().unwrap();
    // (A baseline above what this code reaches is made by raising the stored figure, even past
    // 100 %: the comparison is what is tested.)
    assert!(recall > 0.3, "{dev}");
    let out = eval_only(&db, "invoice_en,receipt_ocr", &["--baseline", saved_s]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("no regression against"), "{err}");

    // A baseline whose recall is higher than this code reaches: exit 1, naming the metric, the
    // split and both figures; precision and accuracy, unchanged, are not named.
    let mut better = stored.clone();
    let expected = dev["fields_expected"].as_i64().unwrap();
    better["by_split"]["dev"]["field_recall"] = json!(recall + 0.1);
    let f = dir.path().join("better.json");
    std::fs::write(&f, better.to_string()).unwrap();
    let out = eval_only(
        &db,
        "invoice_en,receipt_ocr",
        &["--baseline", f.to_str().unwrap()],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let found = dev["fields_found"].as_i64().unwrap();
    let want = format!(
        "field_recall on the dev split fell from {:.1}% ({found}/{expected}) to {:.1}% ({found}/{expected})",
        100.0 * (recall + 0.1),
        100.0 * recall
    );
    assert!(err.contains("eval regression against"), "{err}");
    assert!(err.contains(&want), "{err}\nwanted: {want}");
    assert!(!err.contains("value_accuracy on"), "{err}");
    assert!(!err.contains("field_precision on"), "{err}");
    // Within the tolerance it passes: the drop is 10 points, the tolerance 15.
    let out = eval_only(
        &db,
        "invoice_en,receipt_ocr",
        &["--baseline", f.to_str().unwrap(), "--tolerance", "0.15"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Value accuracy above the run's: named as well.
    let mut acc = stored.clone();
    let a = dev["value_accuracy"].as_f64().unwrap();
    acc["by_split"]["dev"]["value_accuracy"] = json!(a + 0.05);
    std::fs::write(&f, acc.to_string()).unwrap();
    let out = eval_only(
        &db,
        "invoice_en,receipt_ocr",
        &["--baseline", f.to_str().unwrap()],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("value_accuracy on the dev split fell from"),
        "{err}"
    );

    // Another set of documents than the baseline's cannot be compared: an error, not a pass.
    let out = eval_only(&db, "invoice_en", &["--baseline", saved_s]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the baseline scored 2 documents in it, this run 1"),
        "{err}"
    );
    // A file that is no stored report, a bad tolerance or split: exit 2 before any run.
    std::fs::write(&f, "{}").unwrap();
    let out = eval_only(&db, "invoice_en", &["--baseline", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a stored eval report"));
    let out = eval_only(&db, "invoice_en", &["--tolerance", "2"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tolerance must be a share"));
    let out = eval_only(&db, "invoice_en", &["--split", "train"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--split must be dev, test or all"));
}

#[tokio::test]
async fn the_eval_worker_leaves_another_orgs_waiting_job_alone() {
    let db = TestDb::new().await;
    // Production: an org with a document whose auto_create job waits (enqueued first, so an
    // unscoped worker would claim it first).
    let out = agentd(
        &db,
        &[
            "documents",
            "add",
            "--org",
            "production",
            "--name",
            "invoice.txt",
            "--text-file",
            "samples/eval/invoice_en.txt",
            "--auto-create",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = eval_only(
        &db,
        "invoice_en,payslip",
        &["--json", "--org", "eval-isolated"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["totals"]["proposed"], 2, "{r}");
    // The production job is still waiting, never claimed; its document still queued.
    let (state, attempt): (String, i32) = sqlx::query_as(
        "SELECT j.state, j.attempt FROM agentd_jobs j JOIN orgs o ON o.id::text = j.payload->>'org_id'
          WHERE o.name = 'production'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((state.as_str(), attempt), ("available", 0));
    let status: String = sqlx::query_scalar(
        "SELECT d.auto_create_status FROM documents d JOIN orgs o ON o.id = d.org_id
          WHERE o.name = 'production'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(status, "queued");
    // The eval's own jobs all ran.
    let done: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM agentd_jobs WHERE kind = 'auto_create' AND state = 'succeeded'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(done, 2);
    // An org that exists already is not the eval's: refused before anything is enqueued.
    let out = eval_only(&db, "invoice_en", &["--org", "production"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("--org production: an org of that name exists already"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The production job, the eval's two auto_creates and its org's nightly review.
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM agentd_jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(jobs, 4);
}

#[tokio::test]
async fn a_scoped_claim_takes_only_its_orgs_jobs() {
    use agentd::queue::{NewJob, enqueue, store};
    let db = TestDb::new().await;
    let (a, b) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    for (org, n) in [(b, 1), (a, 2), (b, 3)] {
        enqueue(
            &db.pool,
            &NewJob::new(
                "auto_create",
                json!({"org_id": org, "document_id": uuid::Uuid::new_v4(), "n": n}),
            ),
        )
        .await
        .unwrap();
    }
    let lease = chrono::Duration::seconds(30);
    let now = chrono::Utc::now();
    let kinds = vec!["auto_create".to_string()];
    let got = store::claim_scoped(&db.pool, &kinds, Some(a), None, 10, "w", now, lease)
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload["n"], 2);
    // Nothing more of org a; org b's two jobs are still there for an unscoped claim.
    let again = store::claim_scoped(&db.pool, &kinds, Some(a), None, 10, "w", now, lease)
        .await
        .unwrap();
    assert!(again.is_empty());
    let rest = store::claim(&db.pool, &kinds, 10, "w", now, lease)
        .await
        .unwrap();
    let mut ns: Vec<i64> = rest
        .iter()
        .map(|j| j.payload["n"].as_i64().unwrap())
        .collect();
    ns.sort();
    assert_eq!(ns, [1, 3]);
}

/// With constrained calls the offline model answers the one call for the schema and the prompt
/// (issue 28, item 5): the same proposals in at most 3 model calls a document (the one call,
/// the extraction, a summary round only when a value is flagged), fewer than step by step, and
/// the eval counts each of them.
#[tokio::test]
async fn the_one_call_proposes_the_same_fields_in_fewer_counted_calls() {
    let run = |constrained: bool| {
        let db_fut = TestDb::new();
        async move {
            let db = db_fut.await;
            let mut args = vec![
                "eval",
                "--provider",
                "offline",
                "--json",
                "--only",
                "invoice_en,receipt_ocr,invoice_de",
            ];
            if constrained {
                args.push("--constrained");
            }
            let out = agentd(&db, &args);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let r: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
            r["documents"].as_array().unwrap().clone()
        }
    };
    let (step, one) = (run(false).await, run(true).await);
    for (a, b) in step.iter().zip(&one) {
        assert_eq!(b["status"], "proposed", "{b}");
        assert_eq!(a["field_recall"], b["field_recall"], "{a}\n{b}");
        assert_eq!(a["value_accuracy"], b["value_accuracy"], "{a}\n{b}");
        let (calls_a, calls_b) = (
            a["model_calls"].as_i64().unwrap(),
            b["model_calls"].as_i64().unwrap(),
        );
        assert!((2..=3).contains(&calls_b), "{b}");
        assert!(calls_b < calls_a, "{calls_b} vs {calls_a}");
        assert!(b["tokens"].as_i64().unwrap() < a["tokens"].as_i64().unwrap());
    }
}

/// Review D17: `agentd eval` on a shared database. `--base-url` without an explicit key is
/// refused (the configured OPENAI_API_KEY is not sent to a typed URL) before anything is made;
/// the eval's worker runs none of the fleet's maintenance — another org's expired lease is not
/// rescued, its old finished job not purged, with every interval at 1 s; and the eval's org is
/// inactive at the end, so the nightly cron skips it.
#[tokio::test]
async fn the_eval_sends_no_configured_key_to_its_url_runs_no_maintenance_and_ends_inactive() {
    let db = TestDb::new().await;
    let run = |args: &[&str], key: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_agentd"));
        c.args(args)
            .env("DATABASE_URL", &db.url)
            .env("AGENTD_HTTP__ADDR", "")
            .env("OPENAI_API_KEY", "sk-configured-D17-secret")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("AGENTD_EVAL_API_KEY")
            .env("AGENTD_WORKER__RESCUE_INTERVAL_SECS", "1")
            .env("AGENTD_RETENTION__INTERVAL_SECS", "1")
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if let Some(k) = key {
            c.env("AGENTD_EVAL_API_KEY", k);
        }
        c.output().expect("run agentd")
    };
    let out = run(
        &[
            "eval",
            "--only",
            "invoice_en",
            "--base-url",
            "http://127.0.0.1:9/v1",
        ],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--base-url takes --api-key"), "{stderr}");
    let orgs: i64 = sqlx::query_scalar("SELECT count(*) FROM orgs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(orgs, 0, "refused before an org or a job was made");

    // Another org's rows that maintenance would act on: a job whose lease expired an hour ago
    // (the rescuer re-queues it) and a job finished 30 days ago (retention deletes it).
    let other = agentd::store::orgs::ensure(&db.pool, "production")
        .await
        .unwrap()
        .id;
    let expired: i64 = sqlx::query_scalar(
        "INSERT INTO agentd_jobs (kind, payload, state, attempt, started_at, lease_expires_at,
                                  locked_by)
         VALUES ('approval_expiry', jsonb_build_object('org_id', $1::text), 'running', 1,
                 now() - interval '2 hours', now() - interval '1 hour', 'gone-host:1:w1')
         RETURNING id",
    )
    .bind(other)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let old: i64 = sqlx::query_scalar(
        "INSERT INTO agentd_jobs (kind, payload, state, attempt, finished_at)
         VALUES ('approval_expiry', jsonb_build_object('org_id', $1::text), 'succeeded', 1,
                 now() - interval '30 days')
         RETURNING id",
    )
    .bind(other)
    .fetch_one(&db.pool)
    .await
    .unwrap();

    let out = run(
        &[
            "eval",
            "--provider",
            "offline",
            "--only",
            "invoice_en,payslip",
            "--json",
            "--org",
            "eval-d17",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["totals"]["proposed"], 2, "{r}");
    let state: String = sqlx::query_scalar("SELECT state::text FROM agentd_jobs WHERE id = $1")
        .bind(expired)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        state, "running",
        "the eval's worker rescued another org's job"
    );
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM agentd_jobs WHERE id = $1")
        .bind(old)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        kept, 1,
        "the eval's worker purged another org's finished job"
    );
    let active: bool = sqlx::query_scalar("SELECT active FROM orgs WHERE name = 'eval-d17'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(
        !active,
        "the eval's org stays active: the nightly cron would review it"
    );
    let production: bool = sqlx::query_scalar("SELECT active FROM orgs WHERE id = $1")
        .bind(other)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(production, "only the eval's org is deactivated");
}

/// The bars of the chart `<svg id="{id}" …>…</svg>` in `html`: (category, series, value).
fn bars(html: &str, id: &str) -> Vec<(String, String, Option<f64>)> {
    let svg = chart_svg(html, id);
    let attr = |bar: &str, name: &str| -> String {
        bar.split(&format!(r#"{name}=""#))
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or_else(|| panic!("a bar without {name}: {bar}"))
            .to_string()
    };
    svg.split(r#"<rect class="bar""#)
        .skip(1)
        .map(|bar| {
            let value = attr(bar, "data-value");
            (
                attr(bar, "data-category"),
                attr(bar, "data-series"),
                (!value.is_empty()).then(|| value.parse().expect("a number")),
            )
        })
        .collect()
}

/// The `<svg>` element of `id` in `html`.
fn chart_svg(html: &str, id: &str) -> String {
    let start = html
        .find(&format!(r#"<svg id="{id}""#))
        .unwrap_or_else(|| panic!("no chart {id} in the page"));
    let len = html[start..].find("</svg>").expect("the chart ends") + "</svg>".len();
    html[start..start + len].to_string()
}

#[tokio::test]
async fn the_html_page_draws_one_bar_per_kind_and_score_from_the_report_and_loads_nothing() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("eval.html");
    let out = eval_only(
        &db,
        "invoice_en,receipt_ocr,gutschrift_de",
        &["--json", "--no-nightly", "--html", page.to_str().unwrap()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let html = std::fs::read_to_string(&page).unwrap();
    let by_kind = r["by_kind"].as_object().unwrap();
    assert_eq!(by_kind.len(), 3, "{by_kind:?}");
    let drawn = bars(&html, agentd::eval::html::BY_KIND);
    // One bar per kind and score, each the report's figure.
    assert_eq!(drawn.len(), 4 * by_kind.len(), "{drawn:?}");
    for (kind, series, value) in &drawn {
        let key = match series.as_str() {
            "recall" => "field_recall",
            "strict precision" => "strict_precision",
            "precision" => "field_precision",
            "value accuracy" => "value_accuracy",
            other => panic!("a series the report has no figure for: {other}"),
        };
        let want = by_kind[kind][key]
            .as_f64()
            .unwrap_or_else(|| panic!("{kind} {key}"));
        assert_eq!(*value, Some(want), "{kind} {series}");
    }
    // One per language (en, de) and a token bar per kind; every document in the table.
    let languages: std::collections::BTreeSet<String> = bars(&html, "scores-by-language")
        .into_iter()
        .map(|b| b.0)
        .collect();
    assert_eq!(languages.into_iter().collect::<Vec<_>>(), ["de", "en"]);
    assert_eq!(bars(&html, "tokens-by-kind").len(), 3);
    for sample in ["invoice_en", "receipt_ocr", "gutschrift_de"] {
        assert!(html.contains(&format!("<td>{sample}</td>")), "{sample}");
    }
    // Nothing loads, nothing is left unrendered.
    for stray in [
        "<script",
        "src=",
        "href=",
        "NaN",
        "undefined",
        "[object",
        ">null<",
    ] {
        assert!(!html.contains(stray), "{stray} in the page");
    }
    assert!(
        !html.contains("against-baseline"),
        "no baseline, no comparison"
    );
}

#[tokio::test]
async fn a_stored_report_is_drawn_without_a_run_and_the_readme_picture_is_the_baselines() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("baseline.html");
    let baseline = "samples/eval/baseline.offline.json";
    let out = agentd(
        &db,
        &[
            "eval",
            "--report",
            baseline,
            "--baseline",
            baseline,
            "--html",
            page.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no regression against"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // No run: no org, no job.
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM agentd_jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(jobs, 0);
    let html = std::fs::read_to_string(&page).unwrap();
    let stored: Value = serde_json::from_str(&std::fs::read_to_string(baseline).unwrap()).unwrap();
    let kinds = stored["by_kind"].as_object().unwrap().len();
    assert_eq!(bars(&html, agentd::eval::html::BY_KIND).len(), 4 * kinds);
    // Dev and test, each with the baseline's bar beside this report's: equal here.
    let against = bars(&html, "against-baseline");
    assert_eq!(against.len(), 2 * 6, "{against:?}");
    for pair in against.chunks(2) {
        assert_eq!(pair[0].2, pair[1].2, "{pair:?}");
    }
    // The README's picture is this chart of the committed baseline, as this build draws it.
    let picture = std::fs::read_to_string("docs/eval-by-kind.svg").unwrap_or_default();
    assert_eq!(
        picture.trim_end(),
        chart_svg(&html, agentd::eval::html::BY_KIND),
        "docs/eval-by-kind.svg is not the baseline's chart as drawn today: \
         scripts/docs-figures --eval-chart writes it"
    );
    // A file that is not a report exits 2 naming it.
    let out = agentd(&db, &["eval", "--report", "README.md"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("--report README.md: not a report stored by --save"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
