//! The nightly `proactive_suggestion` job against a real PostgreSQL: end to end through a worker
//! with the offline provider (signals → de-duplicated suggestions, every tool call audited), and
//! with a scripted provider (writes and deletes wait for approval, `create_suggestion` runs,
//! the per-night cap holds). The cron fan-out itself is covered in tests/it/queue.rs
//! (`fan_out_enqueues_one_job_per_active_org_once`: 2,000 orgs, one job each, once a night).

use crate::common;
use agentd::app::{App, WorkerArgs};
use agentd::clock::{SharedClock, SystemClock};
use agentd::jobs::proactive_suggestion::Proactive;
use agentd::llm::scripted::{ScriptedProvider, Turn};
use agentd::queue::worker::{JobContext, JobHandler};
use agentd::queue::{self, NewJob};
use agentd::store::{documents, orgs, runs};
use chrono::{Duration, NaiveDate, Utc};
use common::{TestDb, wait_until};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

struct Fixture {
    db: TestDb,
    app: App,
    org: Uuid,
}

async fn fixture() -> Fixture {
    let db = TestDb::new().await;
    // Worker claims compare run_at (set by the database) with the clock: use the real one.
    let app = common::app(&db, Arc::new(SystemClock) as SharedClock);
    let org = orgs::ensure(&db.pool, "acme").await.unwrap().id;
    Fixture { db, app, org }
}

impl Fixture {
    async fn doc(&self, name: &str) -> Uuid {
        let mut conn = self.db.pool.acquire().await.unwrap();
        documents::insert(
            &mut conn,
            self.org,
            name,
            Some("Total: 1.00\n"),
            &json!({}),
            Utc::now(),
        )
        .await
        .unwrap()
    }

    async fn set_status(
        &self,
        doc: Uuid,
        status: &str,
        error: Option<&str>,
        updated: chrono::DateTime<Utc>,
    ) {
        sqlx::query("UPDATE documents SET auto_create_status = $2, auto_create_error = $3, updated_at = $4 WHERE id = $1")
            .bind(doc)
            .bind(status)
            .bind(error)
            .bind(updated)
            .execute(&self.db.pool)
            .await
            .unwrap();
    }

    async fn enqueue(&self, night: NaiveDate, key: &str) -> i64 {
        let job = NewJob::new(
            "proactive_suggestion",
            json!({"org_id": self.org, "night": night}),
        )
        .unique_key(key)
        .unique_until_purged();
        queue::enqueue(&self.db.pool, &job)
            .await
            .unwrap()
            .expect("a new job")
    }

    /// Runs one claimed `proactive_suggestion` job through the handler with `p`; the job's run,
    /// if the model was called at all.
    async fn handle_job(
        &self,
        p: Arc<ScriptedProvider>,
        night: NaiveDate,
        key: &str,
    ) -> Option<Uuid> {
        let id = self.enqueue(night, key).await;
        let claimed = queue::store::claim(
            &self.db.pool,
            &["proactive_suggestion".to_string()],
            1,
            "test",
            Utc::now() + Duration::minutes(1),
            Duration::minutes(5),
        )
        .await
        .unwrap();
        assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), vec![id]);
        let mut app = self.app.clone();
        app.provider = p.clone();
        let job = claimed.into_iter().next().unwrap();
        Proactive { app }
            .handle(JobContext {
                job,
                cancel: CancellationToken::new(),
            })
            .await
            .unwrap();
        runs::run_for_job(&self.db.pool, id)
            .await
            .unwrap()
            .map(|r| r.id)
    }

    /// [`Self::handle_job`], which must run the model through every turn of `p`.
    async fn handle(&self, p: Arc<ScriptedProvider>, night: NaiveDate, key: &str) -> Uuid {
        let run = self.handle_job(p.clone(), night, key).await;
        p.assert_complete();
        run.expect("the job's run")
    }

    async fn suggestions(&self, night: NaiveDate) -> Vec<(String, Option<Uuid>, String)> {
        sqlx::query_as("SELECT kind, document_id, status FROM suggestions WHERE org_id = $1 AND night = $2 ORDER BY kind, document_id")
            .bind(self.org)
            .bind(night)
            .fetch_all(&self.db.pool)
            .await
            .unwrap()
    }

    async fn job_state(&self, id: i64) -> queue::JobState {
        queue::store::get(&self.db.pool, id)
            .await
            .unwrap()
            .unwrap()
            .state
    }
}

