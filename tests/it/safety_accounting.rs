//! Honest accounting and no transaction waiting on a model (issue 12): failed extraction
//! answers are charged and capped, approving a proposed extraction is charged, a slow
//! extraction model leaves no `idle in transaction` session, a crash after the extraction call
//! reuses the checkpointed answer, and concurrent runs cannot overshoot a nearly spent budget.

use crate::common;
use agentd::app::App;
use agentd::approvals::{self, Decision};
use agentd::catalog::Catalog;
use agentd::clock::{ManualClock, SharedClock};
use agentd::llm::scripted::{ScriptedProvider, Turn};
use agentd::llm::{
    Block, CompletionRequest, CompletionResponse, FinishReason, LlmError, LlmProvider, Message,
    Role, Usage,
};
use agentd::store::runs;
use chrono::Utc;
use common::TestDb;
use serde_json::{Value, json};
use sqlx::postgres::PgPoolOptions;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// A stateless fake model, safe under concurrency: in `pipeline` mode it creates a schema, a
/// prompt, runs the extraction and ends; otherwise it calls `get_document` forever. The
/// extraction call (the request with a response_format) answers `extraction_answer` after
/// `extraction_delay`; every call reports `usage`.
struct Bot {
    pipeline: bool,
    usage: Usage,
    delay: Duration,
    extraction_delay: Duration,
    extraction_answer: &'static str,
    calls: AtomicUsize,
    extraction_calls: AtomicUsize,
    /// Extraction calls currently waiting in `extraction_delay`.
    in_extraction: AtomicUsize,
    /// How extraction answers end.
    extraction_finish: FinishReason,
    /// The model named by each extraction request.
    extraction_models: std::sync::Mutex<Vec<String>>,
    /// Extraction calls fail after generating (an error event in the stream) when set.
    extraction_stream_error: bool,
}

impl Bot {
    fn new(pipeline: bool, extraction_answer: &'static str) -> Self {
        Self {
            pipeline,
            usage: Usage {
                input_tokens: 100,
                output_tokens: 20,
                ..Default::default()
            },
            delay: Duration::ZERO,
            extraction_delay: Duration::ZERO,
            extraction_answer,
            calls: AtomicUsize::new(0),
            extraction_calls: AtomicUsize::new(0),
            in_extraction: AtomicUsize::new(0),
            extraction_finish: FinishReason::EndTurn,
            extraction_models: Default::default(),
            extraction_stream_error: false,
        }
    }

    fn answer(&self, content: Vec<Block>, finish: FinishReason) -> CompletionResponse {
        CompletionResponse {
            message: Message {
                role: Role::Assistant,
                content,
            },
            usage: self.usage,
            finish,
            model: "bot".into(),
        }
    }

    fn call(&self, name: &str, args: Value) -> CompletionResponse {
        let b = Block::ToolUse {
            id: "x".into(),
            name: name.into(),
            arguments: args.to_string(),
        };
        self.answer(vec![b], FinishReason::ToolUse)
    }
}

/// The newest tool result that is a JSON object.
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

fn format() -> Value {
    json!({"type": "json_schema", "json_schema": {"name": "s", "strict": true, "schema": {
        "type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
        "additionalProperties": false}}})
}

