//! Several providers (issue 32, items 2 and 3) against HTTP fakes on real ports that speak the
//! OpenAI chat-completions wire format, with real PostgreSQL: a failing first entry (503, or
//! no answer) falls back to the second, the audit names the entry that answered, and the
//! breaker keeps calls off the first until its probe succeeds; an org's own key set over the
//! API is stored encrypted (in no table, log line or answer), used for that org's calls only,
//! refused when malformed, and a bad one fails that org's runs without opening the fleet's
//! breaker.
//!
//! The fakes think with the offline provider: each request is read back into the neutral types,
//! answered by `OfflineProvider`, and written out as a chat completion, so real runs reach their
//! outcome through the HTTP adapter and the chain.

#[path = "it/common/mod.rs"]
mod common;

use agentd::app::App;
use agentd::catalog::Catalog;
use agentd::clock::{ManualClock, SharedClock};
use agentd::config::{Config, Constrained, ProviderEntry, ProviderKind};
use agentd::llm::offline::OfflineProvider;
use agentd::llm::{Block, CompletionRequest, LlmProvider, Message, Role, ToolChoice, ToolSpec};
use agentd::store::states::RunStatus;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use common::TestDb;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex, OnceLock};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// How a fake answers.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// As the offline model would, in OpenAI's format.
    Think,
    /// This HTTP status with an OpenAI error body.
    Status(u16),
    /// Accepts the request and never answers.
    Hang,
}

#[derive(Clone)]
struct Fake {
    mode: Arc<Mutex<Mode>>,
    /// The `Authorization` header of every request, in order.
    auth: Arc<Mutex<Vec<String>>>,
    /// Keys answered with 401 (a revoked key).
    refused_keys: Arc<Mutex<Vec<String>>>,
    base_url: String,
}

impl Fake {
    async fn start(mode: Mode) -> Fake {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let fake = Fake {
            mode: Arc::new(Mutex::new(mode)),
            auth: Arc::default(),
            refused_keys: Arc::default(),
            base_url: format!("http://{}/v1", listener.local_addr().unwrap()),
        };
        let router = axum::Router::new()
            .fallback(answer)
            .with_state(fake.clone());
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        fake
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    fn requests(&self) -> usize {
        self.auth.lock().unwrap().len()
    }

    fn auth(&self) -> Vec<String> {
        self.auth.lock().unwrap().clone()
    }
}

async fn answer(State(f): State<Fake>, headers: HeaderMap, body: Bytes) -> Response {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    f.auth.lock().unwrap().push(auth.clone());
    let refused = f
        .refused_keys
        .lock()
        .unwrap()
        .iter()
        .any(|k| auth == format!("Bearer {k}"));
    let json = [("content-type", "application/json")];
    if refused {
        let body = json!({"error": {"message": "Incorrect API key provided",
                                     "type": "invalid_request_error", "code": "invalid_api_key"}});
        return (axum::http::StatusCode::UNAUTHORIZED, json, body.to_string()).into_response();
    }
    let mode = *f.mode.lock().unwrap();
    match mode {
        Mode::Hang => {
            tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
            ().into_response()
        }
        Mode::Status(s) => {
            let body =
                json!({"error": {"message": "the server is overloaded", "type": "server_error"}});
            let status = axum::http::StatusCode::from_u16(s).unwrap();
            (status, json, body.to_string()).into_response()
        }
        Mode::Think => {
            let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let neutral = neutral(&req);
            let resp = OfflineProvider::default().complete(neutral).await.unwrap();
            let mut message = json!({"role": "assistant", "content": resp.message.joined_text()});
            let calls: Vec<Value> = resp
                .message
                .tool_calls()
                .into_iter()
                .map(|(id, name, args)| {
                    json!({"id": id, "type": "function",
                           "function": {"name": name, "arguments": args}})
                })
                .collect();
            let finish = if calls.is_empty() {
                "stop"
            } else {
                "tool_calls"
            };
            if !calls.is_empty() {
                message["tool_calls"] = json!(calls);
            }
            let body = json!({
                "id": "c", "object": "chat.completion", "created": 1,
                "model": req["model"].as_str().unwrap_or("fake"),
                "choices": [{"index": 0, "finish_reason": finish, "message": message}],
                "usage": {"prompt_tokens": resp.usage.input_tokens,
                          "completion_tokens": resp.usage.output_tokens,
                          "total_tokens": resp.usage.input_tokens + resp.usage.output_tokens}
            });
            (json, body.to_string()).into_response()
        }
    }
}

/// An OpenAI chat-completions request read back into the neutral types.
fn neutral(req: &Value) -> CompletionRequest {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    };
    let mut messages = Vec::new();
    for m in req["messages"].as_array().into_iter().flatten() {
        match m["role"].as_str().unwrap_or("") {
            "system" => messages.push(Message::text(Role::System, text(&m["content"]))),
            "user" => messages.push(Message::text(Role::User, text(&m["content"]))),
            "assistant" => {
                let mut content = Vec::new();
                let t = text(&m["content"]);
                if !t.is_empty() {
                    content.push(Block::Text { text: t });
                }
                for c in m["tool_calls"].as_array().into_iter().flatten() {
                    content.push(Block::ToolUse {
                        id: c["id"].as_str().unwrap_or("").into(),
                        name: c["function"]["name"].as_str().unwrap_or("").into(),
                        arguments: c["function"]["arguments"].as_str().unwrap_or("").into(),
                    });
                }
                messages.push(Message {
                    role: Role::Assistant,
                    content,
                });
            }
            "tool" => {
                let content = text(&m["content"]);
                messages.push(Message {
                    role: Role::Tool,
                    content: vec![Block::ToolResult {
                        call_id: m["tool_call_id"].as_str().unwrap_or("").into(),
                        is_error: content.starts_with("ERROR: "),
                        content,
                    }],
                });
            }
            _ => {}
        }
    }
    let tools = req["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| ToolSpec {
            name: t["function"]["name"].as_str().unwrap_or("").into(),
            description: t["function"]["description"].as_str().unwrap_or("").into(),
            parameters: t["function"]["parameters"].clone(),
            strict: false,
        })
        .collect();
    CompletionRequest {
        model: req["model"].as_str().unwrap_or("").into(),
        messages,
        tools,
        tool_choice: match req["tool_choice"].as_str() {
            Some("required") => ToolChoice::Required,
            Some("none") => ToolChoice::None,
            _ => ToolChoice::Auto,
        },
        max_tokens: None,
        response_format: Some(req["response_format"].clone()).filter(|r| !r.is_null()),
    }
}

