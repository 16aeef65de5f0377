//! The replay test (issue 50, item 3): Temporal's replay test, for agents. Recorded transcripts
//! are replayed against this build with their recorded model answers (`jobs::replay`), each in
//! a fresh database, and any step where this build decides otherwise — another step, tool,
//! arguments, policy decision, result or end — fails the test, naming the step.
//!
//! Two sets: the scenarios below are recorded here from scripted runs of all three kinds that
//! run the model (auto_create, proactive_suggestion, approval_expiry), a crash-resumed one among
//! them, and replayed at once (the replay machinery against the same build); and the stored
//! transcripts of `tests/fixtures/replay/*.json`, recorded once by an earlier build, which are
//! the regression check: a change in what the loop decides makes them fail. Re-record them
//! (after a change that is meant to decide otherwise) with
//! `AGENTD_RECORD_REPLAY=1 cargo test --test it replay::`, which writes each scenario's
//! transcript there, and commit the files with the change.

use crate::auto_create::scripted_happy_path;
use crate::common::{self, TestDb};
use crate::forks::auto_create_run;
use agentd::app::App;
use agentd::clock::{SharedClock, SystemClock};
use agentd::jobs::replay::{self, Recorded};
use agentd::kinds::{ApprovalExpiry, JobKind, ProactiveSuggestion};
use agentd::llm::scripted::{ScriptedProvider, Turn};
use agentd::queue::worker::JobContext;
use agentd::queue::{self, NewJob};
use agentd::store::{documents, orgs, runs};
use chrono::{Duration, NaiveDate, Utc};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Where the stored transcripts are.
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/replay");

/// Fewest stored transcripts the regression check reads.
const MIN_FIXTURES: usize = 10;

fn app(db: &TestDb) -> App {
    common::app(db, Arc::new(SystemClock) as SharedClock)
}

/// Runs one waiting job of `kind` through its handler with `p`: the job's run.
async fn handle_one(db: &TestDb, kind: &str, p: Arc<ScriptedProvider>) -> Uuid {
    let mut app = app(db);
    app.provider = p.clone();
    let claimed = queue::store::claim(
        &db.pool,
        &[kind.to_string()],
        1,
        "test",
        Utc::now() + Duration::minutes(1),
        Duration::minutes(5),
    )
    .await
    .unwrap();
    let job = claimed.into_iter().next().expect("a waiting job");
    let id = job.id;
    let handler = agentd::jobs::handlers(&app)
        .remove(kind)
        .expect("a handler");
    // A run that ends capped or with a tool error is still a run to replay: the outcome is
    // the recording's, whatever it is.
    let _ = handler
        .handle(JobContext {
            job,
            cancel: CancellationToken::new(),
        })
        .await;
    p.assert_complete();
    runs::run_for_job(&db.pool, id)
        .await
        .unwrap()
        .expect("the job's run")
        .id
}

/// An org with documents named `names` (their text an invoice line).
async fn org_with_docs(db: &TestDb, names: &[&str]) -> (Uuid, Vec<Uuid>) {
    let org = orgs::ensure(&db.pool, "acme").await.unwrap().id;
    let mut conn = db.pool.acquire().await.unwrap();
    let mut docs = Vec::new();
    for n in names {
        let d = documents::insert(
            &mut conn,
            org,
            n,
            Some("Total: 1.00\n"),
            &json!({}),
            Utc::now(),
        )
        .await
        .unwrap();
        docs.push(d);
    }
    (org, docs)
}

async fn set_status(db: &TestDb, doc: Uuid, status: &str, error: Option<&str>) {
    sqlx::query(
        "UPDATE documents SET auto_create_status = $2, auto_create_error = $3 WHERE id = $1",
    )
    .bind(doc)
    .bind(status)
    .bind(error)
    .execute(&db.pool)
    .await
    .unwrap();
}

fn night() -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 3, 1).expect("a date")
}

/// A nightly run of the org with `turns` (`docs[0]` failed: a signal, so the model runs).
async fn nightly(db: &TestDb, turns: impl FnOnce(&[Uuid]) -> Vec<Turn>) -> Uuid {
    let (org, docs) = org_with_docs(db, &["scan-01.png", "lease.pdf"]).await;
    set_status(db, docs[0], "failed", Some("provider: HTTP 500")).await;
    let app = app(db);
    let q = &app.spec(ProactiveSuggestion::NAME).queue;
    let payload = agentd::kinds::proactive_suggestion::Payload {
        org_id: org,
        night: night(),
    };
    queue::enqueue(&db.pool, &ProactiveSuggestion::queued(&payload, q))
        .await
        .unwrap();
    let p = Arc::new(ScriptedProvider::new(turns(&docs)));
    handle_one(db, ProactiveSuggestion::NAME, p).await
}

