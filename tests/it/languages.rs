//! Issue 48, item 3: one vocabulary across languages. A German and an English credit note of
//! one org get one schema — through the offline provider end to end and through a scripted
//! model that names the German one's fields in German — because names in the document's
//! language are named in the canonical language (English), the document's label kept as the
//! field's description; `create_schema`'s result lists each renamed field.

use crate::common::TestDb;
use crate::document_words::{app, drain, org, proposing, report, schema_results};
use agentd::app::App;
use agentd::documents::{add_document, document_report};
use agentd::llm::scripted::ScriptedProvider;
use serde_json::{Value, json};
use std::sync::Arc;
use uuid::Uuid;

const ENGLISH: &str = "Brightline Office Supplies Ltd\n4 Canal Street, Manchester M1 3HE\n\n\
CREDIT NOTE\n\nCredit Note Number: CN-2026-0441\nDate: 12/11/2026\n\
Original Invoice: INV-2026-0917\nReason for credit: Returned office chairs (wrong colour)\n\
Net amount: £410.00\nVAT: £82.00\nCredit amount: £492.00\n";

const GERMAN: &str = "Büro Nord GmbH\nHafenstraße 12, 20457 Hamburg\n\nGUTSCHRIFT\n\n\
Gutschriftsnummer: GS-2026-0552\nDatum: 13.11.2026\nUrsprungsrechnung: RE-2026-0871\n\
Grund der Gutschrift: Rücksendung Bürostühle (falsche Farbe)\nNettobetrag: 410,00 €\n\
MwSt: 77,90 €\nGutschriftsbetrag: 487,90 €\n";

/// Adds a document to `org` and runs its auto_create with `app`'s provider.
async fn upload(app: &App, org: Uuid, name: &str, text: &str) -> Uuid {
    let doc = add_document(app, org, name, text, true).await.unwrap().0;
    drain(app, &[doc]).await;
    doc
}

/// The report's schema id, and its fields as name → description.
async fn schema_of(app: &App, doc: Uuid) -> (String, Vec<(String, String)>) {
    let r = document_report(app, doc).await.unwrap().expect("a report");
    assert_eq!(r["auto_create_status"], "proposed", "{r}");
    let revid = r["schema"]["revid"].as_str().expect("a schema").to_string();
    let id = revid.split(':').next().unwrap_or_default().to_string();
    let fields = r["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or_default().to_string();
            (s("name"), s("description"))
        })
        .collect();
    (id, fields)
}

/// create_schema's result as the model read it (the step's `content`).
async fn create_schema_result(db: &TestDb, doc: Uuid) -> Value {
    let steps = schema_results(db, doc).await;
    let step = steps.first().expect("create_schema's step");
    assert_eq!(step["tool"], "create_schema", "{step}");
    serde_json::from_str(step["content"].as_str().unwrap_or_default()).expect("a JSON result")
}

fn names(fields: &[(String, String)]) -> Vec<&str> {
    fields.iter().map(|(n, _)| n.as_str()).collect()
}

#[tokio::test]
async fn the_offline_provider_gives_a_german_and_an_english_credit_note_one_schema() {
    let db = TestDb::new().await;
    let app = app(&db);
    let org = org(&db, "languages-offline").await;
    let en = upload(&app, org, "credit_note_en.txt", ENGLISH).await;
    let de = upload(&app, org, "gutschrift_de.txt", GERMAN).await;
    let (en_schema, en_fields) = schema_of(&app, en).await;
    let (de_schema, de_fields) = schema_of(&app, de).await;
    assert_eq!(
        de_schema, en_schema,
        "the German note reused the English one's schema"
    );
    for name in [
        "credit_note_number",
        "original_invoice",
        "reason",
        "total",
        "vat",
    ] {
        assert!(names(&en_fields).contains(&name), "{name} in {en_fields:?}");
        assert!(names(&de_fields).contains(&name), "{name} in {de_fields:?}");
    }
    for german in [
        "gutschriftsbetrag",
        "grund_der_gutschrift",
        "gutschriftsnummer",
    ] {
        assert!(!names(&de_fields).contains(&german), "{de_fields:?}");
    }
    // The first document's own labels are the fields' descriptions.
    let described = |name: &str| {
        en_fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, d)| d.clone())
    };
    assert_eq!(described("reason").as_deref(), Some("Reason for credit"));
    assert_eq!(described("total").as_deref(), Some("Credit amount"));
}

