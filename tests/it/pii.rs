//! The redaction boundary end to end: auto-create through the OpenAI adapter against an HTTP
//! fake of the chat-completions API. The fake plays a model: it creates a schema and a prompt,
//! runs the extraction, and answers the extraction call by copying the values it sees in the
//! document (which, behind the boundary, are tokens). No request body may contain the
//! document's personal data; the stored extraction must hold the real values.

use crate::common;
use agentd::clock::{SharedClock, SystemClock};
use agentd::documents::add_document;
use agentd::llm::openai::{OpenAiProvider, OpenAiSettings};
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use common::{TestDb, wait_until};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use uuid::Uuid;

const PERSONAL: &[&str] = &[
    "Jane Doe",
    "jane.doe@example.com",
    "+44 20 7946 0958",
    "GB82 WEST 1234 5698 7654 32",
    "078-05-1120",
];

const DOC: &str = "INVOICE INV-2024-0042\nDate: 2024-03-12\nBill to: Jane Doe\n\
Email: jane.doe@example.com\nPhone: +44 20 7946 0958\nSSN: 078-05-1120\n\
Pay to IBAN GB82 WEST 1234 5698 7654 32\nTotal due: 1,234.56 GBP\n\
Jane Doe agreed to pay within 30 days.\n";

#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

fn completion(message: Value) -> Response {
    let finish = if message.get("tool_calls").is_some() {
        "tool_calls"
    } else {
        "stop"
    };
    let body = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "fake",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}
    });
    ([("content-type", "application/json")], body.to_string()).into_response()
}

fn tool_call(name: &str, args: Value) -> Response {
    completion(json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": name, "arguments": args.to_string()}}
    ]}))
}

/// The value after `label:` on some line of `text`.
fn after(text: &str, label: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(label))
        .map(|v| v.trim().to_string())
        .unwrap_or_default()
}