/// An entry of kind openai at `fake`, one attempt per call, not streamed.
fn entry(name: &str, fake: &Fake, key: &str) -> ProviderEntry {
    ProviderEntry {
        name: name.into(),
        kind: ProviderKind::OpenAi,
        base_url: fake.base_url.clone(),
        api_key: key.into(),
        api_key_env: String::new(),
        models: Vec::new(),
        requests_per_minute: 0,
        tokens_per_minute: 0,
        request_timeout_secs: Some(1),
        max_retries: Some(0),
        stream: Some(false),
    }
}

fn config(entries: Vec<ProviderEntry>, breaker_failures: u32) -> Config {
    let mut c = common::test_config();
    c.llm.providers = entries;
    c.llm.breaker_failures = breaker_failures;
    c.llm.breaker_cooldown_secs = 60;
    // The fakes answer as the offline model, which reads a response_format as an extraction.
    c.llm.constrained_calls = Constrained::Off;
    c.validate().expect("a valid config");
    c
}

/// An App whose provider is the config's chain (not the offline one tests usually inject).
fn app(db: &TestDb, clock: SharedClock, config: Config) -> App {
    App::new(
        db.pool.clone(),
        clock,
        config,
        Catalog::builtin(&agentd::known_tool_names()).unwrap(),
    )
}

const INVOICE: &str = "Invoice Number: INV-1\nTotal: 12.50\nDate: 2026-01-05\n";

/// Runs auto_create on a new document of `org` to its end.
async fn run_auto_create(app: &App, org: Uuid) -> agentd::agent::RunOutcome {
    try_auto_create(app, org).await.expect("the run ends")
}

