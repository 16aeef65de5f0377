//! The tool loop against models that behave like real ones (issue 11): prose before the goal,
//! tool calls written as text, stringified arguments, no `usage`, repeated calls, every cap,
//! long transcripts and servers that cannot parse the model's output. The scripted provider and
//! an HTTP fake of the OpenAI chat-completions API (axum on 127.0.0.1:0, answering from what
//! each request contains) stand in for the model; PostgreSQL is real.

use crate::common;
use agentd::agent::{RunOutcome, RunSpec};
use agentd::app::App;
use agentd::clock::{SharedClock, SystemClock};
use agentd::documents::add_document;
use agentd::llm::openai::{OpenAiProvider, OpenAiSettings};
use agentd::llm::scripted::{ScriptedProvider, Turn};
use agentd::llm::{
    Block, CompletionRequest, CompletionResponse, FinishReason, LlmError, Message, Role,
    ToolChoice, Usage,
};
use agentd::store::runs;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::Response;
use common::{TestDb, wait_until};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const INVOICE: &str =
    "Invoice Number: INV-77\nInvoice Date: 2026-11-02\nTotal Due: 1,250.00\nCustomer: Blue Fox\n";

// ---------- fixtures ----------

struct Env {
    db: TestDb,
    app: App,
    org: Uuid,
}

async fn env() -> Env {
    let db = TestDb::new().await;
    let mut app = common::app(&db, Arc::new(SystemClock) as SharedClock);
    // These fakes play servers with a given habit; "auto" (the default) is tested on its own
    // (tests/it/constrained_auto.rs): here constrained calls are on only where a test says so.
    let mut config = (*app.config).clone();
    config.llm.constrained_calls = agentd::config::Constrained::Off;
    app.config = Arc::new(config);
    let org = agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id;
    Env { db, app, org }
}

impl Env {
    async fn doc(&self, text: &str) -> Uuid {
        let mut conn = self.db.pool.acquire().await.unwrap();
        agentd::store::documents::insert(
            &mut conn,
            self.org,
            "invoice.txt",
            Some(text),
            &json!({}),
            chrono::Utc::now(),
        )
        .await
        .unwrap()
    }

    fn spec(&self, doc: Uuid, job: i64) -> RunSpec {
        let s = self.app.spec("auto_create");
        let mut r = self.app.run_spec(
            s,
            self.org,
            doc.to_string(),
            Some(job),
            format!("Document {doc} was uploaded."),
        );
        r.document_id = Some(doc);
        r
    }

    async fn run(&self, spec: &RunSpec) -> RunOutcome {
        self.app
            .engine(self.app.spec("auto_create"))
            .run(spec, &CancellationToken::new())
            .await
            .unwrap()
    }

    /// Uploads `text` and runs the auto_create worker until the document is final.
    async fn upload_and_drain(&self, text: &str) -> (Uuid, String) {
        let (doc, _) = add_document(&self.app, self.org, "invoice.txt", text, true)
            .await
            .unwrap();
        let (w, stop) = common::start_worker(&self.app, "auto_create", None).await;
        let pool = self.db.pool.clone();
        wait_until(60, "the document reaches a final status", || {
            let pool = pool.clone();
            async move {
                let s: String =
                    sqlx::query_scalar("SELECT auto_create_status FROM documents WHERE id = $1")
                        .bind(doc)
                        .fetch_one(&pool)
                        .await
                        .unwrap();
                ["proposed", "failed", "skipped"].contains(&s.as_str())
            }
        })
        .await;
        stop.cancel();
        w.join().await;
        let s = sqlx::query_scalar("SELECT auto_create_status FROM documents WHERE id = $1")
            .bind(doc)
            .fetch_one(&self.db.pool)
            .await
            .unwrap();
        (doc, s)
    }

    async fn decisions(&self, run: Uuid) -> Vec<(String, String)> {
        runs::audit_for_run(&self.db.pool, run)
            .await
            .unwrap()
            .into_iter()
            .map(|a| (a.tool, a.decision))
            .collect()
    }
}

