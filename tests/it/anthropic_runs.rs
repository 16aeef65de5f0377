//! Runs end to end against the Anthropic fake (tests/it/anthropic_support), streamed and not, with
//! the provider built from config (`llm.provider = "anthropic"`, a fleet limit on): auto_create
//! proposes (also with real-model habits), the nightly proactive job writes its suggestion and
//! proposes a `run_extraction` that a person approves, tokens — cache writes and reads
//! included — are charged to the run and the org, a 429 and a 529 are retried and a 400 is not.
//! PostgreSQL is real; the model is the fake.

use crate::anthropic_support;
use crate::common;
use agentd::app::App;
use agentd::approvals::{self, Decision};
use agentd::clock::{SharedClock, SystemClock};
use agentd::config::ProviderChoice;
use agentd::documents::add_document;
use agentd::queue::{self, NewJob};
use agentd::store::{orgs, runs};
use anthropic_support::*;
use chrono::Utc;
use common::{TestDb, wait_until};
use serde_json::{Value, json};
use std::sync::Arc;
use uuid::Uuid;

const INVOICE: &str =
    "Invoice Number: INV-77\nInvoice Date: 2026-11-02\nTotal Due: 1,250.00\nCustomer: Blue Fox\n";

struct Env {
    db: TestDb,
    app: App,
    org: Uuid,
    fake: AnthropicFake,
}

/// A database, an org with a budget, and an App whose provider comes from config pointing at a
/// fake answering with `respond`.
async fn env(stream: bool, respond: Responder) -> Env {
    let fake = AnthropicFake::start(respond).await;
    let db = TestDb::new().await;
    let mut config = common::test_config();
    config.llm.provider = ProviderChoice::Anthropic;
    config.llm.base_url = fake.base_url.clone();
    config.llm.api_key = KEY.into();
    config.llm.model = "claude-agent".into();
    config.llm.extraction_model = "claude-extract".into();
    config.llm.stream = stream;
    config.llm.max_retries = 2;
    config.llm.requests_per_minute = 60_000;
    let mut app = common::app_with(&db, Arc::new(SystemClock) as SharedClock, config);
    app.provider = agentd::llm::from_config_with_limits(&app.config.llm, Some(&db.pool));
    assert_eq!(app.provider.name(), "anthropic");
    let org = orgs::ensure(&db.pool, "acme").await.unwrap().id;
    runs::set_budget(&db.pool, org, 10_000_000, Utc::now())
        .await
        .unwrap();
    Env { db, app, org, fake }
}

impl Env {
    /// Uploads `text` and runs the auto_create worker until the document is final.
    async fn upload_and_drain(&self, text: &str) -> (Uuid, String) {
        let (doc, _) = add_document(&self.app, self.org, "invoice.txt", text, true)
            .await
            .unwrap();
        let (w, stop) = common::start_worker(&self.app, "auto_create", None).await;
        let status = || async {
            sqlx::query_scalar::<_, String>(
                "SELECT auto_create_status FROM documents WHERE id = $1",
            )
            .bind(doc)
            .fetch_one(&self.db.pool)
            .await
            .unwrap()
        };
        wait_until(60, "the document reaches a final status", || async {
            ["proposed", "failed", "skipped"].contains(&status().await.as_str())
        })
        .await;
        stop.cancel();
        w.join().await;
        (doc, status().await)
    }

    async fn only_run(&self) -> runs::RunRow {
        let id: Uuid = sqlx::query_scalar("SELECT id FROM agent_runs")
            .fetch_one(&self.db.pool)
            .await
            .unwrap();
        runs::get_run(&self.db.pool, id).await.unwrap().unwrap()
    }

    async fn tools_called(&self, run: Uuid) -> Vec<String> {
        runs::audit_for_run(&self.db.pool, run)
            .await
            .unwrap()
            .into_iter()
            .filter(|a| a.call_id.is_some())
            .map(|a| a.tool)
            .collect()
    }

    async fn used(&self) -> i64 {
        runs::budget(&self.db.pool, self.org, Utc::now())
            .await
            .unwrap()
            .unwrap()
            .tokens_used
    }

    async fn tokens(&self, run: Uuid) -> (i64, i64, bool) {
        sqlx::query_as(
            "SELECT input_tokens, output_tokens, tokens_estimated FROM agent_runs WHERE id = $1",
        )
        .bind(run)
        .fetch_one(&self.db.pool)
        .await
        .unwrap()
    }
}