/// Runs auto_create on a new document of `org`: its outcome, or the error that ends it.
async fn try_auto_create(
    app: &App,
    org: Uuid,
) -> Result<agentd::agent::RunOutcome, agentd::agent::RunError> {
    let mut conn = app.pool.acquire().await.unwrap();
    let doc = agentd::store::documents::insert(
        &mut conn,
        org,
        "invoice.txt",
        Some(INVOICE),
        &json!({}),
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    drop(conn);
    let spec = app.spec("auto_create");
    let mut rs = app.run_spec(spec, org, doc.to_string(), None, format!("Document {doc}"));
    rs.document_id = Some(doc);
    app.engine(spec).run(&rs, &CancellationToken::new()).await
}

/// (provider, outcome) of each recorded attempt of `run`.
async fn attempts(app: &App, run: Uuid) -> Vec<(String, String)> {
    agentd::store::provider_calls::for_run(&app.pool, run)
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.provider, c.outcome))
        .collect()
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// The first entry fails (`failing`); runs complete on the second; after `k` failures the
/// breaker stops sending to the first — also once it is healthy again — until the cool-down
/// passes and its probe succeeds.
async fn falls_back_and_probes(failing: Mode) {
    let db = TestDb::new().await;
    let clock = ManualClock::new(chrono::Utc::now());
    let (first, second) = (Fake::start(failing).await, Fake::start(Mode::Think).await);
    let k = 2;
    let c = config(
        vec![
            entry("primary", &first, "sk-primary-0000000000000000"),
            entry("backup", &second, "sk-backup-00000000000000000"),
        ],
        k,
    );
    let app = app(&db, clock.clone() as SharedClock, c);
    let org = agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id;

    let out = run_auto_create(&app, org).await;
    assert_eq!(out.status, RunStatus::Succeeded, "{out:?}");
    let calls = attempts(&app, out.run_id).await;
    let failed_first = calls
        .iter()
        .filter(|c| *c == &("primary".to_string(), "failed".to_string()))
        .count();
    assert_eq!(
        failed_first, k as usize,
        "the breaker opened after {k} failures: {calls:?}"
    );
    assert!(
        calls
            .iter()
            .filter(|c| c.1 == "answered")
            .all(|c| c.0 == "backup"),
        "every answer came from the second entry: {calls:?}"
    );
    assert!(
        calls.iter().filter(|c| c.1 == "answered").count() as i32 >= out.rounds,
        "every round (and every extraction call) answered: {calls:?}"
    );
    // The run's charge is what the answering entry reported.
    let charged: (i64, i64) =
        sqlx::query_as("SELECT input_tokens, output_tokens FROM agent_runs WHERE id = $1")
            .bind(out.run_id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let recorded: (i64, i64) = sqlx::query_as(
        "SELECT sum(input_tokens)::bigint, sum(output_tokens)::bigint FROM provider_calls
          WHERE run_id = $1 AND outcome = 'answered'",
    )
    .bind(out.run_id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(charged, recorded);

    // Healthy again, but the breaker is open: nothing is sent to it before the cool-down.
    first.set(Mode::Think);
    let sent = first.requests();
    let out = run_auto_create(&app, org).await;
    assert_eq!(out.status, RunStatus::Succeeded, "{out:?}");
    assert_eq!(first.requests(), sent, "an open breaker sends nothing");
    assert!(
        attempts(&app, out.run_id)
            .await
            .iter()
            .all(|c| c == &("backup".to_string(), "answered".to_string()))
    );

    // After the cool-down one probe goes; it succeeds and the first entry answers again.
    clock.advance(chrono::Duration::seconds(61));
    let out = run_auto_create(&app, org).await;
    assert_eq!(out.status, RunStatus::Succeeded, "{out:?}");
    let calls = attempts(&app, out.run_id).await;
    assert!(!calls.is_empty());
    assert_eq!(
        calls,
        pairs(&vec![("primary", "answered"); calls.len()]),
        "the probe closed the breaker"
    );
    assert!(first.requests() > sent);
}

#[tokio::test]
async fn a_first_provider_answering_503_falls_back_and_its_breaker_waits_for_a_probe() {
    falls_back_and_probes(Mode::Status(503)).await;
}

#[tokio::test]
async fn a_first_provider_that_does_not_answer_falls_back_and_its_breaker_waits_for_a_probe() {
    falls_back_and_probes(Mode::Hang).await;
}

/// Everything `agentd` logs in this test binary.
fn log_buffer() -> Arc<Mutex<Vec<u8>>> {
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let buf: Arc<Mutex<Vec<u8>>> = Arc::default();
        let writer = buf.clone();
        let _ = tracing_subscriber::fmt()
            .with_env_filter("debug")
            .with_writer(move || Tee(writer.clone()))
            .try_init();
        buf
    })
    .clone()
}

struct Tee(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Tee {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The API of `app` on a real port; returns its base URL.
async fn serve(app: &App) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(agentd::api::serve(
        listener,
        None,
        app.clone(),
        CancellationToken::new(),
    ));
    base
}

/// Every answer of the API in this test, to search for the key.
#[derive(Default)]
struct Client {
    http: reqwest::Client,
    answers: Mutex<String>,
}

impl Client {
    async fn call(&self, base: &str, method: &str, key: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self
            .http
            .request(
                reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
                format!("{base}/v1/settings/provider-key"),
            )
            .bearer_auth(key);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        self.answers.lock().unwrap().push_str(&text);
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

/// Rows of every table whose text, jsonb or bytea columns hold `needle`.
async fn tables_holding(pool: &sqlx::PgPool, needle: &str) -> Vec<String> {
    let cols: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT table_name::text, column_name::text, data_type::text FROM information_schema.columns
          WHERE table_schema = current_schema()
            AND data_type IN ('text', 'character varying', 'jsonb', 'json', 'bytea', 'ARRAY')",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert!(cols.len() > 20, "the scan reads the schema's columns");
    let mut found = Vec::new();
    for (table, column, ty) in cols {
        // The names come from the catalogue, quoted.
        let hit: bool = if ty == "bytea" {
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT EXISTS (SELECT 1 FROM \"{table}\" WHERE position(convert_to($1, 'UTF8') in \"{column}\") > 0)"
            )))
        } else {
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT EXISTS (SELECT 1 FROM \"{table}\" WHERE \"{column}\"::text LIKE '%' || $1 || '%')"
            )))
        }
        .bind(needle)
        .fetch_one(pool)
        .await
        .unwrap();
        if hit {
            found.push(format!("{table}.{column}"));
        }
    }
    found
}

