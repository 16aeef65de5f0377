//! The events of issue 15 that are not about approvals, against a real PostgreSQL: each is
//! written exactly once, in the transaction of its cause (a rolled-back cause leaves none; a
//! repeated write of the same state, as by a reclaimed attempt, adds none): `proposal.ready`,
//! `auto_create.failed` (also from a plain-SQL writer, a cancelled job), `run.failed`,
//! `suggestion.created`, and `budget.threshold` at 80 % and 100 %, once per month; and issue
//! 49's run events: `run.started`, `run.step` (written with its checkpoint, no text),
//! `run.finished`, `extraction.flagged`, `job.dead` and `suggestion.dismissed`.

use crate::common;
use agentd::store::auto_create::{self as ac, Proposed};
use agentd::store::runs::{self, NewRun};
use agentd::store::states::AutoCreateStatus;
use agentd::store::suggestions::{self, Created, SuggestionFields};
use agentd::store::{documents, orgs};
use chrono::{DateTime, Duration, SubsecRound, TimeZone, Utc};
use common::TestDb;
use serde_json::{Value, json};
use uuid::Uuid;

fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

async fn events(db: &TestDb, kind: &str) -> Vec<(Option<Uuid>, Value)> {
    sqlx::query_as("SELECT subject_id, payload FROM agentd_events WHERE type = $1 ORDER BY id")
        .bind(kind)
        .fetch_all(&db.pool)
        .await
        .unwrap()
}

async fn setup() -> (TestDb, Uuid, Uuid) {
    let db = TestDb::new().await;
    let org = orgs::ensure(&db.pool, "acme").await.unwrap().id;
    let mut conn = db.pool.acquire().await.unwrap();
    let doc = documents::insert(&mut conn, org, "a.txt", Some("x"), &json!({}), now())
        .await
        .unwrap();
    (db, org, doc)
}

async fn run(db: &TestDb, org: Uuid, subject: &str) -> Uuid {
    let mut conn = db.pool.acquire().await.unwrap();
    let id = Uuid::now_v7();
    runs::create_run(
        &mut conn,
        &NewRun {
            id,
            org_id: org,
            kind: "auto_create",
            subject,
            job_id: None,
            provider: "scripted",
            model: "m",
            started_at: now(),
        },
    )
    .await
    .unwrap();
    id
}

#[tokio::test]
async fn proposal_ready_and_auto_create_failed_once_per_transition_in_its_transaction() {
    let (db, org, doc) = setup().await;
    let r = run(&db, org, &doc.to_string()).await;
    let arts = Proposed {
        proposed_schema_id: Some(Uuid::now_v7()),
        proposed_schema_version: Some(1),
        ..Default::default()
    };
    // Rolled back: no event.
    let mut tx = db.pool.begin().await.unwrap();
    ac::set_proposed(&mut tx, org, doc, r, &arts, now())
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(events(&db, "proposal.ready").await.is_empty());
    // Committed: one; written again (a reclaimed attempt): still one.
    for _ in 0..2 {
        let mut tx = db.pool.begin().await.unwrap();
        ac::set_proposed(&mut tx, org, doc, r, &arts, now())
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    let ev = events(&db, "proposal.ready").await;
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].0, Some(doc));
    assert_eq!(ev[0].1["run_id"], json!(r));
    assert_eq!(ev[0].1["schema_id"], json!(arts.proposed_schema_id));

    // Failed: rolled back → none; committed twice → one.
    let mut tx = db.pool.begin().await.unwrap();
    ac::set_status(
        &mut *tx,
        org,
        doc,
        AutoCreateStatus::Failed,
        Some(r),
        Some("boom"),
        now(),
    )
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    assert!(events(&db, "auto_create.failed").await.is_empty());
    for _ in 0..2 {
        ac::set_status(
            &db.pool,
            org,
            doc,
            AutoCreateStatus::Failed,
            Some(r),
            Some("boom"),
            now(),
        )
        .await
        .unwrap();
    }
    let ev = events(&db, "auto_create.failed").await;
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].1, json!({"document_id": doc, "run_id": r}));
    // No error text in the payload (it may quote the document).
    assert!(!ev[0].1.to_string().contains("boom"));

    // Re-enqueued, failing again with the same run id on the row: a second event.
    ac::set_status(
        &db.pool,
        org,
        doc,
        AutoCreateStatus::Queued,
        None,
        None,
        now(),
    )
    .await
    .unwrap();
    ac::set_status(
        &db.pool,
        org,
        doc,
        AutoCreateStatus::Failed,
        None,
        Some("again"),
        now(),
    )
    .await
    .unwrap();
    assert_eq!(events(&db, "auto_create.failed").await.len(), 2);
}