fn invoice_format() -> Value {
    json!({"type": "json_schema", "json_schema": {"name": "invoice", "strict": true, "schema": {
        "type": "object", "additionalProperties": false, "required": ["invoice_number", "total_due"],
        "properties": {"invoice_number": {"type": "string"}, "total_due": {"type": "number"}}}}})
}

/// The working-state block of a request (in its last user turn).
fn state_of(body: &Value) -> String {
    let last = last_turn_text(body);
    last.rfind("[run state]")
        .and_then(|at| last.get(at..))
        .unwrap_or_default()
        .to_string()
}

fn revid_in(state: &str, what: &str) -> String {
    let at = state.find(&format!("{what}: ")).unwrap() + what.len() + 2;
    state[at..].split([' ', ';']).next().unwrap().to_string()
}

/// The usage every answer of the plain pipeline reports: 10 fresh input tokens, 1,000 read
/// from the cache, 5 output; the first answer also writes 100 to the cache.
fn cached_usage(n: usize) -> Value {
    usage(10, 5, if n == 0 { 100 } else { 0 }, 1000)
}

/// A model building the invoice pipeline from the run's working state. With `habits` it
/// behaves like real models do: prose only at first, prose before its first call with a nested
/// argument sent as a JSON string, a call written as text without usage, and the whole input
/// of a call stringified.
fn pipeline(habits: bool) -> Responder {
    Arc::new(move |body, n| {
        let id = format!("toolu_{n:02}");
        let u = Some(cached_usage(n));
        let reply = |content: Value, stop: &str| Reply::Message(message(content, stop, u.clone()));
        if is_extraction(body) {
            let name = body["tool_choice"]["name"].as_str().unwrap();
            let fields = json!({"invoice_number": "INV-77", "total_due": 1250.0});
            return reply(json!([tool_use(&id, name, fields)]), "tool_use");
        }
        let state = state_of(body);
        if habits && n == 0 {
            return reply(
                json!([text("Let me look at this invoice first.")]),
                "end_turn",
            );
        }
        if state.contains("schema: none yet") {
            let rf = if habits {
                json!(invoice_format().to_string())
            } else {
                invoice_format()
            };
            let call = tool_use(
                &id,
                "create_schema",
                json!({"name": "Invoice", "response_format": rf}),
            );
            if habits {
                reply(
                    json!([text("I'll create an invoice schema."), call]),
                    "tool_use",
                )
            } else {
                reply(json!([call]), "tool_use")
            }
        } else if state.contains("prompt: none yet") {
            let args = json!({"name": "Extract", "content": "Extract the invoice fields.",
                              "schema_revid": revid_in(&state, "schema")});
            if habits {
                let written = json!({"name": "create_prompt", "arguments": args});
                let m = message(
                    json!([text(&format!("```json\n{written}\n```"))]),
                    "end_turn",
                    None,
                );
                Reply::Message(m)
            } else {
                reply(json!([tool_use(&id, "create_prompt", args)]), "tool_use")
            }
        } else if state.contains("extraction: none yet") {
            let args = json!({"prompt_revid": revid_in(&state, "prompt")});
            let input = if habits {
                json!(args.to_string())
            } else {
                args
            };
            reply(json!([tool_use(&id, "run_extraction", input)]), "tool_use")
        } else {
            reply(
                json!([text("Proposed a schema, a prompt and an extraction.")]),
                "end_turn",
            )
        }
    })
}

/// Checks every request the fake saw: the SDK headers, `max_tokens`, the cached prefix, and
/// tool_choice `any` before the goal (tool_choice_required) or `tool` for the extraction.
fn assert_wire(fake: &AnthropicFake) {
    let seen = fake.seen();
    assert!(!seen.is_empty());
    for s in &seen {
        assert_eq!(s.path, "/v1/messages");
        assert_eq!(s.api_key.as_deref(), Some(KEY));
        assert_eq!(s.version.as_deref(), Some("2023-06-01"));
        assert!(
            s.body["max_tokens"].as_u64().is_some_and(|n| n > 0),
            "{}",
            s.body
        );
        assert_eq!(s.body["system"][0]["cache_control"]["type"], "ephemeral");
        let tools = s.body["tools"].as_array().expect("tools");
        assert_eq!(tools.last().unwrap()["cache_control"]["type"], "ephemeral");
    }
    let extraction: Vec<_> = seen.iter().filter(|s| is_extraction(&s.body)).collect();
    assert_eq!(extraction.len(), 1);
    assert_eq!(extraction[0].body["model"], "claude-extract");
    assert_eq!(extraction[0].body["tools"].as_array().unwrap().len(), 1);
    assert_eq!(seen[0].body["model"], "claude-agent");
    assert_eq!(seen[0].body["tool_choice"]["type"], "any");
}

