//! Forking a stored run from step N (issue 50, item 2), scripted provider, real PostgreSQL: the
//! fork's first N checkpoints are the parent's (no provider call and no side effect for them),
//! its live part asks the model it was given with the reviewer's instructions, it writes its own
//! proposal, the parent and the document stay as they were until the fork is adopted.

use crate::auto_create::{INVOICE, scripted_happy_path};
use crate::common::{self, TestDb, wait_until};
use agentd::app::App;
use agentd::clock::{SharedClock, SystemClock};
use agentd::documents::add_document;
use agentd::jobs::fork::{self, ForkAsk, ForkError};
use agentd::llm::scripted::ScriptedProvider;
use agentd::llm::{Block, Role};
use agentd::store::runs;
use serde_json::Value;
use std::sync::Arc;
use uuid::Uuid;

fn app(db: &TestDb, p: Arc<ScriptedProvider>) -> App {
    let mut app = common::app(db, Arc::new(SystemClock) as SharedClock);
    app.provider = p;
    app
}

/// Runs `kind`'s workers until run `run` (of `app`'s database) has ended.
async fn run_until_ended(app: &App, kind: &str, run: Uuid) {
    let (w, stop) = common::start_worker(app, kind, None).await;
    let pool = app.pool.clone();
    wait_until(60, "the run ends and its job with it", || {
        let pool = pool.clone();
        async move {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM agent_runs r WHERE r.id = $1 AND r.status <> 'running'
                    AND NOT EXISTS (SELECT 1 FROM agentd_jobs j WHERE j.id = r.job_id
                                     AND j.state IN ('available', 'running'))",
            )
            .bind(run)
            .fetch_one(&pool)
            .await
            .unwrap();
            n == 1
        }
    })
    .await;
    stop.cancel();
    w.join().await;
}

/// A document proposed by the scripted happy path: (org, document, its run).
async fn proposed(db: &TestDb) -> (Uuid, Uuid, Uuid) {
    let (org, doc, run, p) = auto_create_run(db, "acme", scripted_happy_path()).await;
    p.assert_complete();
    (org, doc, run)
}

/// An upload of the invoice to org `org_name` whose auto_create job the workers run with
/// `turns` until the document is proposed or failed: (org, document, its run, the provider).
pub(crate) async fn auto_create_run(
    db: &TestDb,
    org_name: &str,
    turns: Vec<agentd::llm::scripted::Turn>,
) -> (Uuid, Uuid, Uuid, Arc<ScriptedProvider>) {
    let p = Arc::new(ScriptedProvider::new(turns));
    let app = app(db, p.clone());
    let org = agentd::store::orgs::ensure(&db.pool, org_name)
        .await
        .unwrap()
        .id;
    let (doc, _) = add_document(&app, org, "invoice.txt", INVOICE, true)
        .await
        .unwrap();
    let pool = db.pool.clone();
    let (w, stop) = common::start_worker(&app, "auto_create", None).await;
    wait_until(60, "the document is proposed or failed and its job ended", || {
        let pool = pool.clone();
        async move {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM documents d WHERE d.id = $1
                    AND d.auto_create_status IN ('proposed', 'failed')
                    AND NOT EXISTS (SELECT 1 FROM agentd_jobs j WHERE j.state IN ('available', 'running'))",
            )
            .bind(doc)
            .fetch_one(&pool)
            .await
            .unwrap();
            n == 1
        }
    })
    .await;
    stop.cancel();
    w.join().await;
    let run: Uuid = sqlx::query_scalar(
        "SELECT id FROM agent_runs WHERE subject = $1 ORDER BY started_at DESC LIMIT 1",
    )
    .bind(doc.to_string())
    .fetch_one(&db.pool)
    .await
    .unwrap();
    (org, doc, run, p)
}

/// Everything a fork must leave as it was: the run row, its checkpoints, its audit rows, and
/// the document's proposal.
async fn snapshot(db: &TestDb, run: Uuid, doc: Uuid) -> Value {
    sqlx::query_scalar(
        "SELECT jsonb_build_object(
            'run', (SELECT to_jsonb(r) FROM agent_runs r WHERE r.id = $1),
            'steps', (SELECT jsonb_agg(to_jsonb(s) ORDER BY s.seq) FROM agent_steps s WHERE s.run_id = $1),
            'marks', (SELECT jsonb_agg(to_jsonb(m) ORDER BY m.seq) FROM agent_loop_marks m WHERE m.run_id = $1),
            'audit', (SELECT jsonb_agg(to_jsonb(a) ORDER BY a.id) FROM audit_events a WHERE a.run_id = $1),
            'document', (SELECT to_jsonb(d) - 'updated_at' FROM documents d WHERE d.id = $2))",
    )
    .bind(run)
    .bind(doc)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// The fork of `parent` `request` made: its id, once `run_fork`'s worker ended it.