#[tokio::test]
async fn a_cancelled_auto_create_job_writes_auto_create_failed_from_plain_sql() {
    let (db, org, doc) = setup().await;
    let job = agentd::queue::enqueue(
        &db.pool,
        &agentd::queue::NewJob::new("auto_create", json!({"org_id": org, "document_id": doc})),
    )
    .await
    .unwrap()
    .unwrap();
    ac::set_status(
        &db.pool,
        org,
        doc,
        AutoCreateStatus::Queued,
        None,
        None,
        now(),
    )
    .await
    .unwrap();
    assert!(
        agentd::jobs::cancel::cancel(&mut db.pool.acquire().await.unwrap(), job, now())
            .await
            .unwrap()
    );
    let ev = events(&db, "auto_create.failed").await;
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].0, Some(doc));
}

#[tokio::test]
async fn run_failed_once_in_its_transaction() {
    let (db, org, doc) = setup().await;
    let r = run(&db, org, &doc.to_string()).await;
    let mut tx = db.pool.begin().await.unwrap();
    assert!(
        runs::finish_run(
            &mut *tx,
            r,
            runs::RunStatus::Failed,
            Some("error"),
            None,
            Some("x"),
            now()
        )
        .await
        .unwrap()
    );
    tx.rollback().await.unwrap();
    assert!(events(&db, "run.failed").await.is_empty());
    for _ in 0..2 {
        runs::finish_run(
            &db.pool,
            r,
            runs::RunStatus::Failed,
            Some("error"),
            None,
            Some("x"),
            now(),
        )
        .await
        .unwrap();
    }
    let ev = events(&db, "run.failed").await;
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].0, Some(r));
    assert_eq!(ev[0].1["kind"], "auto_create");
    assert_eq!(ev[0].1["stop_reason"], "error");
    // A run that succeeds writes none.
    let ok = run(&db, org, "other").await;
    runs::finish_run(
        &db.pool,
        ok,
        runs::RunStatus::Succeeded,
        None,
        Some("done"),
        None,
        now(),
    )
    .await
    .unwrap();
    assert_eq!(events(&db, "run.failed").await.len(), 1);
}

#[tokio::test]
async fn suggestion_created_once_in_its_transaction() {
    let (db, org, doc) = setup().await;
    let night = now().date_naive();
    let s = SuggestionFields {
        kind: "missing_tag".into(),
        subject: doc.to_string(),
        night,
        title: "Tag it".into(),
        message: "Personal text that must not be in the event".into(),
        document_id: Some(doc),
        proposed_action: None,
    };
    let mut tx = db.pool.begin().await.unwrap();
    suggestions::create(&mut tx, org, &s, None, None, now())
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(events(&db, "suggestion.created").await.is_empty());
    let mut ids = Vec::new();
    for _ in 0..2 {
        let mut tx = db.pool.begin().await.unwrap();
        ids.push(
            suggestions::create(&mut tx, org, &s, None, None, now())
                .await
                .unwrap(),
        );
        tx.commit().await.unwrap();
    }
    let Created::New(id) = ids[0] else {
        panic!("{ids:?}")
    };
    assert_eq!(ids[1], Created::Duplicate(id));
    let ev = events(&db, "suggestion.created").await;
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].0, Some(id));
    assert_eq!(ev[0].1["document_id"], json!(doc));
    assert!(!ev[0].1.to_string().contains("Personal"));
}