#[tokio::test]
async fn auto_create_proposes_and_charges_cache_reads_streamed_and_not() {
    for stream in [false, true] {
        let e = env(stream, pipeline(false)).await;
        let (doc, status) = e.upload_and_drain(INVOICE).await;
        assert_eq!(status, "proposed", "stream: {stream}");
        let run = e.only_run().await;
        assert_eq!(run.provider, "anthropic");
        assert_eq!(
            e.tools_called(run.id).await,
            ["create_schema", "create_prompt", "run_extraction"]
        );
        let stored: Value =
            sqlx::query_scalar("SELECT result FROM extractions WHERE document_id = $1")
                .bind(doc)
                .fetch_one(&e.db.pool)
                .await
                .unwrap();
        assert_eq!(stored["invoice_number"], "INV-77");
        assert_wire(&e.fake);

        // Every call reported 10 + 1,000 cached input tokens and 5 output; the first also
        // wrote 100 to the cache. All of it is charged, to the run and to the org.
        let calls = e.fake.seen().len() as i64;
        assert_eq!(
            calls, 5,
            "schema, prompt, extraction tool, extraction call, summary"
        );
        let (input, output, estimated) = e.tokens(run.id).await;
        assert_eq!(
            (input, output),
            (calls * 1010 + 100, calls * 5),
            "stream: {stream}"
        );
        assert!(!estimated, "every count came from the server");
        assert_eq!(
            e.used().await,
            input + output,
            "the org budget moved by the same"
        );

        // Every attempt passed the fleet limiter of the endpoint.
        let limits = agentd::store::provider_limits::list(&e.db.pool)
            .await
            .unwrap();
        assert_eq!(limits.len(), 1);
        assert_eq!(limits[0].key, e.fake.base_url);
        assert_eq!(limits[0].granted, calls);
    }
}

#[tokio::test]
async fn auto_create_proposes_despite_real_model_habits_streamed_and_not() {
    for stream in [false, true] {
        let e = env(stream, pipeline(true)).await;
        let (_, status) = e.upload_and_drain(INVOICE).await;
        assert_eq!(status, "proposed", "stream: {stream}");
        let run = e.only_run().await;
        assert_eq!(
            e.tools_called(run.id).await,
            ["create_schema", "create_prompt", "run_extraction"]
        );
        let (input, output, estimated) = e.tokens(run.id).await;
        assert!(estimated, "the answer without usage was estimated");
        assert!(input > 1000 && output > 0, "{input} in, {output} out");
        assert_eq!(e.used().await, input + output);
        // The repair of the stringified response_format is said to the model.
        let bodies: Vec<String> = e.fake.seen().iter().map(|s| s.body.to_string()).collect();
        assert!(
            bodies.iter().any(|b| b.contains("was a JSON string")),
            "the repair note reached the model"
        );
    }
}

#[tokio::test]
async fn a_429_and_a_529_are_retried_and_a_400_is_not() {
    for stream in [false, true] {
        let plain = pipeline(false);
        let e = env(
            stream,
            Arc::new(move |body, n| match n {
                0 => {
                    Reply::error(429, "rate_limit_error", "rate limited").header("retry-after", "1")
                }
                1 => Reply::error(529, "overloaded_error", "Overloaded"),
                _ => plain(body, n),
            }),
        )
        .await;
        let (_, status) = e.upload_and_drain(INVOICE).await;
        assert_eq!(status, "proposed", "stream: {stream}");
        let seen = e.fake.seen();
        assert_eq!(seen.len(), 7, "two retries, then the five calls");
        assert_eq!(seen[0].body, seen[2].body, "the same request again");
        let limits = agentd::store::provider_limits::list(&e.db.pool)
            .await
            .unwrap();
        assert_eq!(
            limits[0].rate_limited, 1,
            "the 429 paused the endpoint fleet-wide"
        );
        assert_eq!(limits[0].granted, 7);

        let e = env(
            stream,
            Arc::new(|_, _| {
                Reply::error(
                    400,
                    "invalid_request_error",
                    "messages: roles must alternate",
                )
            }),
        )
        .await;
        let (_, status) = e.upload_and_drain(INVOICE).await;
        assert_eq!(status, "failed", "stream: {stream}");
        assert_eq!(
            e.fake.seen().len(),
            1,
            "a 400 is not retried, by the call or the job"
        );
        let run = e.only_run().await;
        let err = run.error.unwrap_or_default();
        assert!(
            err.contains("HTTP 400") && err.contains("roles must alternate"),
            "{err}"
        );
        assert!(!err.contains(KEY));
    }
}