#[tokio::test]
async fn an_org_key_is_stored_encrypted_used_for_that_org_only_and_a_bad_one_fails_only_that_org() {
    let logs = log_buffer();
    let db = TestDb::new().await;
    let clock = ManualClock::new(chrono::Utc::now());
    let fake = Fake::start(Mode::Think).await;
    const OPERATOR: &str = "sk-operator-000000000000000000";
    const ORG_KEY: &str = "sk-org-a-SECRET-4f9c2e7d1b8a6c3e";
    const ROTATED: &str = "sk-org-a-ROTATED-9d8c7b6a5f4e3d2c";
    const REVOKED: &str = "sk-org-b-REVOKED-1a2b3c4d5e6f7a8b";
    // A breaker that opens on one failure: a refused org key must not count as one.
    let mut c = config(vec![entry("main", &fake, OPERATOR)], 1);
    c.llm.org_key_encryption_key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=".into();
    let app = app(&db, clock.clone() as SharedClock, c);
    let base = serve(&app).await;
    let api = Client::default();
    let org_a = agentd::store::api_keys::create_org(&db.pool, "a")
        .await
        .unwrap()
        .unwrap();
    let org_b = agentd::store::api_keys::create_org(&db.pool, "b")
        .await
        .unwrap()
        .unwrap();
    let now = chrono::Utc::now();
    let admin = |org| {
        let pool = db.pool.clone();
        async move {
            agentd::api::create_key(&pool, org, agentd::api::Role::Admin, now)
                .await
                .unwrap()
                .1
        }
    };
    let (admin_a, admin_b) = (admin(org_a).await, admin(org_b).await);

    // Malformed: refused naming the field, nothing stored.
    for (body, field) in [
        (json!({"key": "short"}), "key"),
        (json!({"key": "sk has spaces in it 0123456789"}), "key"),
        (json!({"key": 42}), "key"),
        (json!({"key": ORG_KEY, "provider": "nope"}), "provider"),
        (json!({"key": ORG_KEY, "extra": 1}), "extra"),
    ] {
        let (status, b) = api.call(&base, "PUT", &admin_a, Some(body.clone())).await;
        assert_eq!(
            (status, b["field"].as_str()),
            (422, Some(field)),
            "{body}: {b}"
        );
    }
    let (_, view) = api.call(&base, "GET", &admin_a, None).await;
    assert_eq!(view["set"], false);

    // Set over the API: stored, shown by its last 4 characters only.
    let (status, view) = api
        .call(&base, "PUT", &admin_a, Some(json!({"key": ORG_KEY})))
        .await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(
        (view["set"].clone(), view["last4"].clone()),
        (json!(true), json!("6c3e"))
    );
    let (_, view) = api.call(&base, "GET", &admin_a, None).await;
    assert_eq!(view["last4"], "6c3e");
    let (_, view_b) = api.call(&base, "GET", &admin_b, None).await;
    assert_eq!(view_b["set"], false, "another org's key is not this org's");

    // Used for org A's calls only.
    let a = run_auto_create(&app, org_a).await;
    assert_eq!(a.status, RunStatus::Succeeded, "{a:?}");
    let seen_a = fake.auth();
    let b = run_auto_create(&app, org_b).await;
    assert_eq!(b.status, RunStatus::Succeeded, "{b:?}");
    let seen_b: Vec<String> = fake.auth()[seen_a.len()..].to_vec();
    assert!(!seen_a.is_empty() && seen_a.iter().all(|h| *h == format!("Bearer {ORG_KEY}")));
    assert!(!seen_b.is_empty() && seen_b.iter().all(|h| *h == format!("Bearer {OPERATOR}")));
    for (run, own) in [(a.run_id, true), (b.run_id, false)] {
        let marks: Vec<bool> =
            sqlx::query_scalar("SELECT org_key FROM provider_calls WHERE run_id = $1")
                .bind(run)
                .fetch_all(&db.pool)
                .await
                .unwrap();
        assert!(
            !marks.is_empty() && marks.iter().all(|m| *m == own),
            "{run}: {marks:?}"
        );
    }

    // Rotated by writing a new one.
    let (status, view) = api
        .call(
            &base,
            "PUT",
            &admin_a,
            Some(json!({"key": ROTATED, "provider": "main"})),
        )
        .await;
    assert_eq!((status, view["last4"].clone()), (200, json!("3d2c")));
    let before = fake.requests();
    let a2 = run_auto_create(&app, org_a).await;
    assert_eq!(a2.status, RunStatus::Succeeded);
    assert!(
        fake.auth()[before..]
            .iter()
            .all(|h| *h == format!("Bearer {ROTATED}"))
    );

    // A bad key fails that org's runs with a clear reason; the fleet's breaker stays closed.
    fake.refused_keys.lock().unwrap().push(REVOKED.into());
    let (status, _) = api
        .call(&base, "PUT", &admin_b, Some(json!({"key": REVOKED})))
        .await;
    assert_eq!(status, 200);
    let failed = try_auto_create(&app, org_b)
        .await
        .expect_err("the run fails");
    assert!(
        !failed.is_retryable(),
        "a refused key is not retried: {failed}"
    );
    let reason = failed.to_string();
    assert!(
        reason.contains("org's own provider key was refused"),
        "{reason}"
    );
    assert!(!reason.contains(REVOKED), "{reason}");
    let a3 = run_auto_create(&app, org_a).await;
    assert_eq!(
        a3.status,
        RunStatus::Succeeded,
        "another org still runs: {a3:?}"
    );

    // Removed: the operator's key again.
    let (status, _) = api.call(&base, "DELETE", &admin_b, None).await;
    assert_eq!(status, 204);
    let before = fake.requests();
    let b2 = run_auto_create(&app, org_b).await;
    assert_eq!(b2.status, RunStatus::Succeeded);
    assert!(
        fake.auth()[before..]
            .iter()
            .all(|h| *h == format!("Bearer {OPERATOR}"))
    );

    // The raw keys are in no table, no answer and no log line.
    for key in [ORG_KEY, ROTATED, REVOKED] {
        assert_eq!(
            tables_holding(&db.pool, key).await,
            Vec::<String>::new(),
            "{key}"
        );
        assert!(
            !api.answers.lock().unwrap().contains(key),
            "an answer holds {key}"
        );
        let log = String::from_utf8_lossy(&logs.lock().unwrap()).to_string();
        assert!(!log.contains(key), "the log holds {key}");
    }
    assert!(
        tables_holding(&db.pool, "3d2c")
            .await
            .contains(&"org_provider_keys.last4".to_string()),
        "the scan finds what is stored (the rotated key's last 4 characters)"
    );
    let log = String::from_utf8_lossy(&logs.lock().unwrap()).to_string();
    assert!(
        log.contains("an org stored its own provider key"),
        "the log is captured"
    );
}