#[async_trait::async_trait]
impl LlmProvider for Bot {
    fn name(&self) -> &str {
        "bot"
    }
    async fn complete(&self, req: CompletionRequest) -> Result<CompletionResponse, LlmError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        if req.response_format.is_some() {
            self.extraction_calls.fetch_add(1, Ordering::SeqCst);
            self.extraction_models
                .lock()
                .unwrap()
                .push(req.model.clone());
            self.in_extraction.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(self.extraction_delay).await;
            self.in_extraction.fetch_sub(1, Ordering::SeqCst);
            if self.extraction_stream_error {
                let msg = "error event in the stream after HTTP 200: overloaded";
                return Err(LlmError::new("bot", msg, true));
            }
            let text = Block::Text {
                text: self.extraction_answer.into(),
            };
            return Ok(self.answer(vec![text], self.extraction_finish));
        }
        if !self.pipeline {
            return Ok(self.call("get_document", json!({})));
        }
        let last = last_result(&req);
        // Earlier results reach it compacted to one line ("create_prompt ok: prompt_revid=…"):
        // after a failed extraction it reads the prompt from there and tries again.
        let compacted_prompt = serde_json::to_string(&req.messages).ok().and_then(|t| {
            regex::Regex::new(r"prompt_revid=([0-9a-f-]{36}:\d+)")
                .unwrap()
                .captures(&t)
                .map(|c| c[1].to_string())
        });
        Ok(
            if let (true, Some(p)) = (last.is_null(), compacted_prompt) {
                // The last extraction failed: try again.
                self.call("run_extraction", json!({"prompt_revid": p}))
            } else if last.is_null() {
                self.call(
                    "create_schema",
                    json!({"name": "S", "response_format": format()}),
                )
            } else if let Some(s) = last["schema_revid"]
                .as_str()
                .filter(|_| last["prompt_revid"].is_null())
            {
                self.call(
                    "create_prompt",
                    json!({"name": "P", "content": "Extract a.", "schema_revid": s}),
                )
            } else if let Some(p) = last["prompt_revid"]
                .as_str()
                .filter(|_| last["extraction_id"].is_null())
            {
                self.call("run_extraction", json!({"prompt_revid": p}))
            } else {
                self.answer(
                    vec![Block::Text {
                        text: "done".into(),
                    }],
                    FinishReason::EndTurn,
                )
            },
        )
    }
}

struct World {
    db: TestDb,
    clock: Arc<ManualClock>,
    org: Uuid,
}

async fn world() -> World {
    let db = TestDb::new().await;
    let clock = ManualClock::new(Utc::now());
    let org = agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id;
    runs::set_budget(&db.pool, org, 10_000_000, clock.now_utc())
        .await
        .unwrap();
    World { db, clock, org }
}

trait NowUtc {
    fn now_utc(&self) -> chrono::DateTime<Utc>;
}
impl NowUtc for Arc<ManualClock> {
    fn now_utc(&self) -> chrono::DateTime<Utc> {
        agentd::clock::Clock::now(self.as_ref())
    }
}

async fn doc(w: &World, name: &str) -> Uuid {
    let mut c = w.db.pool.acquire().await.unwrap();
    agentd::store::documents::insert(
        &mut c,
        w.org,
        name,
        Some("a: hello"),
        &json!({}),
        Utc::now(),
    )
    .await
    .unwrap()
}

fn app_on(w: &World, pool: sqlx::PgPool, p: Arc<dyn LlmProvider>) -> App {
    let mut app = App::new(
        pool,
        w.clock.clone() as SharedClock,
        common::test_config(),
        Catalog::builtin(&agentd::known_tool_names()).unwrap(),
    );
    app.provider = p;
    app
}

async fn used(w: &World) -> i64 {
    sqlx::query_scalar("SELECT tokens_used FROM org_budgets WHERE org_id = $1")
        .bind(w.org)
        .fetch_one(&w.db.pool)
        .await
        .unwrap()
}

async fn run_auto_create(
    app: &App,
    w: &World,
    doc: Uuid,
    job: Option<i64>,
) -> Result<agentd::agent::RunOutcome, agentd::agent::RunError> {
    let spec = app.spec("auto_create");
    let mut rs = app.run_spec(spec, w.org, doc.to_string(), job, "go".into());
    rs.document_id = Some(doc);
    // The bot reads full JSON results of earlier rounds: no compaction (issue 11's default).
    rs.settings.compact = false;
    app.engine(spec).run(&rs, &CancellationToken::new()).await
}

