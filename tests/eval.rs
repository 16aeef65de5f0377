//! `agentd eval`: the binary runs the labelled samples through the real queue and worker with
//! the offline provider and prints JSON whose figures agree with its own per-field detail; the
//! scorer gives known answers for known inputs; bad labels and flags exit 2 naming the problem.

mod common;

use agentd::eval::labels::{ExpectedField, load_dir, parse_labels};
use agentd::eval::score::{date_candidates, norm_name, number_candidates, score, values_match};
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
    let s = score(&expected, &props, &extracted);
    assert_eq!(
        (s.fields_expected, s.fields_found, s.values_correct),
        (4, 3, 2)
    );
    assert_eq!(s.field_recall, 0.75);
    assert_eq!(s.value_accuracy, 0.5);
    assert_eq!(s.fields[1].matched.as_deref(), Some("total"));
    assert_eq!(s.fields[3].matched, None);
    // A value cannot count for a field the schema does not have, even if the extraction has it.
    let s = score(&expected[3..], &[], &json!({"currency": "GBP"}));
    assert_eq!((s.fields_found, s.values_correct), (0, 0));
    // No extraction at all: recall still counts, accuracy is zero.
    let s = score(&expected, &props, &Value::Null);
    assert_eq!((s.fields_found, s.values_correct), (3, 0));
}

#[test]
fn labels_errors_name_the_file_and_key() {
    let f = Path::new("x.labels.toml");
    let e = parse_labels(f, "[fields]\ntotal = { valeu = 1 }\n").unwrap_err();
    assert!(
        e.to_string()
            .contains("x.labels.toml: fields.total.valeu: unknown key"),
        "{e}"
    );
    let e = parse_labels(f, "documnet = \"a.txt\"\n[fields]\na = 1\n").unwrap_err();
    assert!(e.to_string().contains("unknown key `documnet`"), "{e}");
    let e = parse_labels(f, "[fields]\na = [1, 2]\n").unwrap_err();
    assert!(e.to_string().contains("fields.a: the value must be"), "{e}");
    let e = parse_labels(f, "description = \"no fields\"\n").unwrap_err();
    assert!(e.to_string().contains("`[fields]` is required"), "{e}");
    // A bare TOML date is read as its ISO string.
    let (_, _, fields) = parse_labels(f, "[fields]\nd = 2026-11-02\n").unwrap();
    assert_eq!(fields[0].value, json!("2026-11-02"));
}

#[test]
fn the_shipped_set_has_at_least_twelve_loadable_samples() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/eval");
    let samples = load_dir(&dir, &[]).expect("samples/eval loads");
    assert!(samples.len() >= 12, "{} samples", samples.len());
    for s in &samples {
        assert!(!s.text.trim().is_empty(), "{} has no text", s.name);
        assert!(!s.fields.is_empty(), "{} has no labels", s.name);
    }
    let big = samples
        .iter()
        .find(|s| s.name == "multipage_invoice")
        .expect("multipage");
    assert!(big.text.len() > 60_000, "{} bytes", big.text.len());
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
        assert!(d["rounds"].as_i64().unwrap() >= 1);
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
        "rounds",
        "tool_calls",
        "tokens",
        "fields_expected",
        "fields_found",
        "values_correct",
    ] {
        assert_eq!(t[k].as_i64().unwrap(), sum(k), "{k}");
    }
    let recall = t["field_recall"].as_f64().unwrap();
    assert!((recall - sum("fields_found") as f64 / sum("fields_expected") as f64).abs() < 1e-9);
    // The documents really went through the queue: three auto_create jobs, all succeeded.
    let jobs: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM agentd_jobs WHERE kind = 'auto_create' AND state = 'succeeded'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(jobs, 3);
}

#[tokio::test]
async fn eval_bad_input_exits_2_naming_the_problem() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "Total: 1\n").unwrap();
    std::fs::write(
        dir.path().join("a.labels.toml"),
        "[fields]\ntotal = { value = 1, alias = [] }\n",
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
    let out = agentd(&db, &["eval", "--provider", "anthropic"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--provider must be offline or openai"));
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
