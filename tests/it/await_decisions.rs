//! A nightly run that waits for the decisions on its proposals and goes on (issue 50, item 1),
//! against a real PostgreSQL: with `agent.await_decisions = true` the run checkpoints `waiting`
//! while its approvals are pending (the job ends), the last decision enqueues its resume job
//! (migration 0107's trigger) and the resumed run's next request carries the outcomes and
//! reasons; a wait past the TTL ends the run `capped`; `agent.await_decisions = false` (the
//! shipped file) behaves as before; a worker killed during the wait and one killed during the
//! resume lose nothing and repeat no answered call.

use crate::common;
use agentd::app::App;
use agentd::approvals::{self, Decision, DecisionExtra};
use agentd::clock::{ManualClock, SharedClock, SystemClock};
use agentd::jobs::approval_expiry::ApprovalExpiry;
use agentd::jobs::proactive_suggestion::{Proactive, nightly_job};
use agentd::kinds::{JobKind, ProactiveSuggestion};
use agentd::llm::scripted::{ScriptedProvider, Turn};
use agentd::llm::{Block, Role};
use agentd::queue::worker::{JobContext, JobHandler};
use agentd::queue::{self, JobState};
use agentd::store::states::RunStatus;
use agentd::store::{documents, orgs, run_waits, runs};
use chrono::{Duration, NaiveDate, Utc};
use common::{TestDb, wait_until};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use std::process::{Command, Stdio};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

struct Fixture {
    db: TestDb,
    app: App,
    org: Uuid,
    doc: Uuid,
}

/// An org with one document whose auto-create failed (a signal, so the nightly job runs the
/// model); `awaits`: the nightly kind's job file with `agent.await_decisions = true`.
async fn fixture(awaits: bool) -> Fixture {
    let db = TestDb::new().await;
    let mut app = common::app(&db, Arc::new(SystemClock) as SharedClock);
    if awaits {
        app = awaiting(app);
    }
    let org = orgs::ensure(&db.pool, "acme").await.unwrap().id;
    let mut conn = db.pool.acquire().await.unwrap();
    let doc = documents::insert(
        &mut conn,
        org,
        "a.txt",
        Some("Total: 1.00\n"),
        &json!({}),
        Utc::now(),
    )
    .await
    .unwrap();
    drop(conn);
    sqlx::query(
        "UPDATE documents SET auto_create_status = 'failed', auto_create_error = 'x' WHERE id = $1",
    )
    .bind(doc)
    .execute(&db.pool)
    .await
    .unwrap();
    Fixture { db, app, org, doc }
}

/// `app` with the nightly kind awaiting decisions.
fn awaiting(mut app: App) -> App {
    let mut catalog = (*app.catalog).clone();
    catalog
        .kinds
        .get_mut(ProactiveSuggestion::NAME)
        .expect("the nightly kind")
        .agent
        .await_decisions = true;
    app.catalog = Arc::new(catalog);
    app
}

fn night() -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 3, 1).unwrap()
}

impl Fixture {
    /// Claims the one ready nightly job (the night's, or a resume) and runs it with `p`.
    async fn handle_next(&self, p: Arc<ScriptedProvider>) -> i64 {
        let claimed = queue::store::claim(
            &self.db.pool,
            &[ProactiveSuggestion::NAME.to_string()],
            1,
            "test",
            Utc::now() + Duration::minutes(1),
            Duration::minutes(5),
        )
        .await
        .unwrap();
        assert_eq!(claimed.len(), 1, "one job ready");
        let mut app = self.app.clone();
        app.provider = p;
        let job = claimed.into_iter().next().unwrap();
        let id = job.id;
        Proactive { app }
            .handle(JobContext {
                job,
                cancel: CancellationToken::new(),
            })
            .await
            .unwrap();
        id
    }