#[tokio::test]
async fn prose_extraction_answers_are_charged_and_capped() {
    let w = world().await;
    let d = doc(&w, "a.txt").await;
    let bot = Arc::new(Bot::new(
        true,
        "Sorry, I would rather chat about the weather.",
    ));
    let app = app_on(&w, w.db.pool.clone(), bot.clone());
    let out = run_auto_create(&app, &w, d, Some(1)).await.unwrap();
    let calls = bot.calls.load(Ordering::SeqCst) as i64;
    // Every call, the failed extraction answers included, is charged to the run and the org.
    assert_eq!(out.tokens, 120 * calls);
    assert_eq!(used(&w).await, 120 * calls);
    // Failed answers count as refinements: auto_create allows 2, so the model is asked twice.
    assert_eq!(bot.extraction_calls.load(Ordering::SeqCst), 2);
    let audit = runs::audit_for_run(&w.db.pool, out.run_id).await.unwrap();
    let ext: Vec<(&str, bool, i32)> = audit
        .iter()
        .filter(|a| a.tool == "run_extraction")
        .map(|a| (a.decision.as_str(), a.is_error, a.tokens))
        .take(3)
        .collect();
    assert_eq!(
        ext,
        vec![
            ("auto_approved", true, 120),
            ("auto_approved", true, 120),
            ("capped", true, 0)
        ]
    );
}

