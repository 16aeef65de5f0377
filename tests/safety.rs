//! Safety inside an org (issue 12): a hostile scripted model under `auto_create` cannot write
//! another document, its extractions or the org's artifacts (refused, or proposed when the job
//! file says so; audited either way) nor read other documents; a suggestion's proposed action
//! obeys the allow-list, the policy and the suggestion's document; accepting a document
//! activates exactly what is recorded on it.

mod common;

use agentd::app::App;
use agentd::catalog::PolicyDecision;
use agentd::clock::{ManualClock, SharedClock};
use agentd::llm::scripted::{ScriptedProvider, Turn};
use agentd::store::extractions::ExtractionSource;
use agentd::store::prompts::PromptFields;
use agentd::store::runs;
use chrono::Utc;
use common::TestDb;
use serde_json::{Value, json};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

struct Org {
    db: TestDb,
    clock: Arc<ManualClock>,
    org: Uuid,
    /// The run's document.
    doc: Uuid,
    /// A neighbour in the same org.
    other: Uuid,
    /// The org's active schema and prompt (made by a person).
    schema: Uuid,
    prompt: Uuid,
    /// An extraction of `other`.
    extraction: Uuid,
}

fn format() -> Value {
    json!({"type": "json_schema", "json_schema": {"name": "s", "strict": true, "schema": {
        "type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
        "additionalProperties": false}}})
}

async fn org() -> Org {
    let db = TestDb::new().await;
    let clock = ManualClock::new(Utc::now());
    let org = agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id;
    let mut c = db.pool.acquire().await.unwrap();
    let now = Utc::now();
    let doc = agentd::store::documents::insert(
        &mut c,
        org,
        "mine.txt",
        Some("Total: 1"),
        &json!({}),
        now,
    )
    .await
    .unwrap();
    let other = agentd::store::documents::insert(
        &mut c,
        org,
        "other.txt",
        Some("Total: 2"),
        &json!({"k": "v"}),
        now,
    )
    .await
    .unwrap();
    let s = agentd::store::schemas::create(&mut c, org, "Active", &format(), None, now)
        .await
        .unwrap();
    sqlx::query("UPDATE schemas SET status = 'active'")
        .execute(&mut *c)
        .await
        .unwrap();
    let f = PromptFields {
        name: "Active".into(),
        content: "Extract a.".into(),
        schema_id: s.schema_id,
        schema_version: s.version,
        model: None,
        tag_ids: vec![],
    };
    let p = agentd::store::prompts::create(&mut c, org, &f, None, now)
        .await
        .unwrap();
    let src = ExtractionSource {
        document_id: other,
        prompt_id: p.prompt_id,
        prompt_version: p.version,
        schema_id: s.schema_id,
        schema_version: s.version,
    };
    let e = agentd::store::extractions::insert(&mut c, org, src, &json!({"a": "orig"}), None, now)
        .await
        .unwrap();
    Org {
        db,
        clock,
        org,
        doc,
        other,
        schema: s.schema_id,
        prompt: p.prompt_id,
        extraction: e.id,
    }
}

fn app(o: &Org, p: Arc<ScriptedProvider>) -> App {
    let mut app = common::app(&o.db, o.clock.clone() as SharedClock);
    app.provider = p;
    app
}

async fn scalar<T>(o: &Org, sql: &str) -> T
where
    T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
{
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .fetch_one(&o.db.pool)
        .await
        .unwrap()
}

/// The hostile script: writes on the neighbour and the org's artifacts, then reads the neighbour.
fn hostile(o: &Org) -> Vec<Turn> {
    vec![
        Turn::tool(
            "1",
            "update_document",
            json!({"document_id": o.other, "metadata": {"pwned": true}}),
        ),
        Turn::tool(
            "2",
            "update_extraction_field",
            json!({"extraction_id": o.extraction, "path": "a", "value": "pwned"}),
        ),
        Turn::tool(
            "3",
            "run_extraction",
            json!({"document_id": o.other, "prompt_revid": format!("{}:1", o.prompt)}),
        ),
        Turn::tool(
            "4",
            "update_schema",
            json!({"schema_id": o.schema, "response_format": format()["json_schema"].clone().as_object().map(|_| {
            let mut f = format();
            f["json_schema"]["name"] = json!("pwned");
            f
        }).unwrap()}),
        ),
        Turn::tool(
            "5",
            "update_prompt",
            json!({"prompt_id": o.prompt, "content": "pwned"}),
        ),
        Turn::tool("6", "get_ocr_text", json!({"document_id": o.other})),
        Turn::text("done"),
    ]
}

