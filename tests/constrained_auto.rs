//! `llm.constrained_calls = "auto"` (the default) against HTTP fakes of an OpenAI-compatible
//! server: one that accepts a `response_format` JSON Schema gets it in every round that
//! requires a call, with no configuration; one that refuses it (HTTP 400, as servers without
//! JSON-Schema output answer) costs one rejected request, is remembered, and the run goes on
//! without it (issue 28, item 5).

mod common;

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

/// Runs auto_create on one document against a fake; returns the requests it saw.
async fn run_against(refuses: bool) -> Vec<Value> {
    let fake = Fake {
        refuses,
        seen: Arc::default(),
    };
    let router = axum::Router::new()
        .fallback(answer)
        .with_state(fake.clone());
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
    assert_ne!(out.status, "failed", "{out:?}");
    let seen = fake.seen.lock().unwrap().clone();
    seen
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
    assert!(
        required
            .iter()
            .all(|r| constrained(r) && r["response_format"]["json_schema"]["name"] == "tool_call"),
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
