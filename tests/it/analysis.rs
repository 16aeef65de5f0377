//! The document analysis in the auto_create pipeline (issue 28), against a real database with the
//! scripted provider: the candidates reach the model (and name the fields of a constrained
//! `create_schema`), an extracted value the document does not contain is flagged on the stored
//! extraction and in the document's report, and a field named after a personal-data token or a
//! document value is renamed before the schema is stored.

use crate::common;
use agentd::app::App;
use agentd::clock::{SharedClock, SystemClock};
use agentd::documents::add_document;
use agentd::llm::scripted::{ScriptedProvider, Turn};
use agentd::llm::{
    Block, CompletionRequest, CompletionResponse, FinishReason, LlmError, Message, Role, Usage,
};
use common::{TestDb, wait_until};
use serde_json::{Value, json};
use std::sync::Arc;
use uuid::Uuid;

const INVOICE_DE: &str = include_str!("../../samples/eval/invoice_de.txt");

async fn org(db: &TestDb) -> Uuid {
    agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id
}

/// Runs an auto_create worker until `doc` reaches a final status; returns that status.
async fn drain(app: &App, doc: Uuid) -> String {
    let (w, stop) = common::start_worker(app, "auto_create", None).await;
    let pool = app.pool.clone();
    wait_until(60, "the document reaches a final status", || {
        let pool = pool.clone();
        async move {
            let s: String =
                sqlx::query_scalar("SELECT auto_create_status FROM documents WHERE id = $1")
                    .bind(doc)
                    .fetch_one(&pool)
                    .await
                    .unwrap();
            matches!(s.as_str(), "proposed" | "failed" | "skipped")
        }
    })
    .await;
    wait_until(10, "jobs finished", || {
        let pool = pool.clone();
        async move {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM agentd_jobs WHERE state IN ('available','running')",
            )
            .fetch_one(&pool)
            .await
            .unwrap();
            n == 0
        }
    })
    .await;
    stop.cancel();
    w.join().await;
    sqlx::query_scalar("SELECT auto_create_status FROM documents WHERE id = $1")
        .bind(doc)
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

fn answer(content: Vec<Block>, finish: FinishReason) -> Result<CompletionResponse, LlmError> {
    Ok(CompletionResponse {
        message: Message {
            role: Role::Assistant,
            content,
        },
        usage: Usage {
            input_tokens: 100,
            output_tokens: 20,
            ..Default::default()
        },
        finish,
        model: "scripted".into(),
    })
}

fn call(name: &str, args: Value) -> Result<CompletionResponse, LlmError> {
    answer(
        vec![Block::ToolUse {
            id: format!("c_{name}"),
            name: name.into(),
            arguments: args.to_string(),
        }],
        FinishReason::ToolUse,
    )
}

/// The newest tool result in the transcript, parsed.
fn last_result(req: &CompletionRequest) -> Value {
    req.messages
        .iter()
        .rev()
        .flat_map(|m| m.content.iter())
        .find_map(|b| match b {
            Block::ToolResult { content, .. } => serde_json::from_str(content).ok(),
            _ => None,
        })
        .unwrap_or(Value::Null)
}

