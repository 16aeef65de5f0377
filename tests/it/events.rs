//! The events outbox against a real PostgreSQL with a manual clock: every change of an
//! approval's life writes exactly one event in its own transaction (a rolled-back cause leaves
//! none, a repeated decision adds none), the sweep's expired and stale events, a cursor that
//! never skips an event whose transaction commits after a later id was written, org scoping
//! of events and cursors, and one subject's events (issue 49) by the same cursor.

use crate::common;
use agentd::app::App;
use agentd::approvals::{self, Decision, ProposalOrigin};
use agentd::clock::{Clock, ManualClock, SharedClock};
use agentd::jobs::approval_expiry::ApprovalExpiry;
use agentd::store::events::{self, EventRow, EventType, NewEvent, ReadError};
use agentd::store::states::ApprovalStatus;
use agentd::store::{documents, orgs};
use chrono::{Duration, SubsecRound, Utc};
use common::TestDb;
use serde_json::{Value, json};
use std::sync::Arc;
use uuid::Uuid;

struct Fixture {
    db: TestDb,
    clock: Arc<ManualClock>,
    app: App,
    org: Uuid,
}

async fn fixture() -> Fixture {
    let db = TestDb::new().await;
    let clock = ManualClock::new(Utc::now().trunc_subsecs(6));
    let app = common::app(&db, clock.clone() as SharedClock);
    let org = orgs::ensure(&db.pool, "acme").await.unwrap().id;
    Fixture {
        db,
        clock,
        app,
        org,
    }
}

impl Fixture {
    async fn doc(&self, name: &str) -> Uuid {
        let mut conn = self.db.pool.acquire().await.unwrap();
        documents::insert(
            &mut conn,
            self.org,
            name,
            Some("Invoice Number: INV-1\n"),
            &json!({}),
            self.clock.now(),
        )
        .await
        .unwrap()
    }

    /// Proposes `tool(args)` outside a run; commits when `commit`, else rolls back.
    async fn propose(&self, tool: &str, args: Value, ttl_hours: i64, commit: bool) -> Uuid {
        let env = self.app.tool_env(self.app.spec("proactive_suggestion"));
        let tool = self.app.registry.get(tool).unwrap().clone();
        let mut tx = self.db.pool.begin().await.unwrap();
        let mut ctx = env.ctx(
            &mut tx,
            self.org,
            None,
            "agent:test".into(),
            self.clock.now(),
        );
        let origin = ProposalOrigin {
            call_id: None,
            suggestion_id: None,
            ttl: Duration::hours(ttl_hours),
            repropose: false,
            chain: None,
            rationale: None,
        };
        let id = approvals::propose(&mut ctx, tool.as_ref(), &args, origin)
            .await
            .unwrap();
        if commit {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
        }
        id
    }

    async fn decide(&self, id: Uuid, d: Decision) -> ApprovalStatus {
        let env = self.app.tool_env(self.app.spec("proactive_suggestion"));
        approvals::decide(
            &self.db.pool,
            &self.app.clock,
            &env,
            id,
            None,
            d,
            Default::default(),
        )
        .await
        .unwrap()
        .status
    }

    async fn touch(&self, doc: Uuid) {
        let mut conn = self.db.pool.acquire().await.unwrap();
        documents::update(
            &mut conn,
            self.org,
            doc,
            None,
            Some(&json!({"edited": true})),
            self.clock.now(),
        )
        .await
        .unwrap()
        .unwrap();
    }

    /// Every event about `subject`, straight from the table (visible or not to a cursor).
    async fn about(&self, subject: Uuid) -> Vec<(String, Value)> {
        sqlx::query_as("SELECT type, payload FROM agentd_events WHERE subject_id = $1 ORDER BY id")
            .bind(subject)
            .fetch_all(&self.db.pool)
            .await
            .unwrap()
    }