#[tokio::test]
async fn budget_threshold_at_80_and_100_percent_once_per_month() {
    let (db, org, _) = setup().await;
    let nov = Utc.with_ymd_and_hms(2026, 11, 10, 12, 0, 0).unwrap();
    runs::set_budget(&db.pool, org, 100, nov).await.unwrap();
    let charge = |tokens: i64, at: DateTime<Utc>, commit: bool| {
        let pool = db.pool.clone();
        async move {
            let mut tx = pool.begin().await.unwrap();
            let r = runs::charge_budget(&mut tx, org, tokens, at).await.unwrap();
            if commit {
                tx.commit().await.unwrap();
            } else {
                tx.rollback().await.unwrap();
            }
            r
        }
    };
    let dbr = &db;
    let pcts = move || async move {
        events(dbr, "budget.threshold")
            .await
            .iter()
            .map(|(_, p)| {
                (
                    p["threshold_percent"].as_i64().unwrap(),
                    p["period_start"].as_str().unwrap().to_string(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(charge(79, nov, true).await, None);
    assert!(pcts().await.is_empty());
    // Crossing 100 % in a rolled-back transaction: nothing.
    assert_eq!(charge(30, nov, false).await, Some((109, 100)));
    assert!(pcts().await.is_empty());
    assert_eq!(charge(1, nov, true).await, Some((80, 100)));
    assert_eq!(charge(5, nov, true).await, None);
    assert_eq!(pcts().await, vec![(80, "2026-11-01".to_string())]);
    charge(20, nov, true).await;
    charge(20, nov + Duration::days(1), true).await;
    assert_eq!(
        pcts().await,
        vec![(80, "2026-11-01".into()), (100, "2026-11-01".into())]
    );
    // A new month: both again, in one charge that jumps past 100 %.
    let dec = Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 1).unwrap();
    assert_eq!(charge(150, dec, true).await, Some((150, 100)));
    assert_eq!(
        pcts().await,
        vec![
            (80, "2026-11-01".into()),
            (100, "2026-11-01".into()),
            (80, "2026-12-01".into()),
            (100, "2026-12-01".into())
        ]
    );
}

/// A job of `org` about `doc`, as a worker holds it (running, attempt 1).
async fn running_job(db: &TestDb, org: Uuid, doc: Uuid, kind: &str) -> i64 {
    let job = agentd::queue::enqueue(
        &db.pool,
        &agentd::queue::NewJob::new(kind, json!({"org_id": org, "document_id": doc})),
    )
    .await
    .unwrap()
    .unwrap();
    sqlx::query("UPDATE agentd_jobs SET state = 'running', attempt = 1 WHERE id = $1")
        .bind(job)
        .execute(&db.pool)
        .await
        .unwrap();
    job
}

fn new_run<'a>(org: Uuid, subject: &'a str, job: Option<i64>) -> NewRun<'a> {
    NewRun {
        id: Uuid::now_v7(),
        org_id: org,
        kind: "auto_create",
        subject,
        job_id: job,
        provider: "scripted",
        model: "m",
        started_at: now(),
    }
}

#[tokio::test]
async fn run_started_once_per_run_and_run_finished_once_when_it_ends() {
    let (db, org, doc) = setup().await;
    let subject = doc.to_string();
    let job = running_job(&db, org, doc, "auto_create").await;
    // Rolled back: no run, no event.
    let mut tx = db.pool.begin().await.unwrap();
    runs::create_run(&mut tx, &new_run(org, &subject, Some(job)))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(events(&db, "run.started").await.is_empty());
    // Opened, then opened again by a reclaimed attempt of the same job (the same run): one.
    let mut conn = db.pool.acquire().await.unwrap();
    let first = runs::create_run(&mut conn, &new_run(org, &subject, Some(job)))
        .await
        .unwrap();
    let again = runs::create_run(&mut conn, &new_run(org, &subject, Some(job)))
        .await
        .unwrap();
    drop(conn);
    assert_eq!(first.id, again.id);
    let ev = events(&db, "run.started").await;
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].0, Some(first.id));
    assert_eq!(
        ev[0].1,
        json!({"run_id": first.id, "kind": "auto_create", "job_id": job,
               "document_id": doc, "model": "m"})
    );

    // Finished: rolled back → none; committed twice, then failed by a late writer → one.
    let mut tx = db.pool.begin().await.unwrap();
    runs::finish_run(
        &mut *tx,
        first.id,
        runs::RunStatus::Succeeded,
        Some("goal"),
        Some("done"),
        None,
        now(),
    )
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    assert!(events(&db, "run.finished").await.is_empty());
    for _ in 0..2 {
        runs::finish_run(
            &db.pool,
            first.id,
            runs::RunStatus::Succeeded,
            Some("goal"),
            Some("the final text stays out"),
            None,
            now(),
        )
        .await
        .unwrap();
    }
    let ev = events(&db, "run.finished").await;
    assert_eq!(ev.len(), 1, "{ev:?}");
    let p = &ev[0].1;
    assert_eq!(ev[0].0, Some(first.id));
    assert_eq!(
        (&p["status"], &p["stop_reason"], &p["document_id"]),
        (&json!("succeeded"), &json!("goal"), &json!(doc))
    );
    assert_eq!(
        (&p["input_tokens"], &p["output_tokens"]),
        (&json!(0), &json!(0))
    );
    assert_eq!(p["cost_usd"].as_f64(), Some(0.0), "{p}");
    assert!(!p.to_string().contains("final text"), "{p}");

    // A failed run: `run.failed` and `run.finished`, each once; a run that is not a
    // document's has no document id.
    let other = run(&db, org, "2026-12-01").await;
    for _ in 0..2 {
        runs::finish_run(
            &db.pool,
            other,
            runs::RunStatus::Failed,
            Some("error"),
            None,
            Some("boom"),
            now(),
        )
        .await
        .unwrap();
    }
    let finished = events(&db, "run.finished").await;
    assert_eq!(finished.len(), 2, "{finished:?}");
    assert_eq!(finished[1].1["status"], "failed");
    assert_eq!(finished[1].1["document_id"], Value::Null);
    assert!(!finished[1].1.to_string().contains("boom"));
    assert_eq!(events(&db, "run.failed").await.len(), 1);
}