fn invoice_format() -> Value {
    json!({"type": "json_schema", "json_schema": {"name": "invoice", "strict": true, "schema": {
        "type": "object", "additionalProperties": false, "required": ["invoice_number", "total_due"],
        "properties": {"invoice_number": {"type": "string"}, "total_due": {"type": "number"}}}}})
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

/// A revid from the working-state block at the end of the request (`schema: <revid> (…`).
fn state_revid(req: &CompletionRequest, what: &str) -> String {
    // The block ends the last message: a user message, or the last tool result.
    let last = req.messages.last().unwrap();
    let text: String = last
        .content
        .iter()
        .map(|b| match b {
            Block::Text { text } => text.clone(),
            Block::ToolResult { content, .. } => content.clone(),
            _ => String::new(),
        })
        .collect();
    let block = &text[text.rfind("[run state]").expect("state block")..];
    let at = block.find(&format!("{what}: ")).expect("state block") + what.len() + 2;
    block[at..].split([' ', ';']).next().unwrap().to_string()
}

/// create_prompt → run_extraction → extraction answer → summary, reading ids from the state.
fn rest_of_happy_path() -> Vec<Turn> {
    vec![
        Turn::Dynamic(|req| {
            call(
                "create_prompt",
                json!({"name": "Extract invoice", "content": "Extract the invoice number and total.",
                       "schema_revid": state_revid(req, "schema")}),
            )
        }),
        Turn::Dynamic(|req| {
            call(
                "run_extraction",
                json!({"prompt_revid": state_revid(req, "prompt")}),
            )
        }),
        Turn::Dynamic(|_| {
            answer(
                vec![Block::Text {
                    text: json!({"invoice_number": "INV-77", "total_due": 1250.0}).to_string(),
                }],
                FinishReason::EndTurn,
            )
        }),
        Turn::text("Proposed an invoice schema, a prompt and an extraction."),
    ]
}

/// The first tool result a request carries back to the model.
fn first_tool_result(req: &CompletionRequest) -> String {
    req.messages
        .iter()
        .flat_map(|m| m.content.iter())
        .find_map(|b| match b {
            Block::ToolResult { content, .. } => Some(content.clone()),
            _ => None,
        })
        .expect("a tool result")
}

fn all_text(req: &CompletionRequest) -> String {
    serde_json::to_string(&req.messages).unwrap()
}

// ---------- scripted provider ----------

#[tokio::test]
async fn prose_first_is_nudged_then_proposed() {
    let e = env().await;
    let mut turns = vec![
        Turn::text("Sure, I'll read the document first and then design a schema."),
        Turn::tool(
            "s",
            "create_schema",
            json!({"name": "Invoice", "response_format": invoice_format()}),
        ),
    ];
    turns.extend(rest_of_happy_path());
    let p = Arc::new(ScriptedProvider::new(turns));
    let mut e = e;
    e.app.provider = p.clone();
    let (_, status) = e.upload_and_drain(INVOICE).await;
    assert_eq!(status, "proposed");
    p.assert_complete();
    let reqs = p.requests.lock().unwrap().clone();
    assert!(
        reqs[0].messages[1]
            .joined_text()
            .contains("Invoice Number: INV-77"),
        "the first message carries the document text"
    );
    assert_eq!(reqs[0].tool_choice, ToolChoice::Required);
    let nudge = reqs[1].messages.last().unwrap().joined_text();
    let nudge_msg = &reqs[1].messages[reqs[1].messages.len() - 2];
    assert!(
        nudge_msg.role == Role::User
            && nudge_msg
                .joined_text()
                .contains("no schema, no prompt, no extraction")
            && nudge_msg.joined_text().contains("`create_schema`"),
        "the nudge names what is missing and the next tool: {nudge_msg:?}"
    );
    assert!(nudge.starts_with("[run state] schema: none yet"));
    let run: Uuid = sqlx::query_scalar("SELECT id FROM agent_runs")
        .fetch_one(&e.db.pool)
        .await
        .unwrap();
    let d = e.decisions(run).await;
    assert_eq!(d[0], ("nudge".to_string(), "nudged".to_string()));
    let last = reqs.last().unwrap();
    assert_eq!(
        last.tool_choice,
        ToolChoice::Auto,
        "once the goal is met the model may answer"
    );
}

#[tokio::test]
async fn a_stringified_argument_is_repaired_said_so_and_proposed() {
    let mut e = env().await;
    let mut turns = vec![Turn::tool(
        "s",
        "create_schema",
        json!({"name": "Invoice", "response_format": invoice_format().to_string()}),
    )];
    turns.extend(rest_of_happy_path());
    let p = Arc::new(ScriptedProvider::new(turns));
    e.app.provider = p.clone();
    let (_, status) = e.upload_and_drain(INVOICE).await;
    assert_eq!(status, "proposed");
    let reqs = p.requests.lock().unwrap().clone();
    let result = first_tool_result(&reqs[1]);
    assert!(
        result.starts_with(
            "[repaired: `response_format` was a JSON string; it was parsed as an object]"
        ) && result.contains("schema_revid"),
        "{result}"
    );
    let stored: Value = sqlx::query_scalar("SELECT response_format FROM schemas")
        .fetch_one(&e.db.pool)
        .await
        .unwrap();
    assert_eq!(stored["json_schema"]["name"], "invoice");
}

/// What a 0.5B local model sent as its first call (eval, 2026-11-23): a stringified
/// `response_format` whose `json_schema.schema` is a map of field → type, not a JSON Schema.
#[tokio::test]
async fn a_small_models_compact_schema_is_completed_said_so_and_proposed() {
    let mut e = env().await;
    let rf = json!({"type": "json_schema", "json_schema": {"name": "schema", "strict": true,
        "schema": {"invoice_number": "string", "total_due": "number"}}});
    let mut turns = vec![Turn::tool(
        "s",
        "create_schema",
        json!({"name": "invoice_en.txt", "response_format": rf.to_string()}),
    )];
    turns.extend(rest_of_happy_path());
    let p = Arc::new(ScriptedProvider::new(turns));
    e.app.provider = p.clone();
    let (_, status) = e.upload_and_drain(INVOICE).await;
    assert_eq!(status, "proposed");
    let reqs = p.requests.lock().unwrap().clone();
    let result = first_tool_result(&reqs[1]);
    assert!(
        result.contains("was a JSON string")
            && result.contains("json_schema.schema was a map of fields")
            && result.contains("schema_revid"),
        "{result}"
    );
    let stored: Value = sqlx::query_scalar("SELECT response_format FROM schemas")
        .fetch_one(&e.db.pool)
        .await
        .unwrap();
    let schema = &stored["json_schema"]["schema"];
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(schema["required"], json!(["invoice_number", "total_due"]));
    assert_eq!(
        schema["properties"]["total_due"]["type"],
        json!(["number", "null"])
    );
}

#[tokio::test]
async fn a_repeated_identical_call_gets_the_repeat_error_then_the_repeat_cap() {
    let e = env().await;
    let doc = e.doc(INVOICE).await;
    let p = Arc::new(ScriptedProvider::new(vec![
        Turn::tool("a", "list_schemas", json!({})),
        Turn::tool("b", "list_schemas", json!({})),
        Turn::tool("c", "list_schemas", json!({})),
        Turn::tool("d", "list_schemas", json!({})),
        Turn::text("I only listed schemas."),
    ]));
    let mut app = e.app.clone();
    app.provider = p.clone();
    let e = Env { app, ..e };
    let out = e.run(&e.spec(doc, 1)).await;
    assert_eq!(
        (out.status.as_str(), out.stop_reason.as_deref()),
        ("capped", Some("max_repeats"))
    );
    assert_eq!(out.final_text.as_deref(), Some("I only listed schemas."));
    let d: Vec<String> = e
        .decisions(out.run_id)
        .await
        .into_iter()
        .map(|d| d.1)
        .collect();
    assert_eq!(
        d[..4],
        ["auto_approved", "repeated", "repeated", "repeated"]
    );
    let reqs = p.requests.lock().unwrap().clone();
    let second = all_text(&reqs[2]);
    assert!(
        second
            .contains("repeated call: `list_schemas` already ran with these arguments (call r1.0")
            && second.contains("Next: call `create_schema`"),
        "the error points to the earlier result and names the next step"
    );
    assert_eq!(reqs[4].tool_choice, ToolChoice::None);
    p.assert_complete();
}

#[tokio::test]
async fn tool_calls_written_in_content_are_executed() {
    let e = env().await;
    let doc = e.doc(INVOICE).await;
    let tagged = format!(
        "I'll create the schema.\n<tool_call>\n{}\n</tool_call>",
        json!({"name": "create_schema", "arguments": {"name": "Invoice", "response_format": invoice_format()}})
    );
    let p = Arc::new(ScriptedProvider::new(vec![
        Turn::text(&tagged),
        Turn::text("```json\n{\"name\": \"list_schemas\", \"arguments\": {}}\n```"),
        Turn::text("Done."),
    ]));
    let mut app = e.app.clone();
    app.provider = p.clone();
    let e = Env { app, ..e };
    let mut spec = e.spec(doc, 1);
    spec.settings.max_nudges = 0;
    let out = e.run(&spec).await;
    let d = e.decisions(out.run_id).await;
    assert_eq!(
        d,
        vec![
            ("create_schema".to_string(), "auto_approved".to_string()),
            ("list_schemas".to_string(), "auto_approved".to_string()),
            ("max_nudges".to_string(), "capped".to_string()),
        ]
    );
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM schemas")
        .fetch_one(&e.db.pool)
        .await
        .unwrap();
    assert_eq!(n, 1);
}

#[tokio::test]
async fn context_stays_bounded_over_ten_rounds() {
    // Ten pages of about 3 KB each; the model reads one page a round.
    let pages: Vec<String> = (1..=10)
        .map(|p| {
            (0..60)
                .map(|l| format!("Page {p} line {l}: item {l} qty 1 price 10.00"))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect();
    let text = pages.join("\n\u{c}");
    let sizes = |compact: bool| {
        let text = text.clone();
        async move {
            let e = env().await;
            let doc = e.doc(&text).await;
            let mut turns: Vec<Turn> = (1..=10)
                .map(|p| Turn::tool(&format!("p{p}"), "get_ocr_text", json!({"page": p})))
                .collect();
            turns.push(Turn::text("read every page"));
            let p = Arc::new(ScriptedProvider::new(turns));
            let mut app = e.app.clone();
            app.provider = p.clone();
            let e = Env { app, ..e };
            let mut spec = e.spec(doc, 1);
            spec.caps.max_rounds = 20;
            spec.settings.max_nudges = 0;
            spec.settings.compact = compact;
            e.run(&spec).await;
            p.requests
                .lock()
                .unwrap()
                .iter()
                .map(|r| serde_json::to_string(r).unwrap().len())
                .collect::<Vec<_>>()
        }
    };
    let bounded = sizes(true).await;
    println!("request bytes per round, bounded: {bounded:?}");
    assert_eq!(bounded.len(), 11);
    // Stated bound: no request is more than 8 KB larger than the first one.
    const BOUND: usize = 8 * 1024;
    let max = *bounded.iter().max().unwrap();
    assert!(
        max <= bounded[0] + BOUND,
        "request sizes {bounded:?} grew past first + {BOUND}"
    );
    let legacy = sizes(false).await;
    println!("request bytes per round, legacy shape: {legacy:?}");
    assert!(
        *legacy.last().unwrap() > legacy[0] + 3 * BOUND,
        "without compaction the same run grows: {legacy:?}"
    );
}

// ---------- HTTP fake of the OpenAI API ----------

type Responder = Arc<dyn Fn(&Value, usize) -> (u16, Value) + Send + Sync>;

#[derive(Clone)]
struct FakeState {
    respond: Responder,
    seen: Arc<Mutex<Vec<Value>>>,
}

struct Fake {
    state: FakeState,
    provider: Arc<OpenAiProvider>,
}

impl Fake {
    async fn start(respond: Responder) -> Self {
        let state = FakeState {
            respond,
            seen: Arc::default(),
        };
        let app = axum::Router::new()
            .fallback(serve)
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let provider = Arc::new(OpenAiProvider::new(OpenAiSettings {
            base_url: format!("http://{addr}/v1"),
            api_key: String::new(),
            timeout: Duration::from_secs(20),
            max_retries: 0,
            stream: false,
        }));
        Fake { state, provider }
    }

    fn seen(&self) -> Vec<Value> {
        self.state.seen.lock().unwrap().clone()
    }
}

async fn serve(State(state): State<FakeState>, body: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let n = {
        let mut seen = state.seen.lock().unwrap();
        seen.push(body.clone());
        seen.len() - 1
    };
    let (status, v) = (state.respond)(&body, n);
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(v.to_string()))
        .unwrap()
}

/// A chat completion; `usage` only when given (some servers omit it).
fn completion(message: Value, usage: Option<(u64, u64)>) -> Value {
    let finish = if message.get("tool_calls").is_some() {
        "tool_calls"
    } else {
        "stop"
    };
    let mut v = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "fake-small",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    });
    if let Some((p, c)) = usage {
        v["usage"] = json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c});
    }
    v
}

