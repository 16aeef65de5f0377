//! The tool loop against a real PostgreSQL with the scripted provider: answers, tool chains,
//! malformed arguments, unknown tools, every cap, budgets, policy decisions, crash and resume,
//! and the audit trail.

use crate::common;
use agentd::agent::{LoopSettings, RunError, RunSpec};
use agentd::app::App;
use agentd::catalog::PolicyDecision;
use agentd::clock::{Clock, ManualClock, SharedClock};
use agentd::llm::ToolChoice;
use agentd::llm::scripted::{ScriptedProvider, Turn};
use agentd::store::runs;
use chrono::Utc;
use common::TestDb;
use serde_json::json;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

struct Fixture {
    db: TestDb,
    clock: Arc<ManualClock>,
    org: Uuid,
    doc: Uuid,
}

async fn fixture() -> Fixture {
    let db = TestDb::new().await;
    let clock = ManualClock::new(Utc::now());
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
        Utc::now(),
    )
    .await
    .unwrap();
    Fixture {
        db,
        clock,
        org,
        doc,
    }
}

fn app_with(f: &Fixture, p: Arc<ScriptedProvider>) -> App {
    let mut app = common::app(&f.db, f.clock.clone() as SharedClock);
    app.provider = p;
    app
}

fn spec(app: &App, f: &Fixture, job_id: i64) -> RunSpec {
    let s = app.spec("auto_create");
    let mut r = app.run_spec(
        s,
        f.org,
        f.doc.to_string(),
        Some(job_id),
        format!("Document {}", f.doc),
    );
    r.document_id = Some(f.doc);
    // These tests exercise the bare loop: no goal, the request shape and tool list of before.
    r.settings = LoopSettings {
        compact: false,
        goals: false,
        ..LoopSettings::default()
    };
    r.policy.allow = LEGACY_TOOLS.iter().map(|t| t.to_string()).collect();
    r
}

/// auto_create's tool list before issue 11 (the job file now offers fewer).
const LEGACY_TOOLS: [&str; 24] = [
    "get_document",
    "get_ocr_text",
    "list_documents",
    "update_document",
    "get_schema",
    "list_schemas",
    "validate_schema",
    "create_schema",
    "update_schema",
    "get_prompt",
    "list_prompts",
    "create_prompt",
    "update_prompt",
    "list_tags",
    "create_tag",
    "get_extraction_result",
    "run_extraction",
    "update_extraction_field",
    "help_schemas",
    "help_prompts",
    "delete_document",
    "delete_schema",
    "delete_prompt",
    "delete_tag",
];

async fn audit(f: &Fixture, run: Uuid) -> Vec<runs::AuditRow> {
    runs::audit_for_run(&f.db.pool, run).await.unwrap()
}