    /// Enqueues the night's job and runs it through a script that proposes `update_document`
    /// and `delete_document` (calls `r2.0` and `r2.1`: the loop names calls by round and
    /// place) and writes a suggestion; the run.
    async fn night_run(&self) -> (Uuid, Arc<ScriptedProvider>) {
        let q = &self.app.spec(ProactiveSuggestion::NAME).queue;
        let job = nightly_job(q, self.org, night());
        let id = queue::enqueue(&self.db.pool, &job).await.unwrap().unwrap();
        let p = Arc::new(ScriptedProvider::new(vec![
            Turn::tool("a", "org_overview", json!({})),
            Turn::Tools(vec![
                (
                    "b".into(),
                    "update_document".into(),
                    json!({"document_id": self.doc, "metadata": {"reviewed": true}}).to_string(),
                ),
                (
                    "c".into(),
                    "delete_document".into(),
                    json!({"document_id": self.doc}).to_string(),
                ),
                (
                    "d".into(),
                    "create_suggestion".into(),
                    json!({"kind": "retry_failed", "document_id": self.doc}).to_string(),
                ),
            ]),
            Turn::text("Proposed to mark a.txt reviewed and to delete it."),
        ]));
        assert_eq!(self.handle_next(p.clone()).await, id);
        p.assert_complete();
        let run = runs::run_for_job(&self.db.pool, id).await.unwrap().unwrap();
        (run.id, p)
    }

    async fn run(&self, id: Uuid) -> runs::RunRow {
        runs::get_run(&self.db.pool, id).await.unwrap().unwrap()
    }

    async fn approval(&self, run: Uuid, call: &str) -> Uuid {
        sqlx::query_scalar("SELECT id FROM pending_approvals WHERE run_id = $1 AND call_id = $2")
            .bind(run)
            .bind(call)
            .fetch_one(&self.db.pool)
            .await
            .unwrap()
    }

    async fn decide(&self, id: Uuid, d: Decision, reason: Option<&str>) {
        let env = self.app.tool_env(self.app.spec(ProactiveSuggestion::NAME));
        let extra = DecisionExtra {
            reason: reason.map(str::to_string),
            ..DecisionExtra::default()
        };
        approvals::decide(
            &self.db.pool,
            &self.app.clock,
            &env,
            id,
            Some(self.org),
            d,
            extra,
        )
        .await
        .unwrap();
    }

    async fn count(&self, sql: &str, run: Uuid) -> i64 {
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
            .bind(run)
            .fetch_one(&self.db.pool)
            .await
            .unwrap()
    }

    async fn finished_events(&self, run: Uuid) -> i64 {
        self.count(
            "SELECT count(*) FROM agentd_events WHERE type = 'run.finished' AND subject_id = $1",
            run,
        )
        .await
    }

    async fn marks(&self, run: Uuid) -> Vec<String> {
        sqlx::query_scalar("SELECT kind FROM agent_loop_marks WHERE run_id = $1 ORDER BY seq")
            .bind(run)
            .fetch_all(&self.db.pool)
            .await
            .unwrap()
    }
}

fn person() -> Decision {
    Decision::Approve {
        by: "user:ana".into(),
    }
}