fn night() -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 3, 1).unwrap()
}

#[tokio::test]
async fn the_nightly_job_writes_deduplicated_suggestions_and_audits_every_call() {
    let f = fixture().await;
    let failed = f.doc("failed.txt").await;
    f.set_status(failed, "failed", Some("provider down"), Utc::now())
        .await;
    let waiting = f.doc("waiting.txt").await;
    f.set_status(waiting, "proposed", None, Utc::now() - Duration::days(5))
        .await;
    let fresh = f.doc("fresh.txt").await;
    f.set_status(fresh, "proposed", None, Utc::now() - Duration::days(1))
        .await;

    let stop = CancellationToken::new();
    let worker = f
        .app
        .start_worker(
            WorkerArgs {
                kinds: vec!["proactive_suggestion".into()],
                concurrency: None,
                cron: false,
                only_org: None,
            },
            stop.clone(),
        )
        .await
        .unwrap();
    let key = format!("proactive_suggestion:{}:{}", f.org, night());
    let first = f.enqueue(night(), &key).await;
    wait_until(60, "the first nightly job succeeded", || async {
        f.job_state(first).await == "succeeded"
    })
    .await;
    let expected = vec![
        (
            "retry_failed".to_string(),
            Some(failed),
            "pending".to_string(),
        ),
        (
            "review_proposal".to_string(),
            Some(waiting),
            "pending".to_string(),
        ),
    ];
    assert_eq!(
        f.suggestions(night()).await,
        expected,
        "one per signal; a 1-day-old proposal is no signal"
    );

    // The same night again: the unique key skips the job; a forced second run (another key)
    // writes nothing new.
    let dup = NewJob::new(
        "proactive_suggestion",
        json!({"org_id": f.org, "night": night()}),
    )
    .unique_key(key)
    .unique_until_purged();
    assert_eq!(queue::enqueue(&f.db.pool, &dup).await.unwrap(), None);
    let second = f.enqueue(night(), "again").await;
    wait_until(60, "the second nightly job succeeded", || async {
        f.job_state(second).await == "succeeded"
    })
    .await;
    stop.cancel();
    worker.join().await;
    assert_eq!(
        f.suggestions(night()).await,
        expected,
        "de-duplicated per org, kind, subject and night"
    );

    for (job, duplicate) in [(first, false), (second, true)] {
        let run = runs::run_for_job(&f.db.pool, job)
            .await
            .unwrap()
            .expect("a run per job");
        assert_eq!(
            (
                run.kind.as_str(),
                run.provider.as_str(),
                run.status.as_str()
            ),
            ("proactive_suggestion", "offline", "succeeded")
        );
        assert_eq!(run.subject, night().to_string());
        let steps = runs::steps(&f.db.pool, run.id).await.unwrap();
        let results: Vec<_> = steps.iter().filter(|s| s.kind == "tool_result").collect();
        let audit = runs::audit_for_run(&f.db.pool, run.id).await.unwrap();
        let call_audit: Vec<_> = audit.iter().filter(|a| a.call_id.is_some()).collect();
        assert_eq!(
            results.len(),
            call_audit.len(),
            "one audit row per tool call"
        );
        assert_eq!(
            results.len(),
            3,
            "org_overview, then one create_suggestion per signal"
        );
        for (s, a) in results.iter().zip(&call_audit) {
            assert_eq!(s.call_id, a.call_id);
            assert_eq!(
                (a.decision.as_str(), a.is_error, a.actor.as_str()),
                ("auto_approved", false, "agent:proactive_suggestion")
            );
        }
        let created: Vec<&Value> = call_audit
            .iter()
            .filter(|a| a.tool == "create_suggestion")
            .map(|a| a.outcome.as_ref().unwrap())
            .collect();
        assert_eq!(created.len(), 2);
        assert!(
            created.iter().all(|o| o["duplicate"] == json!(duplicate)),
            "{created:?}"
        );
    }
    let approvals: i64 = sqlx::query_scalar("SELECT count(*) FROM pending_approvals")
        .fetch_one(&f.db.pool)
        .await
        .unwrap();
    assert_eq!(approvals, 0, "suggestions alone need no approval");
}

