//! `llm.constrained_calls = "auto"` (the default) against HTTP fakes of an OpenAI-compatible
//! server: one that accepts a `response_format` JSON Schema gets it in every round that
//! requires a call, with no configuration; one that refuses it (HTTP 400, as servers without
//! JSON-Schema output answer) costs one rejected request, is remembered, and the run goes on
//! without it (issue 28, item 5). Where it is accepted, auto_create asks for the schema and the
//! prompt in one call and runs the extraction as the second; where it is refused, the run takes
//! the step-by-step path. Issue 47, item 1: four server behaviours — the grammar enforced,
//! `tool_choice` honoured over the format, neither enforced, the format refused beside tools —
//! each propose documents end to end; a constrained round is never asked twice of a server that
//! does not enforce it, and the endpoint is remembered for the next document.

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
    // A server that takes the format and answers with tool calls: every round that requires
    // a call keeps its format.
    let server = Server {
        behaves: Behaviour::ToolChoice,
        seen: Arc::default(),
    };
    let router = axum::Router::new()
        .fallback(serve_structured)
        .with_state(server.clone());
    let (_db, out) = run_invoice(router).await;
    assert_eq!(out.status, "succeeded", "{out:?}");
    let seen = server.seen.lock().unwrap().clone();
    let required: Vec<&Value> = seen
        .iter()
        .filter(|r| r["tool_choice"] == "required")
        .collect();
    assert!(required.len() >= 2, "some rounds require a call: {seen:#?}");
    // The first round (no call made yet, the whole document shown) is the one call for the
    // schema and the prompt; the rest one call of an offered tool.
    assert_eq!(format_name(required[0]), Some("proposal"));
    assert!(
        required[1..]
            .iter()
            .all(|r| format_name(r) == Some("tool_call")),
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

/// What an OpenAI-compatible server does with a round that carries a `response_format` beside
/// `tools` (issue 47, item 1). Every behaviour calls the tool of the stage it is offered
/// (natively) when asked with `tool_choice: "required"` and no format, the way a capable model
/// behind vLLM or llama.cpp does, and answers the extraction (no tools) with the document's
/// values.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Behaviour {
    /// Constrains decoding to the format (llama.cpp with its grammar): the format's JSON.
    Grammar,
    /// Honours `tool_choice` over the format (OpenAI): a tool call, the format unused.
    ToolChoice,
    /// Takes the format and enforces neither it nor `tool_choice` (some proxies, older vLLM and
    /// LM Studio builds, a grammar turned off): JSON of another shape to the one call, prose to
    /// a constrained call; tool calls only when asked without a format.
    Neither,
    /// Refuses a `response_format` beside tools with HTTP 400 naming it.
    Refuses,
}