#[tokio::test]
async fn a_slow_extraction_model_holds_no_transaction_open() {
    let w = world().await;
    let docs = [doc(&w, "a").await, doc(&w, "b").await, doc(&w, "c").await];
    let mut bot = Bot::new(true, r#"{"a": "hello"}"#);
    bot.extraction_delay = Duration::from_millis(1500);
    let bot = Arc::new(bot);
    // A pool of 2 connections for 3 concurrent runs.
    let small = PgPoolOptions::new()
        .max_connections(2)
        .connect(&w.db.url)
        .await
        .unwrap();
    let app = app_on(&w, small, bot.clone());
    let done = std::sync::atomic::AtomicBool::new(false);
    let runs = async {
        let outs = futures::future::join_all(
            docs.iter()
                .enumerate()
                .map(|(i, d)| run_auto_create(&app, &w, *d, Some(i as i64 + 1))),
        )
        .await;
        done.store(true, Ordering::SeqCst);
        outs
    };
    let watch = async {
        let (mut samples, mut worst) = (0, 0i64);
        while !done.load(Ordering::SeqCst) {
            if bot.in_extraction.load(Ordering::SeqCst) > 0 {
                let n: i64 = sqlx::query_scalar(
                    // Idle in a transaction for longer than any gap between the statements of
                    // a short step (ms): only a transaction waiting on the model (1.5 s) counts.
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = $1
                        AND state LIKE 'idle in transaction%' AND now() - state_change > interval '300 ms'",
                )
                .bind(&w.db.name)
                .fetch_one(&w.db.pool)
                .await
                .unwrap();
                samples += 1;
                worst = worst.max(n);
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        (samples, worst)
    };
    let (outs, (samples, worst)) = tokio::join!(runs, watch);
    for o in outs {
        let o = o.unwrap();
        assert_eq!(o.status, "succeeded", "{o:?}");
    }
    assert!(samples > 0, "the watcher saw the model answering");
    assert_eq!(
        worst, 0,
        "a session sat idle in transaction while the model answered"
    );
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM extractions")
        .fetch_one(&w.db.pool)
        .await
        .unwrap();
    assert_eq!(n, 3);
}

#[tokio::test]
async fn a_crash_after_the_extraction_call_reuses_the_checkpointed_answer() {
    let w = world().await;
    let d = doc(&w, "a").await;
    let bot = Arc::new(Bot::new(true, r#"{"a": "hello"}"#));
    let app = app_on(&w, w.db.pool.clone(), bot.clone());
    // Storing the extraction fails once, after the model answered: the process "crashes".
    sqlx::raw_sql(
        "CREATE FUNCTION crash() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN RAISE EXCEPTION 'simulated crash'; END $$;
         CREATE TRIGGER crash BEFORE INSERT ON extractions FOR EACH ROW EXECUTE FUNCTION crash();",
    )
    .execute(&w.db.pool)
    .await
    .unwrap();
    let err = run_auto_create(&app, &w, d, Some(7)).await;
    assert!(err.is_err(), "the step failed: {err:?}");
    assert_eq!(bot.extraction_calls.load(Ordering::SeqCst), 1);
    sqlx::raw_sql("DROP TRIGGER crash ON extractions")
        .execute(&w.db.pool)
        .await
        .unwrap();
    // The retried job resumes the run.
    let out = run_auto_create(&app, &w, d, Some(7)).await.unwrap();
    assert_eq!(out.status, "succeeded");
    assert_eq!(
        bot.extraction_calls.load(Ordering::SeqCst),
        1,
        "the extraction model was not asked again"
    );
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM extractions WHERE run_id = $1")
        .bind(out.run_id)
        .fetch_one(&w.db.pool)
        .await
        .unwrap();
    assert_eq!(n, 1);
    // Charged exactly once per call.
    let calls = bot.calls.load(Ordering::SeqCst) as i64;
    assert_eq!(out.tokens, 120 * calls);
    assert_eq!(used(&w).await, 120 * calls);
}

#[tokio::test]
async fn concurrent_runs_cannot_overshoot_a_nearly_spent_budget() {
    let w = world().await;
    let limit = 100_000i64;
    runs::set_budget(&w.db.pool, w.org, limit, w.clock.now_utc())
        .await
        .unwrap();
    sqlx::query("UPDATE org_budgets SET tokens_used = $2 WHERE org_id = $1")
        .bind(w.org)
        .bind(limit - 12_000)
        .execute(&w.db.pool)
        .await
        .unwrap();
    let mut bot = Bot::new(false, "");
    bot.usage = Usage {
        input_tokens: 2500,
        output_tokens: 500,
        ..Default::default()
    };
    bot.delay = Duration::from_millis(100);
    let bot = Arc::new(bot);
    let app = app_on(&w, w.db.pool.clone(), bot.clone());
    let mut docs = Vec::new();
    for i in 0..6 {
        docs.push(doc(&w, &format!("d{i}")).await);
    }
    let outs = futures::future::join_all(
        docs.iter()
            .enumerate()
            .map(|(i, d)| run_auto_create(&app, &w, *d, Some(i as i64 + 1))),
    )
    .await;
    let mut budget_stops = 0;
    for o in outs {
        let o = o.unwrap();
        budget_stops += (o.stop_reason.as_deref() == Some("budget")) as i32;
    }
    let final_used = used(&w).await;
    let calls = bot.calls.load(Ordering::SeqCst) as i64;
    assert!(calls >= 1, "some calls fit");
    assert_eq!(budget_stops, 6, "every run ends on the budget");
    assert_eq!(final_used, limit - 12_000 + 3000 * calls);
    // The estimate (prompt chars / 3 + max_tokens) is above the 3000 tokens a call really
    // uses, so the settle error is 0 and the limit holds exactly.
    assert!(final_used <= limit, "used {final_used} of {limit}");
}

#[tokio::test]
async fn approving_a_proposed_extraction_is_charged_to_org_and_run() {
    let w = world().await;
    let d = doc(&w, "a").await;
    let mut c = w.db.pool.acquire().await.unwrap();
    let s = agentd::store::schemas::create(&mut c, w.org, "S", &format(), None, Utc::now())
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
    let p = agentd::store::prompts::create(&mut c, w.org, &f, None, Utc::now())
        .await
        .unwrap();
    drop(c);
    let scripted = Arc::new(ScriptedProvider::new(vec![
        Turn::tool(
            "1",
            "run_extraction",
            json!({"document_id": d, "prompt_revid": format!("{}:1", p.prompt_id)}),
        ),
        Turn::text("proposed"),
        // The approval's extraction call.
        Turn::text(r#"{"a": "hello"}"#),
    ]));
    let app = app_on(&w, w.db.pool.clone(), scripted.clone());
    let spec = app.spec("proactive_suggestion");
    let mut rs = app.run_spec(spec, w.org, "night".into(), Some(1), "go".into());
    rs.night = Some(Utc::now().date_naive());
    let out = app
        .engine(spec)
        .run(&rs, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.tokens, 240);
    assert_eq!(used(&w).await, 240);
    let id: Uuid = sqlx::query_scalar("SELECT id FROM pending_approvals")
        .fetch_one(&w.db.pool)
        .await
        .unwrap();
    let decided = approvals::decide(
        &w.db.pool,
        &(w.clock.clone() as SharedClock),
        &app.tool_env(spec),
        id,
        Some(w.org),
        Decision::Approve { by: "ann".into() },
        Default::default(),
    )
    .await
    .unwrap();
    assert_eq!(decided.status, "executed", "{decided:?}");
    scripted.assert_complete();
    assert_eq!(
        used(&w).await,
        360,
        "the approval's model call is charged to the org"
    );
    let run = runs::get_run(&w.db.pool, out.run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.counters.tokens(), 360, "and to the run");
}

/// Review N4: a person approves a proposed `run_extraction` with another prompt. The edit is
/// kept (arguments, `edited`, its audit row) and the stored extraction is the one the audit
/// names: the edited prompt's, which is the one that ran.
#[tokio::test]
async fn an_edited_extraction_approval_records_the_arguments_that_ran() {
    let w = world().await;
    let d = doc(&w, "a").await;
    let mut c = w.db.pool.acquire().await.unwrap();
    let s = agentd::store::schemas::create(&mut c, w.org, "S", &format(), None, Utc::now())
        .await
        .unwrap();
    let mut prompts = Vec::new();
    for name in ["P1", "P2"] {
        let f = agentd::store::prompts::PromptFields {
            name: name.into(),
            content: format!("Extract a ({name})."),
            schema_id: s.schema_id,
            schema_version: s.version,
            model: None,
            tag_ids: vec![],
        };
        let p = agentd::store::prompts::create(&mut c, w.org, &f, None, Utc::now())
            .await
            .unwrap();
        prompts.push(p.prompt_id);
    }
    drop(c);
    let scripted = Arc::new(ScriptedProvider::new(vec![
        Turn::tool(
            "1",
            "run_extraction",
            json!({"document_id": d, "prompt_revid": format!("{}:1", prompts[0])}),
        ),
        Turn::text("proposed"),
        // The approval's extraction call (made with the edited prompt).
        Turn::text(r#"{"a": "hello"}"#),
    ]));
    let app = app_on(&w, w.db.pool.clone(), scripted.clone());
    let spec = app.spec("proactive_suggestion");
    let mut rs = app.run_spec(spec, w.org, "night".into(), Some(1), "go".into());
    rs.night = Some(Utc::now().date_naive());
    app.engine(spec)
        .run(&rs, &CancellationToken::new())
        .await
        .unwrap();
    let id: Uuid = sqlx::query_scalar("SELECT id FROM pending_approvals")
        .fetch_one(&w.db.pool)
        .await
        .unwrap();
    let edited = json!({"document_id": d, "prompt_revid": format!("{}:1", prompts[1])});
    let decided = approvals::decide(
        &w.db.pool,
        &(w.clock.clone() as SharedClock),
        &app.tool_env(spec),
        id,
        Some(w.org),
        Decision::Approve { by: "ann".into() },
        approvals::DecisionExtra {
            reason: None,
            edited_args: Some(edited.clone()),
        },
    )
    .await
    .unwrap();
    assert_eq!(decided.status, "executed", "{decided:?}");
    scripted.assert_complete();
    let (was_edited, args): (bool, Value) =
        sqlx::query_as("SELECT edited, args FROM pending_approvals WHERE id = $1")
            .bind(id)
            .fetch_one(&w.db.pool)
            .await
            .unwrap();
    assert!(was_edited, "the approval records that it was edited");
    assert_eq!(args["prompt_revid"], edited["prompt_revid"], "{args}");
    let decisions: Vec<String> = sqlx::query_scalar(
        "SELECT decision FROM audit_events WHERE call_id = 'approval:' || $1 ORDER BY id",
    )
    .bind(id.to_string())
    .fetch_all(&w.db.pool)
    .await
    .unwrap();
    assert_eq!(decisions, ["edited", "human_approved"]);
    let ran: Uuid = sqlx::query_scalar("SELECT prompt_id FROM extractions WHERE document_id = $1")
        .bind(d)
        .fetch_one(&w.db.pool)
        .await
        .unwrap();
    assert_eq!(
        ran, prompts[1],
        "the stored extraction is the edited prompt's"
    );
}

/// An extraction model that answers each prompt with its own value (`gates`: the prompt's text,
/// the value of `a`, a gate) and holds each call at its gate until the test opens it, saying
/// on `entered` which prompt's call arrived: two reviewers' calls overlap in a known order.
struct HeldExtraction {
    gates: Vec<(&'static str, &'static str, tokio::sync::Semaphore)>,
    entered: tokio::sync::mpsc::UnboundedSender<&'static str>,
    usage: Usage,
}

#[async_trait::async_trait]
impl LlmProvider for HeldExtraction {
    fn name(&self) -> &str {
        "held"
    }
    async fn complete(&self, req: CompletionRequest) -> Result<CompletionResponse, LlmError> {
        let seen = format!("{req:?}");
        let Some((needle, value, gate)) = self.gates.iter().find(|g| seen.contains(g.0)) else {
            return Err(LlmError::new("held", "a call of no known prompt", false));
        };
        let _ = self.entered.send(needle);
        gate.acquire()
            .await
            .map_err(|e| LlmError::new("held", e.to_string(), false))?
            .forget();
        Ok(CompletionResponse {
            message: Message {
                role: Role::Assistant,
                content: vec![Block::Text {
                    text: json!({ "a": value }).to_string(),
                }],
            },
            usage: self.usage,
            finish: FinishReason::EndTurn,
            model: req.model.clone(),
        })
    }
}

/// Security review D14: reviewer 1 approves a `run_extraction` edited to P1 and its call is
/// made; reviewer 2's edit to P2 commits while it answers. Reviewer 1's answer (P1's values)
/// must not be applied under P2's arguments: the approval ends `stale`, and no extraction holds
/// one prompt's values under another prompt's id.
#[tokio::test]
async fn an_edit_landing_while_an_approved_extraction_runs_makes_it_stale() {
    let w = world().await;
    let d = doc(&w, "a").await;
    let mut c = w.db.pool.acquire().await.unwrap();
    let s = agentd::store::schemas::create(&mut c, w.org, "S", &format(), None, Utc::now())
        .await
        .unwrap();
    let mut prompts = Vec::new();
    for name in ["P0", "P1", "P2"] {
        let f = agentd::store::prompts::PromptFields {
            name: name.into(),
            content: format!("Extract a ({name})."),
            schema_id: s.schema_id,
            schema_version: s.version,
            model: None,
            tag_ids: vec![],
        };
        let p = agentd::store::prompts::create(&mut c, w.org, &f, None, Utc::now())
            .await
            .unwrap();
        prompts.push(p.prompt_id);
    }
    drop(c);
    let scripted = Arc::new(ScriptedProvider::new(vec![
        Turn::tool(
            "1",
            "run_extraction",
            json!({"document_id": d, "prompt_revid": format!("{}:1", prompts[0])}),
        ),
        Turn::text("proposed"),
    ]));
    let app = app_on(&w, w.db.pool.clone(), scripted.clone());
    let spec = app.spec("proactive_suggestion");
    let mut rs = app.run_spec(spec, w.org, "night".into(), Some(1), "go".into());
    rs.night = Some(Utc::now().date_naive());
    app.engine(spec)
        .run(&rs, &CancellationToken::new())
        .await
        .unwrap();
    scripted.assert_complete();
    let id: Uuid = sqlx::query_scalar("SELECT id FROM pending_approvals")
        .fetch_one(&w.db.pool)
        .await
        .unwrap();
    let (tx, mut entered) = tokio::sync::mpsc::unbounded_channel();
    let held = Arc::new(HeldExtraction {
        gates: vec![
            ("Extract a (P1).", "one", tokio::sync::Semaphore::new(0)),
            ("Extract a (P2).", "two", tokio::sync::Semaphore::new(0)),
        ],
        entered: tx,
        usage: Usage {
            input_tokens: 100,
            output_tokens: 20,
            ..Default::default()
        },
    });
    let reviewers = app_on(&w, w.db.pool.clone(), held.clone());
    let approve = |who: &str, prompt: Uuid| {
        let app = reviewers.clone();
        let (who, org) = (who.to_string(), w.org);
        let edited = json!({"document_id": d, "prompt_revid": format!("{prompt}:1")});
        tokio::spawn(async move {
            let spec = app.spec("proactive_suggestion");
            approvals::decide(
                &app.pool,
                &app.clock,
                &app.tool_env(spec),
                id,
                Some(org),
                Decision::Approve { by: who },
                approvals::DecisionExtra {
                    reason: None,
                    edited_args: Some(edited),
                },
            )
            .await
        })
    };
    let wait = Duration::from_secs(30);
    // Reviewer 1's edit commits and its call is made; reviewer 2's edit commits meanwhile.
    let first = approve("ann", prompts[1]);
    let got = tokio::time::timeout(wait, entered.recv()).await.unwrap();
    assert_eq!(got, Some("Extract a (P1)."));
    let second = approve("bob", prompts[2]);
    let got = tokio::time::timeout(wait, entered.recv()).await.unwrap();
    assert_eq!(got, Some("Extract a (P2)."));
    // Reviewer 1's phase 2 runs first, with the row now holding reviewer 2's arguments.
    held.gates[0].2.add_permits(1);
    let first = tokio::time::timeout(wait, first)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    held.gates[1].2.add_permits(1);
    let second = tokio::time::timeout(wait, second)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.status, "stale", "{first:?}");
    let hashes = &first.changes.as_ref().expect("changes")["arguments"];
    assert_ne!(hashes["before_hash"], hashes["after_hash"], "{hashes}");
    assert!(
        !second.changed,
        "the approval was already decided: {second:?}"
    );
    let (status, args): (String, Value) =
        sqlx::query_as("SELECT status, args FROM pending_approvals WHERE id = $1")
            .bind(id)
            .fetch_one(&w.db.pool)
            .await
            .unwrap();
    assert_eq!(status, "stale");
    assert_eq!(args["prompt_revid"], format!("{}:1", prompts[2]), "{args}");
    // No extraction ran one prompt and was stored as another's.
    let stored: Vec<(Uuid, Value)> =
        sqlx::query_as("SELECT prompt_id, result FROM extractions WHERE document_id = $1")
            .bind(d)
            .fetch_all(&w.db.pool)
            .await
            .unwrap();
    assert!(
        stored.is_empty(),
        "a stale approval applies nothing: {stored:?}"
    );
}

#[tokio::test]
async fn a_cut_off_extraction_says_so_and_uses_the_configured_extraction_model() {
    let w = world().await;
    let d = doc(&w, "a").await;
    let mut bot = Bot::new(true, r#"{"a": "hel"#);
    bot.extraction_finish = FinishReason::MaxTokens;
    let bot = Arc::new(bot);
    let mut config = common::test_config();
    config.llm.model = "agent-model".into();
    config.llm.extraction_model = "extractor".into();
    let mut app = App::new(
        w.db.pool.clone(),
        w.clock.clone() as SharedClock,
        config,
        Catalog::builtin(&agentd::known_tool_names()).unwrap(),
    );
    app.provider = bot.clone();
    let out = run_auto_create(&app, &w, d, Some(1)).await.unwrap();
    let audit = runs::audit_for_run(&w.db.pool, out.run_id).await.unwrap();
    let first = audit.iter().find(|a| a.tool == "run_extraction").unwrap();
    let err = first.outcome.as_ref().unwrap()["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(err.contains("finish_reason = length"), "{err}");
    let models = bot.extraction_models.lock().unwrap().clone();
    assert!(
        !models.is_empty() && models.iter().all(|m| m == "extractor"),
        "{models:?}"
    );
}

#[tokio::test]
async fn an_extraction_call_failing_after_generation_is_charged() {
    let w = world().await;
    let d = doc(&w, "a").await;
    let mut bot = Bot::new(true, "");
    bot.extraction_stream_error = true;
    let bot = Arc::new(bot);
    let app = app_on(&w, w.db.pool.clone(), bot.clone());
    let out = run_auto_create(&app, &w, d, Some(1)).await.unwrap();
    let audit = runs::audit_for_run(&w.db.pool, out.run_id).await.unwrap();
    let failed: Vec<i32> = audit
        .iter()
        .filter(|a| a.tool == "run_extraction" && a.is_error && a.tokens > 0)
        .map(|a| a.tokens)
        .collect();
    assert!(
        !failed.is_empty(),
        "the failed call's input is charged: {audit:?}"
    );
    let loop_calls =
        (bot.calls.load(Ordering::SeqCst) - bot.extraction_calls.load(Ordering::SeqCst)) as i64;
    let charged: i64 = failed.iter().map(|t| i64::from(*t)).sum();
    assert_eq!(out.tokens, 120 * loop_calls + charged);
    assert_eq!(used(&w).await, out.tokens);
}

/// Review #16 (d): the budget's month only moves forward. A node whose clock is a few seconds
/// behind the month boundary reserves and charges against the month the row is in — it neither
/// resets the new month's count to 0 nor sends the row back a month for the next node to reset
/// again; a later month still starts from 0.
#[tokio::test]
async fn a_node_behind_the_month_boundary_does_not_reset_the_new_months_budget() {
    use agentd::store::budget;
    use chrono::TimeZone;
    let db = TestDb::new().await;
    let org = agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id;
    let ahead = Utc.with_ymd_and_hms(2026, 2, 1, 0, 0, 5).unwrap();
    let behind = Utc.with_ymd_and_hms(2026, 1, 31, 23, 59, 58).unwrap();
    runs::set_budget(&db.pool, org, 1_000, ahead).await.unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    runs::charge_budget(&mut conn, org, 100, ahead)
        .await
        .unwrap();
    let row = || async {
        sqlx::query_as::<_, (i64, chrono::NaiveDate)>(
            "SELECT tokens_used, period_start FROM org_budgets WHERE org_id = $1",
        )
        .bind(org)
        .fetch_one(&db.pool)
        .await
        .unwrap()
    };
    let february = chrono::NaiveDate::from_ymd_opt(2026, 2, 1).unwrap();
    assert_eq!(row().await, (100, february));
    let held = budget::reserve(&db.pool, org, 50, behind, chrono::Duration::minutes(5))
        .await
        .unwrap();
    assert!(matches!(held, budget::Reservation::Held { .. }), "{held:?}");
    assert_eq!(
        row().await,
        (100, february),
        "the late node's reservation reset nothing"
    );
    runs::charge_budget(&mut conn, org, 30, behind)
        .await
        .unwrap();
    assert_eq!(
        row().await,
        (130, february),
        "its charge counts in the row's month"
    );
    assert_eq!(
        runs::budget(&db.pool, org, behind)
            .await
            .unwrap()
            .map(|b| b.tokens_used),
        Some(130)
    );
    // March starts from 0.
    let march = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 1).unwrap();
    runs::charge_budget(&mut conn, org, 7, march).await.unwrap();
    assert_eq!(
        row().await,
        (7, chrono::NaiveDate::from_ymd_opt(2026, 3, 1).unwrap())
    );
}