#[tokio::test]
async fn writes_and_deletes_wait_for_approval_while_suggestions_run_under_the_cap() {
    let f = fixture().await;
    let mut docs = Vec::new();
    for i in 0..12 {
        docs.push(f.doc(&format!("doc{i}.txt")).await);
    }
    // A signal, so the nightly job runs the model (`only_with_signals`).
    f.set_status(docs[11], "failed", Some("provider down"), Utc::now())
        .await;
    let cap = f
        .app
        .spec("proactive_suggestion")
        .agent
        .max_suggestions
        .expect("the job file sets a cap");
    assert_eq!(cap, 10);
    let suggestion = |i: usize| {
        (
            format!("s{i}"),
            "create_suggestion".to_string(),
            json!({"kind": "other", "title": format!("Look at doc{i}"), "message": "Worth a look.", "document_id": docs[i]}).to_string(),
        )
    };
    let p = Arc::new(ScriptedProvider::new(vec![
        Turn::tool("a", "org_overview", json!({})),
        Turn::tool(
            "b",
            "update_document",
            json!({"document_id": docs[0], "metadata": {"reviewed": true}}),
        ),
        Turn::tool("c", "delete_document", json!({"document_id": docs[1]})),
        Turn::Tools((0..=cap as usize).map(suggestion).collect()),
        Turn::text("done"),
    ]));
    let run = f.handle(p, night(), "n1").await;

    // The write and the delete are pending approvals of this run; neither was executed.
    let pending: Vec<(String, String, Option<Uuid>)> =
        sqlx::query_as("SELECT tool, status, run_id FROM pending_approvals ORDER BY tool")
            .fetch_all(&f.db.pool)
            .await
            .unwrap();
    assert_eq!(
        pending,
        vec![
            ("delete_document".into(), "pending".into(), Some(run)),
            ("update_document".into(), "pending".into(), Some(run))
        ]
    );
    let meta: Value = sqlx::query_scalar("SELECT metadata FROM documents WHERE id = $1")
        .bind(docs[0])
        .fetch_one(&f.db.pool)
        .await
        .unwrap();
    assert_eq!(meta, json!({}));
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM documents")
        .fetch_one(&f.db.pool)
        .await
        .unwrap();
    assert_eq!(n, 12, "the delete waits for a person");

    // create_suggestion ran (auto) until the night's cap; the one past it was refused.
    let written = f.suggestions(night()).await;
    assert_eq!(written.len(), cap as usize);
    assert!(
        written
            .iter()
            .all(|(k, _, s)| k == "other" && s == "pending")
    );
    let audit = runs::audit_for_run(&f.db.pool, run).await.unwrap();
    let decisions: Vec<(&str, &str, bool)> = audit
        .iter()
        .map(|a| (a.tool.as_str(), a.decision.as_str(), a.is_error))
        .collect();
    assert_eq!(
        decisions[..3],
        [
            ("org_overview", "auto_approved", false),
            ("update_document", "proposed", false),
            ("delete_document", "proposed", false)
        ]
    );
    let sugg = &audit[3..];
    assert_eq!(sugg.len(), cap as usize + 1);
    assert!(
        sugg[..cap as usize]
            .iter()
            .all(|a| a.decision == "auto_approved" && !a.is_error)
    );
    let last = sugg.last().unwrap();
    assert!(
        last.is_error
            && last
                .outcome
                .as_ref()
                .unwrap()
                .to_string()
                .contains("cap reached"),
        "{last:?}"
    );

    // The cap is per org and night, across runs: a second job that night finds the cap
    // reached in the overview and calls no model at all (`only_with_signals`), and another
    // night starts afresh.
    let again = Arc::new(ScriptedProvider::new(vec![
        Turn::Tools(vec![suggestion(11)]),
        Turn::text("done"),
    ]));
    assert_eq!(f.handle_job(again.clone(), night(), "n1-again").await, None);
    assert_eq!(again.remaining(), 2, "no model call");
    assert_eq!(f.suggestions(night()).await.len(), cap as usize);
    let next = night().succ_opt().unwrap();
    let later = Arc::new(ScriptedProvider::new(vec![
        Turn::Tools(vec![suggestion(11)]),
        Turn::text("done"),
    ]));
    f.handle(later, next, "n2").await;
    assert_eq!(
        f.suggestions(next).await,
        vec![("other".to_string(), Some(docs[11]), "pending".to_string())]
    );
}