/// Nothing of the neighbour or of the org's artifacts changed.
async fn assert_untouched(o: &Org) {
    let meta: Value = scalar(
        o,
        &format!("SELECT metadata FROM documents WHERE id = '{}'", o.other),
    )
    .await;
    assert_eq!(
        meta,
        json!({"k": "v"}),
        "the neighbour's metadata is unchanged"
    );
    let result: Value = scalar(
        o,
        &format!(
            "SELECT result FROM extractions WHERE id = '{}'",
            o.extraction
        ),
    )
    .await;
    assert_eq!(
        result,
        json!({"a": "orig"}),
        "the neighbour's extraction is unchanged"
    );
    let n: i64 = scalar(
        o,
        &format!(
            "SELECT count(*) FROM extractions WHERE document_id = '{}'",
            o.other
        ),
    )
    .await;
    assert_eq!(n, 1, "no new extraction of the neighbour");
    let n: i64 = scalar(
        o,
        &format!(
            "SELECT count(*) FROM schemas WHERE schema_id = '{}'",
            o.schema
        ),
    )
    .await;
    assert_eq!(n, 1, "no new version of the org's schema");
    let n: i64 = scalar(
        o,
        &format!(
            "SELECT count(*) FROM prompts WHERE prompt_id = '{}'",
            o.prompt
        ),
    )
    .await;
    assert_eq!(n, 1, "no new version of the org's prompt");
}

#[tokio::test]
async fn a_hostile_auto_create_run_cannot_touch_its_neighbours() {
    let o = org().await;
    let p = Arc::new(ScriptedProvider::new(hostile(&o)));
    let app = app(&o, p.clone());
    let spec = app.spec("auto_create");
    let mut rs = app.run_spec(spec, o.org, o.doc.to_string(), Some(1), "go".into());
    widen(&mut rs);
    rs.document_id = Some(o.doc);
    let out = app
        .engine(spec)
        .run(&rs, &CancellationToken::new())
        .await
        .unwrap();
    // Every turn consumed and no extra call: run_extraction on the neighbour never asked a model.
    p.assert_complete();
    assert_eq!(p.calls(), 7);
    assert_eq!(out.status, "succeeded");
    assert_untouched(&o).await;
    let audit = runs::audit_for_run(&o.db.pool, out.run_id).await.unwrap();
    let rows: Vec<(&str, &str, bool, bool)> = audit
        .iter()
        .map(|a| {
            let off = a.outcome.as_ref().map(|v| v["off_subject"] == json!(true)) == Some(true);
            (a.tool.as_str(), a.decision.as_str(), a.is_error, off)
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            ("update_document", "denied", true, true),
            ("update_extraction_field", "denied", true, true),
            ("run_extraction", "denied", true, true),
            ("update_schema", "denied", true, true),
            ("update_prompt", "denied", true, true),
            ("get_ocr_text", "denied", true, true),
        ]
    );
    let n: i64 = scalar(&o, "SELECT count(*) FROM pending_approvals").await;
    assert_eq!(n, 0);
}