    /// The org's stream from `after`, once other transactions on the server let it through.
    async fn stream(&self, org: Uuid, after: i64, want: usize) -> Vec<EventRow> {
        let pool = self.db.pool.clone();
        let what = format!("{want} events after {after}");
        common::wait_until(30, &what, || {
            let pool = pool.clone();
            async move {
                events::list_after(&pool, org, after, &[], 100)
                    .await
                    .unwrap()
                    .len()
                    >= want
            }
        })
        .await;
        events::list_after(&self.db.pool, org, after, &[], 100)
            .await
            .unwrap()
    }
}

fn approve() -> Decision {
    Decision::Approve { by: "alice".into() }
}

fn kinds(v: &[(String, Value)]) -> Vec<&str> {
    v.iter().map(|(k, _)| k.as_str()).collect()
}

#[tokio::test]
async fn each_change_of_an_approval_writes_one_event_in_its_transaction() {
    let f = fixture().await;
    let doc = f.doc("a.txt").await;
    let args = json!({"document_id": doc, "metadata": {"k": "v"}});

    let gone = f.propose("update_document", args.clone(), 4, false).await;
    assert_eq!(
        f.about(gone).await,
        vec![],
        "a rolled-back proposal emits nothing"
    );

    let rejected = f.propose("update_document", args.clone(), 4, true).await;
    let created = f.about(rejected).await;
    assert_eq!(kinds(&created), vec!["approval.created"]);
    assert_eq!(created[0].1["approval_id"], json!(rejected));
    assert_eq!(created[0].1["tool"], json!("update_document"));
    assert!(
        created[0].1.get("args").is_none(),
        "no arguments in payloads"
    );
    assert_eq!(
        f.decide(rejected, Decision::Reject { by: "bob".into() })
            .await,
        "rejected"
    );
    assert_eq!(f.decide(rejected, approve()).await, "rejected");
    let after = f.about(rejected).await;
    assert_eq!(kinds(&after), vec!["approval.created", "approval.decided"]);
    assert_eq!(after[1].1["status"], json!("rejected"));
    assert_eq!(after[1].1["decided_by"], json!("human:bob"));

    // Other arguments than the rejected ones (a repeat of a rejected action is not proposed).
    let executed = f
        .propose(
            "update_document",
            json!({"document_id": doc, "metadata": {"k": "x"}}),
            4,
            true,
        )
        .await;
    assert_eq!(f.decide(executed, approve()).await, "executed");
    let ev = f.about(executed).await;
    assert_eq!(kinds(&ev), vec!["approval.created", "approval.decided"]);
    assert_eq!(ev[1].1["status"], json!("executed"));

    // The execution above changed the document: this one is stale when approved.
    let stale = f
        .propose(
            "update_document",
            json!({"document_id": doc, "metadata": {"k": "w"}}),
            4,
            true,
        )
        .await;
    f.touch(doc).await;
    assert_eq!(f.decide(stale, approve()).await, "stale");
    assert_eq!(
        kinds(&f.about(stale).await),
        vec!["approval.created", "approval.stale"]
    );

    let late = f
        .propose("delete_document", json!({"document_id": doc}), 1, true)
        .await;
    f.clock.advance(Duration::hours(2));
    assert_eq!(f.decide(late, approve()).await, "expired");
    assert_eq!(
        kinds(&f.about(late).await),
        vec!["approval.created", "approval.expired"]
    );
}

#[tokio::test]
async fn the_sweep_writes_expired_and_stale_events_once() {
    let f = fixture().await;
    let a = f.doc("a.txt").await;
    let b = f.doc("b.txt").await;
    let expiring = f
        .propose("delete_document", json!({"document_id": a}), 1, true)
        .await;
    let changing = f
        .propose("delete_document", json!({"document_id": b}), 10, true)
        .await;
    let untouched = f
        .propose(
            "update_document",
            json!({"document_id": a, "metadata": {}}),
            10,
            true,
        )
        .await;
    f.clock.advance(Duration::hours(2));
    f.touch(b).await;
    let sweeper = ApprovalExpiry::sweeper(&f.app);
    let r = sweeper.run_once(None).await.unwrap();
    assert_eq!((r.expired, r.stale), (1, 1), "{r:?}");
    sweeper.run_once(None).await.unwrap();
    let ev = f.about(expiring).await;
    assert_eq!(kinds(&ev), vec!["approval.created", "approval.expired"]);
    assert_eq!(ev[1].1["decided_by"], json!("system:approval_expiry"));
    assert_eq!(
        kinds(&f.about(changing).await),
        vec!["approval.created", "approval.stale"]
    );
    assert_eq!(kinds(&f.about(untouched).await), vec!["approval.created"]);
}