/// A model that reads the request and does the next step of auto-create.
async fn model(State(seen): State<Seen>, body: Bytes) -> Response {
    let text = String::from_utf8_lossy(&body).to_string();
    seen.0.lock().unwrap().push(text.clone());
    let req: Value = serde_json::from_str(&text).unwrap();
    let messages = req["messages"].as_array().cloned().unwrap_or_default();
    // The extraction call carries the schema's response_format and no tools; a round's
    // constrained call (`llm.constrained_calls = "auto"`: `tool_call`, or the one call's
    // `proposal`) offers tools, and is answered as a tool call.
    let tools = req["tools"].as_array().is_some_and(|t| !t.is_empty());
    if !tools && req.get("response_format").is_some_and(|f| !f.is_null()) {
        // The extraction call: copy what the document says (tokens, behind the boundary).
        let doc = messages
            .iter()
            .filter(|m| m["role"] == "user")
            .filter_map(|m| m["content"].as_str())
            .collect::<Vec<_>>()
            .join("\n");
        // A document that names a beneficiary: the model copies that as the customer.
        let customer = match after(&doc, "Beneficiary:") {
            b if b.is_empty() => after(&doc, "Bill to:"),
            b => b,
        };
        let answer = json!({
            "customer_name": customer,
            "email": after(&doc, "Email:"),
            "phone": after(&doc, "Phone:"),
            "iban": after(&doc, "Pay to IBAN"),
        });
        return completion(json!({"role": "assistant", "content": answer.to_string()}));
    }
    // Tool results of earlier rounds may be compacted to one line: count them, and read ids
    // from any message.
    let results = messages.iter().filter(|m| m["role"] == "tool").count();
    let revid = |what: &str| {
        let re = regex::Regex::new(&format!(r#"{what}_revid\W+([0-9a-f-]{{36}}:\d+)"#)).unwrap();
        re.captures_iter(&text)
            .last()
            .map(|c| c[1].to_string())
            .unwrap_or_default()
    };
    match results {
        0 => tool_call("get_document", json!({})),
        1 => {
            let mut props: serde_json::Map<String, Value> =
                ["customer_name", "email", "phone", "iban"]
                    .iter()
                    .map(|f| (f.to_string(), json!({"type": "string"})))
                    .collect();
            // A model that copies an example into the schema: the person's token, which comes
            // back as the real name, is stored in the schema and must neither reach the audit
            // (review N10) nor leave again in the extraction's response_format (review N9).
            let person = regex::Regex::new(r"PERSON_\d+")
                .unwrap()
                .find(&text)
                .map(|m| m.as_str().to_string())
                .unwrap_or_else(|| "Jane Doe".into());
            props.insert(
                "customer_name".into(),
                json!({"type": "string", "description": format!("the customer, e.g. {person}")}),
            );
            tool_call(
                "create_schema",
                json!({"name": "Invoice", "response_format": {"type": "json_schema",
                    "json_schema": {"name": "invoice", "strict": true, "schema": {
                        "type": "object", "additionalProperties": false,
                        "required": ["customer_name", "email", "phone", "iban"],
                        "properties": props}}}}),
            )
        }
        2 => tool_call(
            "create_prompt",
            json!({"name": "Invoice", "content": "Extract the customer and payment details.",
                   "schema_revid": revid("schema")}),
        ),
        3 => tool_call("run_extraction", json!({"prompt_revid": revid("prompt")})),
        _ => completion(json!({"role": "assistant",
            "content": "Proposed an invoice schema, a prompt and an extraction."})),
    }
}

async fn fake() -> (String, Seen) {
    let seen = Seen::default();
    let app = axum::Router::new().fallback(model).with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/v1"), seen)
}

async fn run_one(redact: bool) -> (TestDb, Vec<String>, Value, Uuid) {
    run_doc(DOC, redact).await
}

/// Review L1: a document that says "Beneficiary: PERSON_1" next to a real name. Sent as it
/// was, the model's copy of `PERSON_1` came back as the run's first person, Jane Doe; escaped,
/// the extraction holds what the document said.
#[tokio::test]
async fn a_token_shaped_literal_in_a_document_is_not_rehydrated_to_a_person() {
    let doc = format!("{DOC}Beneficiary: PERSON_1\n");
    let (_db, bodies, result, _run) = run_doc(&doc, true).await;
    for body in &bodies {
        for value in PERSONAL {
            assert!(!body.contains(value), "{value:?} reached the provider");
        }
    }
    assert_eq!(result["customer_name"], "PERSON_1", "{result}");
    assert_eq!(result["email"], "jane.doe@example.com");
}

async fn run_doc(text: &str, redact: bool) -> (TestDb, Vec<String>, Value, Uuid) {
    let db = TestDb::new().await;
    let (base_url, seen) = fake().await;
    let mut app = common::app(&db, Arc::new(SystemClock) as SharedClock);
    app.provider = Arc::new(OpenAiProvider::new(OpenAiSettings {
        base_url,
        api_key: "sk-test".into(),
        timeout: Duration::from_secs(10),
        max_retries: 0,
        stream: false,
    }));
    let org = agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id;
    agentd::store::pii::set_org_redacts(&db.pool, org, redact)
        .await
        .unwrap();
    let (doc, _) = add_document(&app, org, "invoice.txt", text, true)
        .await
        .unwrap();
    let (w, stop) = common::start_worker(&app, "auto_create", None).await;
    let pool = db.pool.clone();
    wait_until(60, "the document is proposed or failed", || {
        let pool = pool.clone();
        async move {
            let s: String =
                sqlx::query_scalar("SELECT auto_create_status FROM documents WHERE id = $1")
                    .bind(doc)
                    .fetch_one(&pool)
                    .await
                    .unwrap();
            s == "proposed" || s == "failed"
        }
    })
    .await;
    stop.cancel();
    w.join().await;
    let (status, result, run): (String, Option<Value>, Uuid) = sqlx::query_as(
        "SELECT d.auto_create_status, e.result, d.auto_create_run_id
           FROM documents d LEFT JOIN extractions e ON e.id = d.proposed_extraction_id
          WHERE d.id = $1",
    )
    .bind(doc)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let bodies = seen.0.lock().unwrap().clone();
    let error: Option<String> =
        sqlx::query_scalar("SELECT auto_create_error FROM documents WHERE id = $1")
            .bind(doc)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        status,
        "proposed",
        "{error:?}\n{}",
        bodies.last().cloned().unwrap_or_default()
    );
    (db, bodies, result.unwrap_or(Value::Null), run)
}

#[tokio::test]
async fn no_personal_value_reaches_the_provider_and_the_extraction_holds_real_values() {
    let (db, bodies, result, run) = run_one(true).await;
    // The rounds and the extraction call (no summary round: nothing flagged under constrained
    // calls, the summary comes from the run's records).
    assert!(
        bodies.len() >= 5,
        "rounds and the extraction call reached the fake"
    );
    assert!(
        bodies
            .iter()
            .any(|b| b.contains("agreed to pay within 30 days")),
        "the document text itself went to the provider (redacted)"
    );
    for body in &bodies {
        for value in PERSONAL {
            // JSON-escaped forms are the same for these values.
            assert!(
                !body.contains(value),
                "a request to the provider contains {value:?}: {body}"
            );
        }
    }
    assert!(
        bodies
            .iter()
            .any(|b| b.contains("PERSON_") && b.contains("EMAIL_")),
        "the provider saw tokens in place of the values"
    );
    assert_eq!(
        result,
        json!({"customer_name": "Jane Doe", "email": "jane.doe@example.com",
               "phone": "+44 20 7946 0958", "iban": "GB82 WEST 1234 5698 7654 32"}),
        "people see the real values"
    );
    let (redacted, tokens): (bool, i64) = sqlx::query_as(
        "SELECT pii_redacted, (SELECT count(*) FROM pii_tokens WHERE run_id = $1) FROM agent_runs WHERE id = $1",
    )
    .bind(run)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(redacted, "the run records that it was redacted");
    let audit: Vec<String> = sqlx::query_scalar(
        "SELECT coalesce(args::text, '') || coalesce(outcome::text, '') FROM audit_events WHERE run_id = $1",
    )
    .bind(run)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(audit.len() >= 4, "every tool call is audited");
    for row in &audit {
        assert!(
            !row.contains("agreed to pay") && PERSONAL.iter().all(|v| !row.contains(v)),
            "an audit row copies document text: {row}"
        );
    }
    assert!(
        audit.iter().all(|r| r.contains("\"sha256\"")),
        "each outcome carries the hash of the full result"
    );
    assert!(
        tokens >= 5,
        "the symbol table is stored for resume ({tokens})"
    );
}

#[tokio::test]
async fn an_org_that_opts_out_sends_the_text_as_is() {
    let (db, bodies, result, run) = run_one(false).await;
    assert!(bodies.iter().any(|b| b.contains("jane.doe@example.com")));
    assert_eq!(result["email"], "jane.doe@example.com");
    let redacted: bool = sqlx::query_scalar("SELECT pii_redacted FROM agent_runs WHERE id = $1")
        .bind(run)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(!redacted);
}

/// Auto-create with the offline provider; returns (db, org, doc, run).
async fn offline_run() -> (TestDb, Uuid, Uuid, Uuid) {
    offline_run_of("invoice.txt", DOC).await
}

/// Review N11: a personal value too long for a btree entry (a 4,000-character e-mail address)
/// still gets its token stored, and the document is proposed with redaction on.
#[tokio::test]
async fn a_very_long_personal_value_is_redacted_and_the_run_finishes() {
    use rand::Rng;
    let mut rng = rand::rng();
    let local: String = (0..4000)
        .map(|_| char::from(b'a' + rng.random_range(0..26u8)))
        .collect();
    let email = format!("{local}@example.com");
    let text = format!("Invoice INV-7\nEmail: {email}\nTotal: 12.00 EUR\n");
    let (db, _, doc, run) = offline_run_of("long.txt", &text).await;
    let status: String =
        sqlx::query_scalar("SELECT auto_create_status FROM documents WHERE id = $1")
            .bind(doc)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(status, "proposed");
    let stored: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pii_tokens WHERE run_id = $1 AND value = $2")
            .bind(run)
            .bind(&email)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(stored, 1, "the long value has its token");
}

/// Auto-create of one document (`name`, `text`) with the offline provider; returns (db, org,
/// doc, run).
async fn offline_run_of(name: &str, text: &str) -> (TestDb, Uuid, Uuid, Uuid) {
    let db = TestDb::new().await;
    let app = common::app(&db, Arc::new(SystemClock) as SharedClock);
    let org = agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id;
    let (doc, _) = add_document(&app, org, name, text, true).await.unwrap();
    let (w, stop) = common::start_worker(&app, "auto_create", None).await;
    let pool = db.pool.clone();
    wait_until(60, "the run finishes", || {
        let pool = pool.clone();
        async move {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM agent_runs WHERE subject = $1 AND status <> 'running'",
            )
            .bind(doc.to_string())
            .fetch_one(&pool)
            .await
            .unwrap();
            n == 1
        }
    })
    .await;
    stop.cancel();
    w.join().await;
    let run: Uuid = sqlx::query_scalar("SELECT id FROM agent_runs WHERE subject = $1")
        .bind(doc.to_string())
        .fetch_one(&db.pool)
        .await
        .unwrap();
    (db, org, doc, run)
}

