//! Proposals worth accepting, the run's side (issue 28, items 4 and 5), against a real
//! PostgreSQL with the scripted provider or an HTTP fake of an OpenAI-compatible server on a
//! real port (never a real model):
//!
//! - reuse before creating: `create_schema` reuses the org's schema for the same kind of
//!   document (as it is, or as a new version with the missing fields), not one of another kind;
//!   rejecting the document that first proposed a schema leaves the proposals that reuse it,
//!   and the version another proposal extended (D6);
//! - the nightly run declares what it makes: an empty answer is nudged, then the suggestion
//!   is written;
//! - a tool without arguments is asked for with `{}` as its only arguments and a small output
//!   cap.

use crate::common;
use agentd::app::App;
use agentd::clock::{SharedClock, SystemClock};
use agentd::llm::openai::{OpenAiProvider, OpenAiSettings};
use agentd::llm::scripted::{ScriptedProvider, Turn};
use agentd::llm::{
    Block, CompletionRequest, CompletionResponse, FinishReason, LlmError, Message, Role, Usage,
};
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use common::TestDb;
use serde_json::{Map, Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const INVOICE: &str = "Invoice Number: INV-77\nInvoice Date: 2026-11-02\nTotal Due: 1,250.00\n\
                       Customer: Blue Fox\nIBAN: DE89 3704 0044 0532 0130 00\n";

fn app(db: &TestDb) -> App {
    common::app(db, Arc::new(SystemClock) as SharedClock)
}

async fn org(db: &TestDb) -> Uuid {
    agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id
}

/// A strict response_format with nullable string fields.
fn strict(name: &str, fields: &[&str]) -> Value {
    let props: Map<String, Value> = fields
        .iter()
        .map(|f| (f.to_string(), json!({"type": ["string", "null"]})))
        .collect();
    json!({"type": "json_schema", "json_schema": {"name": name, "strict": true, "schema": {
        "type": "object", "properties": props, "required": fields,
        "additionalProperties": false}}})
}

/// An active schema of the org, made by a person (no run).
async fn existing_schema(db: &TestDb, org: Uuid, name: &str, fields: &[&str]) -> Uuid {
    let mut conn = db.pool.acquire().await.unwrap();
    let s = agentd::store::schemas::create(
        &mut conn,
        org,
        name,
        &strict(name, fields),
        None,
        Utc::now(),
    )
    .await
    .unwrap();
    sqlx::query("UPDATE schemas SET status = 'active' WHERE schema_id = $1")
        .bind(s.schema_id)
        .execute(&mut *conn)
        .await
        .unwrap();
    s.schema_id
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
            id: "x".into(),
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

/// `create_schema` with `fields`, then a prompt on whatever schema it returned, the extraction
/// (every field null but the invoice number) and a summary.
fn proposal_turns(fields: Value) -> Vec<Turn> {
    vec![
        Turn::tool(
            "a",
            "create_schema",
            json!({"name": "Invoice", "fields": fields}),
        ),
        Turn::Dynamic(|req| {
            let revid = last_result(req)["schema_revid"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            call(
                "create_prompt",
                json!({"name": "Extract invoice", "content": "Extract the invoice fields.",
                       "schema_revid": revid}),
            )
        }),
        Turn::Dynamic(|req| {
            let revid = last_result(req)["prompt_revid"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            call("run_extraction", json!({"prompt_revid": revid}))
        }),
        Turn::Dynamic(|req| {
            let props = req
                .response_format
                .as_ref()
                .and_then(|f| f.pointer("/json_schema/schema/properties"))
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let mut out = Map::new();
            for k in props.keys() {
                out.insert(k.clone(), Value::Null);
            }
            out.insert("invoice_number".into(), json!("INV-77"));
            answer(
                vec![Block::Text {
                    text: Value::Object(out).to_string(),
                }],
                FinishReason::EndTurn,
            )
        }),
        Turn::text("Proposed."),
    ]
}

/// What one auto_create run on `text` left: the run, the document's proposed schema version and
/// the create_schema result the model read.
struct Proposed {
    run: Uuid,
    doc: Uuid,
    schema: (Uuid, i32),
    create_schema_result: Value,
}

/// Runs auto_create on a new document with `turns` through the engine.
async fn propose(db: &TestDb, app: &App, org: Uuid, text: &str, turns: Vec<Turn>) -> Proposed {
    let p = Arc::new(ScriptedProvider::new(turns));
    let mut app = app.clone();
    app.provider = p.clone();
    let (doc, _) = agentd::documents::add_document(&app, org, "invoice.txt", text, false)
        .await
        .unwrap();
    let spec = app.spec("auto_create");
    let mut rs = app.run_spec(spec, org, doc.to_string(), None, format!("Document {doc}"));
    rs.document_id = Some(doc);
    let out = app
        .engine(spec)
        .run(&rs, &CancellationToken::new())
        .await
        .expect("the run ends");
    p.assert_complete();
    assert_eq!(out.status.as_str(), "succeeded", "{out:?}");
    let mut conn = db.pool.acquire().await.unwrap();
    let a = agentd::store::auto_create::artifacts(&mut *conn, org, out.run_id, doc)
        .await
        .unwrap();
    assert!(a.complete(), "a whole proposal: {a:?}");
    agentd::store::auto_create::set_proposed(&mut conn, org, doc, out.run_id, &a, Utc::now())
        .await
        .unwrap();
    let create_schema_result = p
        .requests
        .lock()
        .unwrap()
        .get(1)
        .map(last_result)
        .unwrap_or(Value::Null);
    Proposed {
        run: out.run_id,
        doc,
        schema: a.schema().expect("a schema"),
        create_schema_result,
    }
}

async fn schema_rows(db: &TestDb) -> Vec<(Uuid, i32, Option<Uuid>)> {
    sqlx::query_as("SELECT schema_id, version, run_id FROM schemas ORDER BY schema_id, version")
        .fetch_all(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_matching_org_schema_is_reused_as_it_is_without_a_new_schema_row() {
    let db = TestDb::new().await;
    let app = app(&db);
    let org = org(&db).await;
    let fields = [
        "invoice_number",
        "invoice_date",
        "total_due",
        "customer",
        "iban",
    ];
    let sid = existing_schema(&db, org, "Invoice", &fields).await;
    // The model asks for four of the schema's five fields, one written differently.
    let p = propose(
        &db,
        &app,
        org,
        INVOICE,
        proposal_turns(json!({"Invoice_Number": "string", "total_due": "number",
                              "customer": "string", "invoice_date": "date"})),
    )
    .await;
    assert_eq!(
        schema_rows(&db).await,
        vec![(sid, 1, None)],
        "no new schema row"
    );
    assert_eq!(p.schema, (sid, 1), "the proposal names the org's schema");
    let r = &p.create_schema_result;
    assert_eq!(r["reused"], true, "{r}");
    assert_eq!(r["schema_revid"], format!("{sid}:1"));
    assert!(
        r["note"].as_str().unwrap_or_default().contains("reused"),
        "the model is told: {r}"
    );
    let reused: (Option<Uuid>, Option<i32>) = sqlx::query_as(
        "SELECT reused_schema_id, reused_schema_version FROM agent_runs WHERE id = $1",
    )
    .bind(p.run)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(reused, (Some(sid), Some(1)));
    let extraction_schema: (Uuid, i32) = sqlx::query_as(
        "SELECT p.schema_id, p.schema_version FROM documents d
           JOIN prompts p ON p.prompt_id = d.proposed_prompt_id
                         AND p.version = d.proposed_prompt_version
          WHERE d.id = $1",
    )
    .bind(p.doc)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(extraction_schema, (sid, 1));
}

#[tokio::test]
async fn a_matching_org_schema_missing_fields_gets_a_new_version_not_a_new_schema() {
    let db = TestDb::new().await;
    let app = app(&db);
    let org = org(&db).await;
    let sid = existing_schema(
        &db,
        org,
        "Invoice",
        &["invoice_number", "invoice_date", "total_due", "customer"],
    )
    .await;
    let p = propose(
        &db,
        &app,
        org,
        INVOICE,
        proposal_turns(json!({"invoice_number": "string", "total_due": "number",
                              "customer": "string", "iban": "string"})),
    )
    .await;
    assert_eq!(
        schema_rows(&db).await,
        vec![(sid, 1, None), (sid, 2, Some(p.run))],
        "a new version of the org's schema, made by the run"
    );
    assert_eq!(p.schema, (sid, 2));
    assert_eq!(p.create_schema_result["fields_added"], json!(["iban"]));
    assert_eq!(p.create_schema_result["previous_version"], 1);
    let rf: Value = sqlx::query_scalar(
        "SELECT response_format FROM schemas WHERE schema_id = $1 AND version = 2",
    )
    .bind(sid)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let props = rf
        .pointer("/json_schema/schema/properties")
        .and_then(Value::as_object)
        .unwrap();
    let mut names: Vec<&str> = props.keys().map(String::as_str).collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            "customer",
            "iban",
            "invoice_date",
            "invoice_number",
            "total_due"
        ],
        "the old fields stay, the missing one is added"
    );
    assert_eq!(
        rf.pointer("/json_schema/schema/required")
            .and_then(Value::as_array)
            .map(Vec::len),
        Some(5),
        "still strict: every field required"
    );
}

#[tokio::test]
async fn a_schema_of_another_kind_of_document_is_not_reused() {
    let db = TestDb::new().await;
    let app = app(&db);
    let org = org(&db).await;
    let receipt = existing_schema(
        &db,
        org,
        "Receipt",
        &["merchant", "date", "total", "payment_method", "items"],
    )
    .await;
    let p = propose(
        &db,
        &app,
        org,
        INVOICE,
        proposal_turns(json!({"invoice_number": "string", "total": "number",
                              "customer": "string", "iban": "string", "due_date": "date"})),
    )
    .await;
    assert_ne!(p.schema.0, receipt);
    assert_eq!(p.schema.1, 1);
    assert_eq!(schema_rows(&db).await.len(), 2, "a schema of its own");
    assert!(p.create_schema_result.get("reused").is_none());
}

/// Both kinds known and not the same: the same field names are not enough (in one org, purchase
/// orders and utility bills joined the invoice schema until it reached the field cap).
#[tokio::test]
async fn a_schema_made_for_another_known_kind_is_not_reused_even_with_the_same_fields() {
    let db = TestDb::new().await;
    let app = app(&db);
    let org = org(&db).await;
    let fields = ["invoice_number", "invoice_date", "total_due", "customer"];
    let order = existing_schema(&db, org, "Purchase order", &fields).await;
    let mut conn = db.pool.acquire().await.unwrap();
    agentd::store::schemas::set_document_kind(&mut conn, org, order, 1, "purchase_order")
        .await
        .unwrap();
    drop(conn);
    let p = propose(
        &db,
        &app,
        org,
        INVOICE,
        proposal_turns(json!({"invoice_number": "string", "invoice_date": "date",
                              "total_due": "number", "customer": "string"})),
    )
    .await;
    assert_ne!(p.schema.0, order, "{}", p.create_schema_result);
    assert_eq!(schema_rows(&db).await.len(), 2, "a schema of its own");
    assert!(p.create_schema_result.get("reused").is_none());
    let kind: Option<String> = sqlx::query_scalar(
        "SELECT document_kind FROM schemas WHERE schema_id = $1 AND version = 1",
    )
    .bind(p.schema.0)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        kind.as_deref(),
        Some("invoice"),
        "the new schema's kind is recorded"
    );
}

#[tokio::test]
async fn rejecting_the_first_proposal_leaves_the_schema_another_document_reused() {
    let db = TestDb::new().await;
    let app = app(&db);
    let org = org(&db).await;
    let fields = json!({"invoice_number": "string", "total_due": "number",
                        "customer": "string", "iban": "string"});
    let first = propose(&db, &app, org, INVOICE, proposal_turns(fields.clone())).await;
    let second = propose(&db, &app, org, INVOICE, proposal_turns(fields)).await;
    assert_eq!(
        second.schema, first.schema,
        "the second upload reuses the first's"
    );
    assert_eq!(second.create_schema_result["reused"], true);
    let mut conn = db.pool.acquire().await.unwrap();
    agentd::store::auto_create::reject(&mut conn, org, first.doc, first.run, Utc::now())
        .await
        .unwrap();
    drop(conn);
    let (id, v) = second.schema;
    let left: i64 =
        sqlx::query_scalar("SELECT count(*) FROM schemas WHERE schema_id = $1 AND version = $2")
            .bind(id)
            .bind(v)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(left, 1, "the reused schema stays");
    let state = agentd::store::auto_create::state(&db.pool, Some(org), second.doc)
        .await
        .unwrap()
        .unwrap();
    assert!(state.proposed.complete(), "{:?}", state.proposed);
    let prompts: i64 = sqlx::query_scalar("SELECT count(*) FROM prompts WHERE run_id = $1")
        .bind(second.run)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(prompts, 1, "the second proposal's prompt stays");
}

/// D6: the second upload extends the first's *proposed* version; rejecting the first keeps that
/// version (the second's chain stays whole, the first's fields go to the second's reviewer),
/// and the second proposal is accepted.
#[tokio::test]
async fn rejecting_a_proposal_another_run_extended_keeps_the_version_it_built_on() {
    let db = TestDb::new().await;
    let app = app(&db);
    let org = org(&db).await;
    let first = propose(
        &db,
        &app,
        org,
        INVOICE,
        proposal_turns(json!({"invoice_number": "string", "total_due": "number",
                              "customer": "string"})),
    )
    .await;
    let second = propose(
        &db,
        &app,
        org,
        INVOICE,
        proposal_turns(json!({"invoice_number": "string", "total_due": "number",
                              "customer": "string", "iban": "string"})),
    )
    .await;
    let (sid, v) = first.schema;
    assert_eq!(
        second.schema,
        (sid, v + 1),
        "the second extends the first's version"
    );
    assert_eq!(second.create_schema_result["fields_added"], json!(["iban"]));
    let mut conn = db.pool.acquire().await.unwrap();
    agentd::store::auto_create::reject(&mut conn, org, first.doc, first.run, Utc::now())
        .await
        .unwrap();
    drop(conn);
    assert_eq!(
        schema_rows(&db).await,
        vec![(sid, v, Some(first.run)), (sid, v + 1, Some(second.run))],
        "the version the second built on stays, with its own"
    );
    let first_prompts: i64 = sqlx::query_scalar("SELECT count(*) FROM prompts WHERE run_id = $1")
        .bind(first.run)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(first_prompts, 0, "the rejected run's own prompt is gone");
    let state = agentd::store::auto_create::state(&db.pool, Some(org), second.doc)
        .await
        .unwrap()
        .unwrap();
    assert!(state.proposed.complete(), "{:?}", state.proposed);
    assert_eq!(state.proposed.schema(), Some((sid, v + 1)));
    let mut tx = db.pool.begin().await.unwrap();
    agentd::store::auto_create::accept(&mut tx, org, second.doc, second.run, Utc::now())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let statuses: Vec<(i32, String)> =
        sqlx::query_as("SELECT version, status FROM schemas WHERE schema_id = $1 ORDER BY version")
            .bind(sid)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        statuses,
        vec![(v, "proposed".to_string()), (v + 1, "active".to_string())],
        "the second's version is accepted on a whole chain"
    );
    let doc: String =
        sqlx::query_scalar("SELECT auto_create_status::text FROM documents WHERE id = $1")
            .bind(second.doc)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(doc, "accepted");
}

/// An org with a failed auto-create: a signal worth a suggestion.
async fn org_with_a_signal(db: &TestDb) -> (Uuid, Uuid) {
    let org = org(db).await;
    let mut conn = db.pool.acquire().await.unwrap();
    let doc = agentd::store::documents::insert(
        &mut conn,
        org,
        "scan.txt",
        Some("Total: 1.00\n"),
        &json!({}),
        Utc::now(),
    )
    .await
    .unwrap();
    sqlx::query(
        "UPDATE documents SET auto_create_status = 'failed', auto_create_error = 'max_rounds'
          WHERE id = $1",
    )
    .bind(doc)
    .execute(&mut *conn)
    .await
    .unwrap();
    (org, doc)
}

/// Runs the nightly job's loop for `org` with `app`'s provider.
async fn nightly(app: &App, org: Uuid) -> agentd::agent::RunOutcome {
    let spec = app.spec("proactive_suggestion");
    let night = Utc::now().date_naive();
    let mut rs = app.run_spec(spec, org, night.to_string(), None, "Review the org.".into());
    rs.night = Some(night);
    app.engine(spec)
        .run(&rs, &CancellationToken::new())
        .await
        .expect("the run ends")
}

#[tokio::test]
async fn a_nightly_run_that_answers_with_nothing_is_nudged_and_writes_its_suggestion() {
    let db = TestDb::new().await;
    let mut app = app(&db);
    let (org, doc) = org_with_a_signal(&db).await;
    let p = Arc::new(ScriptedProvider::new(vec![
        Turn::text(""),
        Turn::tool("a", "org_overview", json!({})),
        Turn::tool(
            "b",
            "create_suggestion",
            json!({"kind": "retry_failed", "title": "Retry scan.txt",
                   "message": "Its auto-create failed at the round cap.", "document_id": doc}),
        ),
        Turn::text("Wrote one suggestion."),
    ]));
    app.provider = p.clone();
    let out = nightly(&app, org).await;
    p.assert_complete();
    assert_eq!(
        (out.status.as_str(), out.stop_reason.as_deref()),
        ("succeeded", Some("completed"))
    );
    let requests = p.requests.lock().unwrap().clone();
    let nudge = requests[1]
        .messages
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            Block::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .find(|t| t.starts_with("Not finished"))
        .map(str::to_string);
    assert!(
        nudge.as_deref().is_some_and(
            |n| n.contains("no overview, no suggestion yet") && n.contains("org_overview")
        ),
        "the second request nudges toward the overview: {nudge:?}"
    );
    let written: i64 = sqlx::query_scalar("SELECT count(*) FROM suggestions WHERE run_id = $1")
        .bind(out.run_id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(written, 1);
    let nudges: Vec<Value> = sqlx::query_scalar(
        "SELECT outcome FROM audit_events WHERE run_id = $1 AND decision = 'nudged' ORDER BY id",
    )
    .bind(out.run_id)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(nudges.len(), 1, "one nudge, audited: {nudges:?}");
}

#[tokio::test]
async fn a_nightly_run_with_nothing_to_suggest_ends_at_its_first_answer() {
    let db = TestDb::new().await;
    let mut app = app(&db);
    let org = org(&db).await;
    let p = Arc::new(ScriptedProvider::new(vec![Turn::text("Nothing to do.")]));
    app.provider = p.clone();
    let out = nightly(&app, org).await;
    p.assert_complete();
    assert_eq!(
        out.status.as_str(),
        "succeeded",
        "no signal: no suggestion is owed"
    );
}

#[derive(Clone, Default)]
struct Fake {
    seen: Arc<Mutex<Vec<Value>>>,
}

/// An OpenAI-compatible server that accepts `response_format`: it answers each constrained
/// round with the call the schema allows (the first tool of the format with `{}`, or a
/// suggestion) and anything else with text.
async fn serve(State(f): State<Fake>, body: Bytes) -> Response {
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let n = {
        let mut seen = f.seen.lock().unwrap();
        seen.push(req.clone());
        seen.len()
    };
    let tools: Vec<&str> = req["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["function"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    let content = if tools == ["org_overview"] {
        json!({"name": "org_overview", "arguments": {}}).to_string()
    } else if tools.contains(&"create_suggestion") && n <= 2 {
        json!({"name": "create_suggestion", "arguments": {"kind": "other", "title": "Look",
               "message": "Something to look at."}})
        .to_string()
    } else {
        "Done.".to_string()
    };
    let body = json!({
        "id": "c", "object": "chat.completion", "created": 1, "model": "small",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    });
    ([("content-type", "application/json")], body.to_string()).into_response()
}

#[tokio::test]
async fn a_tool_without_arguments_is_asked_for_with_empty_arguments_and_a_small_output_cap() {
    let fake = Fake::default();
    let router = axum::Router::new().fallback(serve).with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let db = TestDb::new().await;
    let mut config = common::test_config();
    // Guided: the nightly run's first part is the overview, whose one tool takes no arguments.
    config.llm.guided = "on".into();
    let mut app = common::app_with(&db, Arc::new(SystemClock) as SharedClock, config);
    assert_eq!(
        app.config.llm.constrained_calls,
        agentd::config::Constrained::Auto
    );
    let general_cap = app.config.llm.max_output_tokens;
    app.provider = Arc::new(OpenAiProvider::new(OpenAiSettings {
        base_url,
        api_key: String::new(),
        timeout: Duration::from_secs(10),
        max_retries: 0,
        stream: false,
    }));
    let (org, _) = org_with_a_signal(&db).await;
    let out = nightly(&app, org).await;
    let seen = fake.seen.lock().unwrap().clone();
    let first = seen.first().expect("a request");
    let offered: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert_eq!(offered, vec!["org_overview"], "the overview comes first");
    assert_eq!(first["tool_choice"], "required");
    let schema = &first["response_format"]["json_schema"]["schema"];
    assert_eq!(schema["properties"]["name"]["const"], "org_overview");
    assert_eq!(
        schema["properties"]["arguments"],
        json!({"type": "object", "properties": {}, "additionalProperties": false}),
        "the only arguments the model may write are {{}}"
    );
    let cap = first["max_completion_tokens"]
        .as_u64()
        .or_else(|| first["max_tokens"].as_u64())
        .expect("an output cap");
    assert!(
        cap <= 128,
        "a call without arguments gets a small cap: {cap}"
    );
    // The next round, with arguments to write, gets the general cap back.
    let second = seen.get(1).expect("a second request");
    let cap2 = second["max_completion_tokens"]
        .as_u64()
        .or_else(|| second["max_tokens"].as_u64())
        .expect("an output cap");
    assert_eq!(cap2, u64::from(general_cap));
    let written: i64 = sqlx::query_scalar("SELECT count(*) FROM suggestions WHERE run_id = $1")
        .bind(out.run_id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(written, 1, "{out:?}");
}

/// Key fields first (issue 48, item 2): a model's `create_schema` with a contact detail and
/// doubles keeps the key fields; the detail (`phone`) and the doubles (`datum` beside `date`,
/// `iban_accredito` beside `iban`) are "also found" on the document's report
/// (`GET /v1/documents/{id}` over a real port); a reviewer adds `phone` back with one
/// `POST /v1/documents/{id}/fields`: a new schema version and prompt version, the value from
/// the analysis in the proposed extraction, no longer also found. Another org's key gets 404,
/// a name not in the list 422 naming `name`, an uploader 403.
#[tokio::test]
async fn a_proposal_keeps_the_key_fields_and_a_reviewer_adds_an_also_found_one() {
    use crate::api_support::Api;
    use agentd::api::Role as KeyRole;
    let api = Api::start().await;
    let (org, reviewer) = api.org("acme", KeyRole::Reviewer).await;
    let uploader = api.key(org, KeyRole::Uploader).await;
    let (_, other) = api.org("globex", KeyRole::Reviewer).await;
    let mut app = api.app.clone();
    app.clock = Arc::new(SystemClock) as SharedClock;
    let text = format!("{INVOICE}Date: 2026-11-02\nPhone: 0113 496 0000\n");
    let s = json!({"type": "string"});
    let fields = json!({"invoice_number": s, "invoice_date": s, "customer": s, "date": s,
                        "datum": s, "invoice": s, "iban": s, "iban_accredito": s, "phone": s});
    let p = propose(&api.db, &app, org, &text, proposal_turns(fields)).await;
    assert_eq!(p.schema.1, 1);

    let report = api
        .call(
            "GET",
            &format!("/v1/documents/{}", p.doc),
            Some(&reviewer),
            None,
        )
        .await;
    assert_eq!(report.status.as_u16(), 200, "{}", report.body);
    let names = |r: &Value, k: &str| -> Vec<String> {
        r[k].as_array()
            .unwrap_or_else(|| panic!("{k} in {r}"))
            .iter()
            .map(|f| f["name"].as_str().unwrap().to_string())
            .collect()
    };
    let fields = names(&report.body, "fields");
    for key in ["invoice_number", "invoice_date", "customer", "date", "iban"] {
        assert!(fields.contains(&key.to_string()), "{key} kept: {fields:?}");
    }
    let also = &report.body["also_found"];
    let reason = |n: &str| {
        also.as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == n)
            .map(|f| f["reason"].as_str().unwrap().to_string())
    };
    assert_eq!(reason("phone").as_deref(), Some("detail"), "{also}");
    assert_eq!(reason("invoice").as_deref(), Some("double"), "{also}");
    assert_eq!(
        reason("iban_accredito").as_deref(),
        Some("double"),
        "{also}"
    );
    // `datum` is `date` in one vocabulary (item 3) or a double: never beside it.
    for gone in ["phone", "datum", "invoice", "iban_accredito"] {
        assert!(
            !fields.contains(&gone.to_string()),
            "{gone} left out: {fields:?}"
        );
    }
    assert!(
        p.create_schema_result["also_found"]
            .as_array()
            .is_some_and(|a| a.contains(&json!("phone"))),
        "the model reads what was left out: {}",
        p.create_schema_result
    );

    let add = format!("/v1/documents/{}/fields", p.doc);
    let r = api
        .call("POST", &add, Some(&other), Some(json!({"name": "phone"})))
        .await;
    r.problem(404, None);
    let r = api
        .call(
            "POST",
            &add,
            Some(&uploader),
            Some(json!({"name": "phone"})),
        )
        .await;
    assert_eq!(r.status.as_u16(), 403, "{}", r.body);
    let r = api
        .call(
            "POST",
            &add,
            Some(&reviewer),
            Some(json!({"name": "vat_number"})),
        )
        .await;
    r.problem(422, Some("name"));
    assert!(
        r.body["detail"].as_str().unwrap().contains("phone"),
        "{}",
        r.body
    );

    let r = api
        .call(
            "POST",
            &add,
            Some(&reviewer),
            Some(json!({"name": "phone"})),
        )
        .await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.body);
    assert_eq!(
        r.body["schema_revid"],
        json!(format!("{}:2", p.schema.0)),
        "{}",
        r.body
    );
    assert_eq!(r.body["value"], "0113 496 0000", "{}", r.body);
    let after = api
        .call(
            "GET",
            &format!("/v1/documents/{}", p.doc),
            Some(&reviewer),
            None,
        )
        .await;
    assert!(
        names(&after.body, "fields").contains(&"phone".to_string()),
        "{}",
        after.body
    );
    assert!(
        !names(&after.body, "also_found").contains(&"phone".to_string()),
        "{}",
        after.body
    );
    assert_eq!(
        after.body["extraction"]["result"]["phone"], "0113 496 0000",
        "{}",
        after.body
    );
    assert_eq!(after.body["schema"]["revid"], r.body["schema_revid"]);
    assert_eq!(after.body["prompt"]["revid"], r.body["prompt_revid"]);
    // Once added it is no longer also found.
    let again = api
        .call(
            "POST",
            &add,
            Some(&reviewer),
            Some(json!({"name": "phone"})),
        )
        .await;
    again.problem(422, Some("name"));
    let audited = api
        .count("SELECT count(*) FROM audit_events WHERE tool = 'add_proposal_field'")
        .await;
    assert_eq!(audited, 1);
}