/// The Authorization headers `fake` received from request `from` on.
fn auth_since(fake: &Fake, from: usize) -> Vec<String> {
    fake.auth()[from..].to_vec()
}

/// Review D2: an org's calls with its own key go only to the entry the key is for. Its entry
/// answering 503, the run fails retryably and the healthy second entry (the operator's key)
/// receives nothing; an org without a key still falls back to it; opted in
/// (`byok_fallback = operator`) the keyed org falls back too; and a model the org's entry does
/// not serve is refused, not sent to the operator's entries.
#[tokio::test]
async fn an_org_keys_calls_stay_on_its_entry_unless_the_org_opts_in_to_the_operators_entries() {
    use agentd::org_settings::{Patch, SetBy, apply};
    use agentd::store::org_settings::ByokFallback;
    let db = TestDb::new().await;
    let clock = ManualClock::new(chrono::Utc::now());
    let (own, backup) = (
        Fake::start(Mode::Status(503)).await,
        Fake::start(Mode::Think).await,
    );
    const OPERATOR_OWN: &str = "sk-operator-own-0000000000000000";
    const OPERATOR_BACKUP: &str = "sk-operator-backup-000000000000";
    const ORG_KEY: &str = "sk-org-a-OWN-KEY-0123456789abcdef";
    let mut c = config(
        vec![
            entry("own", &own, OPERATOR_OWN),
            entry("backup", &backup, OPERATOR_BACKUP),
        ],
        2,
    );
    c.llm.org_key_encryption_key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=".into();
    let app = app(&db, clock.clone() as SharedClock, c.clone());
    let org = |name: &'static str| {
        let pool = db.pool.clone();
        async move { agentd::store::orgs::ensure(&pool, name).await.unwrap().id }
    };
    let (org_a, org_b) = (org("a").await, org("b").await);
    agentd::llm::org_keys::set_key(
        &db.pool,
        &app.config.llm,
        org_a,
        ORG_KEY,
        Some("own"),
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    let settings = agentd::store::org_settings::get(&db.pool, org_a)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(settings.byok_fallback, ByokFallback::None, "the default");

    // A's own entry fails: the run fails retryably, nothing reaches the operator's entry.
    let failed = try_auto_create(&app, org_a)
        .await
        .expect_err("A's run fails");
    assert!(failed.is_retryable(), "tried again later: {failed}");
    let reason = failed.to_string();
    assert!(reason.contains("byok_fallback = none"), "{reason}");
    assert_eq!(
        backup.requests(),
        0,
        "the operator's entry received nothing"
    );
    assert!(
        !own.auth().is_empty() && own.auth().iter().all(|h| *h == format!("Bearer {ORG_KEY}")),
        "A's calls carried A's key: {:?}",
        own.auth()
    );
    let calls: Vec<(String, bool)> =
        sqlx::query_as("SELECT provider, org_key FROM provider_calls WHERE org_id = $1")
            .bind(org_a)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert!(
        !calls.is_empty() && calls.iter().all(|c| *c == ("own".to_string(), true)),
        "{calls:?}"
    );

    // B has no key: its calls fall back to the operator's second entry, as before.
    let (own_before, backup_before) = (own.requests(), backup.requests());
    let b = run_auto_create(&app, org_b).await;
    assert_eq!(b.status, RunStatus::Succeeded, "{b:?}");
    assert!(
        auth_since(&own, own_before)
            .iter()
            .all(|h| *h == format!("Bearer {OPERATOR_OWN}"))
    );
    let to_backup = auth_since(&backup, backup_before);
    assert!(
        !to_backup.is_empty()
            && to_backup
                .iter()
                .all(|h| *h == format!("Bearer {OPERATOR_BACKUP}")),
        "{to_backup:?}"
    );

    // A opts in (an org admin may: its calls then run as an org without a key would).
    let opt_in = |b: ByokFallback| Patch {
        byok_fallback: Some(b),
        ..Patch::default()
    };
    let now = chrono::Utc::now();
    apply(
        &db.pool,
        &c,
        org_a,
        &opt_in(ByokFallback::Operator),
        now,
        SetBy::OrgAdmin,
    )
    .await
    .unwrap();
    let (own_before, backup_before) = (own.requests(), backup.requests());
    let a = run_auto_create(&app, org_a).await;
    assert_eq!(a.status, RunStatus::Succeeded, "A falls back: {a:?}");
    assert!(
        auth_since(&own, own_before)
            .iter()
            .all(|h| *h == format!("Bearer {ORG_KEY}")),
        "its own entry still carries its key"
    );
    let to_backup = auth_since(&backup, backup_before);
    assert!(
        !to_backup.is_empty()
            && to_backup
                .iter()
                .all(|h| *h == format!("Bearer {OPERATOR_BACKUP}")),
        "{to_backup:?}"
    );

    // Back to none, and A's entry does not serve the runs' model: refused, not retried, and
    // not sent to the entry that does.
    apply(
        &db.pool,
        &c,
        org_a,
        &opt_in(ByokFallback::None),
        now,
        SetBy::OrgAdmin,
    )
    .await
    .unwrap();
    let mut narrow = c.clone();
    narrow.llm.providers[0].models = vec!["a-model-no-run-asks-for".into()];
    let narrow = crate::app(&db, clock.clone() as SharedClock, narrow);
    let (own_before, backup_before) = (own.requests(), backup.requests());
    let refused = try_auto_create(&narrow, org_a).await.expect_err("refused");
    assert!(!refused.is_retryable(), "{refused}");
    let reason = refused.to_string();
    let model = narrow.model_for(narrow.spec("auto_create"));
    assert!(
        reason.contains(&format!("{model:?}"))
            && reason.contains("\"own\"")
            && reason.contains("byok_fallback"),
        "{reason}"
    );
    assert_eq!(
        (own.requests(), backup.requests()),
        (own_before, backup_before),
        "nothing was sent"
    );
    // B (no key) is served by the entry that serves the model.
    let b = run_auto_create(&narrow, org_b).await;
    assert_eq!(b.status, RunStatus::Succeeded, "{b:?}");
}