async fn transcript_text(db: &TestDb, run: Uuid) -> String {
    sqlx::query_scalar(
        "SELECT coalesce(string_agg(payload::text, ' '), '') FROM agent_steps WHERE run_id = $1",
    )
    .bind(run)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn old_transcripts_are_compacted_and_still_load() {
    let (db, _org, _doc, run) = offline_run().await;
    let before = transcript_text(&db, run).await;
    assert!(
        before.contains("078-05-1120"),
        "before retention the transcript holds document data (the extraction result): {before}"
    );
    let retention = agentd::pii::retention::TranscriptRetention {
        pool: db.pool.clone(),
        clock: Arc::new(SystemClock) as SharedClock,
        keep: chrono::Duration::days(30),
        batch: 10,
        interval: Duration::from_secs(60),
    };
    assert_eq!(
        retention.run_once().await.unwrap(),
        0,
        "a fresh run is kept"
    );
    sqlx::query(
        "UPDATE agent_runs SET finished_at = finished_at - interval '31 days' WHERE id = $1",
    )
    .bind(run)
    .execute(&db.pool)
    .await
    .unwrap();
    assert_eq!(retention.run_once().await.unwrap(), 1);
    let text = transcript_text(&db, run).await;
    assert!(
        !text.contains("agreed to pay")
            && !text.contains("Jane Doe")
            && !text.contains("078-05-1120"),
        "{text}"
    );
    assert!(text.contains("create_schema"), "tool names stay: {text}");
    let steps = agentd::store::runs::steps(&db.pool, run).await.unwrap();
    let registry = agentd::tools::builtin_registry();
    let t = agentd::agent::transcript::Transcript::from_steps(&steps, &registry)
        .expect("compacted steps load");
    assert!(
        t.rounds >= 3 && t.tool_calls >= 3,
        "a compacted transcript still loads"
    );
    let tokens: i64 = sqlx::query_scalar("SELECT count(*) FROM pii_tokens WHERE run_id = $1")
        .bind(run)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(tokens, 0, "the symbol table goes with the text");
}

#[tokio::test]
async fn deleting_a_document_erases_its_text_and_keeps_the_audit_hashes() {
    let (db, org, doc, run) = offline_run().await;
    let audit_before: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_events WHERE run_id = $1")
            .bind(run)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(audit_before >= 3);
    let kept = || async {
        let mut conn = db.pool.acquire().await.unwrap();
        agentd::pii::retention::kept_for_document(&mut conn, org, doc)
            .await
            .unwrap()
            .unwrap()
    };
    let before = kept().await;
    assert_eq!(before.text_chars, DOC.chars().count() as i64);
    assert_eq!((before.runs, before.extractions), (1, 1));
    assert_eq!(before.audit_rows, audit_before);
    assert!(before.pii_tokens >= 5 && before.transcript_steps > 0 && before.compacted_steps == 0);
    // What was derived from the document elsewhere (review N12): the run's summary, a
    // suggestion about it.
    sqlx::query(
        "UPDATE agent_runs SET final_text = 'Extracted the invoice of Jane Doe' WHERE id = $1",
    )
    .bind(run)
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO suggestions (id, org_id, kind, subject, night, title, message, document_id)
         VALUES ($1, $2, 'tag_documents', $3::text, '2026-01-02', 'Tag the invoice of Jane Doe',
                 'jane.doe@example.com sent it', $3)",
    )
    .bind(Uuid::now_v7())
    .bind(org)
    .bind(doc)
    .execute(&db.pool)
    .await
    .unwrap();
    // What is kept counts them (review N12's rest).
    let after = kept().await;
    assert_eq!(
        (after.suggestions, after.approvals, after.refine_requests),
        (1, 0, 0)
    );
    let mut tx = db.pool.begin().await.unwrap();
    assert!(
        agentd::store::documents::delete(&mut tx, org, doc)
            .await
            .unwrap()
    );
    tx.commit().await.unwrap();
    let text = transcript_text(&db, run).await;
    assert!(
        !text.contains("agreed to pay") && !text.contains("jane.doe"),
        "{text}"
    );
    let (extractions, audit_after): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM extractions WHERE document_id = $1),
                (SELECT count(*) FROM audit_events WHERE run_id = $2)",
    )
    .bind(doc)
    .bind(run)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(extractions, 0);
    assert_eq!(audit_after, audit_before, "the audit trail stays");
    let derived: String = sqlx::query_scalar(
        "SELECT coalesce((SELECT string_agg(coalesce(final_text, '') || coalesce(error, ''), ' ')
                            FROM agent_runs WHERE org_id = $1), '')
                || coalesce((SELECT string_agg(title || message, ' ') FROM suggestions WHERE org_id = $1), '')",
    )
    .bind(org)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(
        !derived.contains("Jane Doe") && !derived.contains("jane.doe"),
        "{derived}"
    );
}