/// The nightly job's model: the org overview, one suggestion for `doc`, a `run_extraction` of
/// `prompt_revid` (which waits for a person), then done; and the extraction call itself.
fn nightly(doc: Uuid, prompt_revid: String) -> Responder {
    Arc::new(move |body, n| {
        let id = format!("toolu_{n:02}");
        let u = Some(usage(20, 4, 0, 500));
        let reply = |content: Value, stop: &str| Reply::Message(message(content, stop, u.clone()));
        if is_extraction(body) {
            let name = body["tool_choice"]["name"].as_str().unwrap();
            return reply(
                json!([tool_use(&id, name, json!({"a": "hello"}))]),
                "tool_use",
            );
        }
        let rounds = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .count();
        match rounds {
            0 => reply(
                json!([tool_use(&id, "org_overview", json!({}))]),
                "tool_use",
            ),
            1 => reply(
                json!([
                    text("One document waits for review."),
                    tool_use(
                        &id,
                        "create_suggestion",
                        json!({"kind": "other",
                           "title": "Look at a.txt", "message": "Worth a look.",
                           "document_id": doc})
                    )
                ]),
                "tool_use",
            ),
            2 => reply(
                json!([tool_use(
                    &id,
                    "run_extraction",
                    json!({"document_id": doc,
                    "prompt_revid": prompt_revid})
                )]),
                "tool_use",
            ),
            _ => reply(json!([text("done")]), "end_turn"),
        }
    })
}

#[tokio::test]
async fn the_nightly_job_and_an_approved_run_extraction_reach_their_outcome_streamed_and_not() {
    for stream in [false, true] {
        // The fake needs the document and prompt ids: a placeholder fake first, then the real one.
        let setup = env(
            stream,
            Arc::new(|_, _| Reply::error(500, "api_error", "unused")),
        )
        .await;
        let db = setup.db;
        let org = setup.org;
        let mut c = db.pool.acquire().await.unwrap();
        let doc = agentd::store::documents::insert(
            &mut c,
            org,
            "a.txt",
            Some("a: hello"),
            &json!({}),
            Utc::now(),
        )
        .await
        .unwrap();
        // A signal for the night (a failed auto-create): an org without one runs no model.
        sqlx::query("UPDATE documents SET auto_create_status = 'failed', auto_create_error = 'provider down' WHERE id = $1")
            .bind(doc)
            .execute(&mut *c)
            .await
            .unwrap();
        let format = json!({"type": "json_schema", "json_schema": {"name": "s", "strict": true,
            "schema": {"type": "object", "properties": {"a": {"type": "string"}},
                       "required": ["a"], "additionalProperties": false}}});
        let s = agentd::store::schemas::create(&mut c, org, "S", &format, None, Utc::now())
            .await
            .unwrap();
        let f = agentd::store::prompts::PromptFields {
            name: "P".into(),
            content: "Extract a.".into(),
            schema_id: s.schema_id,
            schema_version: s.version,
            model: None,
            tag_ids: vec![],
        };
        let p = agentd::store::prompts::create(&mut c, org, &f, None, Utc::now())
            .await
            .unwrap();
        drop(c);
        let fake = AnthropicFake::start(nightly(doc, format!("{}:1", p.prompt_id))).await;
        let mut config = (*setup.app.config).clone();
        config.llm.base_url = fake.base_url.clone();
        let mut app = common::app_with(&db, Arc::new(SystemClock) as SharedClock, config);
        app.provider = agentd::llm::from_config_with_limits(&app.config.llm, Some(&db.pool));

        let night = Utc::now().date_naive();
        let job = NewJob::new(
            "proactive_suggestion",
            json!({"org_id": org, "night": night}),
        );
        let job = queue::enqueue(&db.pool, &job).await.unwrap().unwrap();
        let (w, stop) = common::start_worker(&app, "proactive_suggestion", None).await;
        wait_until(60, "the nightly job succeeded", || async {
            queue::store::get(&db.pool, job)
                .await
                .unwrap()
                .unwrap()
                .state
                == "succeeded"
        })
        .await;
        stop.cancel();
        w.join().await;

        let run = runs::run_for_job(&db.pool, job).await.unwrap().unwrap();
        assert_eq!(
            (run.provider.as_str(), run.status.as_str()),
            ("anthropic", "succeeded")
        );
        let suggestions: Vec<(String, Option<Uuid>)> =
            sqlx::query_as("SELECT kind, document_id FROM suggestions WHERE org_id = $1")
                .bind(org)
                .fetch_all(&db.pool)
                .await
                .unwrap();
        assert_eq!(suggestions, vec![("other".to_string(), Some(doc))]);
        let (approval, tool): (Uuid, String) =
            sqlx::query_as("SELECT id, tool FROM pending_approvals WHERE status = 'pending'")
                .fetch_one(&db.pool)
                .await
                .unwrap();
        assert_eq!(tool, "run_extraction");
        let calls_in_run = fake.seen().len() as i64;
        assert_eq!(calls_in_run, 4);
        let run_tokens = calls_in_run * (20 + 500 + 4);
        assert_eq!(
            runs::budget(&db.pool, org, Utc::now())
                .await
                .unwrap()
                .unwrap()
                .tokens_used,
            run_tokens
        );

        // A person approves: the extraction call goes to the fake, is charged, and applies.
        let spec = app.spec("proactive_suggestion");
        let decided = approvals::decide(
            &db.pool,
            &app.clock,
            &app.tool_env(spec),
            approval,
            Some(org),
            Decision::Approve { by: "ann".into() },
            Default::default(),
        )
        .await
        .unwrap();
        assert_eq!(decided.status, "executed", "{decided:?}");
        let seen = fake.seen();
        assert_eq!(seen.len(), 5);
        assert!(is_extraction(&seen[4].body));
        assert_eq!(seen[4].body["model"], "claude-extract");
        let result: Value =
            sqlx::query_scalar("SELECT result FROM extractions WHERE document_id = $1")
                .bind(doc)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        assert_eq!(result, json!({"a": "hello"}), "stream: {stream}");
        let used = runs::budget(&db.pool, org, Utc::now())
            .await
            .unwrap()
            .unwrap()
            .tokens_used;
        assert_eq!(
            used,
            run_tokens + 524,
            "the approval's call, cache reads included"
        );
        let run = runs::get_run(&db.pool, run.id).await.unwrap().unwrap();
        assert_eq!(run.counters.tokens(), run_tokens + 524, "and the run's");
    }
}