async fn emit(conn: &mut sqlx::PgConnection, org: Uuid, kind: EventType, n: i64) -> i64 {
    let payload = json!({"n": n});
    events::emit(
        conn,
        &NewEvent {
            org_id: org,
            kind,
            subject_id: None,
            occurred_at: Utc::now(),
            payload: &payload,
            dedupe_key: None,
        },
    )
    .await
    .unwrap()
    .expect("no dedupe key: always written")
}

#[tokio::test]
async fn a_cursor_never_skips_an_event_whose_transaction_commits_late() {
    let f = fixture().await;
    let mut slow = f.db.pool.begin().await.unwrap();
    let first = emit(&mut slow, f.org, EventType::RunFailed, 1).await;
    let mut conn = f.db.pool.acquire().await.unwrap();
    let second = emit(&mut conn, f.org, EventType::RunFailed, 2).await;
    assert!(first < second, "ids are handed out in insert order");
    // A reader by `id > cursor` would now return `second` and never see `first`.
    let early = events::list_after(&f.db.pool, f.org, 0, &[], 100)
        .await
        .unwrap();
    assert_eq!(
        early,
        vec![],
        "nothing is returned while an earlier writer runs"
    );
    slow.commit().await.unwrap();
    let all = f.stream(f.org, 0, 2).await;
    assert_eq!(
        all.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![first, second]
    );
    assert_eq!(all[0].payload, json!({"n": 1}));
    assert_eq!(all[0].kind, "run.failed");
    let rest = events::list_after(&f.db.pool, f.org, first, &[], 100)
        .await
        .unwrap();
    assert_eq!(rest.iter().map(|e| e.id).collect::<Vec<_>>(), vec![second]);
    assert_eq!(
        events::list_after(&f.db.pool, f.org, second, &[], 100)
            .await
            .unwrap(),
        vec![]
    );
}

#[tokio::test]
async fn the_stream_follows_commit_order_when_ids_do_not() {
    let f = fixture().await;
    // The older transaction takes its id last: the stream still puts it first, and a cursor
    // on either event resumes without loss.
    let mut older = f.db.pool.begin().await.unwrap();
    sqlx::query("SELECT pg_current_xact_id()")
        .execute(&mut *older)
        .await
        .unwrap();
    let mut conn = f.db.pool.acquire().await.unwrap();
    let young = emit(&mut conn, f.org, EventType::BudgetThreshold, 1).await;
    let old = emit(&mut older, f.org, EventType::BudgetThreshold, 2).await;
    older.commit().await.unwrap();
    let all = f.stream(f.org, 0, 2).await;
    assert_eq!(
        all.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![old, young]
    );
    let rest = events::list_after(&f.db.pool, f.org, old, &[], 100)
        .await
        .unwrap();
    assert_eq!(rest.iter().map(|e| e.id).collect::<Vec<_>>(), vec![young]);
}

#[tokio::test]
async fn another_orgs_events_and_cursors_are_not_found() {
    let f = fixture().await;
    let other = orgs::ensure(&f.db.pool, "globex").await.unwrap().id;
    let mut conn = f.db.pool.acquire().await.unwrap();
    let theirs = emit(&mut conn, other, EventType::SuggestionCreated, 1).await;
    let ours = emit(&mut conn, f.org, EventType::ProposalReady, 2).await;
    let mine = f.stream(f.org, 0, 1).await;
    assert_eq!(mine.iter().map(|e| e.id).collect::<Vec<_>>(), vec![ours]);
    match events::list_after(&f.db.pool, f.org, theirs, &[], 100).await {
        Err(ReadError::UnknownCursor(c)) => assert_eq!(c, theirs),
        other => panic!("another org's cursor must be unknown, got {other:?}"),
    }
    let filtered = events::list_after(&f.db.pool, other, 0, &["proposal.ready"], 100)
        .await
        .unwrap();
    assert_eq!(filtered, vec![], "type filter and org scope together");
    assert_eq!(
        EventType::parse("approval.expiring"),
        Some(EventType::ApprovalExpiring)
    );
    assert_eq!(EventType::parse("approval.exploded"), None);
}