#[tokio::test]
async fn run_step_is_written_with_its_checkpoint_once_and_holds_no_text() {
    use agentd::store::agent_loop::{self, Counters, Flush, Settle};
    use agentd::store::audit::{AuditCategory, AuditDecision, NewAudit};
    use agentd::store::runs::{StepKind, StepRow};
    let (db, org, doc) = setup().await;
    let r = run(&db, org, &doc.to_string()).await;
    let secret = "Jane Doe, IBAN DE89370400440532013000";
    let answer = json!({"text": secret, "tool_calls": []});
    let round = |seq: i32| StepRow::written(seq, StepKind::LlmResponse, None, &answer, now());
    let add = Counters {
        rounds: 1,
        input_tokens: 120,
        output_tokens: 7,
        cost_nano_usd: Some(0),
        ..Default::default()
    };
    let settle = Settle {
        org_id: org,
        reservation: None,
        tokens: 127,
        now: now(),
    };
    // A model round: rolled back → none; committed → one with its tokens.
    let mut tx = db.pool.begin().await.unwrap();
    agent_loop::checkpoint_settled(&mut tx, r, &round(0), add, settle, Flush::Durable)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(events(&db, "run.step").await.is_empty());
    let mut conn = db.pool.acquire().await.unwrap();
    agent_loop::checkpoint_settled(&mut conn, r, &round(0), add, settle, Flush::Durable)
        .await
        .unwrap();
    // The same checkpoint again (another worker holding the run, a resume that repeats it):
    // refused, and no second event.
    assert!(
        agent_loop::checkpoint_settled(&mut conn, r, &round(0), add, settle, Flush::Durable)
            .await
            .is_err()
    );
    // A tool call: its name, decision and duration; not its arguments or result.
    let args = json!({"document_id": doc, "note": secret});
    let result = json!({"ok": true, "echo": secret});
    let step = StepRow::written(1, StepKind::ToolResult, Some("call_1"), &result, now());
    let mut audit = NewAudit::new(
        org,
        Some(r),
        "agent:auto_create",
        "create_schema",
        AuditCategory::Write,
        AuditDecision::AutoApproved,
        now(),
    );
    audit.call_id = Some("call_1");
    audit.args = Some(&args);
    audit.outcome = Some(&result);
    audit.duration_ms = 42;
    let calls = Counters {
        tool_calls: 1,
        ..Default::default()
    };
    for _ in 0..2 {
        let _ = agent_loop::checkpoint_audited(&mut conn, r, &step, calls, &audit).await;
    }
    // A tool name the model made up is not repeated.
    let step2 = StepRow::written(2, StepKind::ToolResult, Some("call_2"), &result, now());
    let mut made_up = audit.clone();
    made_up.call_id = Some("call_2");
    made_up.tool = "Jane Doe";
    made_up.category = AuditCategory::Unknown;
    made_up.decision = AuditDecision::Denied;
    agent_loop::checkpoint_audited(&mut conn, r, &step2, calls, &made_up)
        .await
        .unwrap();
    drop(conn);
    let ev = events(&db, "run.step").await;
    assert_eq!(ev.len(), 3, "{ev:?}");
    assert!(ev.iter().all(|(s, _)| *s == Some(r)));
    assert_eq!(
        ev[0].1,
        json!({"run_id": r, "seq": 0, "step": "model", "kind": "auto_create",
               "model_call": "round", "document_id": doc,
               "input_tokens": 120, "output_tokens": 7})
    );
    assert_eq!(
        ev[1].1,
        json!({"run_id": r, "seq": 1, "step": "tool", "kind": "auto_create",
               "document_id": doc, "tool": "create_schema", "decision": "auto_approved",
               "duration_ms": 42, "is_error": false})
    );
    assert_eq!(ev[2].1["tool"], Value::Null);
    assert_eq!(ev[2].1["decision"], "denied");
    for (_, p) in &ev {
        assert!(!p.to_string().contains("Jane"), "{p}");
        assert!(!p.to_string().contains("IBAN"), "{p}");
    }
    // One event per checkpoint, at its seq.
    let seqs: Vec<i32> =
        sqlx::query_scalar("SELECT seq FROM agent_steps WHERE run_id = $1 ORDER BY seq")
            .bind(r)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let event_seqs: Vec<i32> = ev
        .iter()
        .map(|(_, p)| p["seq"].as_i64().unwrap() as i32)
        .collect();
    assert_eq!(seqs, event_seqs);
}