fn text_message(t: &str) -> Value {
    json!({"role": "assistant", "content": t})
}

fn tool_message(name: &str, args: Value) -> Value {
    json!({"role": "assistant", "content": "", "tool_calls": [{"id": "call_0", "type": "function",
        "function": {"name": name, "arguments": args.to_string()}}]})
}

/// The working-state block of a request body (the last message).
fn body_state(body: &Value) -> String {
    let last = body["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap_or_default();
    last.rfind("[run state]")
        .map(|at| last[at..].to_string())
        .unwrap_or_default()
}

fn revid_in(state: &str, what: &str) -> String {
    let at = state.find(&format!("{what}: ")).unwrap() + what.len() + 2;
    state[at..].split([' ', ';']).next().unwrap().to_string()
}

#[tokio::test]
async fn text_tool_calls_without_usage_are_executed_counted_and_charged() {
    // A llama.cpp-like server without a tool parser and without usage: calls come back as text.
    let respond: Responder = Arc::new(|body, _| {
        if body.get("response_format").is_some() {
            let v = json!({"invoice_number": "INV-77", "total_due": 1250.0});
            return (200, completion(text_message(&v.to_string()), None));
        }
        let state = body_state(body);
        let content = if state.contains("schema: none yet") {
            format!(
                "<tool_call>\n{}\n</tool_call>",
                json!({"name": "create_schema", "arguments": {"name": "Invoice", "response_format": invoice_format()}})
            )
        } else if state.contains("prompt: none yet") {
            format!(
                "```json\n{}\n```",
                json!({"name": "create_prompt", "arguments": {"name": "Extract", "content": "Extract the invoice fields.", "schema_revid": revid_in(&state, "schema")}})
            )
        } else if state.contains("extraction: none yet") {
            json!({"name": "run_extraction", "arguments": {"prompt_revid": revid_in(&state, "prompt")}})
                .to_string()
        } else {
            "Proposed a schema, a prompt and an extraction.".to_string()
        };
        (200, completion(text_message(&content), None))
    });
    let fake = Fake::start(respond).await;
    let mut e = env().await;
    e.app.provider = fake.provider.clone();
    let now = chrono::Utc::now();
    runs::set_budget(&e.db.pool, e.org, 10_000_000, now)
        .await
        .unwrap();
    let (_, status) = e.upload_and_drain(INVOICE).await;
    assert_eq!(status, "proposed");
    let (run, input, output, estimated): (Uuid, i64, i64, bool) =
        sqlx::query_as("SELECT id, input_tokens, output_tokens, tokens_estimated FROM agent_runs")
            .fetch_one(&e.db.pool)
            .await
            .unwrap();
    assert!(estimated, "the run is marked as estimated");
    assert!(
        input > 500 && output > 20,
        "tokens counted without usage: {input} in, {output} out"
    );
    let used = runs::budget(&e.db.pool, e.org, now)
        .await
        .unwrap()
        .unwrap()
        .tokens_used;
    assert_eq!(
        used,
        input + output,
        "the org budget moved by the same count"
    );
    let d: Vec<String> = e.decisions(run).await.into_iter().map(|d| d.0).collect();
    assert_eq!(d, ["create_schema", "create_prompt", "run_extraction"]);
    let extraction_tokens: i32 =
        sqlx::query_scalar("SELECT tokens FROM audit_events WHERE tool = 'run_extraction'")
            .fetch_one(&e.db.pool)
            .await
            .unwrap();
    assert!(
        extraction_tokens > 0,
        "run_extraction's own call is counted too (no usage from the server)"
    );
    let bodies = fake.seen();
    assert_eq!(bodies[0]["tool_choice"], "required");
}

#[tokio::test]
async fn every_cap_ends_with_a_forced_summary_with_tool_choice_none_on_the_wire() {
    // A model that keeps reading pages (or, for the repeat cap, the same call).
    for cap in [
        "max_rounds",
        "max_tool_calls",
        "max_tokens",
        "deadline",
        "max_repeats",
    ] {
        let respond: Responder = match cap {
            "max_repeats" => Arc::new(|body, _| {
                if body["tool_choice"] == "none" {
                    return (
                        200,
                        completion(text_message("summary: kept listing"), Some((50, 5))),
                    );
                }
                (
                    200,
                    completion(tool_message("list_schemas", json!({})), Some((50, 5))),
                )
            }),
            "max_refinements" => Arc::new(|body, n| {
                if body["tool_choice"] == "none" {
                    return (
                        200,
                        completion(text_message("summary: refined"), Some((50, 5))),
                    );
                }
                let args =
                    json!({"name": format!("Invoice {n}"), "response_format": invoice_format()});
                (
                    200,
                    completion(tool_message("create_schema", args), Some((50, 5))),
                )
            }),
            "max_rounds" => Arc::new(|body, n| {
                if body["tool_choice"] == "none" {
                    // An empty summary: the run's own records stand in.
                    return (200, completion(text_message(""), Some((50, 0))));
                }
                let args = json!({"page": n + 1});
                (
                    200,
                    completion(tool_message("get_ocr_text", args), Some((50, 5))),
                )
            }),
            _ => Arc::new(|body, n| {
                if body["tool_choice"] == "none" {
                    return (
                        200,
                        completion(text_message("summary: read pages"), Some((50, 5))),
                    );
                }
                let args = json!({"page": n + 1});
                (
                    200,
                    completion(tool_message("get_ocr_text", args), Some((50, 5))),
                )
            }),
        };
        let fake = Fake::start(respond).await;
        let mut e = env().await;
        e.app.provider = fake.provider.clone();
        let doc = e
            .doc(&format!("{INVOICE}\u{c}page 2\u{c}page 3\u{c}page 4"))
            .await;
        let mut spec = e.spec(doc, 1);
        match cap {
            "max_rounds" => spec.caps.max_rounds = 2,
            "max_tool_calls" => spec.caps.max_tool_calls = 2,
            "max_tokens" => spec.caps.max_tokens = 100,
            "deadline" => spec.caps.deadline = Duration::ZERO,
            "max_refinements" => spec.caps.max_refinements = 0,
            _ => {}
        }
        let out = e.run(&spec).await;
        assert_eq!(
            (out.status.as_str(), out.stop_reason.as_deref()),
            ("capped", Some(cap)),
            "{cap}"
        );
        let bodies = fake.seen();
        let last = bodies.last().unwrap();
        assert_eq!(last["tool_choice"], "none", "{cap}: {last}");
        assert!(
            last["tools"].as_array().is_some_and(|t| !t.is_empty()),
            "{cap}: the tools stay in the summary request"
        );
        assert_eq!(
            bodies.iter().filter(|b| b["tool_choice"] == "none").count(),
            1,
            "{cap}: exactly one forced summary"
        );
        let text = out.final_text.unwrap_or_default();
        if cap == "max_rounds" {
            assert!(
                text.starts_with("Stopped at the max_rounds cap.")
                    && text.contains("Missing: schema, prompt, extraction")
                    && text.contains("get_ocr_text ok"),
                "fallback summary from the run's records: {text}"
            );
        } else {
            assert!(text.starts_with("summary: "), "{cap}: {text}");
        }
    }
}

#[tokio::test]
async fn a_parse_error_500_is_retried_once_with_a_hint() {
    const HINT: &str = "could not be parsed by the server";
    let respond: Responder = Arc::new(|body, _| {
        if body.to_string().contains(HINT) {
            return (
                200,
                completion(text_message("The invoice is INV-77."), Some((80, 6))),
            );
        }
        // llama.cpp when the model's output is not a well-formed tool call.
        (
            500,
            json!({"error": {"code": 500, "message": "Failed to parse input at pos 12: <tool_call>{\"name\"", "type": "server_error"}}),
        )
    });
    let fake = Fake::start(respond).await;
    let mut e = env().await;
    e.app.provider = fake.provider.clone();
    let doc = e.doc(INVOICE).await;
    let mut spec = e.spec(doc, 1);
    spec.settings.goals = false;
    let out = e.run(&spec).await;
    assert_eq!(out.status, "succeeded");
    let bodies = fake.seen();
    let hinted: Vec<bool> = bodies
        .iter()
        .map(|b| b.to_string().contains(HINT))
        .collect();
    assert_eq!(hinted.iter().filter(|h| **h).count(), 1, "{hinted:?}");
    assert!(hinted.last().unwrap() & !hinted[0], "{hinted:?}");
    let estimated: bool =
        sqlx::query_scalar("SELECT tokens_estimated FROM agent_runs WHERE id = $1")
            .bind(out.run_id)
            .fetch_one(&e.db.pool)
            .await
            .unwrap();
    assert!(
        estimated,
        "the failed call's input was charged as an estimate"
    );
    assert!(
        out.tokens > 86,
        "failed call counted beside the 86 reported"
    );
}

#[tokio::test]
async fn a_request_larger_than_the_context_window_is_refused_before_sending() {
    let e = env().await;
    let doc = e.doc(&"Line item: widget 12.40 EUR\n".repeat(400)).await;
    let p = Arc::new(ScriptedProvider::new(vec![]));
    let mut app = e.app.clone();
    app.provider = p.clone();
    let e = Env { app, ..e };
    let mut spec = e.spec(doc, 1);
    spec.settings.context_window_tokens = 2_000;
    let err = e
        .app
        .engine(e.app.spec("auto_create"))
        .run(&spec, &CancellationToken::new())
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("more than llm.context_window_tokens (2000)") && !err.is_retryable(),
        "{msg}"
    );
    assert_eq!(p.calls(), 0, "nothing was sent");
}