/// A re-proposal run of a stale `update_document` approval with `turns(document)`.
async fn reproposal(db: &TestDb, turns: impl FnOnce(Uuid) -> Vec<Turn>) -> Uuid {
    let (org, docs) = org_with_docs(db, &["a.txt"]).await;
    let app = app(db);
    let env = app.tool_env(app.spec(ProactiveSuggestion::NAME));
    let tool = app.registry.get("update_document").unwrap().clone();
    let mut tx = db.pool.begin().await.unwrap();
    let mut ctx = env.ctx(&mut tx, org, None, "agent:test".into(), Utc::now());
    let origin = agentd::approvals::ProposalOrigin {
        call_id: None,
        suggestion_id: None,
        ttl: Duration::hours(4),
        repropose: true,
        chain: None,
        rationale: None,
    };
    let args = json!({"document_id": docs[0], "metadata": {"k": "v"}});
    let approval = agentd::approvals::propose(&mut ctx, tool.as_ref(), &args, origin)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // The document changed behind it: the approval went stale, its re-proposal is due.
    sqlx::query(
        "UPDATE pending_approvals SET status = 'stale', decided_at = now(), decided_by = 'sweep',
                result = '{\"changes\": [\"metadata\"]}' WHERE id = $1",
    )
    .bind(approval)
    .execute(&db.pool)
    .await
    .unwrap();
    let job = NewJob::new(
        ApprovalExpiry::NAME,
        json!({"org_id": org, "repropose": approval}),
    );
    queue::enqueue(&db.pool, &job).await.unwrap();
    let p = Arc::new(ScriptedProvider::new(turns(docs[0])));
    handle_one(db, ApprovalExpiry::NAME, p).await
}

/// The happy path with `extra` turns first (answered before the usual first call).
fn happy_after(extra: Vec<Turn>) -> Vec<Turn> {
    extra.into_iter().chain(scripted_happy_path()).collect()
}

/// Records scenario `name` in `db`: the run it made.
async fn record(db: &TestDb, name: &str) -> Uuid {
    let auto = |turns| async move { auto_create_run(db, "acme", turns).await.2 };
    match name {
        "auto_create_happy_path" => auto(scripted_happy_path()).await,
        // Prose before the goal is met: a nudge, then the calls.
        "auto_create_nudged" => auto(happy_after(vec![Turn::text("This is an invoice.")])).await,
        // A call with arguments the tool refuses: a tool error the model corrects.
        "auto_create_tool_error" => {
            let bad = json!({"name": "x", "content": "y", "schema_revid": "not-a-revid"});
            auto(happy_after(vec![Turn::tool("e", "create_prompt", bad)])).await
        }
        // The same read twice: the repeat guard refuses the second.
        "auto_create_repeated_call" => {
            auto(happy_after(vec![Turn::tool("a", "get_document", json!({}))])).await
        }
        // A tool the kind does not offer: refused, never run.
        "auto_create_unknown_tool" => {
            let turn = Turn::tool("z", "delete_document", json!({}));
            auto(happy_after(vec![turn])).await
        }
        // The provider fails mid-run (retryable): the job is retried and the run resumes from
        // its checkpoints, repeating no call.
        "auto_create_crash_resumed" => {
            let mut turns = scripted_happy_path();
            let down = Turn::Error {
                message: "upstream 503".into(),
                retryable: true,
            };
            turns.insert(2, down);
            auto(turns).await
        }
        "nightly_retry_failed" => {
            nightly(db, |_| {
                vec![
                    Turn::tool("a", "org_overview", json!({})),
                    Turn::tool("b", "create_suggestion", json!({"kind": "retry_failed"})),
                    Turn::text("Wrote one suggestion."),
                ]
            })
            .await
        }
        // A write the nightly policy proposes for approval, then a suggestion.
        "nightly_proposes_a_write" => {
            nightly(db, |docs| {
                vec![
                    Turn::tool("a", "org_overview", json!({})),
                    Turn::tool(
                        "b",
                        "update_document",
                        json!({"document_id": docs[1], "metadata": {"kind": "lease"}}),
                    ),
                    Turn::tool("c", "create_suggestion", json!({"kind": "retry_failed"})),
                    Turn::text("Proposed a tag and wrote a suggestion."),
                ]
            })
            .await
        }
        // Kind `other` without words is a tool error; with them, a suggestion.
        "nightly_other_needs_words" => {
            nightly(db, |_| {
                vec![
                    Turn::tool("a", "org_overview", json!({})),
                    Turn::tool("b", "create_suggestion", json!({"kind": "other"})),
                    Turn::tool(
                        "c",
                        "create_suggestion",
                        json!({"kind": "other", "title": "Add a tag for leases",
                               "message": "Several documents are leases; a Leases tag would group them."}),
                    ),
                    Turn::text("Wrote one suggestion."),
                ]
            })
            .await
        }
        "reproposal_proposed_again" => {
            reproposal(db, |doc| {
                vec![
                    Turn::tool("a", "get_document", json!({"document_id": doc})),
                    Turn::tool(
                        "b",
                        "update_document",
                        json!({"document_id": doc, "metadata": {"k": "v"}}),
                    ),
                    Turn::text("Re-proposed."),
                ]
            })
            .await
        }
        // Prose only: nudged twice, then capped (`max_nudges`).
        "reproposal_in_prose_is_capped" => {
            reproposal(db, |_| {
                vec![
                    Turn::text("The data changed; it looks fine."),
                    Turn::text("Still fine."),
                    Turn::text("Nothing to do."),
                ]
            })
            .await
        }
        // Prose first: nudged, then the overview and a suggestion.
        "nightly_nudged" => {
            nightly(db, |_| {
                vec![
                    Turn::text("Let me think about the night."),
                    Turn::tool("a", "org_overview", json!({})),
                    Turn::tool("b", "create_suggestion", json!({"kind": "retry_failed"})),
                    Turn::text("Wrote one suggestion."),
                ]
            })
            .await
        }
        other => panic!("no scenario {other}"),
    }
}

