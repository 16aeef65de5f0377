//! `llm.constrained_calls = "auto"` (the default) against HTTP fakes of an OpenAI-compatible
//! server: one that accepts a `response_format` JSON Schema gets it in every round that
//! requires a call, with no configuration; one that refuses it (HTTP 400, as servers without
//! JSON-Schema output answer) costs one rejected request, is remembered, and the run goes on
//! without it (issue 28, item 5). Where it is accepted, auto_create asks for the schema and the
//! prompt in one call and runs the extraction as the second; where it is refused, the run takes
//! the step-by-step path.

use crate::common;
use agentd::clock::{SharedClock, SystemClock};
use agentd::llm::openai::{OpenAiProvider, OpenAiSettings};
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use common::TestDb;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Clone)]
struct Fake {
    refuses: bool,
    seen: Arc<Mutex<Vec<Value>>>,
}

async fn answer(State(f): State<Fake>, body: Bytes) -> Response {
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    f.seen.lock().unwrap().push(req.clone());
    if f.refuses && req.get("response_format").is_some_and(|r| !r.is_null()) {
        let body = json!({"error": {"message": "response_format is not supported by this server",
                                     "type": "invalid_request_error"}});
        return (
            axum::http::StatusCode::BAD_REQUEST,
            [("content-type", "application/json")],
            body.to_string(),
        )
            .into_response();
    }
    let body = json!({
        "id": "c", "object": "chat.completion", "created": 1, "model": "small",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "I have read the document."}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    });
    ([("content-type", "application/json")], body.to_string()).into_response()
}

/// Serves `router` as the model server on a real port and runs auto_create on a one-page
/// invoice against it with the default (unconfigured) constrained calls; the database (kept
/// alive for the caller's queries) and the run's outcome.
async fn run_invoice(router: axum::Router) -> (TestDb, agentd::agent::RunOutcome) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let db = TestDb::new().await;
    let mut app = common::app(&db, Arc::new(SystemClock) as SharedClock);
    assert_eq!(
        app.config.llm.constrained_calls,
        agentd::config::Constrained::Auto,
        "the default needs no configuration"
    );
    app.provider = Arc::new(OpenAiProvider::new(OpenAiSettings {
        base_url,
        api_key: String::new(),
        timeout: Duration::from_secs(10),
        max_retries: 0,
        stream: false,
    }));
    let org = agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id;
    let mut conn = db.pool.acquire().await.unwrap();
    let doc = agentd::store::documents::insert(
        &mut conn,
        org,
        "invoice.txt",
        Some("Invoice Number: INV-1\nTotal: 12.50\n"),
        &json!({}),
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    drop(conn);
    let spec = app.spec("auto_create");
    let mut rs = app.run_spec(
        spec,
        org,
        doc.to_string(),
        Some(1),
        format!("Document {doc}"),
    );
    rs.document_id = Some(doc);
    let out = app
        .engine(spec)
        .run(&rs, &CancellationToken::new())
        .await
        .expect("the run ends without a provider error");
    (db, out)
}

/// Runs auto_create on one document against a fake; returns the requests it saw.
async fn run_against(refuses: bool) -> Vec<Value> {
    let fake = Fake {
        refuses,
        seen: Arc::default(),
    };
    let router = axum::Router::new()
        .fallback(answer)
        .with_state(fake.clone());
    let (_db, out) = run_invoice(router).await;
    assert_ne!(out.status, "failed", "{out:?}");

    fake.seen.lock().unwrap().clone()
}

fn constrained(req: &Value) -> bool {
    req.get("response_format").is_some_and(|r| !r.is_null())
}

#[tokio::test]
async fn a_server_that_accepts_a_schema_gets_constrained_calls_without_configuration() {
    let seen = run_against(false).await;
    let required: Vec<&Value> = seen
        .iter()
        .filter(|r| r["tool_choice"] == "required")
        .collect();
    assert!(!required.is_empty(), "some rounds require a call");
    // The first rounds (no call made yet, the whole document shown) are the one call for the
    // schema and the prompt; the rest one call of an offered tool.
    assert!(
        required.iter().all(|r| constrained(r)
            && ["tool_call", "proposal"].contains(
                &r["response_format"]["json_schema"]["name"]
                    .as_str()
                    .unwrap_or("")
            )),
        "every round that requires a call is constrained"
    );
}

#[tokio::test]
async fn a_server_that_refuses_a_schema_is_asked_without_it_from_then_on() {
    let seen = run_against(true).await;
    let with: Vec<usize> = seen
        .iter()
        .enumerate()
        .filter(|(_, r)| constrained(r))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        with,
        vec![0],
        "one refused request, then none: {} requests",
        seen.len()
    );
    assert!(seen.len() >= 2, "the round was asked again without it");
    assert_eq!(
        seen[1]["tool_choice"], seen[0]["tool_choice"],
        "the same round again"
    );
}

/// A server that constrains output to the schema it is given and otherwise calls the tool of the
/// stage it is offered (natively), the way a capable model behind vLLM or llama.cpp does. With
/// `refuses_beside_tools` it refuses a `response_format` in a request that offers tools (as
/// servers without JSON-Schema output for chat rounds answer) but takes the extraction's.
#[derive(Clone)]
struct Server {
    refuses_beside_tools: bool,
    seen: Arc<Mutex<Vec<Value>>>,
}

fn reply(message: Value, finish: &str) -> Response {
    let body = json!({
        "id": "c", "object": "chat.completion", "created": 1, "model": "small",
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
    });
    ([("content-type", "application/json")], body.to_string()).into_response()
}