/// create_schema with `fields`, then a prompt, an extraction answered with `extracted`, a summary.
fn script(
    fields: Value,
    extracted: fn(&CompletionRequest) -> Result<CompletionResponse, LlmError>,
) -> Vec<Turn> {
    vec![
        Turn::tool(
            "a",
            "create_schema",
            json!({"name": "Rechnung", "fields": fields}),
        ),
        Turn::Dynamic(|req| {
            let revid = last_result(req)["schema_revid"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            call(
                "create_prompt",
                json!({"name": "Rechnung", "content": "Extract the fields.", "schema_revid": revid}),
            )
        }),
        Turn::Dynamic(|req| {
            let revid = last_result(req)["prompt_revid"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            call("run_extraction", json!({"prompt_revid": revid}))
        }),
        Turn::Dynamic(extracted),
        Turn::text("Proposed a schema, a prompt and an extraction."),
    ]
}

fn json_answer(v: Value) -> Result<CompletionResponse, LlmError> {
    answer(
        vec![Block::Text {
            text: v.to_string(),
        }],
        FinishReason::EndTurn,
    )
}

fn first_user_text(req: &CompletionRequest) -> String {
    req.messages
        .iter()
        .find(|m| m.role == Role::User)
        .map(|m| m.joined_text())
        .unwrap_or_default()
}

#[tokio::test]
async fn candidates_reach_the_model_and_are_each_decided_in_the_one_call() {
    let db = TestDb::new().await;
    let mut config = common::test_config();
    config.llm.constrained_calls = agentd::config::Constrained::On;
    let mut app = common::app_with(&db, Arc::new(SystemClock) as SharedClock, config);
    let mut turns = script(
        json!([{"name": "invoice_number", "type": "string"}, {"name": "total", "type": "number"}]),
        |req| {
            // The extraction request carries the analysis' readings of the schema's fields,
            // after the document text.
            let last = req
                .messages
                .last()
                .map(|m| m.joined_text())
                .unwrap_or_default();
            assert!(
                last.starts_with(agentd::analysis::READINGS_START)
                    && last.contains(r#""invoice_number":"RE-2026-1183""#)
                    && last.contains(r#""total":1763.58"#),
                "{last}"
            );
            json_answer(json!({"invoice_number": "RE-2026-1183", "total": 1763.58}))
        },
    );
    // Nothing flagged under constrained calls: the summary comes from the run's records.
    turns.pop();
    let p = Arc::new(ScriptedProvider::new(turns));
    app.provider = p.clone();
    let org = org(&db).await;
    let (doc, _) = add_document(&app, org, "rechnung.txt", INVOICE_DE, true)
        .await
        .unwrap();
    assert_eq!(drain(&app, doc).await, "proposed");
    p.assert_complete();
    let requests = p.requests.lock().unwrap().clone();
    let first = first_user_text(&requests[0]);
    // The candidate list, fenced like the text, with English names and the labels as written.
    assert!(first.contains("<candidates kind=\"invoice\">"), "{first}");
    assert!(
        first.contains("invoice_number: string = RE-2026-1183 (label: Rechnungsnummer)"),
        "{first}"
    );
    assert!(
        first.contains("total: number = 1763.58 (label: Gesamtbetrag)"),
        "{first}"
    );
    assert!(first.contains("line_items: array of {"), "{first}");
    // The model is told what the redaction tokens the document will show are (an IBAN), and
    // only those.
    assert!(
        first.contains("IBAN_n (n a number) hide personal data"),
        "{first}"
    );
    assert!(!first.contains("PHONE_n"), "{first}");
    // ... in words the provider boundary leaves alone (a token-shaped example would leave as
    // a token of its own, review L1).
    assert!(!first.contains("ID_1, ID_2"), "{first}");
    // The first round is the one call for the schema and the prompt: every candidate becomes a
    // field, and the schema is asked for as the fields to add.
    let rf = requests[0]
        .response_format
        .as_ref()
        .expect("a constrained call");
    assert_eq!(rf["json_schema"]["name"], "proposal", "{rf}");
    assert!(
        rf.pointer("/json_schema/schema/properties/schema/properties/drop")
            .is_none(),
        "nothing offered to leave out: {rf}"
    );
    assert_eq!(
        rf.pointer(
            "/json_schema/schema/properties/schema/properties/more/items/properties/name/type"
        ),
        Some(&json!("string")),
        "a field the analysis missed can still be added: {rf}"
    );
    // Everything the model answered is in the document: nothing flagged.
    let ungrounded: Vec<String> =
        sqlx::query_scalar("SELECT ungrounded FROM extractions WHERE document_id = $1")
            .bind(doc)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(ungrounded.is_empty(), "{ungrounded:?}");
}

#[tokio::test]
async fn an_ungrounded_value_is_flagged_and_one_the_document_reads_is_filled_in() {
    let db = TestDb::new().await;
    let mut app = common::app(&db, Arc::new(SystemClock) as SharedClock);
    let p = Arc::new(ScriptedProvider::new(script(
        json!({"invoice_number": "string", "invoice_date": "date", "net_amount": "number",
               "total": "number", "customer_number": "string", "vat": "number",
               "contract_number": "string"}),
        // Written differently from the document (ISO date, plain numbers) but there, except
        // the total (invented), the customer number (another one) and the contract number
        // (the document has none); the VAT left empty.
        |_| {
            json_answer(
                json!({"invoice_number": "RE-2026-1183", "invoice_date": "2026-11-05",
            "net_amount": 1482, "total": 9999.99, "customer_number": "K-99999",
            "vat": null, "contract_number": "V-777"}),
            )
        },
    )));
    app.provider = p.clone();
    let org = org(&db).await;
    let (doc, _) = add_document(&app, org, "rechnung.txt", INVOICE_DE, true)
        .await
        .unwrap();
    assert_eq!(drain(&app, doc).await, "proposed");
    p.assert_complete();
    let (result, ungrounded): (Value, Vec<String>) =
        sqlx::query_as("SELECT result, ungrounded FROM extractions WHERE document_id = $1")
            .bind(doc)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    // What the document reads under the field's label replaced the invented and the empty
    // values; what it has no reading for stays as answered, flagged.
    assert_eq!(result["total"], json!(1763.58), "{result}");
    assert_eq!(result["vat"], json!(281.58), "{result}");
    assert_eq!(result["customer_number"], "K-40712", "{result}");
    assert_eq!(result["contract_number"], "V-777", "{result}");
    assert_eq!(result["invoice_number"], "RE-2026-1183", "{result}");
    assert_eq!(ungrounded, vec!["/contract_number"]);
    // The reviewer's read of the document shows the flag beside the result.
    let report = agentd::documents::document_report(&app, doc)
        .await
        .unwrap()
        .unwrap();
    let shown: Vec<String> =
        serde_json::from_value(report["extraction"]["ungrounded"].clone()).unwrap();
    assert_eq!(shown, ungrounded);
    // The model saw the flag and each value that was filled in, with what it had answered.
    let requests = p.requests.lock().unwrap().clone();
    let seen = requests
        .last()
        .map(last_result)
        .expect("the summary round saw run_extraction's result");
    assert_eq!(seen["ungrounded"], json!(["/contract_number"]), "{seen}");
    let mut filled: Vec<(String, Value)> = seen["filled_from_document"]
        .as_array()
        .expect("filled_from_document")
        .iter()
        .map(|f| {
            (
                f["field"].as_str().unwrap_or_default().to_string(),
                f["was"].clone(),
            )
        })
        .collect();
    filled.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        filled,
        vec![
            ("customer_number".to_string(), json!("K-99999")),
            ("total".to_string(), json!(9999.99)),
            ("vat".to_string(), Value::Null),
        ],
        "{seen}"
    );
    assert!(seen.get("empty_but_in_document").is_none(), "{seen}");
}

#[tokio::test]
async fn a_personal_data_token_or_a_document_value_is_no_field_name() {
    let db = TestDb::new().await;
    let mut app = common::app(&db, Arc::new(SystemClock) as SharedClock);
    let p = Arc::new(ScriptedProvider::new(script(
        // `phone_1` and `PERSON_2` are redaction tokens; `re_2026_1183` is the invoice's number.
        json!({"phone_1": "string", "PERSON_2": "string", "re_2026_1183": "string",
               "total": "number"}),
        |_| {
            json_answer(json!({"phone": null, "person_name": null,
            "invoice_number": "RE-2026-1183", "total": 1763.58}))
        },
    )));
    app.provider = p.clone();
    let org = org(&db).await;
    let (doc, _) = add_document(&app, org, "rechnung.txt", INVOICE_DE, true)
        .await
        .unwrap();
    assert_eq!(drain(&app, doc).await, "proposed");
    p.assert_complete();
    let rf: Value = sqlx::query_scalar(
        "SELECT s.response_format FROM schemas s JOIN documents d
            ON d.proposed_schema_id = s.schema_id AND d.proposed_schema_version = s.version
         WHERE d.id = $1",
    )
    .bind(doc)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let mut names: Vec<String> = rf["json_schema"]["schema"]["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    names.sort();
    assert_eq!(names, ["invoice_number", "person_name", "phone", "total"]);
    let mut required: Vec<String> =
        serde_json::from_value(rf["json_schema"]["schema"]["required"].clone()).unwrap();
    required.sort();
    assert_eq!(required, names);
    // The model is told what was renamed.
    let requests = p.requests.lock().unwrap().clone();
    let created = last_result(&requests[1]);
    let notes = created["completed"].to_string();
    assert!(
        notes.contains("renamed field \\\"phone_1\\\" to \\\"phone\\\""),
        "{created}"
    );
    assert!(
        notes.contains("\\\"re_2026_1183\\\" to \\\"invoice_number\\\""),
        "{created}"
    );
}

/// An invoice with a table of `rows` items.
fn long_invoice(rows: usize) -> String {
    let mut t = String::from(
        "ACME Supplies Ltd\nINVOICE\nInvoice Number: INV-2026-0500\nInvoice Date: 02/11/2026\n\n\
         Item      Description                          Qty    Unit Price      Amount\n",
    );
    let mut total = 0;
    for k in 1..=rows {
        let (qty, price) = (k % 5 + 1, 10 * k);
        total += qty * price;
        t.push_str(&format!(
            "SKU-{k:03}   Replacement filter cartridge {k:<6}  {qty:>4}   {price:>10}.00   {:>9}.00\n",
            qty * price
        ));
    }
    t.push_str(&format!("\nTotal Due: {total}.00\n"));
    t
}

#[tokio::test]
async fn a_long_table_is_read_by_the_analysis_and_not_asked_of_the_extraction_model() {
    let db = TestDb::new().await;
    let mut app = common::app(&db, Arc::new(SystemClock) as SharedClock);
    let p = Arc::new(ScriptedProvider::new(script(
        json!({"invoice_number": "string", "total_due": "number",
               "line_items": [{"description": "string", "quantity": "number", "amount": "number"}]}),
        |req| {
            // The model is asked for the scalar fields only, and told the table is read for it.
            let rf = req
                .response_format
                .as_ref()
                .expect("the schema's response_format");
            let props = rf
                .pointer("/json_schema/schema/properties")
                .and_then(Value::as_object)
                .expect("properties");
            assert!(
                props.contains_key("invoice_number") && !props.contains_key("line_items"),
                "{rf}"
            );
            let last = req
                .messages
                .last()
                .map(|m| m.joined_text())
                .unwrap_or_default();
            assert!(last.contains("`line_items` (30 rows)"), "{last}");
            json_answer(json!({"invoice_number": "INV-2026-0500", "total_due": null}))
        },
    )));
    app.provider = p.clone();
    let org = org(&db).await;
    let text = long_invoice(30);
    let (doc, _) = add_document(&app, org, "invoice.txt", &text, true)
        .await
        .unwrap();
    assert_eq!(drain(&app, doc).await, "proposed");
    p.assert_complete();
    let result: Value = sqlx::query_scalar("SELECT result FROM extractions WHERE document_id = $1")
        .bind(doc)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let rows = result["line_items"].as_array().expect("the analysis' rows");
    assert_eq!(rows.len(), 30, "{result}");
    assert_eq!(rows[29]["amount"], json!(300), "{result}");
    assert_eq!(result["invoice_number"], "INV-2026-0500");
    // The model and the audit see where the rows came from.
    let requests = p.requests.lock().unwrap().clone();
    let seen = requests
        .last()
        .map(last_result)
        .expect("run_extraction's result");
    assert_eq!(
        seen["tables_from_analysis"],
        json!([{"field": "line_items", "rows": 30}]),
        "{seen}"
    );
}