/// `agentd status --json` of `db`, run as its own process.
fn status_json(db: &TestDb) -> Value {
    let o = agentd(db, &["status", "--json"], &[], "");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("status --json is JSON")
}

fn at(v: &Value) -> chrono::DateTime<chrono::Utc> {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a timestamp: {v}"))
}

/// Issue 47, item 2: breakers live in each worker's memory; `agentd status`, another process,
/// shows each live worker's entries and their states (since when) from the row the worker
/// writes every heartbeat, follows a change at the next beat, and forgets a stopped worker.
#[tokio::test]
async fn status_shows_each_live_workers_provider_breakers_since_when() {
    let db = TestDb::new().await;
    let clock = ManualClock::new(chrono::Utc::now());
    let (first, second) = (
        Fake::start(Mode::Status(503)).await,
        Fake::start(Mode::Think).await,
    );
    let mut c = config(
        vec![
            entry("primary", &first, "sk-primary-0000000000000000"),
            entry("backup", &second, "sk-backup-00000000000000000"),
        ],
        2,
    );
    // Live a lease after its beat by the manual clock; status reads the wall clock.
    c.worker.lease_secs = 120;
    let app = app(&db, clock.clone() as SharedClock, c);
    let none = status_json(&db);
    assert_eq!(none["workers"], json!([]), "no worker yet");
    let org = agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id;
    // The first entry's breaker opens (2 failures); the run completes on the second.
    let out = run_auto_create(&app, org).await;
    assert_eq!(out.status, RunStatus::Succeeded, "{out:?}");
    let worker = app
        .start_worker(
            agentd::app::WorkerArgs::serving(&["auto_create"], Some(1)),
            CancellationToken::new(),
        )
        .await
        .expect("the worker starts");

    let v = status_json(&db);
    let workers = v["workers"].as_array().expect("a list");
    assert_eq!(workers.len(), 1, "{v}");
    let w = &workers[0];
    assert_eq!(
        (w["kinds"].clone(), w["pid"].clone()),
        (json!(["auto_create"]), json!(std::process::id()))
    );
    let b = w["breakers"].as_array().expect("breakers");
    assert_eq!(
        b.iter()
            .map(|b| (b["provider"].as_str(), b["state"].as_str()))
            .collect::<Vec<_>>(),
        vec![
            (Some("primary"), Some("open")),
            (Some("backup"), Some("closed"))
        ],
        "{v}"
    );
    let opened = at(&b[0]["since"]);
    assert_eq!(at(&b[0]["until"]) - opened, chrono::Duration::seconds(60));
    assert_eq!(
        (b[1]["since"].clone(), b[1]["failures"].clone()),
        (Value::Null, json!(0)),
        "closed since the worker started"
    );
    let o = agentd(&db, &["status"], &[], "");
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let line = |entry: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(entry))
            .unwrap_or_else(|| panic!("a line for {entry}: {text}"))
            .to_string()
    };
    assert!(
        line("primary").contains(" open ") && line("primary").contains("probe from"),
        "{text}"
    );
    assert!(
        line("backup").contains("closed") && line("backup").contains("since the worker's start"),
        "{text}"
    );
    assert!(text.contains("(auto_create) up since"), "{text}");

    // Past the cool-down the next beat says half-open, since the cool-down's end.
    clock.advance(chrono::Duration::seconds(61));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let half = loop {
        let rows = agentd::store::workers::live(&db.pool, agentd::clock::Clock::now(&*clock))
            .await
            .unwrap();
        let b = rows[0].breakers[0].clone();
        if b["state"] == "half-open" {
            break b;
        }
        assert!(std::time::Instant::now() < deadline, "no beat: {b}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(at(&half["since"]), opened + chrono::Duration::seconds(60));

    // Stopped: its row is gone.
    worker.shutdown.cancel();
    worker.join().await;
    assert_eq!(status_json(&db)["workers"], json!([]));
    let o = agentd(&db, &["status"], &[], "");
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(text.contains("(no live worker)"), "{text}");
}

#[tokio::test]
async fn a_stored_org_key_without_an_encryption_key_refuses_to_start_workers() {
    let db = TestDb::new().await;
    let clock: SharedClock = ManualClock::new(chrono::Utc::now());
    let fake = Fake::start(Mode::Think).await;
    let mut c = config(
        vec![entry("main", &fake, "sk-operator-000000000000000000")],
        3,
    );
    c.llm.org_key_encryption_key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=".into();
    let with_key = app(&db, clock.clone(), c.clone());
    let org = agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id;
    agentd::llm::org_keys::set_key(
        &db.pool,
        &with_key.config.llm,
        org,
        "sk-org-0123456789abcdefghij",
        None,
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    c.llm.org_key_encryption_key = String::new();
    let without = app(&db, clock, c);
    let err = without
        .start_worker(
            agentd::app::WorkerArgs::serving(&["auto_create"], Some(1)),
            CancellationToken::new(),
        )
        .await
        .err()
        .expect("refused");
    assert!(
        err.to_string()
            .contains("llm.org_key_encryption_key is not set"),
        "{err}"
    );
}

/// A TCP stand-in for a PostgreSQL server that is restarting: the first `refuse` connections
/// are closed as soon as they open, later ones are piped to the real server. Returns its port
/// and the count of connections it closed.
async fn restarting_server(refuse: usize) -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::Ordering;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let closed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = closed.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            if seen.load(Ordering::SeqCst) < refuse {
                seen.fetch_add(1, Ordering::SeqCst);
                drop(client);
                continue;
            }
            tokio::spawn(async move {
                if let Ok(mut server) = tokio::net::TcpStream::connect("127.0.0.1:5432").await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    (port, closed)
}

/// An App whose pool reaches `db` through `port` (connections opened lazily).
fn app_through(db: &TestDb, port: u16, config: Config) -> App {
    let opts = agentd::db::connect_options(&db.url).unwrap().port(port);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(std::time::Duration::from_millis(500))
        .connect_lazy_with(opts);
    App::new(
        pool,
        ManualClock::new(chrono::Utc::now()),
        config,
        Catalog::builtin(&agentd::known_tool_names()).unwrap(),
    )
}

#[tokio::test]
async fn a_worker_started_while_the_database_restarts_waits_for_it_and_one_that_never_answers_is_not_bad_input()
 {
    let db = TestDb::new().await;
    let fake = Fake::start(Mode::Think).await;
    let c = config(
        vec![entry("main", &fake, "sk-operator-000000000000000000")],
        3,
    );

    // Three connections dropped, then the server answers: the start-up check retries.
    let (port, closed) = restarting_server(3).await;
    let stop = CancellationToken::new();
    let running = app_through(&db, port, c.clone())
        .start_worker(
            agentd::app::WorkerArgs::serving(&["auto_create"], Some(1)),
            stop.clone(),
        )
        .await
        .expect("the worker starts once the database answers");
    assert_eq!(closed.load(std::sync::atomic::Ordering::SeqCst), 3);
    stop.cancel();
    running.join().await;

    // A database that never answers: a database error (exit 1, a supervisor retries), not
    // the operator's input (exit 2).
    let (port, _) = restarting_server(usize::MAX).await;
    let err = app_through(&db, port, c)
        .start_worker(
            agentd::app::WorkerArgs::serving(&["auto_create"], Some(1)),
            CancellationToken::new(),
        )
        .await
        .err()
        .expect("refused");
    assert!(
        matches!(err, agentd::app::StartError::Database(_)),
        "{err:?}"
    );
    assert!(err.to_string().contains("org_provider_keys"), "{err}");
}

/// `agentd` with the test database and no model server in the environment.
fn agentd(db: &TestDb, args: &[&str], env: &[(&str, &str)], stdin: &str) -> std::process::Output {
    use std::io::Write;
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_agentd"));
    c.args(args)
        .env("DATABASE_URL", &db.url)
        .env("AGENTD_HTTP__ADDR", "")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("AGENTD_LLM__ORG_KEY_ENCRYPTION_KEY")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c.spawn().expect("run agentd");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[tokio::test]
async fn the_cli_sets_a_key_from_stdin_and_bad_entries_exit_2_naming_file_and_key() {
    let db = TestDb::new().await;
    let endpoint = [
        ("AGENTD_LLM__PROVIDER", "openai"),
        ("AGENTD_LLM__BASE_URL", "http://127.0.0.1:9/v1"),
    ];
    let secret = [(
        "AGENTD_LLM__ORG_KEY_ENCRYPTION_KEY",
        "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
    )];
    let o = agentd(&db, &["orgs", "create", "acme"], &endpoint, "");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    const KEY: &str = "sk-cli-SECRET-00112233445566778899";
    let o = agentd(
        &db,
        &["orgs", "set-key", "acme"],
        &[endpoint.as_slice(), secret.as_slice()].concat(),
        &format!("{KEY}\n"),
    );
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).to_string(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    );
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains("ends in 8899") && !out.contains(KEY) && !err.contains(KEY),
        "{out}{err}"
    );
    assert_eq!(tables_holding(&db.pool, KEY).await, Vec::<String>::new());
    // A malformed key: exit 2 naming it, nothing else said about it.
    let o = agentd(
        &db,
        &["orgs", "set-key", "acme"],
        &[endpoint.as_slice(), secret.as_slice()].concat(),
        "sk short\n",
    );
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("key: key must be"), "{err}");
    // A stored key and no encryption key: the server does not start.
    let o = agentd(&db, &["serve", "--addr", "127.0.0.1:0"], &endpoint, "");
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("llm.org_key_encryption_key is not set"),
        "{err}"
    );
    // A bad entry: exit 2 naming the file, the key and the problem.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agentd.toml");
    std::fs::write(
        &file,
        "[[llm.providers]]\nname = \"main\"\nkind = \"openai\"\nbase_url = \"ftp://models\"\n",
    )
    .unwrap();
    let o = agentd(
        &db,
        &["status", "--config", file.to_str().unwrap()],
        &[],
        "",
    );
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("agentd.toml")
            && err.contains("llm.providers[0].base_url must be an http(s) URL"),
        "{err}"
    );
}