/// Every scenario [`record`] knows.
const SCENARIOS: [&str; 12] = [
    "auto_create_happy_path",
    "auto_create_nudged",
    "auto_create_tool_error",
    "auto_create_repeated_call",
    "auto_create_unknown_tool",
    "auto_create_crash_resumed",
    "nightly_retry_failed",
    "nightly_proposes_a_write",
    "nightly_other_needs_words",
    "reproposal_proposed_again",
    "reproposal_in_prose_is_capped",
    "nightly_nudged",
];

/// Replays `rec` in a fresh database; panics naming the divergence.
async fn replays_the_same(rec: &Recorded, what: &str) {
    let scratch = TestDb::new().await;
    let report = replay::replay(&app(&scratch), rec).await.unwrap();
    assert!(report.steps > 0, "{what}: nothing was compared");
    assert!(report.same(), "{what}: {}", report.text());
}

/// Records `name`, checks its run is what the scenario means, exports it and replays it; with
/// `AGENTD_RECORD_REPLAY` set, writes it to the fixtures.
async fn scenario(name: &str) {
    let db = TestDb::new().await;
    let run = record(&db, name).await;
    let rec = replay::export(&app(&db), run).await.unwrap();
    assert!(!rec.steps.is_empty() && !rec.seed.is_empty(), "{name}");
    if name == "auto_create_crash_resumed" {
        let resumed = rec.steps.iter().any(|s| s.kind == "resume");
        assert!(resumed, "the run was resumed: {:?}", rec.steps);
    }
    replays_the_same(&rec, name).await;
    if std::env::var_os("AGENTD_RECORD_REPLAY").is_some() {
        let path = Path::new(FIXTURES).join(format!("{name}.json"));
        let text = serde_json::to_string_pretty(&rec).unwrap();
        std::fs::create_dir_all(FIXTURES).unwrap();
        std::fs::write(path, format!("{text}\n")).unwrap();
    }
}

#[tokio::test]
async fn recorded_scenarios_of_every_kind_replay_without_divergence() {
    for name in SCENARIOS {
        scenario(name).await;
    }
}

fn fixture_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(FIXTURES)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|x| x == "json"));
    files.sort();
    files
}