/// Issue 30, item 2: the nightly cost follows the orgs with work. Of 60 orgs, each with a
/// document, 3 have a failed auto-create (a signal); all 60 get their nightly job, and only those
/// 3 run the model (the others end at the overview, computed in SQL).
#[tokio::test]
async fn the_nightly_job_runs_the_model_only_for_orgs_with_something_to_do() {
    let f = fixture().await;
    assert!(
        f.app.spec("proactive_suggestion").agent.only_with_signals,
        "as shipped"
    );
    let mut with_work = Vec::new();
    let mut jobs = Vec::new();
    for i in 0..60 {
        let org = orgs::ensure(&f.db.pool, &format!("org{i:02}"))
            .await
            .unwrap()
            .id;
        let mut conn = f.db.pool.acquire().await.unwrap();
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
        if i % 20 == 7 {
            sqlx::query("UPDATE documents SET auto_create_status = 'failed', auto_create_error = 'provider down' WHERE id = $1")
                .bind(doc)
                .execute(&f.db.pool)
                .await
                .unwrap();
            with_work.push(org);
        }
        jobs.push(NewJob::new(
            "proactive_suggestion",
            json!({"org_id": org, "night": night()}),
        ));
    }
    queue::enqueue_many(&f.db.pool, &jobs).await.unwrap();
    let stop = CancellationToken::new();
    let worker = f
        .app
        .start_worker(
            WorkerArgs {
                kinds: vec!["proactive_suggestion".into()],
                concurrency: Some(8),
                cron: false,
                only_org: None,
            },
            stop.clone(),
        )
        .await
        .unwrap();
    wait_until(120, "every org's nightly job succeeded", || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM agentd_jobs WHERE kind = 'proactive_suggestion' AND state = 'succeeded'",
        )
        .fetch_one(&f.db.pool)
        .await
        .unwrap();
        n == 60
    })
    .await;
    stop.cancel();
    worker.join().await;
    let mut ran: Vec<Uuid> = sqlx::query_scalar("SELECT DISTINCT org_id FROM agent_runs")
        .fetch_all(&f.db.pool)
        .await
        .unwrap();
    ran.sort();
    with_work.sort();
    assert_eq!(
        ran, with_work,
        "model runs for the three orgs with a signal only"
    );
    let suggested: Vec<Uuid> =
        sqlx::query_scalar("SELECT DISTINCT org_id FROM suggestions ORDER BY org_id")
            .fetch_all(&f.db.pool)
            .await
            .unwrap();
    assert_eq!(
        suggested, with_work,
        "each of them got its retry_failed suggestion"
    );
}