#[tokio::test]
async fn a_nightly_run_waits_for_its_decisions_and_goes_on_with_them() {
    let f = fixture(true).await;
    let (run, _) = f.night_run().await;
    // It waits: status `waiting`, a `waiting` mark, no run.finished, no job for it.
    let r = f.run(run).await;
    assert_eq!(
        (r.status, r.finished_at, r.counters.rounds),
        (RunStatus::Waiting, None, 3)
    );
    assert_eq!(f.marks(run).await, vec!["waiting"]);
    assert_eq!(f.finished_events(run).await, 0, "a wait is not an end");
    assert_eq!(run_waits::resume_job(&f.db.pool, run).await.unwrap(), None);

    // One decision of two: still waiting, no resume job.
    let update = f.approval(run, "r2.0").await;
    let delete = f.approval(run, "r2.1").await;
    f.decide(update, person(), None).await;
    assert_eq!(f.run(run).await.status, RunStatus::Waiting);
    assert_eq!(run_waits::resume_job(&f.db.pool, run).await.unwrap(), None);
    // The last one, rejected with a reason: the resume job is enqueued in its transaction and
    // is the run's job now.
    f.decide(
        delete,
        Decision::Reject {
            by: "user:ana".into(),
        },
        Some("keep it, the customer may come back"),
    )
    .await;
    let resume = run_waits::resume_job(&f.db.pool, run)
        .await
        .unwrap()
        .expect("a resume job");
    assert_eq!(f.run(run).await.job_id, Some(resume));

    // The resume: one provider call, whose request ends with the outcomes of calls b and c.
    let p = Arc::new(ScriptedProvider::new(vec![Turn::text(
        "a.txt is marked reviewed; the delete was rejected, so it stays.",
    )]));
    assert_eq!(f.handle_next(p.clone()).await, resume);
    p.assert_complete();
    let req = p.requests.lock().unwrap()[0].clone();
    // After the answer that began the wait (before the `[run state]` block every request
    // ends with): the outcomes, as a person's message.
    let answered = req
        .messages
        .iter()
        .rposition(|m| m.role == Role::Assistant)
        .expect("the answer before the wait");
    let decided = &req.messages[answered + 1];
    assert_eq!(decided.role, Role::User);
    let told = decided.joined_text();
    assert!(told.starts_with("[decided]"), "{told}");
    assert!(
        told.contains("call r2.0: ") && told.contains("approved and executed"),
        "{told}"
    );
    assert!(
        told.contains("call r2.1: ")
            && told.contains("rejected; reason: \"keep it, the customer may come back\""),
        "{told}"
    );
    // The proposing calls kept their own results before the answer that ended the first part.
    let results: Vec<&str> = req
        .messages
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            Block::ToolResult { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(results, ["r1.0", "r2.0", "r2.1", "r2.2"]);

    let r = f.run(run).await;
    assert_eq!(
        (r.status, r.stop_reason.as_deref(), r.counters.rounds),
        (RunStatus::Succeeded, Some("completed"), 4),
        "rounds count across the wait"
    );
    assert_eq!(
        r.final_text.as_deref(),
        Some("a.txt is marked reviewed; the delete was rejected, so it stays.")
    );
    assert_eq!(f.marks(run).await, vec!["waiting", "resume", "decided"]);
    assert_eq!(f.finished_events(run).await, 1);
    let status: String =
        sqlx::query_scalar("SELECT payload->>'status' FROM agentd_events WHERE type = 'run.finished' AND subject_id = $1")
            .bind(run)
            .fetch_one(&f.db.pool)
            .await
            .unwrap();
    assert_eq!(status, "succeeded");
    let jobs = f
        .count(
            "SELECT count(*) FROM agentd_jobs WHERE payload->>'org_id' = $1::text",
            f.org,
        )
        .await;
    assert_eq!(jobs, 2, "the night's job and one resume");
}

#[tokio::test]
async fn a_resumed_run_may_propose_again_and_wait_again() {
    let f = fixture(true).await;
    let (run, _) = f.night_run().await;
    for call in ["r2.0", "r2.1"] {
        f.decide(f.approval(run, call).await, person(), None).await;
    }
    let first = run_waits::resume_job(&f.db.pool, run)
        .await
        .unwrap()
        .unwrap();
    // Told the outcomes, the model proposes the next step: the run waits again.
    let p = Arc::new(ScriptedProvider::new(vec![
        Turn::tool(
            "e",
            "update_document",
            json!({"document_id": f.doc, "metadata": {"archived": true}}),
        ),
        Turn::text("Proposed to archive a.txt as well."),
    ]));
    assert_eq!(f.handle_next(p.clone()).await, first);
    p.assert_complete();
    assert_eq!(f.run(run).await.status, RunStatus::Waiting);
    assert_eq!(
        f.marks(run).await,
        vec!["waiting", "resume", "decided", "waiting"]
    );
    assert_eq!(run_waits::resume_job(&f.db.pool, run).await.unwrap(), None);
    let next: Uuid = sqlx::query_scalar(
        "SELECT id FROM pending_approvals WHERE run_id = $1 AND status = 'pending'",
    )
    .bind(run)
    .fetch_one(&f.db.pool)
    .await
    .unwrap();
    f.decide(next, person(), None).await;
    let second = run_waits::resume_job(&f.db.pool, run)
        .await
        .unwrap()
        .unwrap();
    assert_ne!(second, first, "a job per wait");
    // The second resume tells only the new outcome.
    let p = Arc::new(ScriptedProvider::new(vec![Turn::text("All done.")]));
    assert_eq!(f.handle_next(p.clone()).await, second);
    let req = p.requests.lock().unwrap()[0].clone();
    let told: Vec<String> = req
        .messages
        .iter()
        .map(|m| m.joined_text())
        .filter(|t| t.starts_with("[decided]"))
        .collect();
    assert_eq!(told.len(), 2, "both waits' messages, in order");
    assert!(
        told[1].contains("call r4.0: ") && !told[1].contains("call r2.0: "),
        "{}",
        told[1]
    );
    let r = f.run(run).await;
    assert_eq!(
        (r.status, r.counters.rounds, r.final_text.as_deref()),
        (RunStatus::Succeeded, 6, Some("All done."))
    );
    assert_eq!(f.finished_events(run).await, 1);
}

#[tokio::test]
async fn a_wait_past_the_approval_ttl_ends_the_run_capped_without_a_model_call() {
    let f = fixture(true).await;
    let (run, _) = f.night_run().await;
    assert_eq!(f.run(run).await.status, RunStatus::Waiting);
    let ids = vec![f.approval(run, "r2.0").await, f.approval(run, "r2.1").await];
    // Nobody decides: the expiry sweep, past the TTL, expires both and enqueues the resume.
    let ttl = f
        .app
        .spec(ProactiveSuggestion::NAME)
        .agent
        .approval_ttl_secs as i64;
    let clock = ManualClock::new(Utc::now() + Duration::seconds(ttl + 60));
    let mut sweeper = ApprovalExpiry::sweeper(&f.app);
    let shared: SharedClock = clock;
    sweeper.clock = shared;
    let report = sweeper.run_once(Some(&ids)).await.unwrap();
    assert_eq!(report.expired, 2, "{report:?}");
    assert!(
        run_waits::resume_job(&f.db.pool, run)
            .await
            .unwrap()
            .is_some()
    );
    let p = Arc::new(ScriptedProvider::new(vec![]));
    f.handle_next(p.clone()).await;
    assert_eq!(p.calls(), 0, "no provider call for a run past its TTL");
    let r = f.run(run).await;
    assert_eq!(
        (r.status, r.stop_reason.as_deref()),
        (RunStatus::Capped, Some("approval_ttl"))
    );
    let text = r.final_text.unwrap_or_default();
    assert!(
        text.contains("past the approval TTL: 2 of 2 expired undecided"),
        "{text}"
    );
    assert_eq!(f.finished_events(run).await, 1);
    let cap_audits = f
        .count(
            "SELECT count(*) FROM audit_events WHERE run_id = $1 AND decision = 'capped' AND tool = 'approval_ttl'",
            run,
        )
        .await;
    assert_eq!(cap_audits, 1);
}

#[tokio::test]
async fn a_waiting_run_whose_approvals_are_deleted_ends_with_its_answer() {
    let f = fixture(true).await;
    let (run, _) = f.night_run().await;
    assert_eq!(f.run(run).await.status, RunStatus::Waiting);
    // Its document erased, say: the approvals go without a decision (migration 0108).
    sqlx::query("DELETE FROM pending_approvals WHERE run_id = $1")
        .bind(run)
        .execute(&f.db.pool)
        .await
        .unwrap();
    assert!(
        run_waits::resume_job(&f.db.pool, run)
            .await
            .unwrap()
            .is_some()
    );
    let p = Arc::new(ScriptedProvider::new(vec![]));
    f.handle_next(p.clone()).await;
    assert_eq!(p.calls(), 0, "nothing to tell the model");
    let r = f.run(run).await;
    assert_eq!(
        (r.status, r.final_text.as_deref()),
        (
            RunStatus::Succeeded,
            Some("Proposed to mark a.txt reviewed and to delete it.")
        )
    );
    assert_eq!(f.finished_events(run).await, 1);
}

#[tokio::test]
async fn a_cancelled_or_dead_resume_job_ends_its_waiting_run() {
    let f = fixture(true).await;
    // Cancelled: `jobs cancel` ends the run with its job.
    let (run, _) = f.night_run().await;
    for call in ["r2.0", "r2.1"] {
        f.decide(f.approval(run, call).await, person(), None).await;
    }
    let resume = run_waits::resume_job(&f.db.pool, run)
        .await
        .unwrap()
        .unwrap();
    let mut conn = f.db.pool.acquire().await.unwrap();
    assert!(
        agentd::jobs::cancel::cancel(&mut conn, resume, Utc::now())
            .await
            .unwrap()
    );
    drop(conn);
    let r = f.run(run).await;
    assert_eq!(
        (r.status, r.stop_reason.as_deref()),
        (RunStatus::Cancelled, Some("cancelled"))
    );
    assert_eq!(f.finished_events(run).await, 1);

    // Dead before it drove the run: the reconciler ends the run, naming the job.
    let other = fixture(true).await;
    let (run, _) = other.night_run().await;
    for call in ["r2.0", "r2.1"] {
        other
            .decide(other.approval(run, call).await, person(), None)
            .await;
    }
    let resume = run_waits::resume_job(&other.db.pool, run)
        .await
        .unwrap()
        .unwrap();
    sqlx::query("UPDATE agentd_jobs SET state = 'dead', last_error = 'x' WHERE id = $1")
        .bind(resume)
        .execute(&other.db.pool)
        .await
        .unwrap();
    let report = agentd::jobs::reconcile::Reconciler::for_app(&other.app)
        .run_once()
        .await
        .unwrap();
    assert_eq!(report.runs_failed, 1, "{report:?}");
    let r = other.run(run).await;
    assert_eq!(r.status, RunStatus::Failed);
    assert!(
        r.error
            .unwrap_or_default()
            .starts_with(&format!("job {resume} is dead"))
    );
    // A run that waits with no resume job yet is left alone.
    let third = fixture(true).await;
    let (run, _) = third.night_run().await;
    let report = agentd::jobs::reconcile::Reconciler::for_app(&third.app)
        .run_once()
        .await
        .unwrap();
    assert_eq!(report, Default::default());
    assert_eq!(third.run(run).await.status, RunStatus::Waiting);
}

#[tokio::test]
async fn a_kind_without_await_decisions_ends_as_before_and_a_decision_resumes_nothing() {
    let f = fixture(false).await;
    let (run, _) = f.night_run().await;
    let r = f.run(run).await;
    assert_eq!(
        (r.status, r.stop_reason.as_deref()),
        (RunStatus::Succeeded, Some("completed"))
    );
    assert!(f.marks(run).await.is_empty());
    f.decide(f.approval(run, "r2.0").await, person(), None)
        .await;
    f.decide(f.approval(run, "r2.1").await, person(), None)
        .await;
    assert_eq!(run_waits::resume_job(&f.db.pool, run).await.unwrap(), None);
    let jobs = f
        .count(
            "SELECT count(*) FROM agentd_jobs WHERE payload->>'org_id' = $1::text",
            f.org,
        )
        .await;
    assert_eq!(jobs, 1, "the night's job only");
    assert_eq!(f.run(run).await.status, RunStatus::Succeeded);
    assert_eq!(f.finished_events(run).await, 1);
}

/// A worker process with the offline model and `jobs_dir`.
struct Node(std::process::Child);

impl Node {
    fn start(db: &TestDb, jobs_dir: &str, latency_ms: u64) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_agentd"))
            .args(["worker", "--no-cron"])
            .env("DATABASE_URL", &db.url)
            .env("AGENTD_HTTP__ADDR", "")
            .env("AGENTD_DATABASE__MAX_CONNECTIONS", "40")
            .env("AGENTD_WORKER__JOBS_DIR", jobs_dir)
            .env("AGENTD_WORKER__LEASE_SECS", "4")
            .env("AGENTD_WORKER__HEARTBEAT_SECS", "1")
            .env("AGENTD_WORKER__RESCUE_INTERVAL_SECS", "1")
            .env("AGENTD_WORKER__POLL_INTERVAL_MS", "200")
            .env("AGENTD_LLM__PROVIDER", "offline")
            .env("AGENTD_LLM__OFFLINE_LATENCY_MS", latency_ms.to_string())
            .env_remove("OPENAI_API_KEY")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start agentd worker");
        Self(child)
    }

    fn kill9(mut self) {
        kill(Pid::from_raw(self.0.id() as i32), Signal::SIGKILL).unwrap();
        let status = self.0.wait().unwrap();
        assert!(!status.success(), "killed");
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_worker_killed_during_the_wait_and_one_killed_during_the_resume_lose_nothing() {
    let db = TestDb::new().await;
    let app = awaiting(common::app(&db, Arc::new(SystemClock) as SharedClock));
    // The shipped job files, the nightly one awaiting decisions.
    let dir = tempfile::tempdir().unwrap();
    for (kind, body) in agentd::catalog::BUILTIN {
        let body = if kind == ProactiveSuggestion::NAME {
            body.replace("await_decisions = false", "await_decisions = true")
        } else {
            body.to_string()
        };
        std::fs::write(dir.path().join(format!("{kind}.toml")), body).unwrap();
    }
    let jobs_dir = dir.path().display().to_string();
    // A tag and two untagged documents: the offline model proposes a tag for each.
    let org = orgs::ensure(&db.pool, "acme").await.unwrap().id;
    let mut conn = db.pool.acquire().await.unwrap();
    agentd::store::tags::create(&mut conn, org, "paperwork", "#4a90d9", None, Utc::now())
        .await
        .unwrap();
    for name in ["a.txt", "b.txt"] {
        documents::insert(
            &mut conn,
            org,
            name,
            Some("Total: 1.00\n"),
            &json!({}),
            Utc::now(),
        )
        .await
        .unwrap();
    }
    drop(conn);
    let q = &app.spec(ProactiveSuggestion::NAME).queue;
    let night_job = queue::enqueue(&db.pool, &nightly_job(q, org, night()))
        .await
        .unwrap()
        .unwrap();

    // 1. The night's run waits; its job ends; the worker is killed while the run waits.
    let node = Node::start(&db, &jobs_dir, 0);
    wait_until(60, "the run waits and its job ended", || async {
        let r = runs::run_for_job(&db.pool, night_job).await.unwrap();
        let job = queue::store::get(&db.pool, night_job).await.unwrap();
        r.is_some_and(|r| r.status == RunStatus::Waiting)
            && job.is_none_or(|j| j.state == JobState::Succeeded)
    })
    .await;
    node.kill9();
    let run = runs::run_for_job(&db.pool, night_job)
        .await
        .unwrap()
        .unwrap();
    let rounds_before = run.counters.rounds;
    let pending: Vec<Uuid> = sqlx::query_scalar(
        "SELECT id FROM pending_approvals WHERE run_id = $1 AND status = 'pending' ORDER BY id",
    )
    .bind(run.id)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(pending.len(), 2, "one tag proposed per document");

    // 2. People decide with no worker up: the resume job waits for one.
    let env = app.tool_env(app.spec(ProactiveSuggestion::NAME));
    for id in &pending {
        approvals::decide(
            &db.pool,
            &app.clock,
            &env,
            *id,
            Some(org),
            person(),
            DecisionExtra::default(),
        )
        .await
        .unwrap();
    }
    let resume = run_waits::resume_job(&db.pool, run.id)
        .await
        .unwrap()
        .expect("a resume job");

    // 3. A slow model: the worker is killed while the resumed run's call is in flight.
    let node = Node::start(&db, &jobs_dir, 4000);
    wait_until(60, "the resumed run checkpointed the decisions", || async {
        let marks: Vec<String> =
            sqlx::query_scalar("SELECT kind FROM agent_loop_marks WHERE run_id = $1")
                .bind(run.id)
                .fetch_all(&db.pool)
                .await
                .unwrap();
        marks.iter().any(|k| k == "decided")
    })
    .await;
    node.kill9();
    assert_eq!(
        runs::get_run(&db.pool, run.id)
            .await
            .unwrap()
            .unwrap()
            .status,
        RunStatus::Running
    );

    // 4. Another worker takes the resume job over once its lease ran out and ends the run.
    let _node = Node::start(&db, &jobs_dir, 0);
    wait_until(60, "the resumed run ended", || async {
        let r = runs::get_run(&db.pool, run.id).await.unwrap().unwrap();
        r.status == RunStatus::Succeeded
    })
    .await;
    let r = runs::get_run(&db.pool, run.id).await.unwrap().unwrap();
    assert_eq!(r.job_id, Some(resume));
    assert_eq!(
        r.counters.rounds,
        rounds_before + 1,
        "one answer after the wait"
    );
    let one = |sql: &'static str| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(sql)
                .bind(run.id)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    assert_eq!(
        one("SELECT count(*) FROM agent_steps WHERE run_id = $1 AND kind = 'llm_response'").await,
        i64::from(r.counters.rounds),
        "every answer checkpointed once"
    );
    for kind in ["waiting", "decided"] {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM agent_loop_marks WHERE run_id = $1 AND kind = $2",
        )
        .bind(run.id)
        .bind(kind)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert_eq!(n, 1, "{kind}");
    }
    assert_eq!(
        one("SELECT count(*) FROM (SELECT call_id FROM audit_events WHERE run_id = $1 AND call_id IS NOT NULL GROUP BY call_id HAVING count(*) > 1) d").await,
        0,
        "no call audited twice"
    );
    assert_eq!(
        one("SELECT count(*) FROM pending_approvals WHERE run_id = $1 AND status = 'executed'")
            .await,
        2
    );
    assert_eq!(
        one("SELECT count(*) FROM agentd_events WHERE type = 'run.finished' AND subject_id = $1")
            .await,
        1
    );
    let steps = one(
        "SELECT count(*) FROM agentd_events WHERE type = 'run.step' AND payload->>'run_id' = $1::text",
    )
    .await;
    let checkpoints = one("SELECT count(*) FROM agent_steps WHERE run_id = $1").await;
    assert_eq!(steps, checkpoints, "one run.step per checkpoint");
}