async fn count(f: &Fixture, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .fetch_one(&f.db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn text_only_answer_succeeds() {
    let f = fixture().await;
    let p = Arc::new(ScriptedProvider::new(vec![Turn::text("nothing to do")]));
    let app = app_with(&f, p.clone());
    let out = app
        .engine(app.spec("auto_create"))
        .run(&spec(&app, &f, 1), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        (out.status.as_str(), out.stop_reason.as_deref()),
        ("succeeded", Some("completed"))
    );
    assert_eq!(out.final_text.as_deref(), Some("nothing to do"));
    assert_eq!((out.rounds, out.tool_calls, out.tokens), (1, 0, 120));
    assert!(audit(&f, out.run_id).await.is_empty());
    p.assert_complete();
    let req = &p.requests.lock().unwrap()[0];
    assert!(
        req.tools.iter().any(|t| t.name == "create_schema"),
        "the allow-list is offered"
    );
    assert_eq!(req.tool_choice, ToolChoice::Auto);
}

#[tokio::test]
async fn a_chain_of_tool_calls_is_executed_audited_and_checkpointed() {
    let f = fixture().await;
    let p = Arc::new(ScriptedProvider::new(vec![
        Turn::tool("a", "get_document", json!({})),
        Turn::tool(
            "b",
            "create_tag",
            json!({"name": "invoices", "color": "#112233"}),
        ),
        Turn::text("done"),
    ]));
    let app = app_with(&f, p.clone());
    let out = app
        .engine(app.spec("auto_create"))
        .run(&spec(&app, &f, 1), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.status, "succeeded");
    assert_eq!((out.rounds, out.tool_calls), (3, 2));
    let a = audit(&f, out.run_id).await;
    assert_eq!(
        a.iter()
            .map(|r| (r.tool.as_str(), r.decision.as_str(), r.is_error))
            .collect::<Vec<_>>(),
        vec![
            ("get_document", "auto_approved", false),
            ("create_tag", "auto_approved", false)
        ]
    );
    assert!(
        a.iter()
            .all(|r| r.actor == "agent:auto_create" && r.org_id == f.org)
    );
    let tag_run: Option<Uuid> =
        sqlx::query_scalar("SELECT run_id FROM tags WHERE name = 'invoices'")
            .fetch_one(&f.db.pool)
            .await
            .unwrap();
    assert_eq!(tag_run, Some(out.run_id));
    let steps = runs::steps(&f.db.pool, out.run_id).await.unwrap();
    assert_eq!(
        steps.iter().map(|s| s.kind.as_str()).collect::<Vec<_>>(),
        vec![
            "llm_response",
            "tool_result",
            "llm_response",
            "tool_result",
            "llm_response"
        ]
    );
    // The model saw the document text in the tool result of its first call.
    let second = &p.requests.lock().unwrap()[1];
    let seen = serde_json::to_string(&second.messages).unwrap();
    assert!(seen.contains("INV-1"), "{seen}");
}

#[tokio::test]
async fn malformed_arguments_come_back_as_an_error_the_model_corrects() {
    let f = fixture().await;
    let p = Arc::new(ScriptedProvider::new(vec![
        Turn::tool_raw("a", "create_tag", "{\"name\": \"x\", "),
        Turn::tool("b", "create_tag", json!({"name": "x"})),
        Turn::tool_raw(
            "c",
            "create_tag",
            "```json\n{\"name\": \"x\", \"color\": \"#000000\"}\n```",
        ),
        Turn::text("ok"),
    ]));
    let app = app_with(&f, p.clone());
    let out = app
        .engine(app.spec("auto_create"))
        .run(&spec(&app, &f, 1), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.status, "succeeded");
    let a = audit(&f, out.run_id).await;
    assert_eq!(a.len(), 3, "every call is audited, failed ones too");
    assert!(a[0].is_error && a[0].decision == "error");
    assert!(
        a[1].is_error,
        "missing required `color` fails the schema check"
    );
    assert!(!a[2].is_error, "a fenced JSON block is accepted");
    let reqs = p.requests.lock().unwrap().clone();
    let msgs = serde_json::to_string(&reqs[1].messages).unwrap();
    assert!(msgs.contains("not valid JSON"), "{msgs}");
    let msgs = serde_json::to_string(&reqs[2].messages).unwrap();
    assert!(
        msgs.contains("color"),
        "the schema error names the field: {msgs}"
    );
    assert_eq!(count(&f, "SELECT count(*) FROM tags").await, 1);
}

#[tokio::test]
async fn unknown_tools_and_tools_outside_the_allow_list_never_reach_a_handler() {
    let f = fixture().await;
    let p = Arc::new(ScriptedProvider::new(vec![
        Turn::tool("a", "drop_database", json!({})),
        Turn::tool(
            "b",
            "create_suggestion",
            json!({"kind": "other", "title": "t", "message": "m"}),
        ),
        Turn::text("ok"),
    ]));
    let app = app_with(&f, p.clone());
    let out = app
        .engine(app.spec("auto_create"))
        .run(&spec(&app, &f, 1), &CancellationToken::new())
        .await
        .unwrap();
    let a = audit(&f, out.run_id).await;
    assert_eq!(a.len(), 2);
    assert!(
        a.iter()
            .all(|r| r.is_error && r.decision == "error" && r.category == "unknown")
    );
    assert_eq!(
        count(&f, "SELECT count(*) FROM suggestions").await,
        0,
        "create_suggestion is not in auto_create's allow-list"
    );
    let msgs = serde_json::to_string(&p.requests.lock().unwrap()[1].messages).unwrap();
    assert!(msgs.contains("unknown tool `drop_database`"), "{msgs}");
}

#[tokio::test]
async fn round_cap_forces_a_final_summary_without_tools() {
    let f = fixture().await;
    let p = Arc::new(ScriptedProvider::new(vec![
        Turn::tool("a", "list_tags", json!({})),
        Turn::tool("b", "list_tags", json!({})),
        Turn::text("summary: I listed tags twice"),
    ]));
    let app = app_with(&f, p.clone());
    let mut s = spec(&app, &f, 1);
    s.caps.max_rounds = 2;
    let out = app
        .engine(app.spec("auto_create"))
        .run(&s, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        (out.status.as_str(), out.stop_reason.as_deref()),
        ("capped", Some("max_rounds"))
    );
    assert_eq!(
        out.final_text.as_deref(),
        Some("summary: I listed tags twice")
    );
    let reqs = p.requests.lock().unwrap().clone();
    assert_eq!(reqs.len(), 3);
    assert_eq!(reqs[2].tool_choice, ToolChoice::None);
    assert_eq!(
        reqs[2].tools, reqs[1].tools,
        "the tools stay in the summary request so servers accept the history"
    );
    let caps: Vec<_> = audit(&f, out.run_id)
        .await
        .into_iter()
        .filter(|r| r.decision == "capped")
        .collect();
    assert_eq!(caps.len(), 1);
    assert_eq!(caps[0].tool, "max_rounds");
}

#[tokio::test]
async fn tool_call_cap_stops_extra_calls() {
    let f = fixture().await;
    let p = Arc::new(ScriptedProvider::new(vec![
        Turn::Tools(vec![
            ("a".into(), "list_tags".into(), "{}".into()),
            ("b".into(), "list_tags".into(), "{}".into()),
            (
                "c".into(),
                "create_tag".into(),
                r##"{"name":"n","color":"#000000"}"##.into(),
            ),
        ])
        .clone(),
        Turn::text("listed the tags"),
    ]));
    let app = app_with(&f, p.clone());
    let mut s = spec(&app, &f, 1);
    s.caps.max_tool_calls = 2;
    let out = app
        .engine(app.spec("auto_create"))
        .run(&s, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.stop_reason.as_deref(), Some("max_tool_calls"));
    let a = audit(&f, out.run_id).await;
    // The call past the cap is dropped from the answer when it is stored, and said so.
    assert_eq!(
        (a[0].tool.as_str(), a[0].decision.as_str()),
        ("dropped_calls", "capped")
    );
    assert_eq!(a[0].args.as_ref().unwrap()["dropped"], json!(1));
    assert_eq!(
        count(&f, "SELECT count(*) FROM tags").await,
        0,
        "the third call did not run"
    );
    assert_eq!(out.final_text.as_deref(), Some("listed the tags"));
    assert_eq!(
        p.requests.lock().unwrap()[1].tool_choice,
        ToolChoice::None,
        "the cap ends with a forced summary"
    );
    p.assert_complete();
}

/// Review N14: one answer with 10,000 tool calls — native, or written as text — costs the
/// run what `max_tool_calls` allows and one audit row that says how many were dropped (plus the
/// run's cap row); the next request carries no more results than that.
#[tokio::test]
async fn an_answer_with_thousands_of_calls_is_cut_to_the_cap_with_one_audit_row() {
    const N: usize = 10_000;
    let text_calls: String = (0..N)
        .map(|i| format!("<tool_call>{{\"name\": \"get_document\", \"arguments\": {{\"n\": {i}}}}}</tool_call>\n"))
        .collect();
    let native: Vec<(String, String, String)> = (0..N)
        .map(|i| {
            (
                format!("c{i}"),
                "get_document".into(),
                format!("{{\"n\": {i}}}"),
            )
        })
        .collect();
    for (how, turn) in [
        ("native", Turn::Tools(native)),
        ("text", Turn::Text(text_calls)),
    ] {
        let f = fixture().await;
        let p = Arc::new(ScriptedProvider::new(vec![turn, Turn::text("done")]));
        let app = app_with(&f, p.clone());
        let mut s = spec(&app, &f, 1);
        s.caps.max_tool_calls = 5;
        let out = app
            .engine(app.spec("auto_create"))
            .run(&s, &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(out.stop_reason.as_deref(), Some("max_tool_calls"), "{how}");
        let a = audit(&f, out.run_id).await;
        assert!(a.len() <= 5 + 2, "{how}: {} audit rows", a.len());
        let dropped: Vec<_> = a.iter().filter(|r| r.tool == "dropped_calls").collect();
        assert_eq!(dropped.len(), 1, "{how}: one row for the dropped calls");
        assert_eq!(
            dropped[0].args.as_ref().unwrap()["dropped"],
            json!(N - 5),
            "{how}: it says how many"
        );
        let results = p.requests.lock().unwrap()[1]
            .messages
            .iter()
            .flat_map(|m| m.content.iter())
            .filter(|b| matches!(b, agentd::llm::Block::ToolResult { .. }))
            .count();
        assert_eq!(
            results, 5,
            "{how}: the next request carries the kept calls' results"
        );
        p.assert_complete();
    }
}

#[tokio::test]
async fn token_cap_stops_before_the_next_call() {
    let f = fixture().await;
    let p = Arc::new(ScriptedProvider::new(vec![
        Turn::tool("a", "list_tags", json!({})),
        Turn::text("no tags yet"),
    ]));
    let app = app_with(&f, p.clone());
    let mut s = spec(&app, &f, 1);
    s.caps.max_tokens = 100;
    let out = app
        .engine(app.spec("auto_create"))
        .run(&s, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        (out.status.as_str(), out.stop_reason.as_deref()),
        ("capped", Some("max_tokens"))
    );
    assert_eq!(p.calls(), 2, "one tool round, then only the forced summary");
    assert_eq!(p.requests.lock().unwrap()[1].tool_choice, ToolChoice::None);
    assert_eq!(out.final_text.as_deref(), Some("no tags yet"));
}

#[tokio::test]
async fn deadline_counts_active_time_not_time_waiting_for_a_retry() {
    let f = fixture().await;
    let p1 = Arc::new(ScriptedProvider::new(vec![
        Turn::tool("a", "list_tags", json!({})),
        Turn::Error {
            message: "upstream 503".into(),
            retryable: true,
        },
    ]));
    let app = app_with(&f, p1.clone());
    let s = spec(&app, &f, 7);
    let err = app
        .engine(app.spec("auto_create"))
        .run(&s, &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(matches!(err, RunError::Provider(_)) && err.is_retryable());
    // Longer than the 120 s deadline, but spent queued for the retry, not running.
    f.clock.advance(chrono::Duration::seconds(121));
    let p2 = Arc::new(ScriptedProvider::new(vec![Turn::text("done")]));
    let app = app_with(&f, p2.clone());
    let out = app
        .engine(app.spec("auto_create"))
        .run(&s, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        (out.status.as_str(), out.stop_reason.as_deref()),
        ("succeeded", Some("completed"))
    );
    assert_eq!(p2.requests.lock().unwrap()[0].tool_choice, ToolChoice::Auto);
}

#[tokio::test]
async fn deadline_does_not_count_the_wait_of_a_run_that_failed_before_its_first_checkpoint() {
    // Found by the chaos suite (`agentd bench chaos`): a run whose attempts all died before
    // its first answer was checkpointed (killed workers, a model down) was resumed with no
    // resume mark, so every earlier wait counted as active time and the next attempt was
    // capped by the deadline before it asked the model anything.
    let f = fixture().await;
    let p1 = Arc::new(ScriptedProvider::new(vec![Turn::Error {
        message: "upstream 503".into(),
        retryable: true,
    }]));
    let app = app_with(&f, p1.clone());
    let s = spec(&app, &f, 8);
    let err = app
        .engine(app.spec("auto_create"))
        .run(&s, &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(matches!(err, RunError::Provider(_)) && err.is_retryable());
    // Longer than the 120 s deadline, spent waiting for the retry.
    f.clock.advance(chrono::Duration::seconds(121));
    let p2 = Arc::new(ScriptedProvider::new(vec![Turn::text("done")]));
    let app = app_with(&f, p2.clone());
    let out = app
        .engine(app.spec("auto_create"))
        .run(&s, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        (out.status.as_str(), out.stop_reason.as_deref()),
        ("succeeded", Some("completed"))
    );
    assert_eq!(p2.calls(), 1, "the model was asked, not skipped by a cap");
}

/// Each call takes 70 s of the manual clock.
struct SlowModel {
    inner: ScriptedProvider,
    clock: Arc<ManualClock>,
}

#[async_trait::async_trait]
impl agentd::llm::LlmProvider for SlowModel {
    fn name(&self) -> &str {
        "scripted"
    }
    async fn complete(
        &self,
        req: agentd::llm::CompletionRequest,
    ) -> Result<agentd::llm::CompletionResponse, agentd::llm::LlmError> {
        self.clock.advance(chrono::Duration::seconds(70));
        self.inner.complete(req).await
    }
}

#[tokio::test]
async fn deadline_of_active_time_ends_with_a_forced_summary() {
    let f = fixture().await;
    let p = Arc::new(SlowModel {
        inner: ScriptedProvider::new(vec![
            Turn::tool("a", "list_tags", json!({})),
            Turn::tool("b", "list_tags", json!({})),
            Turn::text("out of time"),
        ]),
        clock: f.clock.clone(),
    });
    let mut app = common::app(&f.db, f.clock.clone() as SharedClock);
    app.provider = p.clone();
    let out = app
        .engine(app.spec("auto_create"))
        .run(&spec(&app, &f, 1), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        (out.status.as_str(), out.stop_reason.as_deref()),
        ("capped", Some("deadline"))
    );
    assert_eq!(out.final_text.as_deref(), Some("out of time"));
    let reqs = p.inner.requests.lock().unwrap().clone();
    assert_eq!(reqs.len(), 3, "140 s of calls pass the 120 s deadline");
    assert_eq!(reqs[2].tool_choice, ToolChoice::None);
    p.inner.assert_complete();
}

#[tokio::test]
async fn refinement_cap_refuses_further_rework() {
    let f = fixture().await;
    let tag = |id: &str, n: &str| {
        Turn::tool(
            id,
            "create_schema",
            json!({"name": n, "response_format": {"type": "json_schema", "json_schema": {"name": "s", "strict": true, "schema": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": false}}}}),
        )
    };
    let p = Arc::new(ScriptedProvider::new(vec![
        tag("a", "one"),
        tag("b", "two"),
        tag("c", "three"),
        Turn::text("stop"),
    ]));
    let app = app_with(&f, p.clone());
    let mut s = spec(&app, &f, 1);
    s.caps.max_refinements = 1;
    let out = app
        .engine(app.spec("auto_create"))
        .run(&s, &CancellationToken::new())
        .await
        .unwrap();
    let a = audit(&f, out.run_id).await;
    assert_eq!(
        a.iter().map(|r| r.decision.as_str()).collect::<Vec<_>>()[..3],
        ["auto_approved", "auto_approved", "capped"]
    );
    assert_eq!(
        count(&f, "SELECT count(*) FROM schemas").await,
        2,
        "the second schema is the one allowed refinement"
    );
}

#[tokio::test]
async fn exhausted_budget_refuses_the_provider_call() {
    let f = fixture().await;
    let now = f.clock.now();
    runs::set_budget(&f.db.pool, f.org, 1000, now)
        .await
        .unwrap();
    let mut conn = f.db.pool.acquire().await.unwrap();
    assert_eq!(
        runs::charge_budget(&mut conn, f.org, 700, now)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        runs::charge_budget(&mut conn, f.org, 150, now)
            .await
            .unwrap(),
        Some((850, 1000)),
        "80% crossed: warn"
    );
    assert_eq!(
        runs::charge_budget(&mut conn, f.org, 150, now)
            .await
            .unwrap(),
        None,
        "warned once per period"
    );
    let p = Arc::new(ScriptedProvider::new(vec![]));
    let app = app_with(&f, p.clone());
    let out = app
        .engine(app.spec("auto_create"))
        .run(&spec(&app, &f, 1), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        (out.status.as_str(), out.stop_reason.as_deref()),
        ("capped", Some("budget"))
    );
    assert_eq!(p.calls(), 0);
    // A new month starts a new period.
    f.clock.advance(chrono::Duration::days(40));
    let b = runs::budget(&f.db.pool, f.org, f.clock.now())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(b.tokens_used, 0);
}

#[tokio::test]
async fn deny_refuses_and_propose_creates_a_pending_approval() {
    let f = fixture().await;
    let p = Arc::new(ScriptedProvider::new(vec![
        Turn::tool("a", "delete_document", json!({"document_id": f.doc})),
        Turn::tool(
            "b",
            "update_document",
            json!({"document_id": f.doc, "metadata": {"k": "v"}}),
        ),
        Turn::text("done"),
    ]));
    let app = app_with(&f, p.clone());
    let mut s = spec(&app, &f, 1);
    s.policy.write = PolicyDecision::Propose;
    let out = app
        .engine(app.spec("auto_create"))
        .run(&s, &CancellationToken::new())
        .await
        .unwrap();
    let a = audit(&f, out.run_id).await;
    assert_eq!(
        (a[0].decision.as_str(), a[0].category.as_str()),
        ("denied", "destructive")
    );
    assert_eq!(a[1].decision, "proposed");
    assert_eq!(
        count(&f, "SELECT count(*) FROM documents").await,
        1,
        "not deleted"
    );
    let meta: serde_json::Value = sqlx::query_scalar("SELECT metadata FROM documents")
        .fetch_one(&f.db.pool)
        .await
        .unwrap();
    assert_eq!(meta, json!({}), "the update waits for approval");
    let (status, hash, expires): (String, String, chrono::DateTime<Utc>) =
        sqlx::query_as("SELECT status, snapshot_hash, expires_at FROM pending_approvals")
            .fetch_one(&f.db.pool)
            .await
            .unwrap();
    assert_eq!(status, "pending");
    assert_eq!(hash.len(), 64);
    let ttl = (expires - f.clock.now()).num_seconds();
    assert!(
        (14_399..=14_400).contains(&ttl),
        "TTL from the job file: {ttl}"
    );
}

#[tokio::test]
async fn a_crash_between_steps_resumes_without_repeating_calls_or_effects() {
    let f = fixture().await;
    // First attempt: two tool calls commit, then the worker "crashes" (the provider fails).
    let p1 = Arc::new(ScriptedProvider::new(vec![
        Turn::tool("a", "get_document", json!({})),
        Turn::tool("b", "create_tag", json!({"name": "t1", "color": "#abcdef"})),
        Turn::Error {
            message: "connection reset".into(),
            retryable: true,
        },
    ]));
    let app = app_with(&f, p1.clone());
    let s = spec(&app, &f, 42);
    assert!(
        app.engine(app.spec("auto_create"))
            .run(&s, &CancellationToken::new())
            .await
            .is_err()
    );
    assert_eq!(p1.calls(), 3);
    // Second attempt (same job): resumes after the last checkpoint.
    let p2 = Arc::new(ScriptedProvider::new(vec![Turn::text("finished")]));
    let app = app_with(&f, p2.clone());
    let out = app
        .engine(app.spec("auto_create"))
        .run(&s, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.status, "succeeded");
    assert_eq!(p2.calls(), 1, "completed provider calls are not repeated");
    p2.assert_complete();
    // The resumed request carries the whole transcript so far.
    let msgs = serde_json::to_string(&p2.requests.lock().unwrap()[0].messages).unwrap();
    assert!(msgs.contains("INV-1") && msgs.contains("t1"));
    assert_eq!(
        count(&f, "SELECT count(*) FROM tags").await,
        1,
        "the tool ran once"
    );
    assert_eq!(
        audit(&f, out.run_id).await.len(),
        2,
        "one audit row per call"
    );
    assert_eq!(count(&f, "SELECT count(*) FROM agent_runs").await, 1);
    // Running the finished job again returns the stored outcome without any call.
    let p3 = Arc::new(ScriptedProvider::new(vec![]));
    let app = app_with(&f, p3.clone());
    let again = app
        .engine(app.spec("auto_create"))
        .run(&s, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!((again.run_id, p3.calls()), (out.run_id, 0));
}

#[tokio::test]
async fn committed_calls_of_a_multi_call_response_are_not_rerun_on_resume() {
    let f = fixture().await;
    // One response with two calls; both commit; the next provider call fails (the crash).
    let p1 = Arc::new(ScriptedProvider::new(vec![Turn::Tools(vec![
        (
            "a".into(),
            "create_tag".into(),
            r##"{"name":"one","color":"#000000"}"##.into(),
        ),
        (
            "b".into(),
            "create_tag".into(),
            r##"{"name":"two","color":"#000000"}"##.into(),
        ),
    ])]));
    let app = app_with(&f, p1.clone());
    let s = spec(&app, &f, 9);
    assert!(
        app.engine(app.spec("auto_create"))
            .run(&s, &CancellationToken::new())
            .await
            .is_err()
    );
    let run: Uuid = sqlx::query_scalar("SELECT id FROM agent_runs")
        .fetch_one(&f.db.pool)
        .await
        .unwrap();
    let results = runs::steps(&f.db.pool, run)
        .await
        .unwrap()
        .iter()
        .filter(|s| s.kind == "tool_result")
        .count();
    assert_eq!(results, 2);
    let p2 = Arc::new(ScriptedProvider::new(vec![Turn::text("done")]));
    let app = app_with(&f, p2.clone());
    let out = app
        .engine(app.spec("auto_create"))
        .run(&s, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.status, "succeeded");
    assert_eq!(count(&f, "SELECT count(*) FROM tags").await, 2);
    assert_eq!(audit(&f, run).await.len(), 2);
    // Call ids are made unique per run, whatever the server sent.
    let ids: Vec<Option<String>> =
        sqlx::query_scalar("SELECT call_id FROM audit_events ORDER BY id")
            .fetch_all(&f.db.pool)
            .await
            .unwrap();
    assert_eq!(
        ids,
        vec![Some("r1.0".to_string()), Some("r1.1".to_string())]
    );
}

#[tokio::test]
async fn audit_rows_cannot_be_updated_or_deleted() {
    let f = fixture().await;
    runs::insert_audit(
        &f.db.pool,
        &runs::NewAudit {
            org_id: f.org,
            run_id: None,
            call_id: None,
            actor: "t",
            tool: "x",
            category: runs::AuditCategory::Read,
            decision: runs::AuditDecision::AutoApproved,
            args: None,
            args_as: runs::ArgsKept::Redacted,
            outcome: None,
            is_error: false,
            duration_ms: 0,
            tokens: 0,
            now: Utc::now(),
        },
    )
    .await
    .unwrap();
    for sql in [
        "UPDATE audit_events SET actor = 'evil'",
        "DELETE FROM audit_events",
        "TRUNCATE audit_events",
    ] {
        let err = sqlx::query(sql).execute(&f.db.pool).await.unwrap_err();
        assert!(err.to_string().contains("append-only"), "{sql}: {err}");
    }
    assert_eq!(
        count(&f, "SELECT count(*) FROM audit_events WHERE actor = 't'").await,
        1
    );
}

#[tokio::test]
async fn nul_characters_in_model_arguments_are_stored_safely() {
    let f = fixture().await;
    let p = Arc::new(ScriptedProvider::new(vec![
        Turn::tool(
            "a",
            "create_tag",
            json!({"name": "bad\u{0}name", "color": "#000000"}),
        ),
        Turn::text("ok"),
    ]));
    let app = app_with(&f, p.clone());
    let out = app
        .engine(app.spec("auto_create"))
        .run(&spec(&app, &f, 1), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.status, "succeeded");
    let a = audit(&f, out.run_id).await;
    assert_eq!(a.len(), 1);
    assert!(!a[0].args.as_ref().unwrap().to_string().contains("\\u0000"));
}

#[tokio::test]
async fn a_suggested_action_waits_for_approval_linked_to_its_suggestion() {
    let f = fixture().await;
    let doc = f.doc.to_string();
    let p = Arc::new(ScriptedProvider::new(vec![
        Turn::tool(
            "a",
            "create_suggestion",
            json!({"kind": "tag_documents", "title": "Tag it", "message": "Tag the invoice",
            "document_id": doc, "proposed_action": {"tool": "update_document", "args": {"document_id": doc, "metadata": {"reviewed": true}}}}),
        ),
        Turn::text("done"),
    ]));
    let app = app_with(&f, p.clone());
    let s = app.spec("proactive_suggestion");
    let mut r = app.run_spec(s, f.org, "2026-11-22".into(), Some(1), "night".into());
    r.night = Some(chrono::NaiveDate::from_ymd_opt(2026, 11, 22).unwrap());
    let out = app
        .engine(s)
        .run(&r, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.status, "succeeded");
    let (sid, tool, status): (Option<Uuid>, String, String) =
        sqlx::query_as("SELECT suggestion_id, tool, status FROM pending_approvals")
            .fetch_one(&f.db.pool)
            .await
            .unwrap();
    let suggestion: Uuid = sqlx::query_scalar("SELECT id FROM suggestions")
        .fetch_one(&f.db.pool)
        .await
        .unwrap();
    assert_eq!(
        (sid, tool.as_str(), status.as_str()),
        (Some(suggestion), "update_document", "pending")
    );
    let meta: serde_json::Value = sqlx::query_scalar("SELECT metadata FROM documents")
        .fetch_one(&f.db.pool)
        .await
        .unwrap();
    assert_eq!(meta, json!({}), "nothing changes before a person approves");
    let msgs = serde_json::to_string(&p.requests.lock().unwrap()[1].messages).unwrap();
    assert!(
        msgs.contains("approval_id"),
        "the model learns the action is pending: {msgs}"
    );
}

/// A handler that panics on the input it is given (a bug meeting an unforeseen input): no tool
/// of this build panics on any input found so far, so the test registers this one.
struct Panics;

#[async_trait::async_trait]
impl agentd::tools::Tool for Panics {
    fn name(&self) -> &'static str {
        "panics"
    }
    fn description(&self) -> &'static str {
        "panics on any input"
    }
    fn parameters(&self) -> serde_json::Value {
        json!({"type": "object", "properties": {"text": {"type": "string"}}})
    }
    fn category(&self) -> agentd::tools::Category {
        agentd::tools::Category::Read
    }
    async fn call(
        &self,
        _ctx: &mut agentd::tools::ToolCtx<'_>,
        args: serde_json::Value,
    ) -> Result<serde_json::Value, agentd::tools::ToolError> {
        let text = args["text"].as_str().unwrap_or_default().to_string();
        // The byte slicing the review found (N1), on purpose.
        Ok(json!(&text[..4]))
    }
    fn targets(&self, _args: &serde_json::Value) -> Vec<agentd::tools::Target> {
        vec![]
    }
    fn calls_model(&self) -> bool {
        false
    }
    fn follow_up(
        &self,
        _args: &serde_json::Value,
        _result: &serde_json::Value,
    ) -> Option<agentd::tools::FollowUp> {
        None
    }
    async fn prepare(
        &self,
        _ctx: &mut agentd::tools::ToolCtx<'_>,
        _args: &serde_json::Value,
    ) -> agentd::tools::Declared<agentd::tools::ModelCall> {
        None
    }
    async fn apply(
        &self,
        _ctx: &mut agentd::tools::ToolCtx<'_>,
        _args: &serde_json::Value,
        _answer: (&serde_json::Value, &agentd::llm::CompletionResponse),
    ) -> Result<serde_json::Value, agentd::tools::ToolError> {
        Err(agentd::tools::ToolError::Invalid("not a model tool".into()))
    }
    async fn snapshot(
        &self,
        _ctx: &mut agentd::tools::ToolCtx<'_>,
        _args: &serde_json::Value,
    ) -> agentd::tools::Declared<serde_json::Value> {
        None
    }
}

/// Issue 29 item 3: a handler that panics inside a run fails that one call as a tool error —
/// audited as an error of the allowed call, told to the model without quoting the input — and
/// the run goes on to succeed.
#[tokio::test]
async fn a_panicking_tool_fails_its_call_and_the_run_goes_on() {
    let f = fixture().await;
    let p = Arc::new(ScriptedProvider::new(vec![
        Turn::tool("a", "panics", json!({"text": "DE１２ABCD"})),
        Turn::tool("b", "create_tag", json!({"name": "x", "color": "#000000"})),
        Turn::text("done"),
    ]));
    let mut app = app_with(&f, p.clone());
    let mut registry = agentd::tools::builtin_registry();
    registry.register(Arc::new(Panics));
    app.registry = Arc::new(registry);
    let mut s = spec(&app, &f, 1);
    s.policy.allow.push("panics".into());
    let out = app
        .engine(app.spec("auto_create"))
        .run(&s, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.status, "succeeded");
    let a = audit(&f, out.run_id).await;
    let rows: Vec<_> = a
        .iter()
        .map(|r| (r.tool.as_str(), r.decision.as_str(), r.is_error))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("panics", "auto_approved", true),
            ("create_tag", "auto_approved", false)
        ]
    );
    let outcome = a[0]
        .outcome
        .as_ref()
        .map(|o| o.to_string())
        .unwrap_or_default();
    assert!(outcome.contains("internal error"), "{outcome}");
    let reqs = p.requests.lock().unwrap().clone();
    let msgs = serde_json::to_string(&reqs[1].messages).unwrap();
    assert!(
        msgs.contains("`panics` failed with an internal error"),
        "{msgs}"
    );
    assert_eq!(
        count(&f, "SELECT count(*) FROM tags").await,
        1,
        "the run went on"
    );
}

/// Review D16: a model server's strings never become metric labels. The server answers as
/// model `hostile-model-d16` and calls a tool no registry has, twice with the same arguments
/// (the second is refused by the repeat guard): the tokens are counted under the model the run
/// asked for, and both tool calls under `unknown`.
#[tokio::test]
async fn metric_labels_come_from_the_asked_model_and_the_registry_not_the_server() {
    use agentd::llm::{CompletionRequest, CompletionResponse, LlmError};
    fn hostile(req: &CompletionRequest) -> Result<CompletionResponse, LlmError> {
        let mut r = Turn::tool("h", "zz_d16_invented_tool", json!({"a": 1}))
            .answer(req, agentd::llm::Usage::default())?;
        r.model = "hostile-model-d16".into();
        r.usage.input_tokens = 100;
        r.usage.output_tokens = 20;
        Ok(r)
    }
    let metrics = agentd::http::metrics_handle();
    let f = fixture().await;
    let p = Arc::new(ScriptedProvider::new(vec![
        Turn::Dynamic(hostile),
        Turn::Dynamic(hostile),
        Turn::text("done"),
    ]));
    let app = app_with(&f, p.clone());
    let mut s = spec(&app, &f, 1);
    s.settings.compact = true;
    s.model = "configured-model-d16".into();
    let out = app
        .engine(app.spec("auto_create"))
        .run(&s, &CancellationToken::new())
        .await
        .unwrap();
    p.assert_complete();
    let decisions: Vec<String> = audit(&f, out.run_id)
        .await
        .iter()
        .map(|r| r.decision.as_str().to_string())
        .collect();
    assert!(
        decisions.iter().any(|d| d == "repeated"),
        "the second call is a repeat: {decisions:?}"
    );
    let rendered = metrics.render();
    assert!(
        !rendered.contains("hostile-model-d16") && !rendered.contains("zz_d16_invented_tool"),
        "a server's string is a label: {rendered}"
    );
    let tokens = rendered
        .lines()
        .find(|l| {
            l.starts_with("agentd_tokens_total{") && l.contains("model=\"configured-model-d16\"")
        })
        .unwrap_or_else(|| panic!("no tokens under the asked model: {rendered}"));
    assert!(
        tokens.ends_with(" 360"),
        "three answers of 120 tokens: {tokens}"
    );
    assert!(
        rendered
            .lines()
            .any(|l| l.starts_with("agentd_tool_calls_total{")
                && l.contains("tool=\"unknown\"")
                && l.contains("decision=\"repeated\"")),
        "the repeat is counted under unknown: {rendered}"
    );
}