#[tokio::test]
async fn extraction_flagged_when_a_value_is_newly_flagged_in_its_transaction() {
    use agentd::store::extractions::{self, ExtractionSource};
    let (db, org, doc) = setup().await;
    let r = run(&db, org, &doc.to_string()).await;
    let src = ExtractionSource {
        document_id: doc,
        prompt_id: Uuid::now_v7(),
        prompt_version: 1,
        schema_id: Uuid::now_v7(),
        schema_version: 1,
    };
    let result = json!({"total": "999.99", "name": "Jane Doe"});
    let flagged = vec!["/total".to_string()];
    // Rolled back: none. Stored with nothing flagged: none.
    let mut tx = db.pool.begin().await.unwrap();
    extractions::insert(&mut tx, org, src, &result, &flagged, Some(r), now())
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    let clean = extractions::insert(&mut conn, org, src, &result, &[], Some(r), now())
        .await
        .unwrap();
    assert!(events(&db, "extraction.flagged").await.is_empty());
    // Stored with a flagged value: one.
    let x = extractions::insert(&mut conn, org, src, &result, &flagged, Some(r), now())
        .await
        .unwrap();
    let ev = events(&db, "extraction.flagged").await;
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].0, Some(x.id));
    assert_eq!(ev[0].1["document_id"], json!(doc));
    assert_eq!(ev[0].1["run_id"], json!(r));
    assert_eq!(ev[0].1["flagged"], 1);
    assert_eq!(ev[0].1["fields"], json!(["/total"]));
    assert!(!ev[0].1.to_string().contains("999"));
    assert!(!ev[0].1.to_string().contains("Jane"));
    // The same flags written again, or a flag cleared: none. A new flag: one more.
    for ungrounded in [flagged.clone(), vec![]] {
        extractions::update_result(&mut conn, org, x.id, &result, &ungrounded)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(events(&db, "extraction.flagged").await.len(), 1);
    let two = vec!["/total".to_string(), "/name".to_string()];
    extractions::update_result(&mut conn, org, clean.id, &result, &two)
        .await
        .unwrap()
        .unwrap();
    let ev = events(&db, "extraction.flagged").await;
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert_eq!(ev[1].1["flagged"], 2);
}