const PERSONAL: &[&str] = &[
    "Jane Doe",
    "jane.doe@example.com",
    "GB82 WEST 1234 5698 7654 32",
];

const PERSONAL_DOC: &str = "INVOICE INV-2024-0042\nBill to: Jane Doe\nEmail: jane.doe@example.com\n\
Pay to IBAN GB82 WEST 1234 5698 7654 32\nTotal due: 1,234.56 GBP\n";

/// The value after `label:` on some line of `text`.
fn after(text: &str, label: &str) -> String {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(label))
        .map(|v| v.trim().to_string())
        .unwrap_or_default()
}

/// A model doing auto-create whose extraction copies the customer, email and IBAN it reads in
/// the request (tokens, behind the redaction boundary).
fn copying_model() -> Responder {
    Arc::new(|body, n| {
        let id = format!("toolu_{n:02}");
        let reply = |content: Value, stop: &str| {
            Reply::Message(message(content, stop, Some(usage(50, 10, 0, 0))))
        };
        if is_extraction(body) {
            let doc: String = body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
                .filter_map(|b| b["text"].as_str().map(str::to_string))
                .collect::<Vec<_>>()
                .join("\n");
            let name = body["tool_choice"]["name"].as_str().unwrap();
            let fields = json!({"customer_name": after(&doc, "Bill to:"),
                "email": after(&doc, "Email:"), "iban": after(&doc, "Pay to IBAN")});
            return reply(json!([tool_use(&id, name, fields)]), "tool_use");
        }
        let state = state_of(body);
        if state.contains("schema: none yet") {
            let props: serde_json::Map<String, Value> = ["customer_name", "email", "iban"]
                .iter()
                .map(|f| (f.to_string(), json!({"type": "string"})))
                .collect();
            let rf = json!({"type": "json_schema", "json_schema": {"name": "invoice",
                "strict": true, "schema": {"type": "object", "additionalProperties": false,
                "required": ["customer_name", "email", "iban"], "properties": props}}});
            let args = json!({"name": "Invoice", "response_format": rf});
            reply(json!([tool_use(&id, "create_schema", args)]), "tool_use")
        } else if state.contains("prompt: none yet") {
            let args = json!({"name": "Invoice", "content": "Extract the customer and payment.",
                              "schema_revid": revid_in(&state, "schema")});
            reply(json!([tool_use(&id, "create_prompt", args)]), "tool_use")
        } else if state.contains("extraction: none yet") {
            let args = json!({"prompt_revid": revid_in(&state, "prompt")});
            reply(json!([tool_use(&id, "run_extraction", args)]), "tool_use")
        } else {
            reply(
                json!([text("Proposed a schema, a prompt and an extraction.")]),
                "end_turn",
            )
        }
    })
}