#[tokio::test]
async fn stored_transcripts_replay_without_divergence() {
    let files = fixture_files();
    assert!(
        files.len() >= MIN_FIXTURES,
        "{FIXTURES} holds {} transcripts, at least {MIN_FIXTURES} expected (record them with \
         AGENTD_RECORD_REPLAY=1 cargo test --test it replay::)",
        files.len()
    );
    let mut kinds = std::collections::BTreeSet::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let rec: Recorded = serde_json::from_str(&text).unwrap();
        kinds.insert(rec.kind.clone());
        replays_the_same(&rec, &f.display().to_string()).await;
    }
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        ["approval_expiry", "auto_create", "proactive_suggestion"]
    );
}

#[tokio::test]
async fn a_transcript_whose_tool_schema_changed_names_the_tool_and_a_changed_result_the_step() {
    let files = fixture_files();
    let first = files.first().expect("a stored transcript");
    let mut rec: Recorded = serde_json::from_str(&std::fs::read_to_string(first).unwrap()).unwrap();
    let tool = rec.tools.keys().next().cloned().expect("an offered tool");
    rec.tools.insert(tool.clone(), "0".repeat(64));
    // And a recorded result this build would not write: the step is named.
    let step = rec
        .steps
        .iter_mut()
        .find(|s| s.kind == "tool_result")
        .expect("a tool result");
    let seq = step.seq;
    step.payload["content"] = json!("{\"something\": \"else\"}");
    let scratch = TestDb::new().await;
    let report = replay::replay(&app(&scratch), &rec).await.unwrap();
    assert_eq!(report.tools_changed.len(), 1, "{}", report.text());
    assert_eq!(
        (
            report.tools_changed[0].tool.as_str(),
            report.tools_changed[0].change
        ),
        (tool.as_str(), "changed")
    );
    let d = report.divergence.clone().expect("a divergence");
    assert_eq!(
        (d.step, d.what.as_str()),
        (Some(seq), "result"),
        "{}",
        report.text()
    );
    let text = report.text();
    assert!(
        text.contains(&format!("tool {tool}: its parameter schema changed")),
        "{text}"
    );
    assert!(
        text.contains(&format!("diverges at step {seq}: the result differs")),
        "{text}"
    );
}

/// Scratch databases on the server (the CLI makes one per replay and drops it).
async fn scratch_databases(db: &TestDb) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname LIKE 'agentd\\_replay\\_%'")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_cli_replays_a_stored_run_or_a_file_in_a_scratch_database_and_exits_1_on_a_difference()
{
    use crate::cli::{agentd, text};
    let db = TestDb::new().await;
    let run = record(&db, "nightly_retry_failed").await;
    let scratch = scratch_databases(&db).await;
    let stored = |db: &TestDb| {
        let pool = db.pool.clone();
        async move {
            let v: serde_json::Value = sqlx::query_scalar(
                "SELECT jsonb_build_object('runs', (SELECT count(*) FROM agent_runs),
                    'steps', (SELECT count(*) FROM agent_steps), 'audit', (SELECT count(*) FROM audit_events),
                    'suggestions', (SELECT count(*) FROM suggestions), 'jobs', (SELECT count(*) FROM agentd_jobs))",
            )
            .fetch_one(&pool)
            .await
            .unwrap();
            v
        }
    };
    let before = stored(&db).await;
    let o = agentd(&db, &["runs", "replay", &run.to_string()], &[]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(out.contains("every decision the same"), "{out}");
    // The transcript as a file, with a tool's schema hash and a result changed.
    let file = std::env::temp_dir().join(format!("agentd-replay-{}.json", Uuid::now_v7()));
    let path = file.to_string_lossy().to_string();
    let o = agentd(
        &db,
        &["runs", "export", &run.to_string(), "--out", &path],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{:?}", text(&o));
    let mut rec: Recorded = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(rec.run_id, run);
    let tool = rec.tools.keys().next().cloned().unwrap();
    rec.tools.insert(tool.clone(), "0".repeat(64));
    std::fs::write(&file, serde_json::to_string(&rec).unwrap()).unwrap();
    let o = agentd(&db, &["runs", "replay", "--file", &path], &[]);
    let (out, err) = text(&o);
    std::fs::remove_file(&file).unwrap();
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(
        out.contains(&format!("tool {tool}: its parameter schema changed")),
        "{out}"
    );
    // A fork past the run's last step is bad input naming the option.
    let o = agentd(
        &db,
        &["runs", "fork", &run.to_string(), "--from-step", "99"],
        &[],
    );
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--from-step: from_step must be between 1 and"),
        "{err}"
    );
    // The stored data is as it was, and no scratch database is left.
    assert_eq!(stored(&db).await, before);
    assert_eq!(scratch_databases(&db).await, scratch);
}
