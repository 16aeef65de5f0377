//! The events of issue 15 that are not about approvals, against a real PostgreSQL: each is
//! written exactly once, in the transaction of its cause (a rolled-back cause leaves none; a
//! repeated write of the same state, as by a reclaimed attempt, adds none): `proposal.ready`,
//! `auto_create.failed` (also from a plain-SQL writer, a cancelled job), `run.failed`,
//! `suggestion.created`, and `budget.threshold` at 80 % and 100 %, once per month.

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