#[tokio::test]
async fn no_personal_value_reaches_the_anthropic_fake_and_the_extraction_holds_real_values() {
    for stream in [false, true] {
        let e = env(stream, copying_model()).await;
        agentd::store::pii::set_org_redacts(&e.db.pool, e.org, true)
            .await
            .unwrap();
        let (doc, status) = e.upload_and_drain(PERSONAL_DOC).await;
        assert_eq!(status, "proposed", "stream: {stream}");
        let bodies: Vec<String> = e.fake.seen().iter().map(|s| s.body.to_string()).collect();
        assert_eq!(bodies.len(), 5);
        for body in &bodies {
            for value in PERSONAL {
                assert!(
                    !body.contains(value),
                    "{value:?} reached the provider: {body}"
                );
            }
        }
        assert!(
            bodies
                .iter()
                .any(|b| b.contains("PERSON_") && b.contains("EMAIL_")),
            "the provider saw tokens in place of the values"
        );
        let result: Value =
            sqlx::query_scalar("SELECT result FROM extractions WHERE document_id = $1")
                .bind(doc)
                .fetch_one(&e.db.pool)
                .await
                .unwrap();
        assert_eq!(
            result,
            json!({"customer_name": "Jane Doe", "email": "jane.doe@example.com",
                   "iban": "GB82 WEST 1234 5698 7654 32"}),
            "the forced tool's answer is rehydrated like any answer"
        );
    }
}

/// Issue 46, item 3: a user with only `ANTHROPIC_API_KEY` (and `ANTHROPIC_BASE_URL`, here at the
/// fake) and the default config gets Anthropic with its default model: the document is proposed
/// through the Messages API, with the key as the SDKs read it.
#[tokio::test]
async fn only_an_anthropic_key_in_the_environment_proposes_through_the_messages_api() {
    let fake = AnthropicFake::start(pipeline(false)).await;
    let db = TestDb::new().await;
    let mut config = common::test_config();
    // The defaults as a user has them: `provider = "auto"`, the default model, no entries.
    let defaults = agentd::config::Config::defaults().llm;
    config.llm.provider = defaults.provider;
    config.llm.model = defaults.model.clone();
    config.llm.extraction_model = String::new();
    config.llm.base_url = String::new();
    config.llm.api_key = String::new();
    assert_eq!(config.llm.provider, ProviderChoice::Auto);
    let env = [
        ("ANTHROPIC_API_KEY", KEY.to_string()),
        ("ANTHROPIC_BASE_URL", fake.base_url.clone()),
    ];
    let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
    config.llm.follow_keys(get);
    assert_eq!(config.llm.provider, ProviderChoice::Anthropic);
    assert_eq!(config.llm.model, agentd::config::ANTHROPIC_DEFAULT_MODEL);
    // The entry reads the process's variables when `llm.*` is empty; the tests share one process,
    // so the same values go into `llm.*` here.
    let (base, key) = config.llm.anthropic_endpoint(get);
    config.llm.base_url = base;
    config.llm.api_key = key;
    let mut app = common::app_with(&db, Arc::new(SystemClock) as SharedClock, config);
    app.provider = agentd::llm::from_config_with_limits(&app.config.llm, Some(&db.pool));
    assert_eq!(app.provider.name(), "anthropic");
    let org = orgs::ensure(&db.pool, "acme").await.unwrap().id;
    runs::set_budget(&db.pool, org, 10_000_000, Utc::now())
        .await
        .unwrap();
    let e = Env { db, app, org, fake };
    let (_, status) = e.upload_and_drain(INVOICE).await;
    assert_eq!(status, "proposed");
    let seen = e.fake.seen();
    assert!(!seen.is_empty());
    for s in &seen {
        assert_eq!(s.path, "/v1/messages");
        assert_eq!(s.api_key.as_deref(), Some(KEY));
        assert_eq!(s.body["model"], agentd::config::ANTHROPIC_DEFAULT_MODEL);
    }
}