/// The approval's extraction answer: the document it was sent holds tokens, not values; it
/// answers with the email token it saw.
fn extraction_from_tokens(
    req: &agentd::llm::CompletionRequest,
) -> Result<agentd::llm::CompletionResponse, agentd::llm::LlmError> {
    let sent = serde_json::to_string(&req.messages).unwrap();
    let leaked: Vec<&&str> = PERSONAL.iter().filter(|v| sent.contains(**v)).collect();
    let token = regex::Regex::new(r"EMAIL_\d+")
        .unwrap()
        .find(&sent)
        .map(|m| m.as_str().to_string())
        .unwrap_or_default();
    // A leak is reported through the answer so the test sees it.
    let email = if leaked.is_empty() {
        token
    } else {
        format!("LEAKED {leaked:?}")
    };
    Ok(agentd::llm::CompletionResponse {
        message: agentd::llm::Message::text(
            agentd::llm::Role::Assistant,
            json!({"email": email}).to_string(),
        ),
        usage: agentd::llm::Usage {
            input_tokens: 10,
            output_tokens: 5,
            ..Default::default()
        },
        finish: agentd::llm::FinishReason::EndTurn,
        model: "scripted".into(),
    })
}

#[tokio::test]
async fn approving_a_proposed_extraction_calls_the_model_behind_the_boundary() {
    use agentd::llm::scripted::{ScriptedProvider, Turn};
    let db = TestDb::new().await;
    let mut app = common::app(&db, Arc::new(SystemClock) as SharedClock);
    let org = agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id;
    let (doc, _) = add_document(&app, org, "invoice.txt", DOC, false)
        .await
        .unwrap();
    let format = json!({"type": "json_schema", "json_schema": {"name": "s", "strict": true,
        "schema": {"type": "object", "additionalProperties": false, "required": ["email"],
                   "properties": {"email": {"type": "string"}}}}});
    let mut c = db.pool.acquire().await.unwrap();
    let s = agentd::store::schemas::create(&mut c, org, "S", &format, None, chrono::Utc::now())
        .await
        .unwrap();
    let fields = agentd::store::prompts::PromptFields {
        name: "P".into(),
        content: "Extract the email.".into(),
        schema_id: s.schema_id,
        schema_version: s.version,
        model: None,
        tag_ids: vec![],
    };
    let p = agentd::store::prompts::create(&mut c, org, &fields, None, chrono::Utc::now())
        .await
        .unwrap();
    drop(c);
    let scripted = Arc::new(ScriptedProvider::new(vec![
        Turn::tool(
            "1",
            "run_extraction",
            json!({"document_id": doc, "prompt_revid": format!("{}:1", p.prompt_id)}),
        ),
        Turn::text("proposed"),
        Turn::Dynamic(extraction_from_tokens),
    ]));
    app.provider = scripted.clone();
    let spec = app.spec("proactive_suggestion");
    let mut rs = app.run_spec(spec, org, "night".into(), Some(1), "go".into());
    rs.night = Some(chrono::Utc::now().date_naive());
    app.engine(spec)
        .run(&rs, &tokio_util::sync::CancellationToken::new())
        .await
        .unwrap();
    let id: Uuid = sqlx::query_scalar("SELECT id FROM pending_approvals")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let decided = agentd::approvals::decide(
        &db.pool,
        &app.clock,
        &app.tool_env(spec),
        id,
        Some(org),
        agentd::approvals::Decision::Approve { by: "ann".into() },
        Default::default(),
    )
    .await
    .unwrap();
    assert_eq!(decided.status, "executed", "{decided:?}");
    scripted.assert_complete();
    let result: Value = sqlx::query_scalar(
        "SELECT result FROM extractions WHERE document_id = $1 ORDER BY created_at DESC LIMIT 1",
    )
    .bind(doc)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        result["email"], "jane.doe@example.com",
        "the model saw a token and answered with it; the stored value is real"
    );
}