/// Issue 30, "done when": the nightly cost follows the orgs with work at scale. 10,000 active
/// orgs, 100 of them with a failed auto-create (a signal); the cron fan-out enqueues a nightly
/// job for every org in one statement, a worker runs them all, and the scripted provider is
/// called exactly 100 times — one model run per org with a signal, none for the 9,900 others.
#[tokio::test]
async fn ten_thousand_orgs_with_a_hundred_signals_make_a_hundred_model_runs() {
    let f = fixture().await;
    // The fixture's org and 9,999 more, all due tonight whatever the hour (nightly_hour 0).
    sqlx::query("INSERT INTO orgs (id, name) SELECT gen_random_uuid(), 'bulk-' || lpad(g::text, 5, '0') FROM generate_series(1, 9999) g")
        .execute(&f.db.pool)
        .await
        .unwrap();
    sqlx::query("UPDATE orgs SET nightly_hour = 0")
        .execute(&f.db.pool)
        .await
        .unwrap();
    // A failed auto-create in 100 of them (every 100th); a plain document in 100 others (no
    // signal).
    let mut with_work: Vec<Uuid> = sqlx::query_scalar(
        "INSERT INTO documents (id, org_id, name, text, metadata, created_at, updated_at,
                                auto_create_status, auto_create_error)
         SELECT gen_random_uuid(), o.id, 'a.txt', 'Total: 1.00', '{}', now(), now(),
                'failed', 'provider down'
           FROM orgs o WHERE o.name LIKE 'bulk-%' AND substr(o.name, 6)::int % 100 = 1
         RETURNING org_id",
    )
    .fetch_all(&f.db.pool)
    .await
    .unwrap();
    assert_eq!(with_work.len(), 100);
    sqlx::query(
        "INSERT INTO documents (id, org_id, name, text, metadata, created_at, updated_at)
         SELECT gen_random_uuid(), o.id, 'b.txt', 'Total: 2.00', '{}', now(), now()
           FROM orgs o WHERE o.name LIKE 'bulk-%' AND substr(o.name, 6)::int % 100 = 50",
    )
    .execute(&f.db.pool)
    .await
    .unwrap();
    let entry = agentd::queue::cron::CronEntry {
        kind: "proactive_suggestion".into(),
        schedule: "0 */15 * * * *".parse().unwrap(),
        fan_out: Some(agentd::store::nightly::fan_out(
            agentd::catalog::FanOut::Orgs,
            0,
        )),
        priority: 0,
        max_attempts: 3,
    };
    let inserted = agentd::queue::cron::enqueue_tick(&f.db.pool, &entry, Utc::now())
        .await
        .unwrap();
    assert_eq!(inserted, 10_000, "one nightly job per org");
    // What a nightly run owes while its org shows a signal (issue 28: the run's goal): the
    // overview, then a suggestion about the failed document it names, then a last word. The
    // 100 runs interleave, so each answer is computed from the request it answers.
    let p = Arc::new(ScriptedProvider::new(
        (0..300).map(|_| Turn::Dynamic(nightly_answer)).collect(),
    ));
    let mut app = f.app.clone();
    app.provider = p.clone();
    let stop = CancellationToken::new();
    let worker = app
        .start_worker(
            WorkerArgs::serving(&["proactive_suggestion"], Some(16)),
            stop.clone(),
        )
        .await
        .unwrap();
    wait_until(600, "every org's nightly job finished", || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM agentd_jobs WHERE kind = 'proactive_suggestion' AND state IN ('succeeded', 'dead')",
        )
        .fetch_one(&f.db.pool)
        .await
        .unwrap();
        n == 10_000
    })
    .await;
    stop.cancel();
    worker.join().await;
    let succeeded: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM agentd_jobs WHERE kind = 'proactive_suggestion' AND state = 'succeeded'",
    )
    .fetch_one(&f.db.pool)
    .await
    .unwrap();
    assert_eq!(succeeded, 10_000);
    assert_eq!(
        p.calls(),
        300,
        "three model calls (overview, suggestion, last word) per org with a signal"
    );
    let suggested: i64 = sqlx::query_scalar("SELECT count(DISTINCT org_id) FROM suggestions")
        .fetch_one(&f.db.pool)
        .await
        .unwrap();
    assert_eq!(suggested, 100, "a suggestion in each org with a signal");
    p.assert_complete();
    let mut ran: Vec<Uuid> = sqlx::query_scalar("SELECT org_id FROM agent_runs ORDER BY org_id")
        .fetch_all(&f.db.pool)
        .await
        .unwrap();
    ran.sort();
    with_work.sort();
    assert_eq!(
        ran, with_work,
        "one model run for each of the 100, none else"
    );
}