/// Review D9: `agentd orgs rekey` seals every row again under the current master key (the old
/// one listed as previous in the environment, comma-separated), prints what it moved, and with
/// no master key, or a row no listed key opens, exits 2 naming why and changes nothing.
#[tokio::test]
async fn the_cli_rekeys_every_row_to_the_new_master_key_and_exits_2_when_it_cannot() {
    const K1: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const K2: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";
    let db = TestDb::new().await;
    let endpoint = [
        ("AGENTD_LLM__PROVIDER", "openai"),
        ("AGENTD_LLM__BASE_URL", "http://127.0.0.1:9/v1"),
    ];
    let with = |keys: &[(&'static str, &'static str)]| [endpoint.as_slice(), keys].concat();
    let k1 = [("AGENTD_LLM__ORG_KEY_ENCRYPTION_KEY", K1)];
    let k2_after_k1 = [
        ("AGENTD_LLM__ORG_KEY_ENCRYPTION_KEY", K2),
        ("AGENTD_LLM__ORG_KEY_PREVIOUS_ENCRYPTION_KEYS", K1),
    ];
    let o = agentd(&db, &["orgs", "create", "acme"], &endpoint, "");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    const KEY: &str = "sk-cli-SECRET-00112233445566778899";
    let o = agentd(
        &db,
        &["orgs", "set-key", "acme"],
        &with(&k1),
        &format!("{KEY}\n"),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let key_ids = || async {
        sqlx::query_scalar::<_, Option<String>>("SELECT key_id FROM org_provider_keys")
            .fetch_all(&db.pool)
            .await
            .unwrap()
    };
    let before = key_ids().await;
    // No master key: nothing to re-key with.
    let o = agentd(&db, &["orgs", "rekey"], &endpoint, "");
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("llm.org_key_encryption_key is not set"),
        "{err}"
    );
    // Key 2 current, key 1 previous: the row moves to key 2.
    let o = agentd(&db, &["orgs", "rekey", "--json"], &with(&k2_after_k1), "");
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).to_string(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    );
    assert!(o.status.success(), "{err}");
    let done: Value = serde_json::from_str(out.trim()).expect("one JSON line");
    assert_eq!(
        (done["org_keys"].clone(), done["webhook_secrets"].clone()),
        (json!(1), json!(0))
    );
    let after = key_ids().await;
    assert_eq!(after, [done["key_id"].as_str().map(str::to_string)]);
    assert_ne!(after, before);
    assert!(!out.contains(KEY) && !err.contains(KEY) && !err.contains(K1) && !err.contains(K2));
    // Key 1 alone opens nothing now: exit 2 naming key 2's id, and the row stays as it is.
    let o = agentd(&db, &["orgs", "rekey"], &with(&k1), "");
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(2), "{err}");
    let id2 = after[0].clone().unwrap();
    assert!(
        err.contains(&id2) && err.contains("Nothing was re-keyed"),
        "{err}"
    );
    assert_eq!(key_ids().await, after);
}