#[tokio::test]
async fn deleting_an_org_removes_its_personal_data_and_keeps_the_audit() {
    let (db, org, doc, run) = offline_run().await;
    let audit: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_events WHERE org_id = $1")
        .bind(org)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(audit >= 3);
    let mut tx = db.pool.begin().await.unwrap();
    let r = agentd::pii::retention::delete_org(&mut tx, org, chrono::Utc::now())
        .await
        .unwrap()
        .expect("the org exists");
    tx.commit().await.unwrap();
    assert_eq!((r.documents, r.runs), (1, 1));
    let left: (i64, i64, i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM documents WHERE id = $1),
                (SELECT count(*) FROM extractions WHERE document_id = $1),
                (SELECT count(*) FROM agent_steps WHERE run_id = $2),
                (SELECT count(*) FROM pii_tokens WHERE run_id = $2),
                (SELECT count(*) FROM audit_events WHERE org_id = $3)",
    )
    .bind(doc)
    .bind(run)
    .bind(org)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(left, (0, 0, 0, 0, audit), "only the audit trail stays");
    let mut tx = db.pool.begin().await.unwrap();
    assert!(
        agentd::pii::retention::delete_org(&mut tx, org, chrono::Utc::now())
            .await
            .unwrap()
            .is_none()
    );
}