/// The fake server: its behaviour and every request it was sent.
#[derive(Clone)]
struct Server {
    behaves: Behaviour,
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

/// The `json_schema` name of a request's format, if it has one.
fn format_name(req: &Value) -> Option<&str> {
    req.get("response_format")
        .filter(|f| !f.is_null())
        .map(|f| f["json_schema"]["name"].as_str().unwrap_or("?"))
}

/// The names of the tools a request offers.
fn offered(req: &Value) -> Vec<String> {
    req["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `req` is a constrained round: a `response_format` beside tools.
fn constrained_round(req: &Value) -> bool {
    format_name(req).is_some() && !offered(req).is_empty()
}

/// The invoice number of the document in `req` (`INV-…`).
fn invoice_number(req: &Value) -> String {
    let text = req["messages"].to_string();
    text.split("Invoice Number: ")
        .nth(1)
        .and_then(|r| {
            r.split(|c: char| c != '-' && !c.is_ascii_alphanumeric())
                .next()
        })
        .unwrap_or("INV-1")
        .to_string()
}

async fn serve_structured(State(s): State<Server>, body: Bytes) -> Response {
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    s.seen.lock().unwrap().push(req.clone());
    let tools = offered(&req);
    let format = format_name(&req);
    if s.behaves == Behaviour::Refuses && format.is_some() && !tools.is_empty() {
        let body = json!({"error": {"message": "response_format is not supported with tools",
                                     "type": "invalid_request_error", "param": "response_format"}});
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
    let number = invoice_number(&req);
    if tools.is_empty() {
        // The extraction: the values as the document has them.
        return text(json!({"invoice_number": number, "total": 12.5}));
    }
    let fields =
        json!([{"name": "invoice_number", "type": "string"}, {"name": "total", "type": "number"}]);
    let prompt =
        json!({"name": "Invoice", "content": "Extract the invoice number and the total as JSON."});
    match (s.behaves, format) {
        (Behaviour::Grammar, Some("proposal")) => {
            // The decision form when the format asks for one (the candidates become fields).
            let decision = req["response_format"]
                .pointer("/json_schema/schema/properties/schema/properties/more")
                .is_some();
            let schema = match decision {
                true => json!({"more": []}),
                false => json!({"fields": fields}),
            };
            return text(json!({"schema": schema, "prompt": prompt}));
        }
        (Behaviour::Neither, Some("proposal")) => {
            // Valid JSON, of the document's shape rather than the format's.
            return text(json!({"invoice_number": number, "total": 12.5}));
        }
        (Behaviour::Neither, Some(_)) => {
            let prose = "I will now create a schema for this invoice.";
            return reply(json!({"role": "assistant", "content": prose}), "stop");
        }
        _ => {}
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
    let has = |n: &str| tools.iter().any(|t| t == n);
    let (name, args) = if has("create_schema") {
        ("create_schema", json!({"fields": fields}))
    } else if has("create_prompt") {
        let revid = state
            .split("schema: ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_default();
        let mut args = prompt.clone();
        args["schema_revid"] = json!(revid);
        ("create_prompt", args)
    } else {
        ("run_extraction", json!({}))
    };
    match (s.behaves, format) {
        // Under a grammar the call is the format's JSON, written as text.
        (Behaviour::Grammar, Some(_)) => text(json!({"name": name, "arguments": args})),
        _ => tool_call(name, args),
    }
}

/// Serves a fake of `behaves` on a real port: its base URL and the requests it will see.
async fn start_server(behaves: Behaviour) -> (String, Arc<Mutex<Vec<Value>>>) {
    let server = Server {
        behaves,
        seen: Arc::default(),
    };
    let seen = server.seen.clone();
    let router = axum::Router::new()
        .fallback(serve_structured)
        .with_state(server);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (base_url, seen)
}

/// Runs auto_create on a one-page invoice against `Server`; the run's requests and the audited
/// calls of the run.
async fn propose_against(behaves: Behaviour) -> (Vec<Value>, Vec<(String, String)>, String) {
    let server = Server {
        behaves,
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
    let (seen, audit, text) = propose_against(Behaviour::Grammar).await;
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
    let (seen, audit, text) = propose_against(Behaviour::Refuses).await;
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

// ---------------------------------------------------------------------------------------------
// Issue 47, item 1: the four server behaviours, each proposing documents end to end (upload →
// auto_create job → worker → `proposed`) through a provider chain built from config, whose
// entry is named after the test (the metric's label) and whose model is the test's own (an
// endpoint is remembered per model: no other test's fake on a reused port shares it).

/// A log buffer every WARN of this test's thread goes to (the worker runs on it: the runtime
/// of `#[tokio::test]` has one thread).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).to_string()
    }
}

const SECRET: &str = "sk-lenient-0123456789abcdef";

/// What proposing documents against one endpoint showed.
struct Proposed {
    /// The requests each document's run sent, in order.
    per_document: Vec<Vec<Value>>,
    /// The tokens each run was charged, and the org's budget use after all of them.
    run_tokens: Vec<i64>,
    org_used: i64,
    /// `agentd_provider_constraint_fallbacks_total{provider = entry}` per reason.
    fallbacks: Vec<(String, f64)>,
    logs: String,
}

fn fallbacks(body: &str, provider: &str) -> Vec<(String, f64)> {
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
        .expect("Prometheus text");
    scrape
        .samples
        .iter()
        .filter(|s| {
            s.metric == "agentd_provider_constraint_fallbacks_total"
                && s.labels.get("provider") == Some(provider)
        })
        .map(|s| {
            let v = match s.value {
                prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
                _ => 0.0,
            };
            (s.labels.get("reason").unwrap_or("").to_string(), v)
        })
        .collect()
}

/// Uploads `documents` one-page invoices one after another to an org with a budget, each
/// proposed by the auto_create worker against a fake of `behaves`, in this process.
async fn propose_documents(behaves: Behaviour, entry: &str, documents: usize) -> Proposed {
    use agentd::config::{ProviderEntry, ProviderKind};
    let metrics = agentd::http::metrics_handle();
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _logged = tracing::subscriber::set_default(subscriber);
    let (base_url, seen) = start_server(behaves).await;
    let db = TestDb::new().await;
    let mut config = common::test_config();
    config.llm.providers = vec![ProviderEntry {
        name: entry.into(),
        kind: ProviderKind::OpenAi,
        base_url: base_url.clone(),
        api_key: SECRET.into(),
        api_key_env: String::new(),
        models: Vec::new(),
        requests_per_minute: 0,
        tokens_per_minute: 0,
        request_timeout_secs: Some(10),
        max_retries: Some(0),
        stream: Some(false),
    }];
    config.llm.model = format!("{entry}-agent");
    config.llm.extraction_model = format!("{entry}-extract");
    assert_eq!(
        config.llm.constrained_calls,
        agentd::config::Constrained::Auto
    );
    let mut app = common::app_with(&db, Arc::new(SystemClock) as SharedClock, config);
    app.provider = agentd::llm::from_config_with_limits(&app.config.llm, Some(&db.pool));
    assert_eq!(app.provider.name(), entry);
    let org = agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id;
    agentd::store::runs::set_budget(&db.pool, org, 10_000_000, chrono::Utc::now())
        .await
        .unwrap();
    let mut per_document = Vec::new();
    let mut run_tokens = Vec::new();
    for i in 1..=documents {
        let before = seen.lock().unwrap().len();
        let text = format!("Invoice Number: INV-{i}\nTotal: 12.50\n");
        let (doc, _) =
            agentd::documents::add_document(&app, org, &format!("invoice-{i}.txt"), &text, true)
                .await
                .unwrap();
        let (w, stop) = common::start_worker(&app, "auto_create", None).await;
        let status = || async {
            sqlx::query_scalar::<_, String>(
                "SELECT auto_create_status FROM documents WHERE id = $1",
            )
            .bind(doc)
            .fetch_one(&db.pool)
            .await
            .unwrap()
        };
        common::wait_until(60, "the document reaches a final status", || async {
            ["proposed", "failed", "skipped"].contains(&status().await.as_str())
        })
        .await;
        stop.cancel();
        w.join().await;
        let sent = seen.lock().unwrap()[before..].to_vec();
        assert_eq!(
            status().await,
            "proposed",
            "{behaves:?}, document {i}: {sent:#?}"
        );
        let tokens: i64 = sqlx::query_scalar(
            "SELECT r.input_tokens + r.output_tokens FROM agent_runs r
               JOIN documents d ON d.auto_create_run_id = r.id WHERE d.id = $1",
        )
        .bind(doc)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        per_document.push(sent);
        run_tokens.push(tokens);
    }
    let org_used = agentd::store::runs::budget(&db.pool, org, chrono::Utc::now())
        .await
        .unwrap()
        .unwrap()
        .tokens_used;
    Proposed {
        per_document,
        run_tokens,
        org_used,
        fallbacks: fallbacks(&metrics.render(), entry),
        logs: logs.text(),
    }
}

/// The runs were charged to the org (each run's tokens are asserted by the test: 120 per call
/// the fake answered; a refused request generated nothing).
fn assert_charged(p: &Proposed) {
    assert_eq!(
        p.org_used,
        p.run_tokens.iter().sum::<i64>(),
        "the org is charged what its runs were"
    );
}

/// The calls of each document's run, and how many of them were constrained rounds.
fn calls(p: &Proposed) -> Vec<(usize, usize)> {
    p.per_document
        .iter()
        .map(|sent| {
            (
                sent.len(),
                sent.iter().filter(|r| constrained_round(r)).count(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_server_that_enforces_the_grammar_proposes_in_two_calls() {
    let p = propose_documents(Behaviour::Grammar, "grammar-enforced", 2).await;
    // The one call and the extraction, for each document: the endpoint stays constrained.
    assert_eq!(calls(&p), vec![(2, 1), (2, 1)]);
    assert_eq!(format_name(&p.per_document[1][0]), Some("proposal"));
    assert_eq!(p.run_tokens, vec![240, 240]);
    assert_charged(&p);
    assert!(
        p.fallbacks.iter().all(|(_, n)| *n == 0.0),
        "{:?}",
        p.fallbacks
    );
}

#[tokio::test]
async fn a_server_that_honours_tool_choice_over_the_format_proposes_in_four_calls() {
    let p = propose_documents(Behaviour::ToolChoice, "tool-choice-honoured", 2).await;
    // The one call answered with create_schema, then create_prompt, run_extraction and the
    // extraction; the tool calls are used, so the endpoint stays constrained.
    assert_eq!(calls(&p), vec![(4, 3), (4, 3)]);
    assert_eq!(p.run_tokens, vec![480, 480]);
    assert_charged(&p);
    assert!(
        p.fallbacks.iter().all(|(_, n)| *n == 0.0),
        "{:?}",
        p.fallbacks
    );
}

/// What (c) and (d) share: the constrained request sent once in the first run, never in the
/// second; one fallback counted with `reason`; a WARN naming the endpoint and not the key or
/// the document.
fn assert_fell_back_once_and_remembered(p: &Proposed, entry: &str, reason: &str) {
    let c = calls(p);
    assert_eq!(
        c[0].1, 1,
        "the constrained request, once: {:#?}",
        p.per_document[0]
    );
    assert_eq!(
        c[1].1, 0,
        "the endpoint is remembered: {:#?}",
        p.per_document[1]
    );
    assert!(
        p.per_document[1]
            .iter()
            .all(|r| !matches!(format_name(r), Some("proposal" | "tool_call" | "review"))),
        "no constraint at all for the second document"
    );
    // The first run asks the same round again without the format, as the second run starts.
    let (first, second) = (&p.per_document[0], &p.per_document[1]);
    assert_eq!(first[1]["tool_choice"], "required");
    assert_eq!(offered(&first[1]), offered(&second[0]));
    assert!(format_name(&first[1]).is_none());
    assert!(
        !first[1]["messages"]
            .to_string()
            .contains("Answer with one JSON object"),
        "the one call's instruction went with its format"
    );
    assert_eq!(p.fallbacks, vec![(reason.to_string(), 1.0)], "{}", p.logs);
    let warn = p
        .logs
        .lines()
        .find(|l| l.contains("WARN") && l.contains("constrained calls are off"))
        .unwrap_or_else(|| panic!("a WARN line: {}", p.logs));
    assert!(warn.contains(entry), "{warn}");
    assert!(warn.contains(&format!("reason=\"{reason}\"")), "{warn}");
    assert!(
        warn.contains("http://127.0.0.1:"),
        "names the endpoint: {warn}"
    );
    assert!(!p.logs.contains(SECRET), "no key in the log");
    assert!(!p.logs.contains("INV-"), "no document text in the log");
}

#[tokio::test]
async fn a_server_that_enforces_neither_falls_back_to_plain_tool_calls_and_is_remembered() {
    let entry = "neither-enforced";
    let p = propose_documents(Behaviour::Neither, entry, 2).await;
    // First run: the one call answered outside its format (discarded), then step by step:
    // schema, prompt, run_extraction, the extraction, the summary round. Second run: step by
    // step from the start.
    assert_eq!(calls(&p), vec![(6, 1), (5, 0)]);
    assert_fell_back_once_and_remembered(&p, entry, "ignored");
    // The discarded answer was charged to the run like any call.
    assert_eq!(p.run_tokens, vec![720, 600]);
    assert_charged(&p);
}

#[tokio::test]
async fn a_server_that_refuses_the_format_beside_tools_is_asked_without_it_and_remembered() {
    let entry = "format-refused";
    let p = propose_documents(Behaviour::Refuses, entry, 2).await;
    // First run: the one call refused (HTTP 400), the same round asked again without it, and
    // step by step; the second run sends no format beside tools.
    assert_eq!(calls(&p), vec![(6, 1), (5, 0)]);
    assert_fell_back_once_and_remembered(&p, entry, "refused");
    // A refused request generated nothing: 5 answered calls each.
    assert_eq!(p.run_tokens, vec![600, 600]);
    assert_charged(&p);
}