/// Writes an event of `kind` with `subject` and `payload` (its own statement on `conn`).
async fn emit_about(
    conn: &mut sqlx::PgConnection,
    org: Uuid,
    kind: EventType,
    subject: Option<Uuid>,
    payload: Value,
) -> i64 {
    events::emit(
        conn,
        &NewEvent {
            org_id: org,
            kind,
            subject_id: subject,
            occurred_at: Utc::now(),
            payload: &payload,
            dedupe_key: None,
        },
    )
    .await
    .unwrap()
    .expect("no dedupe key: always written")
}

/// Issue 49: the subject filter keeps the events whose subject is the id or whose payload
/// names it as `document_id` or `run_id`, in stream order; a late-committing writer is not
/// skipped (the filter reads behind the same horizon); any event of the org is a cursor, and
/// another org's subject gives nothing.
#[tokio::test]
async fn one_subjects_events_by_cursor_skip_nothing_and_stay_in_the_org() {
    let f = fixture().await;
    let other = orgs::ensure(&f.db.pool, "globex").await.unwrap().id;
    let (doc, run) = (Uuid::now_v7(), Uuid::now_v7());
    let mut conn = f.db.pool.acquire().await.unwrap();
    let started = emit_about(
        &mut conn,
        f.org,
        EventType::RunStarted,
        Some(run),
        json!({"run_id": run, "document_id": doc}),
    )
    .await;
    let unrelated = emit(&mut conn, f.org, EventType::RunStep, 1).await;
    // Written first, committed last.
    let mut slow = f.db.pool.begin().await.unwrap();
    let step = emit_about(
        &mut slow,
        f.org,
        EventType::RunStep,
        Some(run),
        json!({"run_id": run, "document_id": doc, "seq": 0}),
    )
    .await;
    let ready = emit_about(
        &mut conn,
        f.org,
        EventType::ProposalReady,
        Some(doc),
        json!({"document_id": doc, "run_id": run}),
    )
    .await;
    let approval = emit_about(
        &mut conn,
        f.org,
        EventType::ApprovalCreated,
        Some(Uuid::now_v7()),
        json!({"run_id": run}),
    )
    .await;
    // Another org's event naming the same ids.
    emit_about(
        &mut conn,
        other,
        EventType::RunStarted,
        Some(run),
        json!({"run_id": run, "document_id": doc}),
    )
    .await;
    let about = |subject: Uuid, after: i64| {
        let pool = f.db.pool.clone();
        async move {
            events::list_after_about(&pool, f.org, after, &[], Some(subject), 100)
                .await
                .unwrap()
                .iter()
                .map(|e| e.id)
                .collect::<Vec<i64>>()
        }
    };
    assert_eq!(
        about(doc, 0).await,
        vec![started],
        "nothing after an earlier writer that still runs"
    );
    slow.commit().await.unwrap();
    f.stream(f.org, 0, 5).await;
    // The document: its own event and its run's; the run: those and its approval's.
    assert_eq!(about(doc, 0).await, vec![started, step, ready]);
    assert_eq!(about(run, 0).await, vec![started, step, ready, approval]);
    // A cursor on any of the org's events, about the subject or not.
    assert_eq!(about(doc, unrelated).await, vec![step, ready]);
    assert_eq!(about(run, ready).await, vec![approval]);
    // Another org reading the same ids: only its own event.
    let theirs = events::list_after_about(&f.db.pool, other, 0, &[], Some(doc), 100)
        .await
        .unwrap();
    assert_eq!(theirs.len(), 1);
    assert_eq!(theirs[0].org_id, other);
    // An id nothing is about.
    assert_eq!(about(Uuid::now_v7(), 0).await, Vec::<i64>::new());
}