/// A small model behind llama.cpp, as measured with Qwen2.5-0.5B: told to call a tool
/// (`tool_choice: "required"`) without a schema to follow, it echoes the last message back; given
/// a `response_format`, its output follows it (the server constrains decoding), and its first
/// field map runs on until the output cap.
fn small_model(body: &Value, n: usize) -> (u16, Value) {
    if body["tools"].as_array().is_none_or(|t| t.is_empty()) {
        // run_extraction's own request.
        let v = json!({"invoice_number": "INV-77", "total_due": 1250.0});
        return (200, completion(text_message(&v.to_string()), None));
    };
    let last = body["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let Some(schema) = body["response_format"]["json_schema"]["schema"].as_object() else {
        if body["tool_choice"] == "required" {
            return (200, completion(text_message(&last), None));
        }
        return (
            200,
            completion(
                text_message("Proposed a schema, a prompt and an extraction."),
                None,
            ),
        );
    };
    let alternatives: Vec<Value> = match schema.get("anyOf") {
        Some(a) => a.as_array().unwrap().clone(),
        None => vec![Value::Object(schema.clone())],
    };
    let offers = |name: &str| {
        alternatives
            .iter()
            .find(|a| a["properties"]["name"]["const"] == name)
            .map(|a| a["properties"]["arguments"].clone())
    };
    let pinned = |args: &Value, key: &str| {
        args["properties"][key]["enum"][0]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (content, finish) = if let Some(args) = offers("run_extraction") {
        let call = json!({"name": "run_extraction", "arguments": {"prompt_revid": pinned(&args, "prompt_revid")}});
        (call.to_string(), "stop")
    } else if let Some(args) = offers("create_prompt").filter(|_| offers("create_schema").is_none())
    {
        let call = json!({"name": "create_prompt", "arguments": {"name": "Invoice fields",
            "content": "Extract the invoice fields.", "schema_revid": pinned(&args, "schema_revid")}});
        (call.to_string(), "stop")
    } else if n == 0 {
        // The first field map runs on, repeating one key, until the output cap.
        (r#"{"name": "create_schema", "arguments": {"fields": [{"name": "invoice_number", "type": "string"}, {"name": "total_due", "type": "number"}, {"name": "total_du"#.to_string(), "length")
    } else {
        let call = json!({"name": "create_schema", "arguments": {"fields": [
            {"name": "invoice_number", "type": "string"}, {"name": "total_due", "type": "number"}]}});
        (call.to_string(), "stop")
    };
    let mut v = completion(text_message(&content), None);
    v["choices"][0]["finish_reason"] = json!(finish);
    (200, v)
}

#[tokio::test]
async fn constrained_calls_carry_a_call_schema_and_a_small_model_proposes() {
    // Without constrained calls, the small model echoes instead of calling: nothing is made.
    let fake = Fake::start(Arc::new(small_model)).await;
    let mut e = env().await;
    e.app.provider = fake.provider.clone();
    let (_, status) = e.upload_and_drain(INVOICE).await;
    assert_eq!(
        status, "failed",
        "tool_choice required alone does not bind it"
    );
    assert!(
        fake.seen()
            .iter()
            .all(|b| b.get("response_format").is_none()
                || b["tools"].as_array().is_none_or(|t| t.is_empty()))
    );

    // With them, each required round carries a schema only a call satisfies.
    let fake = Fake::start(Arc::new(small_model)).await;
    let mut e = env().await;
    e.app.provider = fake.provider.clone();
    let mut config = (*e.app.config).clone();
    config.llm.constrained_calls = agentd::config::Constrained::On;
    e.app.config = Arc::new(config);
    let (_, status) = e.upload_and_drain(INVOICE).await;
    assert_eq!(status, "proposed");
    let run: Uuid = sqlx::query_scalar("SELECT id FROM agent_runs")
        .fetch_one(&e.db.pool)
        .await
        .unwrap();
    let d: Vec<String> = e.decisions(run).await.into_iter().map(|d| d.0).collect();
    assert_eq!(d, ["create_schema", "create_prompt", "run_extraction"]);

    let bodies = fake.seen();
    let rounds: Vec<&Value> = bodies
        .iter()
        .filter(|b| b["tools"].as_array().is_some_and(|t| !t.is_empty()))
        .collect();
    for b in &rounds {
        assert_eq!(
            b.get("response_format").is_some(),
            b["tool_choice"] == "required",
            "a call schema exactly where a call is required: {b}"
        );
    }
    // Round 1: the field map was cut at the output cap; closed, and the model is told.
    let first = rounds[1]["messages"].to_string();
    assert!(first.contains("cut off"), "the repair is said: {first}");
    let schemas: Vec<String> = sqlx::query_scalar(
        "SELECT jsonb_object_keys(response_format->'json_schema'->'schema'->'properties') FROM schemas",
    )
    .fetch_all(&e.db.pool)
    .await
    .unwrap();
    assert_eq!(
        schemas.len(),
        2,
        "the complete fields were kept: {schemas:?}"
    );
    // create_prompt's round pins the run's schema; create_schema offers no response_format.
    let prompt_round = rounds
        .iter()
        .find(|b| {
            b["response_format"]
                .to_string()
                .contains("\"create_prompt\"")
                && !b["response_format"]
                    .to_string()
                    .contains("\"create_schema\"")
        })
        .expect("a create_prompt round");
    let rf = &prompt_round["response_format"]["json_schema"]["schema"];
    let create_prompt = rf["anyOf"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["properties"]["name"]["const"] == "create_prompt")
        .unwrap();
    let pinned = create_prompt["properties"]["arguments"]["properties"]["schema_revid"]["enum"][0]
        .as_str()
        .unwrap()
        .to_string();
    let (sid, sv): (Uuid, i32) = sqlx::query_as("SELECT schema_id, version FROM schemas")
        .fetch_one(&e.db.pool)
        .await
        .unwrap();
    assert_eq!(pinned, format!("{sid}:{sv}"));
    // The first round is the one call: every candidate kept, the schema asked for as the
    // fields to add, with no response_format argument to fill.
    let first_rf = &rounds[0]["response_format"];
    assert_eq!(first_rf["json_schema"]["name"], "proposal", "{first_rf}");
    let schema_part = first_rf
        .pointer("/json_schema/schema/properties/schema")
        .unwrap_or_else(|| panic!("the schema part in {first_rf}"));
    assert_eq!(schema_part["required"], json!(["more"]), "{schema_part}");
    assert!(
        schema_part.pointer("/properties/drop").is_none(),
        "{schema_part}"
    );
    assert!(
        !first_rf.to_string().contains("\"response_format\""),
        "{first_rf}"
    );
}