#[tokio::test]
async fn a_models_german_names_are_canonical_described_by_the_label_and_reuse_one_schema() {
    let db = TestDb::new().await;
    let mut app = app(&db);
    let org = org(&db, "languages-scripted").await;
    // The English note, named in English by the model.
    app.provider = Arc::new(ScriptedProvider::new(proposing(json!({
        "credit_note_number": "string", "reason": "string", "total": "number"}))));
    let en = upload(&app, org, "credit_note_en.txt", ENGLISH).await;
    // The German one named in German: `rechnungsnummer` is in the lexicon, the others reach it
    // through the glossary (`Grund der Gutschrift` → credit reason → `reason`).
    app.provider = Arc::new(ScriptedProvider::new(proposing(json!({
        "gutschriftsnummer": "string", "grund_der_gutschrift": "string",
        "gutschriftsbetrag": "number"}))));
    let de = upload(&app, org, "gutschrift_de.txt", GERMAN).await;
    let (en_schema, _) = schema_of(&app, en).await;
    let (de_schema, de_fields) = schema_of(&app, de).await;
    assert_eq!(de_schema, en_schema, "one schema for both languages");
    let mut de_names = names(&de_fields);
    de_names.sort();
    assert_eq!(de_names, ["credit_note_number", "reason", "total"]);
    let result = create_schema_result(&db, de).await;
    assert_eq!(result["reused"], true, "{result}");
    let renamed: Vec<(String, String)> = result["canonical_names"]
        .as_array()
        .expect("canonical_names in the result")
        .iter()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("name"), s("canonical"))
        })
        .collect();
    for (given, canonical) in [
        ("gutschriftsnummer", "credit_note_number"),
        ("grund_der_gutschrift", "reason"),
        ("gutschriftsbetrag", "total"),
    ] {
        assert!(
            renamed.contains(&(given.into(), canonical.into())),
            "{given} → {canonical}: {renamed:?}"
        );
    }
    let told = result.to_string();
    assert!(
        told.contains("canonical language"),
        "a note says so: {told}"
    );
    let (_, dropped) = report(&app, de).await;
    assert!(dropped.is_empty(), "nothing left out: {dropped:?}");
}

#[tokio::test]
async fn a_models_german_name_in_a_new_schema_keeps_the_documents_label_as_description() {
    let db = TestDb::new().await;
    let mut app = app(&db);
    let org = org(&db, "languages-described").await;
    app.provider = Arc::new(ScriptedProvider::new(proposing(json!({
        "grund_der_gutschrift": "string", "gutschriftsbetrag": "number",
        "rechnungsnummer": "string"}))));
    let de = upload(&app, org, "gutschrift_de.txt", GERMAN).await;
    let (_, fields) = schema_of(&app, de).await;
    let described = |name: &str| -> Option<String> {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, d)| d.clone())
    };
    assert_eq!(
        described("reason").as_deref(),
        Some("Grund der Gutschrift"),
        "{fields:?}"
    );
    assert_eq!(described("total").as_deref(), Some("Gutschriftsbetrag"));
    // A name the document does not write as a label keeps the name given.
    assert_eq!(
        described("invoice_number").as_deref(),
        Some("rechnungsnummer")
    );
    let result = create_schema_result(&db, de).await;
    assert_eq!(
        result["canonical_names"].as_array().map(Vec::len),
        Some(3),
        "{result}"
    );
}