/// One answer of a nightly run, from the tool results it has been given: none yet → the
/// overview; the overview → a suggestion to retry the failed document it names; then a word.
fn nightly_answer(
    req: &agentd::llm::CompletionRequest,
) -> Result<agentd::llm::CompletionResponse, agentd::llm::LlmError> {
    use agentd::llm::Block;
    let results: Vec<&str> = req
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            Block::ToolResult { content, .. } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    let uuid =
        regex::Regex::new(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}").unwrap();
    let turn = match results.as_slice() {
        [] => Turn::tool("a", "org_overview", json!({})),
        [overview] => {
            let doc = uuid
                .find(overview)
                .map(|m| m.as_str().to_string())
                .unwrap_or_default();
            Turn::tool(
                "b",
                "create_suggestion",
                json!({"kind": "retry_failed", "title": "Retry a.txt",
                       "message": "Its auto-create failed.", "document_id": doc}),
            )
        }
        _ => Turn::text("Wrote one suggestion."),
    };
    turn.answer(
        req,
        agentd::llm::Usage {
            input_tokens: 100,
            output_tokens: 20,
            ..Default::default()
        },
    )
}

/// Under constrained calls (issue 28), a nightly run's suggestion is asked for as one of the
/// overview's signals with its kind and one of its documents: the guided first round reads the
/// overview, the next round's `response_format` offers `create_suggestion` as `retry_failed`
/// about a failed document or `review_proposal` about the waiting proposal, nothing else, and
/// the suggestion written from that answer is grounded.
#[tokio::test]
async fn a_constrained_suggestion_is_one_of_the_overviews_signals_with_its_kind() {
    let db = TestDb::new().await;
    let mut config = common::test_config();
    config.llm.constrained_calls = agentd::config::Constrained::On;
    let app = common::app_with(&db, Arc::new(SystemClock) as SharedClock, config);
    let org = orgs::ensure(&db.pool, "acme").await.unwrap().id;
    let f = Fixture { db, app, org };
    let failed = [f.doc("a.txt").await, f.doc("b.txt").await];
    for d in failed {
        f.set_status(d, "failed", Some("provider down"), Utc::now())
            .await;
    }
    let waiting = f.doc("c.txt").await;
    f.set_status(waiting, "proposed", None, Utc::now() - Duration::days(5))
        .await;
    let p = Arc::new(ScriptedProvider::new(vec![
        Turn::tool("a", "org_overview", json!({})),
        Turn::Dynamic(|req| {
            let rf = req.response_format.as_ref().expect("a constrained call");
            let schema = &rf["json_schema"]["schema"];
            let calls: Vec<&Value> = match schema["anyOf"].as_array() {
                Some(calls) => calls.iter().collect(),
                None => vec![schema],
            };
            let suggestion = calls
                .iter()
                .find(|c| c["properties"]["name"]["const"] == "create_suggestion")
                .unwrap_or_else(|| panic!("create_suggestion offered in {rf}"));
            let variants = suggestion["properties"]["arguments"]["anyOf"]
                .as_array()
                .unwrap_or_else(|| panic!("one alternative per signal in {suggestion}"));
            let offered: Vec<(String, Vec<String>)> = variants
                .iter()
                .map(|v| {
                    let kind = v["properties"]["kind"]["enum"][0].as_str().unwrap_or("");
                    let ids = v["properties"]["document_id"]["enum"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(Value::as_str)
                                .map(String::from)
                                .collect()
                        })
                        .unwrap_or_default();
                    (kind.to_string(), ids)
                })
                .collect();
            let kinds: Vec<&str> = offered.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(kinds, ["review_proposal", "retry_failed"], "{offered:?}");
            assert_eq!(offered[0].1.len(), 1, "{offered:?}");
            assert_eq!(offered[1].1.len(), 2, "{offered:?}");
            for v in variants {
                assert_eq!(v["required"], json!(["kind", "document_id"]));
            }
            Turn::tool(
                "b",
                "create_suggestion",
                json!({"kind": "retry_failed", "title": "Retry b.txt",
                       "message": "Its auto-create failed.", "document_id": offered[1].1[1]}),
            )
            .answer(
                req,
                agentd::llm::Usage {
                    input_tokens: 100,
                    output_tokens: 20,
                    ..Default::default()
                },
            )
        }),
        Turn::text("Wrote one suggestion."),
    ]));
    f.handle(p, night(), "n1").await;
    let written = f.suggestions(night()).await;
    assert_eq!(written.len(), 1, "{written:?}");
    let (kind, doc, _) = &written[0];
    assert_eq!(kind, "retry_failed");
    assert!(
        doc.is_some_and(|d| failed.contains(&d)),
        "about a failed document: {written:?}"
    );
}