#[tokio::test]
async fn with_off_subject_propose_the_writes_wait_for_a_person() {
    let o = org().await;
    let p = Arc::new(ScriptedProvider::new(hostile(&o)));
    let app = app(&o, p.clone());
    let mut spec = app.spec("auto_create").clone();
    spec.agent.off_subject = PolicyDecision::Propose;
    let mut rs = app.run_spec(&spec, o.org, o.doc.to_string(), Some(1), "go".into());
    widen(&mut rs);
    rs.document_id = Some(o.doc);
    let out = app
        .engine(&spec)
        .run(&rs, &CancellationToken::new())
        .await
        .unwrap();
    p.assert_complete();
    assert_untouched(&o).await;
    let audit = runs::audit_for_run(&o.db.pool, out.run_id).await.unwrap();
    let decisions: Vec<(&str, &str)> = audit
        .iter()
        .map(|a| (a.tool.as_str(), a.decision.as_str()))
        .collect();
    assert_eq!(
        decisions,
        vec![
            ("update_document", "proposed"),
            ("update_extraction_field", "proposed"),
            ("run_extraction", "proposed"),
            ("update_schema", "proposed"),
            ("update_prompt", "proposed"),
            // Reading another document is never proposed: it is off.
            ("get_ocr_text", "denied"),
        ]
    );
    let tools: Vec<String> = sqlx::query_scalar(
        "SELECT tool FROM pending_approvals WHERE status = 'pending' ORDER BY created_at, tool",
    )
    .fetch_all(&o.db.pool)
    .await
    .unwrap();
    assert_eq!(tools.len(), 5, "{tools:?}");
}