/// Review S3: two drivers of one run (a lease lost under clock skew) each give `EMAIL_1` to
/// another address. The second to save finds the run's stored table differs and fails (and
/// keeps failing, so a retry in that process sends nothing redacted with it); a resumed run
/// reads the first driver's table.
#[tokio::test]
async fn two_drivers_of_one_run_cannot_store_different_values_for_a_token() {
    let db = TestDb::new().await;
    let org = agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id;
    let run = Uuid::new_v4();
    sqlx::query("INSERT INTO agent_runs (id, org_id, kind, subject, provider, model, status, started_at) VALUES ($1, $2, 'auto_create', 'x', 'offline', 'm', 'running', now())")
        .bind(run)
        .bind(org)
        .execute(&db.pool)
        .await
        .unwrap();
    let load = || agentd::pii::Vault::for_run(db.pool.clone(), org, run, Vec::new());
    let (first, second, same) = (
        load().await.unwrap(),
        load().await.unwrap(),
        load().await.unwrap(),
    );
    let a = first.redact("Write to ann@example.com");
    assert_eq!(same.redact("cc ann@example.com"), "cc EMAIL_1");
    let b = second.redact("Write to bob@example.com");
    assert_eq!(a, b, "each driver gave the address its first token");
    first.save().await.unwrap();
    let err = second.save().await.unwrap_err();
    assert!(
        matches!(&err, agentd::pii::SaveError::Diverged(t) if t == &vec!["EMAIL_1".to_string()]),
        "{err:?}"
    );
    assert!(
        !err.to_string().contains("bob@"),
        "no value in the error: {err}"
    );
    // Still refused, with nothing new to save.
    assert!(second.save().await.is_err());
    // The same pair saved by two drivers is no conflict, and a resumed run reads the first's.
    same.save().await.unwrap();
    let resumed = load().await.unwrap();
    assert_eq!(resumed.rehydrate("EMAIL_1"), "ann@example.com");
}

/// Review D18: a phone number and an IBAN written in full-width characters (as Japanese and
/// Chinese documents write them) are redacted like their ASCII forms: neither form reaches the
/// provider, and the extraction holds the document's own full-width values.
#[tokio::test]
async fn full_width_phone_and_iban_never_reach_the_provider() {
    const PHONE: &str = "+４４ ２０ ７９４６ ０９５８";
    const IBAN: &str = "ＧＢ８２ ＷＥＳＴ １２３４ ５６９８ ７６５４ ３２";
    let doc = format!(
        "INVOICE INV-2024-0042\nDate: 2024-03-12\nBill to: Jane Doe\n\
         Email: jane.doe@example.com\nPhone: {PHONE}\n\
         Pay to IBAN {IBAN}\nTotal due: 1,234.56 GBP\n"
    );
    let (_db, bodies, result, _run) = run_doc(&doc, true).await;
    assert!(!bodies.is_empty());
    for body in &bodies {
        for value in [
            PHONE,
            IBAN,
            "７９４６",
            "+44 20 7946 0958",
            "GB82 WEST",
            "5698 7654",
        ] {
            assert!(
                !body.contains(value),
                "{value:?} reached the provider: {body}"
            );
        }
    }
    assert_eq!(result["phone"], PHONE, "{result}");
    assert_eq!(result["iban"], IBAN, "{result}");
}