fn tool_call(name: &str, args: Value) -> Response {
    reply(
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_0", "type": "function",
               "function": {"name": name, "arguments": args.to_string()}}]}),
        "tool_calls",
    )
}

async fn serve_structured(State(s): State<Server>, body: Bytes) -> Response {
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    s.seen.lock().unwrap().push(req.clone());
    let tools: Vec<String> = req["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let format = req.get("response_format").filter(|f| !f.is_null());
    if s.refuses_beside_tools && format.is_some() && !tools.is_empty() {
        let body = json!({"error": {"message": "response_format cannot be used with tools",
                                     "type": "invalid_request_error"}});
        return (
            axum::http::StatusCode::BAD_REQUEST,
            [("content-type", "application/json")],
            body.to_string(),
        )
            .into_response();
    }
    let text = |v: Value| {
        reply(
            json!({"role": "assistant", "content": v.to_string()}),
            "stop",
        )
    };
    if tools.is_empty() {
        // The extraction: the values as the document has them.
        return text(json!({"invoice_number": "INV-1", "total": 12.5}));
    }
    let fields =
        json!([{"name": "invoice_number", "type": "string"}, {"name": "total", "type": "number"}]);
    let prompt =
        json!({"name": "Invoice", "content": "Extract the invoice number and the total as JSON."});
    if format.is_some_and(|f| f["json_schema"]["name"] == "proposal") {
        return text(json!({"schema": {"fields": fields}, "prompt": prompt}));
    }
    if req["tool_choice"] != "required" {
        let prose = "Proposed a schema, a prompt and an extraction.";
        return reply(json!({"role": "assistant", "content": prose}), "stop");
    }
    // The step-by-step path: the stage's tool, the run's ids from the [run state] block.
    let state = req["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string();
    let offered = |n: &str| tools.iter().any(|t| t == n);
    if offered("create_schema") {
        tool_call("create_schema", json!({"fields": fields}))
    } else if offered("create_prompt") {
        let revid = state
            .split("schema: ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_default();
        let mut args = prompt.clone();
        args["schema_revid"] = json!(revid);
        tool_call("create_prompt", args)
    } else {
        tool_call("run_extraction", json!({}))
    }
}

/// Runs auto_create on a one-page invoice against `Server`; the run's requests and the audited
/// calls of the run.
async fn propose_against(
    refuses_beside_tools: bool,
) -> (Vec<Value>, Vec<(String, String)>, String) {
    let server = Server {
        refuses_beside_tools,
        seen: Arc::default(),
    };
    let router = axum::Router::new()
        .fallback(serve_structured)
        .with_state(server.clone());
    let (db, out) = run_invoice(router).await;
    assert_eq!(out.status, "succeeded", "{out:?}");
    let audit: Vec<(String, String)> = sqlx::query_as(
        "SELECT tool, decision FROM audit_events WHERE run_id = $1 AND NOT is_error ORDER BY id",
    )
    .bind(out.run_id)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let (sid, pid, eid): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM schemas WHERE run_id = $1),
                (SELECT count(*) FROM prompts WHERE run_id = $1),
                (SELECT count(*) FROM extractions WHERE run_id = $1)",
    )
    .bind(out.run_id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (sid, pid, eid),
        (1, 1, 1),
        "a schema, a prompt and an extraction"
    );
    let text: String = sqlx::query_scalar("SELECT final_text FROM agent_runs WHERE id = $1")
        .bind(out.run_id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let seen = server.seen.lock().unwrap().clone();
    (seen, audit, text)
}

fn audited(names: &[&str]) -> Vec<(String, String)> {
    names
        .iter()
        .map(|n| (n.to_string(), "auto_approved".to_string()))
        .collect()
}

#[tokio::test]
async fn structured_output_proposes_a_one_page_document_in_two_calls() {
    let (seen, audit, text) = propose_against(false).await;
    assert_eq!(
        seen.len(),
        2,
        "one call for the schema and the prompt, one extraction: {seen:#?}"
    );
    assert_eq!(
        seen[0]["response_format"]["json_schema"]["name"],
        "proposal"
    );
    assert!(
        seen[1]["tools"].as_array().is_none_or(|t| t.is_empty()),
        "the extraction"
    );
    // Each tool ran with its own audit row.
    assert_eq!(
        audit,
        audited(&["create_schema", "create_prompt", "run_extraction"])
    );
    assert!(text.contains("from the run's records"), "{text}");
}

#[tokio::test]
async fn a_server_that_refuses_the_schema_beside_tools_keeps_the_step_by_step_path() {
    let (seen, audit, text) = propose_against(true).await;
    // The one call, refused; the same round again as it was before the one call (no format,
    // no instruction); then one round per part, the extraction call and the summary round.
    assert_eq!(
        seen[0]["response_format"]["json_schema"]["name"],
        "proposal"
    );
    assert!(constrained(&seen[0]));
    let n = |r: &Value| r["messages"].as_array().map(Vec::len).unwrap_or(0);
    assert!(!constrained(&seen[1]));
    assert_eq!(n(&seen[1]) + 1, n(&seen[0]), "the instruction is gone");
    assert!(
        !seen[1]["messages"]
            .to_string()
            .contains("Answer with one JSON object")
    );
    assert!(
        seen[2..]
            .iter()
            .all(|r| !constrained(r) || r["tools"].as_array().is_none_or(|t| t.is_empty())),
        "no constrained round after the refusal"
    );
    assert_eq!(
        seen.len(),
        6,
        "refused, schema, prompt, extraction round, extraction, summary"
    );
    assert_eq!(
        audit,
        audited(&["create_schema", "create_prompt", "run_extraction"])
    );
    assert_eq!(text, "Proposed a schema, a prompt and an extraction.");
}