#[tokio::test]
async fn the_run_may_still_write_its_own_document_and_artifacts() {
    let o = org().await;
    let turns = vec![
        Turn::tool("1", "update_document", json!({"metadata": {"seen": true}})),
        Turn::tool(
            "2",
            "create_schema",
            json!({"name": "Mine", "response_format": format()}),
        ),
        Turn::Dynamic(|req| {
            let id = last_result(req)["schema_id"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let mut f = format();
            f["json_schema"]["name"] = json!("mine2");
            call(
                "update_schema",
                json!({"schema_id": id, "response_format": f}),
            )
        }),
        Turn::text("done"),
    ];
    let p = Arc::new(ScriptedProvider::new(turns));
    let app = app(&o, p.clone());
    let spec = app.spec("auto_create");
    let mut rs = app.run_spec(spec, o.org, o.doc.to_string(), Some(1), "go".into());
    widen(&mut rs);
    rs.document_id = Some(o.doc);
    let out = app
        .engine(spec)
        .run(&rs, &CancellationToken::new())
        .await
        .unwrap();
    p.assert_complete();
    let audit = runs::audit_for_run(&o.db.pool, out.run_id).await.unwrap();
    assert!(
        audit
            .iter()
            .all(|a| a.decision == "auto_approved" && !a.is_error),
        "{audit:?}"
    );
    let meta: Value = scalar(
        &o,
        &format!("SELECT metadata FROM documents WHERE id = '{}'", o.doc),
    )
    .await;
    assert_eq!(meta["seen"], json!(true));
    let n: i64 = scalar(
        &o,
        &format!(
            "SELECT count(*) FROM schemas WHERE run_id = '{}'",
            out.run_id
        ),
    )
    .await;
    assert_eq!(n, 2, "the run's own schema got a second version");
}

pub fn last_result(req: &agentd::llm::CompletionRequest) -> Value {
    req.messages
        .iter()
        .rev()
        .flat_map(|m| m.content.iter())
        .find_map(|b| match b {
            agentd::llm::Block::ToolResult { content, .. } => serde_json::from_str(content).ok(),
            _ => None,
        })
        .unwrap_or(Value::Null)
}

pub fn call(
    name: &str,
    args: Value,
) -> Result<agentd::llm::CompletionResponse, agentd::llm::LlmError> {
    Ok(agentd::llm::CompletionResponse {
        message: agentd::llm::Message {
            role: agentd::llm::Role::Assistant,
            content: vec![agentd::llm::Block::ToolUse {
                id: "x".into(),
                name: name.into(),
                arguments: args.to_string(),
            }],
        },
        usage: agentd::llm::Usage {
            input_tokens: 100,
            output_tokens: 20,
        },
        finish: agentd::llm::FinishReason::ToolUse,
        model: "scripted".into(),
    })
}

#[tokio::test]
async fn a_suggestions_action_obeys_allow_list_policy_and_its_document() {
    let o = org().await;
    let sug = |kind: &str, doc: Uuid, action: Value| {
        Turn::tool(
            kind,
            "create_suggestion",
            json!({"kind": kind, "title": "t", "message": "m", "document_id": doc,
                   "proposed_action": action}),
        )
    };
    let turns = vec![
        // Not in the nightly job's allow-list.
        sug(
            "review_proposal",
            o.doc,
            json!({"tool": "delete_prompt", "args": {"prompt_id": o.prompt}}),
        ),
        // In the allow-list but denied by this test's policy override.
        sug(
            "retry_failed",
            o.doc,
            json!({"tool": "create_tag", "args": {"name": "x", "color": "#112233"}}),
        ),
        // Allowed, but on another document than the suggestion's.
        sug(
            "tag_documents",
            o.doc,
            json!({"tool": "update_document", "args": {"document_id": o.other, "metadata": {"x": 1}}}),
        ),
        // The control: allowed, on the suggestion's own document.
        sug(
            "other",
            o.doc,
            json!({"tool": "update_document", "args": {"metadata": {"x": 1}}}),
        ),
        Turn::text("done"),
    ];
    let p = Arc::new(ScriptedProvider::new(turns));
    let app = app(&o, p.clone());
    let spec = app.spec("proactive_suggestion");
    let mut rs = app.run_spec(spec, o.org, "night".into(), Some(1), "go".into());
    rs.night = Some(Utc::now().date_naive());
    rs.policy
        .overrides
        .insert("create_tag".into(), PolicyDecision::Deny);
    let out = app
        .engine(spec)
        .run(&rs, &CancellationToken::new())
        .await
        .unwrap();
    p.assert_complete();
    let audit = runs::audit_for_run(&o.db.pool, out.run_id).await.unwrap();
    let errors: Vec<Option<String>> = audit
        .iter()
        .map(|a| {
            a.outcome
                .as_ref()
                .and_then(|v| v["proposed_action_error"].as_str().map(str::to_string))
        })
        .collect();
    assert_eq!(audit.len(), 4);
    assert!(
        errors[0]
            .as_deref()
            .unwrap()
            .contains("not one of the tools"),
        "{errors:?}"
    );
    assert!(
        errors[1]
            .as_deref()
            .unwrap()
            .contains("denies `create_tag`"),
        "{errors:?}"
    );
    assert!(
        errors[2].as_deref().unwrap().contains(&o.other.to_string()),
        "{errors:?}"
    );
    assert_eq!(errors[3], None);
    let approvals: Vec<(String, Value)> =
        sqlx::query_as("SELECT tool, args FROM pending_approvals")
            .fetch_all(&o.db.pool)
            .await
            .unwrap();
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    assert_eq!(approvals[0].0, "update_document");
    assert_eq!(approvals[0].1["document_id"], json!(o.doc));
    let n: i64 = scalar(&o, "SELECT count(*) FROM suggestions").await;
    assert_eq!(n, 4, "the suggestions themselves stand");
}

#[tokio::test]
async fn accepting_a_document_activates_exactly_what_is_recorded_on_it() {
    use agentd::store::auto_create::{self, Artifacts};
    let o = org().await;
    let run = Uuid::now_v7();
    let now = Utc::now();
    let mut c = o.db.pool.acquire().await.unwrap();
    let v1 = agentd::store::schemas::create(&mut c, o.org, "Mine", &format(), Some(run), now)
        .await
        .unwrap();
    let mut f2 = format();
    f2["json_schema"]["name"] = json!("v2");
    let v2 =
        agentd::store::schemas::create_version(&mut c, o.org, v1.schema_id, &f2, Some(run), now)
            .await
            .unwrap()
            .unwrap();
    let f = PromptFields {
        name: "Mine".into(),
        content: "Extract a.".into(),
        schema_id: v2.schema_id,
        schema_version: v2.version,
        model: None,
        tag_ids: vec![],
    };
    let p = agentd::store::prompts::create(&mut c, o.org, &f, Some(run), now)
        .await
        .unwrap();
    let src = |doc| ExtractionSource {
        document_id: doc,
        prompt_id: p.prompt_id,
        prompt_version: p.version,
        schema_id: v2.schema_id,
        schema_version: v2.version,
    };
    let early = agentd::store::extractions::insert(
        &mut c,
        o.org,
        src(o.doc),
        &json!({"a": "1"}),
        Some(run),
        now,
    )
    .await
    .unwrap();
    let recorded = agentd::store::extractions::insert(
        &mut c,
        o.org,
        src(o.doc),
        &json!({"a": "2"}),
        Some(run),
        now,
    )
    .await
    .unwrap();
    let arts = Artifacts {
        schema_id: Some(v2.schema_id),
        schema_version: Some(v2.version),
        prompt_id: Some(p.prompt_id),
        prompt_version: Some(p.version),
        extraction_id: Some(recorded.id),
    };
    auto_create::set_proposed(&mut c, o.org, o.doc, run, &arts, now)
        .await
        .unwrap();
    auto_create::accept(&mut c, o.org, o.doc, run, now)
        .await
        .unwrap();
    let st = |sql: String| {
        let pool = o.db.pool.clone();
        async move {
            sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(sql))
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let sid = v1.schema_id;
    assert_eq!(
        st(format!(
            "SELECT status FROM schemas WHERE schema_id = '{sid}' AND version = 2"
        ))
        .await,
        "active"
    );
    assert_eq!(
        st(format!(
            "SELECT status FROM schemas WHERE schema_id = '{sid}' AND version = 1"
        ))
        .await,
        "proposed"
    );
    assert_eq!(
        st(format!(
            "SELECT status FROM prompts WHERE prompt_id = '{}'",
            p.prompt_id
        ))
        .await,
        "active"
    );
    assert_eq!(
        st(format!(
            "SELECT status FROM extractions WHERE id = '{}'",
            recorded.id
        ))
        .await,
        "accepted"
    );
    assert_eq!(
        st(format!(
            "SELECT status FROM extractions WHERE id = '{}'",
            early.id
        ))
        .await,
        "proposed"
    );
}

#[tokio::test]
async fn error_text_with_nul_is_stored_cleaned_and_truncated() {
    let o = org().await;
    let mut c = o.db.pool.acquire().await.unwrap();
    let run = runs::create_run(
        &mut c,
        &runs::NewRun {
            id: Uuid::now_v7(),
            org_id: o.org,
            kind: "auto_create",
            subject: "x",
            job_id: None,
            provider: "scripted",
            model: "m",
            started_at: Utc::now(),
        },
    )
    .await
    .unwrap();
    let error = format!("bad\0answer {}", "x".repeat(10_000));
    assert!(
        runs::finish_run(
            &o.db.pool,
            run.id,
            "failed",
            Some("error"),
            None,
            Some(&error),
            Utc::now()
        )
        .await
        .unwrap()
    );
    agentd::store::auto_create::set_status(
        &o.db.pool,
        o.org,
        o.doc,
        "failed",
        None,
        Some(&error),
        Utc::now(),
    )
    .await
    .unwrap();
    let stored = runs::get_run(&o.db.pool, run.id)
        .await
        .unwrap()
        .unwrap()
        .error
        .unwrap();
    assert!(
        stored.starts_with("badanswer xxx") && stored.ends_with("[truncated]"),
        "{}",
        &stored[..40]
    );
    assert!(stored.chars().count() < 2_100);
    let doc_err: String = scalar(
        &o,
        &format!(
            "SELECT auto_create_error FROM documents WHERE id = '{}'",
            o.doc
        ),
    )
    .await;
    assert_eq!(doc_err, stored);
}

/// The scope must hold even where a deployment offers every write tool to auto_create (its own
/// job file offers only what the job needs), with the goal tracking (nudges) off: these runs
/// test the scope, not the road to a proposal.
fn widen(rs: &mut agentd::agent::RunSpec) {
    for t in [
        "list_documents",
        "update_document",
        "list_prompts",
        "update_schema",
        "update_prompt",
        "run_extraction",
        "update_extraction_field",
        "delete_document",
    ] {
        if !rs.policy.allow.iter().any(|a| a == t) {
            rs.policy.allow.push(t.to_string());
        }
    }
    rs.settings.goals = false;
}