async fn fork_and_run(app: &App, org: Uuid, parent: Uuid, ask: &ForkAsk<'_>) -> Uuid {
    let forked = fork::request(app, org, parent, ask, "test").await.unwrap();
    assert_eq!(forked.parent_run_id, parent);
    let id = forked.run_id;
    run_until_ended(app, "run_fork", id).await;
    id
}

#[tokio::test]
async fn a_fork_from_step_2_with_another_model_asks_only_for_the_rest_and_ends_with_its_own_proposal()
 {
    let db = TestDb::new().await;
    let (org, doc, parent) = proposed(&db).await;
    let before = snapshot(&db, parent, doc).await;
    // Steps 1–2 are the parent's get_document call and its result: the fork's script starts
    // at create_schema, so a call for them would take a turn meant for later and fail.
    let live: Vec<_> = scripted_happy_path().into_iter().skip(1).collect();
    let p = Arc::new(ScriptedProvider::new(live));
    let app = app(&db, p.clone());
    let ask = ForkAsk {
        from_step: 2,
        model: Some("other-model"),
        instructions: Some("Call the total total_due."),
    };
    let fork_id = fork_and_run(&app, org, parent, &ask).await;
    p.assert_complete();
    let requests = p.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 5, "4 rounds and the extraction's call");
    // The first request the fork made already holds the parent's get_document result, is
    // sent to the model it was given and carries the reviewer's words, fenced.
    let first = &requests[0];
    assert_eq!(first.model, "other-model");
    let parent_steps = runs::steps(&db.pool, parent).await.unwrap();
    let copied_call = parent_steps[1].call_id.clone().unwrap();
    let shown = first.messages.iter().flat_map(|m| m.content.iter()).any(|b| {
        matches!(b, Block::ToolResult { call_id, is_error: false, .. } if *call_id == copied_call)
    });
    assert!(
        shown,
        "the copied tool result is in the fork's first request"
    );
    let system: String = first
        .messages
        .iter()
        .filter(|m| m.role == Role::System)
        .map(|m| m.joined_text())
        .collect();
    assert!(
        system.contains(
            "<reviewer_instructions>\nCall the total total_due.\n</reviewer_instructions>"
        ),
        "{system}"
    );
    let run = runs::get_run(&db.pool, fork_id).await.unwrap().unwrap();
    assert_eq!(
        (
            run.status.as_str(),
            run.parent_run_id,
            run.parent_step,
            run.model.as_str()
        ),
        ("succeeded", Some(parent), Some(2), "other-model")
    );
    assert_eq!(
        (run.kind.as_str(), run.subject.clone()),
        ("auto_create", doc.to_string())
    );
    // Its first two checkpoints are the parent's, as they were.
    let steps = runs::steps(&db.pool, fork_id).await.unwrap();
    for i in 0..2 {
        assert_eq!(steps[i].payload, parent_steps[i].payload);
        assert_eq!(steps[i].call_id, parent_steps[i].call_id);
    }
    // No side effect of the copied steps again: no get_document call of the fork, only its own.
    let audit: Vec<(String, String)> =
        sqlx::query_as("SELECT tool, decision FROM audit_events WHERE run_id = $1 ORDER BY id")
            .bind(fork_id)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let tools: Vec<&str> = audit.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        tools,
        [
            "fork_run",
            "create_schema",
            "create_prompt",
            "run_extraction"
        ]
    );
    // Its own proposal: a prompt and an extraction of the fork's, on a schema it made or
    // reused (create_schema reuses the org's schema with the same fields: the parent's).
    let mut conn = db.pool.acquire().await.unwrap();
    let start = agentd::store::auto_create::StartFrom::default();
    let arts = agentd::store::auto_create::proposal(&mut conn, org, fork_id, doc, &start)
        .await
        .unwrap();
    drop(conn);
    assert!(arts.complete(), "{arts:?}");
    for (table, id) in [
        ("prompts WHERE prompt_id", arts.proposed_prompt_id),
        ("extractions WHERE id", arts.proposed_extraction_id),
    ] {
        let sql = format!("SELECT run_id FROM {table} = $1 AND status = 'proposed' LIMIT 1");
        let by: Option<Uuid> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
        assert_eq!(by, Some(fork_id), "{table}");
    }
    // The parent and the document are untouched.
    assert_eq!(snapshot(&db, parent, doc).await, before);
    // Adopting makes the fork's proposal the document's, once.
    let adopted = fork::adopt(&app, org, fork_id, "test").await.unwrap();
    assert_eq!(adopted.document_id, doc);
    let (status, by, extraction_run): (String, Uuid, Uuid) = sqlx::query_as(
        "SELECT d.auto_create_status, d.auto_create_run_id, e.run_id FROM documents d
           JOIN extractions e ON e.id = d.proposed_extraction_id WHERE d.id = $1",
    )
    .bind(doc)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (status.as_str(), by, extraction_run),
        ("proposed", fork_id, fork_id)
    );
    let again = fork::adopt(&app, org, fork_id, "test").await;
    assert!(matches!(again, Err(ForkError::Adopted(_))), "{again:?}");
    // The parent's run is still what it was (adopting changes the document, not runs).
    let after = snapshot(&db, parent, doc).await;
    assert_eq!(after["run"], before["run"]);
    assert_eq!(after["steps"], before["steps"]);
}