#[tokio::test]
async fn job_dead_once_per_death_and_never_for_a_webhook_delivery() {
    let (db, org, doc) = setup().await;
    let job = running_job(&db, org, doc, "auto_create").await;
    let fail = |id: i64, attempt: i32| {
        let pool = db.pool.clone();
        async move {
            agentd::queue::store::fail(
                &pool,
                id,
                attempt,
                "error text quoting the document",
                true,
                now(),
                now(),
            )
            .await
            .unwrap()
        }
    };
    // A retry is not a death; a fatal failure is, once (a stale attempt's repeat changes nothing).
    sqlx::query("UPDATE agentd_jobs SET max_attempts = 3 WHERE id = $1")
        .bind(job)
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(fail(job, 1).await, agentd::queue::store::FailOutcome::Dead);
    assert_eq!(fail(job, 1).await, agentd::queue::store::FailOutcome::Stale);
    let ev = events(&db, "job.dead").await;
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(
        ev[0].1,
        json!({"job_id": job, "kind": "auto_create", "attempt": 1, "max_attempts": 3,
               "document_id": doc})
    );
    assert!(!ev[0].1.to_string().contains("error text"));
    // Retried by an operator and dead again: a second death, a second event.
    sqlx::query("UPDATE agentd_jobs SET state = 'running', attempt = 2 WHERE id = $1")
        .bind(job)
        .execute(&db.pool)
        .await
        .unwrap();
    fail(job, 2).await;
    assert_eq!(events(&db, "job.dead").await.len(), 2);
    // A dead webhook delivery writes none (its event would need a delivery of its own).
    let delivery = running_job(&db, org, doc, "webhook_delivery").await;
    fail(delivery, 1).await;
    assert_eq!(events(&db, "job.dead").await.len(), 2);
}

#[tokio::test]
async fn suggestion_dismissed_once_in_its_transaction_without_the_reason() {
    use agentd::store::states::SuggestionStatus;
    let (db, org, doc) = setup().await;
    let s = SuggestionFields {
        kind: "missing_tag".into(),
        subject: doc.to_string(),
        night: now().date_naive(),
        title: "Tag it".into(),
        message: "m".into(),
        document_id: Some(doc),
        proposed_action: None,
    };
    let mut conn = db.pool.acquire().await.unwrap();
    let Created::New(id) = suggestions::create(&mut conn, org, &s, None, None, now())
        .await
        .unwrap()
    else {
        panic!("a new suggestion")
    };
    let dismiss = async |conn: &mut sqlx::PgConnection| {
        suggestions::transition(
            conn,
            org,
            id,
            SuggestionStatus::Dismissed,
            Some("Jane Doe does not want it"),
            "cli:alice",
            now(),
        )
        .await
        .unwrap()
    };
    let mut tx = db.pool.begin().await.unwrap();
    dismiss(&mut tx).await;
    tx.rollback().await.unwrap();
    assert!(events(&db, "suggestion.dismissed").await.is_empty());
    // Shown first (no event), then dismissed twice: one.
    suggestions::transition(
        &mut conn,
        org,
        id,
        SuggestionStatus::Shown,
        None,
        "cli:alice",
        now(),
    )
    .await
    .unwrap();
    dismiss(&mut conn).await;
    assert_eq!(
        dismiss(&mut conn).await,
        // Dismissed again: no change, so no second event.
        suggestions::Transition::Done(SuggestionStatus::Dismissed)
    );
    let ev = events(&db, "suggestion.dismissed").await;
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].0, Some(id));
    assert_eq!(
        ev[0].1,
        json!({"suggestion_id": id, "kind": "missing_tag", "document_id": doc,
               "run_id": null, "by": "cli:alice"})
    );
}