/// Issue 48, item 5: a signal's suggestion says what the signal is and names its documents,
/// whatever the model wrote (a model's restatement is dropped, what it adds is kept); a
/// suggestion no signal names keeps the model's words, which it must give — asked without
/// them, the tool says so and the model's corrected call is written.
#[tokio::test]
async fn a_signals_suggestion_is_worded_from_the_signal_and_other_needs_the_models_words() {
    let f = fixture().await;
    let failed = [f.doc("scan-01.png").await, f.doc("scan-02.png").await];
    for d in failed {
        f.set_status(
            d,
            "failed",
            Some("provider: HTTP 500 from http://10.0.0.5"),
            Utc::now(),
        )
        .await;
    }
    let waiting = f.doc("lease.pdf").await;
    f.set_status(waiting, "proposed", None, Utc::now() - Duration::days(5))
        .await;
    let p = Arc::new(ScriptedProvider::new(vec![
        Turn::tool("a", "org_overview", json!({})),
        // No words at all: the signal's.
        Turn::tool("b", "create_suggestion", json!({"kind": "retry_failed"})),
        // A restatement, and a title the signal replaces.
        Turn::tool(
            "c",
            "create_suggestion",
            json!({"kind": "review_proposal", "document_id": waiting,
                   "title": "Extracting relevant documents from the most useful action for the night.",
                   "message": "The proposal for lease.pdf waited 5 days."}),
        ),
        // Kind other without words: a tool error naming what is missing.
        Turn::tool("d", "create_suggestion", json!({"kind": "other"})),
        Turn::tool(
            "e",
            "create_suggestion",
            json!({"kind": "other", "title": "Add a tag for leases",
                   "message": "Several documents are leases; a Leases tag would group them."}),
        ),
        Turn::text("Wrote three suggestions."),
    ]));
    let run = f.handle(p, night(), "words").await;
    let written: Vec<(String, Option<Uuid>, String, String)> = sqlx::query_as(
        "SELECT kind, document_id, title, message FROM suggestions WHERE org_id = $1 ORDER BY kind",
    )
    .bind(f.org)
    .fetch_all(&f.db.pool)
    .await
    .unwrap();
    assert_eq!(written.len(), 3, "{written:?}");
    assert_eq!(
        written[0],
        (
            "other".into(),
            None,
            "Add a tag for leases".into(),
            "Several documents are leases; a Leases tag would group them.".into()
        )
    );
    assert_eq!(written[1].0, "retry_failed");
    // In the overview's order.
    assert!(
        [
            "2 documents failed to auto-create: “scan-01.png” and “scan-02.png”",
            "2 documents failed to auto-create: “scan-02.png” and “scan-01.png”"
        ]
        .contains(&written[1].2.as_str()),
        "{}",
        written[1].2
    );
    assert!(
        !written[1].3.contains("HTTP 500") && !written[1].3.contains("10.0.0.5"),
        "no error text: {}",
        written[1].3
    );
    assert_eq!(
        (
            written[2].0.as_str(),
            written[2].1,
            written[2].2.as_str(),
            written[2].3.as_str()
        ),
        (
            "review_proposal",
            Some(waiting),
            "The proposal for “lease.pdf” has waited 5 days",
            "The proposal for “lease.pdf” has waited 5 days for a review."
        )
    );
    let refused: String = sqlx::query_scalar(
        "SELECT outcome::text FROM audit_events WHERE run_id = $1 AND tool = 'create_suggestion'
           AND is_error",
    )
    .bind(run)
    .fetch_one(&f.db.pool)
    .await
    .unwrap();
    assert!(
        refused.contains("title and message are needed"),
        "{refused}"
    );
}