#[tokio::test]
async fn a_fork_after_the_schema_step_starts_from_the_parents_schema() {
    let db = TestDb::new().await;
    let (org, doc, parent) = proposed(&db).await;
    // Steps 1–4: get_document and create_schema with their results; the fork goes on at
    // create_prompt, on the schema the parent made (its revid in the copied result).
    let live: Vec<_> = scripted_happy_path().into_iter().skip(2).collect();
    let p = Arc::new(ScriptedProvider::new(live));
    let app = app(&db, p.clone());
    let ask = ForkAsk {
        from_step: 4,
        ..ForkAsk::default()
    };
    let fork_id = fork_and_run(&app, org, parent, &ask).await;
    p.assert_complete();
    let run = runs::get_run(&db.pool, fork_id).await.unwrap().unwrap();
    assert_eq!(run.status.as_str(), "succeeded");
    let parent_run = runs::get_run(&db.pool, parent).await.unwrap().unwrap();
    assert_eq!(run.model, parent_run.model, "the parent's model by default");
    let schemas: i64 = sqlx::query_scalar("SELECT count(*) FROM schemas WHERE run_id = $1")
        .bind(fork_id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(schemas, 0, "the fork made no schema: it had the parent's");
    let adopted = fork::adopt(&app, org, fork_id, "test").await.unwrap();
    let (schema_run, prompt_run): (Option<Uuid>, Option<Uuid>) = sqlx::query_as(
        "SELECT s.run_id, p.run_id FROM documents d
           JOIN schemas s ON s.schema_id = d.proposed_schema_id AND s.version = d.proposed_schema_version
           JOIN prompts p ON p.prompt_id = d.proposed_prompt_id AND p.version = d.proposed_prompt_version
          WHERE d.id = $1",
    )
    .bind(adopted.document_id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((schema_run, prompt_run), (Some(parent), Some(fork_id)));
    assert_eq!(adopted.document_id, doc);
}

#[tokio::test]
async fn a_fork_is_refused_naming_what_is_wrong_and_writes_nothing() {
    let db = TestDb::new().await;
    let (org, doc, parent) = proposed(&db).await;
    let p = Arc::new(ScriptedProvider::new(vec![]));
    let app = app(&db, p.clone());
    let steps = agentd::store::forks::step_count(&db.pool, parent)
        .await
        .unwrap();
    assert!(
        steps >= 10,
        "the happy path has 10 checkpoints (got {steps})"
    );
    let cases: Vec<(ForkAsk, &str)> = vec![
        (
            ForkAsk {
                from_step: i64::from(steps) + 1,
                ..ForkAsk::default()
            },
            "from_step",
        ),
        (ForkAsk::default(), "from_step"),
        (
            ForkAsk {
                from_step: 1,
                model: Some(" \u{7} "),
                ..ForkAsk::default()
            },
            "model",
        ),
        (
            ForkAsk {
                from_step: 1,
                instructions: Some("   "),
                ..ForkAsk::default()
            },
            "instructions",
        ),
    ];
    for (ask, field) in cases {
        let e = fork::request(&app, org, parent, &ask, "test")
            .await
            .expect_err(field);
        let named = matches!(
            (&e, field),
            (ForkError::Step { .. }, "from_step")
                | (ForkError::Model(_), "model")
                | (ForkError::Instructions(_), "instructions")
        );
        assert!(named, "{field}: {e}");
    }
    // Another org's run is not found.
    let other = agentd::store::orgs::ensure(&db.pool, "other")
        .await
        .unwrap()
        .id;
    let e = fork::request(
        &app,
        other,
        parent,
        &ForkAsk {
            from_step: 1,
            ..ForkAsk::default()
        },
        "t",
    )
    .await
    .expect_err("another org");
    assert!(matches!(e, ForkError::NotFound(_)), "{e}");
    // A running run cannot be forked.
    sqlx::query("UPDATE agent_runs SET status = 'running' WHERE id = $1")
        .bind(parent)
        .execute(&db.pool)
        .await
        .unwrap();
    let e = fork::request(
        &app,
        org,
        parent,
        &ForkAsk {
            from_step: 1,
            ..ForkAsk::default()
        },
        "t",
    )
    .await
    .expect_err("running");
    assert!(matches!(e, ForkError::Running(_)), "{e}");
    // Nothing was written: no run, no job, no audit row.
    let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM agent_runs WHERE subject = $1")
        .bind(doc.to_string())
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM agentd_jobs WHERE kind = 'run_fork'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!((runs, jobs, p.calls()), (1, 0, 0));
}
