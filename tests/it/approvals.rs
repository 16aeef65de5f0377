//! Pending approvals against a real PostgreSQL with a manual clock: decide (approve, reject,
//! twice, after the TTL, after the data changed), the expiry sweep over a mixed batch,
//! re-proposal chains and their cap, retention, snapshot hashing, and the `agentd approvals`
//! command.

use crate::common;
use agentd::app::App;
use agentd::approvals::{
    self, DecideOutcome, Decision, DecisionExtra, ProposalOrigin, SweepReport, Sweeper,
};
use agentd::catalog::PolicyDecision;
use agentd::clock::{Clock, ManualClock, SharedClock};
use agentd::jobs::approval_expiry::ApprovalExpiry;
use agentd::llm::scripted::{ScriptedProvider, Turn};
use agentd::queue::worker::{JobContext, JobHandler};
use agentd::store::{approvals as astore, documents, orgs, runs};
use chrono::{Duration, SubsecRound, Utc};
use common::TestDb;
use serde_json::{Value, json};
use std::process::{Command, Output};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

struct Fixture {
    db: TestDb,
    clock: Arc<ManualClock>,
    app: App,
    org: Uuid,
}

async fn fixture() -> Fixture {
    let db = TestDb::new().await;
    // Whole microseconds: what PostgreSQL stores, so times read back compare equal.
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
    fn with_provider(&self, p: Arc<ScriptedProvider>) -> App {
        let mut app = self.app.clone();
        app.provider = p;
        app
    }

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

    async fn tag(&self, name: &str) -> Uuid {
        let id = Uuid::now_v7();
        sqlx::query("INSERT INTO tags (id, org_id, name, color, created_at) VALUES ($1, $2, $3, '#112233', $4)")
            .bind(id)
            .bind(self.org)
            .bind(name)
            .bind(self.clock.now())
            .execute(&self.db.pool)
            .await
            .unwrap();
        id
    }

    /// Proposes `tool(args)` directly (outside a run), as the nightly job's policy would.
    async fn propose(&self, tool: &str, args: Value, ttl: Duration, repropose: bool) -> Uuid {
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
            ttl,
            repropose,
            chain: None,
            rationale: None,
        };
        let id = approvals::propose(&mut ctx, tool.as_ref(), &args, origin)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        id
    }

    async fn decide(&self, id: Uuid, d: Decision) -> DecideOutcome {
        let env = self.app.tool_env(self.app.spec("proactive_suggestion"));
        let extra = DecisionExtra::default();
        approvals::decide(&self.db.pool, &self.app.clock, &env, id, None, d, extra)
            .await
            .unwrap()
    }

    async fn approval(&self, id: Uuid) -> astore::ApprovalRow {
        astore::get(&self.db.pool, id)
            .await
            .unwrap()
            .expect("approval exists")
    }

    async fn metadata(&self, doc: Uuid) -> (Value, Vec<Uuid>) {
        sqlx::query_as("SELECT metadata, tag_ids FROM documents WHERE id = $1")
            .bind(doc)
            .fetch_one(&self.db.pool)
            .await
            .unwrap()
    }

    /// Changes a document behind the approval's back (what a person or another job would do).
    async fn touch(&self, doc: Uuid, patch: Value) {
        let mut conn = self.db.pool.acquire().await.unwrap();
        documents::update(
            &mut conn,
            self.org,
            doc,
            None,
            Some(&patch),
            self.clock.now(),
        )
        .await
        .unwrap()
        .unwrap();
    }

    async fn count(&self, sql: &str) -> i64 {
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
            .fetch_one(&self.db.pool)
            .await
            .unwrap()
    }

    async fn decisions(&self, id: Uuid) -> Vec<(String, String)> {
        sqlx::query_as("SELECT decision, actor FROM audit_events WHERE call_id = $1 ORDER BY id")
            .bind(format!("approval:{id}"))
            .fetch_all(&self.db.pool)
            .await
            .unwrap()
    }

    fn sweeper(&self, batch: u32) -> Sweeper {
        let mut s = ApprovalExpiry::sweeper(&self.app);
        s.batch = batch;
        s
    }
}

fn approve(by: &str) -> Decision {
    Decision::Approve { by: by.into() }
}

const TTL: i64 = 4;

// ---- decide ----

#[tokio::test]
async fn an_approved_proposal_from_a_run_executes_once_as_the_approver() {
    let f = fixture().await;
    let doc = f.doc("invoice.txt").await;
    let tag = f.tag("invoices").await;
    // The nightly job proposes (its policy: write → propose); nothing changes yet.
    let p = Arc::new(ScriptedProvider::new(vec![
        Turn::tool(
            "a",
            "update_document",
            json!({"document_id": doc, "tag_ids": [tag], "metadata": {"vendor": "ACME"}}),
        ),
        Turn::text("proposed a tag"),
    ]));
    let app = f.with_provider(p.clone());
    let spec = app.spec("proactive_suggestion");
    let mut rs = app.run_spec(spec, f.org, "2026-01-01".into(), Some(1), "night".into());
    rs.night = Some(chrono::NaiveDate::from_ymd_opt(2026, 1, 1).unwrap());
    let out = app
        .engine(spec)
        .run(&rs, &CancellationToken::new())
        .await
        .unwrap();
    p.assert_complete();
    assert_eq!(
        f.metadata(doc).await,
        (json!({}), vec![]),
        "nothing executed before approval"
    );
    let id: Uuid = sqlx::query_scalar("SELECT id FROM pending_approvals")
        .fetch_one(&f.db.pool)
        .await
        .unwrap();
    let a = f.approval(id).await;
    assert_eq!(
        (a.status.as_str(), a.run_id, a.action.tool.as_str()),
        ("pending", Some(out.run_id), "update_document")
    );

    let o = f.decide(id, approve("alice")).await;
    assert_eq!((o.status.as_str(), o.changed), ("executed", true), "{o:?}");
    assert_eq!(o.result.as_ref().unwrap()["updated"], json!(true));
    assert_eq!(
        f.metadata(doc).await,
        (json!({"vendor": "ACME"}), vec![tag])
    );
    let a = f.approval(id).await;
    assert_eq!(
        (a.status.as_str(), a.decided_by.as_deref(), a.decided_at),
        ("executed", Some("human:alice"), Some(f.clock.now()))
    );
    assert_eq!(
        f.decisions(id).await,
        vec![("human_approved".into(), "human:alice".into())]
    );
    // The history (what `approvals show` prints): the run's proposal, then the decision.
    let h = astore::history(&f.db.pool, &a).await.unwrap();
    assert_eq!(
        h.iter().map(|r| r.decision.as_str()).collect::<Vec<_>>(),
        ["proposed", "human_approved"]
    );
    assert_eq!(h[0].actor, "agent:proactive_suggestion");
}

#[tokio::test]
async fn approving_twice_executes_once() {
    let f = fixture().await;
    let doc = f.doc("a.txt").await;
    let id = f
        .propose(
            "update_document",
            json!({"document_id": doc, "metadata": {"n": 1}}),
            Duration::hours(TTL),
            false,
        )
        .await;
    // Two people approve at the same moment: the row lock lets exactly one of them execute.
    let (x, y) = tokio::join!(f.decide(id, approve("alice")), f.decide(id, approve("bob")));
    assert_eq!(
        [x.changed, y.changed].iter().filter(|c| **c).count(),
        1,
        "{x:?} {y:?}"
    );
    assert_eq!(
        (x.status.as_str(), y.status.as_str()),
        ("executed", "executed")
    );
    let updated_at: chrono::DateTime<Utc> =
        sqlx::query_scalar("SELECT updated_at FROM documents WHERE id = $1")
            .bind(doc)
            .fetch_one(&f.db.pool)
            .await
            .unwrap();
    // A third call (and a late reject) return the state and change nothing.
    let again = f.decide(id, approve("carol")).await;
    assert_eq!((again.status.as_str(), again.changed), ("executed", false));
    assert_eq!(
        again.result,
        x.result.clone().or(y.result.clone()),
        "the stored result comes back"
    );
    let late = f.decide(id, Decision::Reject { by: "dave".into() }).await;
    assert_eq!((late.status.as_str(), late.changed), ("executed", false));
    assert_eq!(
        f.count(&format!(
            "SELECT count(*) FROM audit_events WHERE call_id = 'approval:{id}'"
        ))
        .await,
        1
    );
    assert_eq!(
        f.count("SELECT count(*) FROM audit_events WHERE decision = 'human_approved'")
            .await,
        1
    );
    let after: chrono::DateTime<Utc> =
        sqlx::query_scalar("SELECT updated_at FROM documents WHERE id = $1")
            .bind(doc)
            .fetch_one(&f.db.pool)
            .await
            .unwrap();
    assert_eq!(after, updated_at, "the document was written once");
}

#[tokio::test]
async fn approving_after_the_ttl_expires_and_executes_nothing() {
    let f = fixture().await;
    let doc = f.doc("a.txt").await;
    let id = f
        .propose(
            "update_document",
            json!({"document_id": doc, "metadata": {"k": "v"}}),
            Duration::hours(TTL),
            false,
        )
        .await;
    f.clock.advance(Duration::hours(TTL) + Duration::seconds(1));
    let o = f.decide(id, approve("alice")).await;
    assert_eq!(
        (o.status.as_str(), o.changed, o.result),
        ("expired", true, None)
    );
    assert_eq!(f.metadata(doc).await.0, json!({}));
    assert_eq!(
        f.decisions(id).await,
        vec![("expired".into(), "human:alice".into())]
    );
}

#[tokio::test]
async fn approving_after_the_data_changed_is_stale_and_says_what_changed() {
    let f = fixture().await;
    let doc = f.doc("a.txt").await;
    let id = f
        .propose(
            "update_document",
            json!({"document_id": doc, "metadata": {"k": "proposed"}}),
            Duration::hours(TTL),
            false,
        )
        .await;
    f.touch(doc, json!({"owner": "someone else"})).await;
    let o = f.decide(id, approve("alice")).await;
    assert_eq!((o.status.as_str(), o.changed), ("stale", true), "{o:?}");
    let changes = o.changes.expect("stale reports its changes");
    assert_eq!(
        changes["metadata"],
        json!({"before": {}, "after": {"owner": "someone else"}}),
        "{changes}"
    );
    assert!(
        changes.get("name").is_none(),
        "unchanged keys are not reported: {changes}"
    );
    assert_eq!(
        f.metadata(doc).await.0,
        json!({"owner": "someone else"}),
        "the proposal was not applied"
    );
    let a = f.approval(id).await;
    assert_eq!(a.result.unwrap()["changes"], changes);
    assert_eq!(
        f.decisions(id).await,
        vec![("stale".into(), "human:alice".into())]
    );
}

/// Review #14b: a deletion approved after the document got an extraction nobody saw when it was
/// proposed is stale, and the extraction stays; so is one after an extraction's result changed.
#[tokio::test]
async fn a_deletion_approved_after_a_new_extraction_is_stale() {
    let f = fixture().await;
    let doc = f.doc("a.txt").await;
    let delete = json!({"document_id": doc});
    let id = f
        .propose(
            "delete_document",
            delete.clone(),
            Duration::hours(TTL),
            false,
        )
        .await;
    let mut conn = f.db.pool.acquire().await.unwrap();
    let src = agentd::store::extractions::ExtractionSource {
        document_id: doc,
        prompt_id: Uuid::now_v7(),
        prompt_version: 1,
        schema_id: Uuid::now_v7(),
        schema_version: 1,
    };
    let e = agentd::store::extractions::insert(
        &mut conn,
        f.org,
        src,
        &json!({"total": 1}),
        &[],
        None,
        f.clock.now(),
    )
    .await
    .unwrap();
    let o = f.decide(id, approve("alice")).await;
    assert_eq!((o.status.as_str(), o.changed), ("stale", true), "{o:?}");
    let changes = o.changes.expect("stale reports its changes");
    assert_eq!(changes["extractions"]["after"]["count"], 1, "{changes}");
    let left = f
        .count(&format!(
            "SELECT count(*) FROM extractions WHERE id = '{}'",
            e.id
        ))
        .await;
    assert_eq!(left, 1, "the document and its extraction stay");

    // Proposed with the extraction there: a changed result makes it stale too.
    let id = f
        .propose("delete_document", delete, Duration::hours(TTL), false)
        .await;
    agentd::store::extractions::update_result(&mut conn, f.org, e.id, &json!({"total": 2}), &[])
        .await
        .unwrap()
        .unwrap();
    let o = f.decide(id, approve("alice")).await;
    assert_eq!(o.status.as_str(), "stale", "{o:?}");
    // Unchanged, it deletes.
    let id = f
        .propose(
            "delete_document",
            json!({"document_id": doc}),
            Duration::hours(TTL),
            false,
        )
        .await;
    let o = f.decide(id, approve("alice")).await;
    assert_eq!(o.status.as_str(), "executed", "{o:?}");
    let left = f
        .count(&format!(
            "SELECT count(*) FROM extractions WHERE id = '{}'",
            e.id
        ))
        .await;
    assert_eq!(left, 0);
}

/// Review #25: an inactive (offboarded) org's approval is not executed (nor a model called for
/// it) when approved; it stays pending and can still be rejected.
#[tokio::test]
async fn approving_for_an_inactive_org_executes_nothing_and_stays_pending() {
    let f = fixture().await;
    let doc = f.doc("a.txt").await;
    let id = f
        .propose(
            "update_document",
            json!({"document_id": doc, "metadata": {"k": "proposed"}}),
            Duration::hours(TTL),
            false,
        )
        .await;
    sqlx::query("UPDATE orgs SET active = false WHERE id = $1")
        .bind(f.org)
        .execute(&f.db.pool)
        .await
        .unwrap();
    let env = f.app.tool_env(f.app.spec("proactive_suggestion"));
    let extra = DecisionExtra::default();
    let r = approvals::decide(
        &f.db.pool,
        &f.app.clock,
        &env,
        id,
        None,
        approve("alice"),
        extra,
    )
    .await;
    assert!(
        matches!(r, Err(approvals::DecideError::OrgInactive(a)) if a == id),
        "{r:?}"
    );
    assert_eq!(f.approval(id).await.status.as_str(), "pending");
    assert_eq!(f.metadata(doc).await.0, json!({}), "nothing executed");
    let o = f.decide(id, Decision::Reject { by: "alice".into() }).await;
    assert_eq!(o.status.as_str(), "rejected");
}

#[tokio::test]
async fn rejecting_executes_nothing() {
    let f = fixture().await;
    let doc = f.doc("a.txt").await;
    let id = f
        .propose(
            "delete_document",
            json!({"document_id": doc}),
            Duration::hours(TTL),
            false,
        )
        .await;
    let o = f.decide(id, Decision::Reject { by: "alice".into() }).await;
    assert_eq!((o.status.as_str(), o.changed), ("rejected", true));
    assert_eq!(
        f.count("SELECT count(*) FROM documents").await,
        1,
        "not deleted"
    );
    assert_eq!(
        f.decisions(id).await,
        vec![("human_rejected".into(), "human:alice".into())]
    );
    let again = f.decide(id, approve("bob")).await;
    assert_eq!(
        (again.status.as_str(), again.changed),
        ("rejected", false),
        "a rejection is final"
    );
    assert_eq!(f.count("SELECT count(*) FROM documents").await, 1);
}

#[tokio::test]
async fn a_proposal_that_relies_on_the_runs_document_can_be_approved() {
    // auto_create runs have a document of their own: tools default `document_id` to it. The
    // approval must still name the document when a person decides outside the run.
    let f = fixture().await;
    let doc = f.doc("invoice.txt").await;
    let p = Arc::new(ScriptedProvider::new(vec![
        Turn::tool(
            "a",
            "update_document",
            json!({"metadata": {"reviewed": true}}),
        ),
        Turn::text("done"),
    ]));
    let app = f.with_provider(p);
    let spec = app.spec("auto_create");
    let mut rs = app.run_spec(
        spec,
        f.org,
        doc.to_string(),
        Some(1),
        format!("Document {doc}"),
    );
    rs.document_id = Some(doc);
    rs.policy.write = PolicyDecision::Propose;
    // The run only proposes; no nudge toward auto_create's goal. auto_create no longer offers
    // update_document (each kind offers what its job needs): allow it here.
    rs.settings.max_nudges = 0;
    rs.policy.allow.push("update_document".into());
    app.engine(spec)
        .run(&rs, &CancellationToken::new())
        .await
        .unwrap();
    let id: Uuid = sqlx::query_scalar("SELECT id FROM pending_approvals")
        .fetch_one(&f.db.pool)
        .await
        .unwrap();
    assert_eq!(
        f.approval(id).await.action.args["document_id"],
        json!(doc),
        "the default is recorded"
    );
    let o = f.decide(id, approve("alice")).await;
    assert_eq!(o.status, "executed", "{o:?}");
    assert_eq!(f.metadata(doc).await.0, json!({"reviewed": true}));
}

#[tokio::test]
async fn a_proposal_with_nul_in_its_arguments_is_stored_and_approvable() {
    // jsonb refuses \u0000: the arguments are cleaned before they are hashed and stored, so
    // the hash recomputed from the stored arguments still matches.
    let f = fixture().await;
    let doc = f.doc("a.txt").await;
    let id = f
        .propose(
            "update_document",
            json!({"document_id": doc, "metadata": {"k\u{0}ey": "v\u{0}al"}}),
            Duration::hours(TTL),
            false,
        )
        .await;
    assert_eq!(
        f.approval(id).await.action.args["metadata"],
        json!({"key": "val"})
    );
    let o = f.decide(id, approve("alice")).await;
    assert_eq!(o.status, "executed", "{o:?}");
    assert_eq!(f.metadata(doc).await.0, json!({"key": "val"}));
}

// ---- hashing ----

#[test]
fn snapshot_hash_is_stable_across_key_order_and_number_formatting() {
    let data = json!({"exists": true, "metadata": {"x": "y"}});
    let h = approvals::snapshot_hash("t", &json!({"a": 1, "b": [1.0, 2]}), &data);
    let reordered: Value = serde_json::from_str(r#"{"b": [1, 2.0], "a": 1.0}"#).unwrap();
    assert_eq!(h, approvals::snapshot_hash("t", &reordered, &data));
    let data_reordered: Value =
        serde_json::from_str(r#"{"metadata": {"x": "y"}, "exists": true}"#).unwrap();
    assert_eq!(
        h,
        approvals::snapshot_hash("t", &reordered, &data_reordered)
    );
    assert_eq!(h.len(), 64);
    assert_ne!(
        h,
        approvals::snapshot_hash("t", &json!({"a": 1, "b": [1, 3]}), &data),
        "args value"
    );
    assert_ne!(
        h,
        approvals::snapshot_hash(
            "t",
            &json!({"a": 1, "b": [1, 2]}),
            &json!({"exists": false})
        ),
        "data"
    );
    assert_ne!(
        h,
        approvals::snapshot_hash("u", &json!({"a": 1, "b": [1, 2]}), &data),
        "tool"
    );
}

// ---- the sweep ----

/// The sweep re-validates approvals on documents set-based (one statement for the batch's
/// documents); it must judge exactly as the tools' own snapshots do (`row_by_row`), including a
/// deleted document.
#[tokio::test]
async fn the_set_based_sweep_judges_like_the_tools() {
    for row_by_row in [false, true] {
        let f = fixture().await;
        let gone = f.doc("gone").await;
        let kept = f.doc("kept").await;
        let edited = f.doc("edited").await;
        let on_gone = f
            .propose(
                "update_document",
                json!({"document_id": gone, "metadata": {"x": 1}}),
                Duration::hours(10),
                false,
            )
            .await;
        let on_kept = f
            .propose(
                "delete_document",
                json!({"document_id": kept}),
                Duration::hours(1),
                false,
            )
            .await;
        let on_edited = f
            .propose(
                "delete_document",
                json!({"document_id": edited}),
                Duration::hours(10),
                false,
            )
            .await;
        sqlx::query("DELETE FROM documents WHERE id = $1")
            .bind(gone)
            .execute(&f.db.pool)
            .await
            .unwrap();
        f.touch(edited, json!({"edited": true})).await;
        f.clock.advance(Duration::hours(2));
        let mut sweeper = f.sweeper(10);
        sweeper.row_by_row = row_by_row;
        let r = sweeper.run_once(None).await.unwrap();
        assert_eq!(
            (r.checked, r.expired, r.stale),
            (3, 1, 2),
            "row_by_row {row_by_row}"
        );
        assert_eq!(f.approval(on_kept).await.status, "expired");
        let a = f.approval(on_gone).await;
        assert_eq!(a.status, "stale");
        assert_eq!(
            a.result.unwrap()["changes"]["exists"],
            json!({"before": true, "after": false}),
            "row_by_row {row_by_row}"
        );
        let a = f.approval(on_edited).await;
        assert_eq!(a.status, "stale");
        assert!(a.result.unwrap()["changes"]["metadata"].is_object());
    }
}

/// Review N2: approvals the sweep ends (expired, and stale with before/after copies of the
/// changed data) leave audit rows without the values of their arguments or results — the
/// trail is append-only — in both sweeps.
/// A person's decision on an approval audits the arguments as a digest (review D3): the
/// approval holds the real values it executes with ("Jane Doe" in a key no rule calls personal),
/// and a reviewer's edit may add more; neither reaches the append-only audit.
#[tokio::test]
async fn human_decisions_and_edits_leave_no_personal_value_in_the_audit() {
    const NAME: &str = "Jane Doe";
    const EDITED: &str = "Jane Doe, 12 High Street";
    let f = fixture().await;
    let (a, b) = (f.doc("a.txt").await, f.doc("b.txt").await);
    let ttl = Duration::hours(TTL);
    let approved = f
        .propose(
            "update_document",
            json!({"document_id": a, "metadata": {"signed_by": NAME}}),
            ttl,
            false,
        )
        .await;
    let rejected = f
        .propose(
            "update_document",
            json!({"document_id": b, "metadata": {"signed_by": NAME}}),
            ttl,
            false,
        )
        .await;
    let edited = f
        .propose(
            "update_document",
            json!({"document_id": b, "metadata": {"value": NAME}}),
            ttl,
            false,
        )
        .await;
    assert_eq!(
        f.decide(approved, approve("alice")).await.status,
        "executed"
    );
    let o = f
        .decide(rejected, Decision::Reject { by: "bob".into() })
        .await;
    assert_eq!(o.status, "rejected");
    let env = f.app.tool_env(f.app.spec("proactive_suggestion"));
    let extra = DecisionExtra {
        edited_args: Some(json!({"document_id": b, "metadata": {"value": EDITED}})),
        ..Default::default()
    };
    let o = approvals::decide(
        &f.db.pool,
        &f.app.clock,
        &env,
        edited,
        None,
        approve("carol"),
        extra,
    )
    .await
    .unwrap();
    assert_eq!(o.status, "executed");
    assert_eq!(
        f.metadata(b).await.0["value"],
        json!(EDITED),
        "the edit ran with the real value"
    );
    let rows: Vec<(String, Option<Value>, Option<Value>)> = sqlx::query_as(
        "SELECT decision, args, outcome FROM audit_events WHERE category = 'approval' ORDER BY id",
    )
    .fetch_all(&f.db.pool)
    .await
    .unwrap();
    let decisions: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    for d in ["human_approved", "human_rejected", "edited"] {
        assert!(decisions.contains(&d), "{d}: {decisions:?}");
    }
    for (decision, args, outcome) in &rows {
        let text = format!("{args:?} {outcome:?}");
        assert!(!text.contains("Jane"), "{decision}: {text}");
    }
    let approved_args = rows
        .iter()
        .find(|r| r.0 == "human_approved")
        .and_then(|r| r.1.clone())
        .unwrap_or_default();
    assert_eq!(approved_args["keys"], json!(["document_id", "metadata"]));
    assert_eq!(approved_args["sha256"].as_str().map(str::len), Some(64));
}

#[tokio::test]
async fn swept_approvals_leave_no_personal_value_in_the_audit() {
    const EMAIL: &str = "jane@example.com";
    for row_by_row in [false, true] {
        let f = fixture().await;
        let (a, b) = (f.doc("a.txt").await, f.doc("b.txt").await);
        let meta = json!({"contact": EMAIL, "note": format!("write to {EMAIL}")});
        let ttl = Duration::hours(TTL);
        let expiring = f
            .propose(
                "update_document",
                json!({"document_id": a, "metadata": meta}),
                ttl,
                false,
            )
            .await;
        let staling = f
            .propose(
                "update_document",
                json!({"document_id": b, "metadata": meta}),
                ttl,
                false,
            )
            .await;
        f.touch(b, json!({"contact": format!("old-{EMAIL}")})).await;
        f.clock.advance(Duration::hours(TTL + 1));
        let mut sweeper = f.sweeper(10);
        sweeper.row_by_row = row_by_row;
        sweeper.run_once(None).await.unwrap();
        assert_eq!(f.approval(expiring).await.status, "expired");
        assert_eq!(f.approval(staling).await.status, "stale");
        let stale_result = f.approval(staling).await.result.unwrap_or_default();
        assert!(
            stale_result.to_string().contains(EMAIL),
            "the approval itself keeps what changed: {stale_result}"
        );
        let rows: Vec<(String, Option<Value>, Option<Value>)> = sqlx::query_as(
            "SELECT decision, args, outcome FROM audit_events WHERE category = 'approval' ORDER BY id",
        )
        .fetch_all(&f.db.pool)
        .await
        .unwrap();
        let swept: Vec<_> = rows
            .iter()
            .filter(|r| r.0 == "expired" || r.0 == "stale")
            .collect();
        assert_eq!(swept.len(), 2, "row_by_row={row_by_row}: {rows:?}");
        for (decision, args, outcome) in &swept {
            let text = format!("{args:?} {outcome:?}");
            assert!(
                !text.contains(EMAIL),
                "row_by_row={row_by_row}: {decision}: {text}"
            );
            assert!(
                args.as_ref().is_some_and(|a| a["sha256"].is_string()),
                "the arguments are proven by their hash: {text}"
            );
        }
        let stale_outcome = swept.iter().find(|r| r.0 == "stale").unwrap().2.clone();
        let changed = stale_outcome.unwrap()["changed"].clone();
        assert!(
            changed
                .as_array()
                .is_some_and(|c| c.contains(&json!("metadata"))),
            "the stale row names what changed, not the values: {changed}"
        );
        let all = format!("{rows:?}");
        assert!(!all.contains(EMAIL), "row_by_row={row_by_row}: {all}");
    }
}

/// Review L2: the summary of `update_extraction_field` names the field's path (reviewers saw
/// `'?'`: the summary read an argument the tool does not have).
#[tokio::test]
async fn an_extraction_field_summary_names_the_path() {
    let f = fixture().await;
    let mut conn = f.db.pool.acquire().await.unwrap();
    let registry = agentd::tools::builtin_registry();
    let tool = registry
        .get("update_extraction_field")
        .expect("a built-in tool");
    let line = agentd::approvals::summary::summarize(
        &mut conn,
        f.org,
        tool.as_ref(),
        &json!({"extraction_id": Uuid::now_v7(), "path": "total.amount", "value": 12.5}),
    )
    .await
    .unwrap();
    assert_eq!(line, "Set field 'total.amount' of an extraction to 12.5");
}

/// The document snapshot as SQL defines it (migration 0090's `document_snapshot`: what the tools
/// read, `documents::snapshot`, and the set-based sweep compares stored snapshots with) is the
/// JSON agentd's Rust built before, reproduced here from the row's columns (`DocumentLock::
/// snapshot`: `json!` of the name, tags, metadata and the SHA-256 of the text): for documents
/// written on a whole second, a whole millisecond and a microsecond, metadata with a decimal
/// written `1.50` and an exponent, tags, no text, one that never existed and another org's. The
/// batch reads (`documents::snapshots`, locked or not) give the same.
#[tokio::test]
async fn the_sql_document_snapshot_is_the_one_rust_built() {
    use sha2::{Digest, Sha256};
    let f = fixture().await;
    f.clock.set(f.clock.now().trunc_subsecs(0));
    let mut docs = vec![f.doc("second.txt").await];
    f.clock.advance(Duration::milliseconds(1));
    docs.push(f.doc("milli.txt").await);
    f.clock.advance(Duration::microseconds(1));
    docs.push(f.doc("micro.txt").await);
    let tag = f.tag("paid").await;
    let mut conn = f.db.pool.acquire().await.unwrap();
    let odd = documents::insert(
        &mut conn,
        f.org,
        "odd \"name\" ü.txt",
        None,
        &json!({}),
        f.clock.now(),
    )
    .await
    .unwrap();
    sqlx::query(
        "UPDATE documents SET metadata = '{\"amount\": 1.50, \"n\": [1, 2.0e3], \"s\": \"x\"}',
                tag_ids = ARRAY[$2]::uuid[], auto_create_status = 'proposed'
          WHERE id = $1",
    )
    .bind(odd)
    .bind(tag)
    .execute(&mut *conn)
    .await
    .unwrap();
    docs.push(odd);
    docs.push(Uuid::now_v7());
    docs.sort();
    let keys: Vec<(Uuid, Uuid)> = docs.iter().map(|d| (f.org, *d)).collect();
    let read = documents::snapshots(&mut conn, &keys, false).await.unwrap();
    let locked = documents::snapshots(&mut conn, &keys, true).await.unwrap();
    assert_eq!(read, locked);
    assert_eq!(read.len(), docs.len());
    for ((org, id, snapshot), doc) in read.into_iter().zip(&docs) {
        assert_eq!((org, id), (f.org, *doc));
        let row: Option<(String, Vec<Uuid>, Value, Option<String>)> = sqlx::query_as(
            "SELECT name, tag_ids, metadata, text FROM documents WHERE org_id = $1 AND id = $2",
        )
        .bind(f.org)
        .bind(id)
        .fetch_optional(&mut *conn)
        .await
        .unwrap();
        let before = match row {
            Some((name, tag_ids, metadata, text)) => json!({
                "exists": true, "document_id": id, "name": name, "tag_ids": tag_ids,
                "metadata": metadata,
                "text_sha256": hex::encode(Sha256::digest(text.unwrap_or_default())),
            }),
            None => json!({"exists": false, "document_id": id}),
        };
        assert_eq!(snapshot, before, "document {id}");
        let one = documents::snapshot(&mut conn, f.org, id).await.unwrap();
        assert_eq!(one, before, "document {id}");
    }
    let other = orgs::ensure(&f.db.pool, "other").await.unwrap().id;
    let theirs = documents::snapshot(&mut conn, other, odd).await.unwrap();
    assert_eq!(theirs, json!({"exists": false, "document_id": odd}));
}

/// The hash of a pending approval on a fixed document (fixed id, name, tag, text, and metadata
/// with a decimal written `1.50`, an exponent, a number past `u64` and a non-ASCII string) is
/// the one agentd computed before the snapshot was defined once, in SQL: an upgrade must not turn
/// the stored hashes of pending approvals stale. The literal was printed by this test run on
/// the code before that change (commit 218b59f, `DocumentLock::snapshot` built with `json!`).
#[tokio::test]
async fn a_documents_snapshot_hash_is_the_one_stored_before_the_upgrade() {
    let f = fixture().await;
    let doc = Uuid::parse_str("0192b3c4-d5e6-7f80-9a1b-2c3d4e5f6a7b").unwrap();
    let tag = Uuid::parse_str("0192b3c4-d5e6-7f80-9a1b-2c3d4e5f6a7c").unwrap();
    sqlx::query(
        "INSERT INTO tags (id, org_id, name, color, created_at) VALUES ($2, $1, 'paid', '#112233', now())",
    )
    .bind(f.org)
    .bind(tag)
    .execute(&f.db.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO documents (id, org_id, name, text, metadata, tag_ids, created_at, updated_at)
         VALUES ($3, $1, 'odd \"name\" ü.txt', E'Invoice Number: INV-1\\n',
                 '{\"amount\": 1.50, \"n\": [1, 2.0e3], \"big\": 123456789012345678901234,
                   \"s\": \"ü\"}', ARRAY[$2]::uuid[], now(), now())",
    )
    .bind(f.org)
    .bind(tag)
    .bind(doc)
    .execute(&f.db.pool)
    .await
    .unwrap();
    let mut conn = f.db.pool.acquire().await.unwrap();
    let snapshot = documents::snapshot(&mut conn, f.org, doc).await.unwrap();
    let args = json!({"document_id": doc, "metadata": {"amount": 2}});
    let hash = approvals::snapshot_hash("update_document", &args, &snapshot);
    assert_eq!(
        hash,
        "d9a01a806b372a014c14f87e23075fde9a7aa7079454f1497739c9428b54bc0d"
    );
}

/// One sweep over a mixed population, set-based and row by row on two databases built the same
/// way on the same clock: the same report, approval states and results, audit rows, events and
/// re-proposal jobs (ids replaced by labels). The labels' expected states are checked too. The
/// population: valid, expired, changed before or after the TTL, deleted documents, a document
/// that never existed, one changed and changed back, two approvals on one document, another
/// tool's approvals, a document row rewritten without a snapshot change, an approval without a
/// recorded document version, and one already rejected.
#[tokio::test]
async fn set_based_and_row_by_row_sweeps_end_the_same() {
    let t0 = Utc::now().trunc_subsecs(0);
    let mut outcomes = Vec::new();
    for row_by_row in [false, true] {
        let f = fixture().await;
        f.clock.set(t0);
        let (labels, report) = sweep_population(&f, row_by_row).await;
        assert_eq!(
            report,
            SweepReport {
                checked: 18,
                expired: 8,
                stale: 6,
                reproposals_enqueued: 3,
                ..Default::default()
            },
            "row_by_row {row_by_row}"
        );
        let status = |label: &str| {
            let id = labels.iter().find(|(_, l)| l == label).unwrap().0;
            let pool = f.db.pool.clone();
            async move {
                sqlx::query_scalar::<_, String>(
                    "SELECT status FROM pending_approvals WHERE id = $1",
                )
                .bind(id)
                .fetch_one(&pool)
                .await
                .unwrap()
            }
        };
        for (label, want) in [
            ("valid", "pending"),
            ("expired", "expired"),
            ("expired_no_text", "expired"),
            ("late", "stale"),
            ("early", "stale"),
            ("gone", "stale"),
            ("gone_late", "stale"),
            // Its snapshot holds what update_document depends on, not `updated_at`
            // (issue 33): changed and changed back is unchanged.
            ("back", "pending"),
            ("same_doc_expired", "expired"),
            ("same_doc_live", "pending"),
            ("missing", "expired"),
            ("tag_new", "stale"),
            ("tag_same", "expired"),
            ("aside_live", "pending"),
            ("aside_expired", "expired"),
            ("legacy", "expired"),
            ("late_numbers", "stale"),
            ("aside_long", "expired"),
            ("rejected", "rejected"),
        ] {
            assert_eq!(
                status(label).await,
                want,
                "{label}, row_by_row {row_by_row}"
            );
        }
        // Proposals of update_document recorded the row version they read (the set-based sweep's
        // shortcut); those on untouched documents still match it. delete_document's do not: its
        // snapshot covers the document's extractions too (review #14b).
        let matching = f
            .count(
                "SELECT count(*) FROM pending_approvals p
                   JOIN documents d ON d.id = (p.args->>'document_id')::uuid
                  WHERE p.document_version = d.version",
            )
            .await;
        assert_eq!(matching, 4, "row_by_row {row_by_row}");
        outcomes.push(sweep_outcome(&f, &labels).await);
    }
    let kinds = ["approvals", "audit rows", "events", "jobs"];
    for (k, kind) in kinds.iter().enumerate() {
        let (set, rows) = (&outcomes[0][k], &outcomes[1][k]);
        let only_set: Vec<_> = set.iter().filter(|r| !rows.contains(r)).collect();
        let only_rows: Vec<_> = rows.iter().filter(|r| !set.contains(r)).collect();
        assert!(
            only_set.is_empty() && only_rows.is_empty() && set.len() == rows.len(),
            "{kind} differ\nset-based only: {only_set:#?}\nrow by row only: {only_rows:#?}"
        );
    }
}

/// Builds the population (clock at a whole second), moves the clock 2 h on, changes data behind
/// some approvals' backs and sweeps once (batches of 3). Returns every id's label and the report.
async fn sweep_population(f: &Fixture, row_by_row: bool) -> (Vec<(Uuid, String)>, SweepReport) {
    let (long, short) = (Duration::hours(10), Duration::hours(1));
    let mut labels: Vec<(Uuid, String)> = vec![(f.org, "org".into())];
    let mut conn = f.db.pool.acquire().await.unwrap();
    let doc = async |name: &str, labels: &mut Vec<(Uuid, String)>| {
        let d = f.doc(name).await;
        labels.push((d, format!("doc:{name}")));
        f.clock.advance(Duration::microseconds(1));
        d
    };
    let d_valid = doc("valid", &mut labels).await;
    let set_metadata = async |conn: &mut sqlx::PgConnection, d: Uuid, metadata: &str| {
        sqlx::query("UPDATE documents SET metadata = $2::jsonb WHERE id = $1")
            .bind(d)
            .bind(metadata)
            .execute(conn)
            .await
            .unwrap();
    };
    set_metadata(&mut conn, d_valid, r#"{"amount": 1.50}"#).await;
    f.clock
        .advance(Duration::milliseconds(1) - Duration::microseconds(1));
    let d_expired = doc("expired", &mut labels).await;
    let d_no_text = documents::insert(&mut conn, f.org, "no_text", None, &json!({}), f.clock.now())
        .await
        .unwrap();
    labels.push((d_no_text, "doc:no_text".into()));
    let d_late = doc("late", &mut labels).await;
    let d_early = doc("early", &mut labels).await;
    let d_gone = doc("gone", &mut labels).await;
    let d_gone_late = doc("gone_late", &mut labels).await;
    let d_back = doc("back", &mut labels).await;
    let d_same = doc("same", &mut labels).await;
    let d_rejected = doc("rejected", &mut labels).await;
    let d_aside = doc("aside", &mut labels).await;
    let d_legacy = doc("legacy", &mut labels).await;
    // Numbers in metadata: the set-based statement leaves these to the Rust re-check (`jsonb`
    // and `serde_json` compare and round numbers differently).
    let d_late_numbers = doc("late_numbers", &mut labels).await;
    let d_aside_long = doc("aside_long", &mut labels).await;
    set_metadata(&mut conn, d_late_numbers, r#"{"amount": 2, "n": [1.50]}"#).await;
    // More digits than an f64 holds: the stored snapshot has the nearest f64, the row the exact
    // number, so the two differ as `jsonb` while the snapshot's hash is unchanged.
    set_metadata(
        &mut conn,
        d_aside_long,
        r#"{"ratio": 0.1000000000000000000001}"#,
    )
    .await;
    let missing = Uuid::now_v7();
    labels.push((missing, "doc:missing".into()));
    let update = |d: Uuid| json!({"document_id": d, "metadata": {"reviewed": true}});
    let delete = |d: Uuid| json!({"document_id": d});
    let tag = |name: &str| json!({"name": name, "color": "#112233"});
    for (label, tool, args, ttl, repropose) in [
        ("valid", "update_document", update(d_valid), long, false),
        (
            "expired",
            "update_document",
            update(d_expired),
            short,
            false,
        ),
        (
            "expired_no_text",
            "delete_document",
            delete(d_no_text),
            short,
            true,
        ),
        ("late", "update_document", update(d_late), short, true),
        ("early", "delete_document", delete(d_early), long, true),
        ("gone", "update_document", update(d_gone), long, false),
        (
            "gone_late",
            "delete_document",
            delete(d_gone_late),
            short,
            false,
        ),
        ("back", "update_document", update(d_back), long, false),
        (
            "same_doc_expired",
            "update_document",
            update(d_same),
            short,
            false,
        ),
        (
            "same_doc_live",
            "delete_document",
            delete(d_same),
            long,
            false,
        ),
        ("missing", "delete_document", delete(missing), short, false),
        ("tag_new", "create_tag", tag("urgent"), long, false),
        ("tag_same", "create_tag", tag("calm"), short, false),
        (
            "aside_live",
            "update_document",
            update(d_aside),
            long,
            false,
        ),
        (
            "aside_expired",
            "delete_document",
            delete(d_aside),
            short,
            false,
        ),
        ("legacy", "update_document", update(d_legacy), short, false),
        (
            "late_numbers",
            "update_document",
            update(d_late_numbers),
            short,
            true,
        ),
        (
            "aside_long",
            "delete_document",
            delete(d_aside_long),
            short,
            false,
        ),
        (
            "rejected",
            "update_document",
            update(d_rejected),
            short,
            false,
        ),
    ] {
        let id = f.propose(tool, args, ttl, repropose).await;
        labels.push((id, label.into()));
    }
    let rejected = labels.last().unwrap().0;
    // Proposed before document versions were recorded: judged by its snapshot alone.
    let legacy = labels.iter().find(|(_, l)| l == "legacy").unwrap().0;
    sqlx::query("UPDATE pending_approvals SET document_version = NULL WHERE id = $1")
        .bind(legacy)
        .execute(&mut *conn)
        .await
        .unwrap();
    f.decide(rejected, Decision::Reject { by: "alice".into() })
        .await;
    f.clock.advance(Duration::hours(2));
    f.touch(d_late, json!({"edited": true})).await;
    f.touch(d_early, json!({"edited": true})).await;
    f.touch(d_late_numbers, json!({"edited": true})).await;
    // Changed and changed back: the same metadata, a later updated_at and version (the sweep
    // falls back to comparing snapshots, and finds them equal).
    f.touch(d_back, json!({"edited": true})).await;
    sqlx::query("UPDATE documents SET metadata = metadata - 'edited' WHERE id = $1")
        .bind(d_back)
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query("DELETE FROM documents WHERE id = ANY($1)")
        .bind([d_gone, d_gone_late])
        .execute(&mut *conn)
        .await
        .unwrap();
    // A new row version with the same snapshot (a column the snapshot does not cover).
    sqlx::query("UPDATE documents SET auto_create_error = 'unrelated' WHERE id = ANY($1)")
        .bind([d_aside, d_aside_long])
        .execute(&mut *conn)
        .await
        .unwrap();
    let t = f.tag("urgent").await;
    labels.push((t, "tag:urgent".into()));
    let mut sweeper = f.sweeper(3);
    sweeper.row_by_row = row_by_row;
    let report = sweeper.run_once(None).await.unwrap();
    (labels, report)
}

/// What a sweep left: approvals, audit rows, events and jobs, ids replaced by their labels,
/// each kind sorted.
async fn sweep_outcome(f: &Fixture, labels: &[(Uuid, String)]) -> Vec<Vec<String>> {
    let queries = [
        "SELECT to_jsonb(a) FROM (SELECT id, org_id, tool, args, snapshot,
                status, decided_by, decided_at, result, repropose, chain_id, chain_depth
           FROM pending_approvals) a",
        // A swept approval's row keeps hashes of its arguments and result, which hold ids that
        // differ between the two databases: each is compared with the hash of its own
        // approval's arguments and result instead.
        "SELECT to_jsonb(a) - 'id'
                || jsonb_build_object(
                     'args', CASE WHEN a.args ? 'sha256' AND a.call_id LIKE 'approval:%'
                                  THEN to_jsonb(a.args->>'sha256' = (SELECT encode(sha256(convert_to(p.args::text, 'UTF8')), 'hex')
                                                                  FROM pending_approvals p WHERE 'approval:' || p.id = a.call_id))
                                  ELSE a.args END,
                     'outcome', CASE WHEN a.outcome ? 'sha256' AND a.call_id LIKE 'approval:%'
                                     THEN (a.outcome - 'sha256') || jsonb_build_object('sha256_of_result',
                                          a.outcome->>'sha256' = (SELECT encode(sha256(convert_to(p.result::text, 'UTF8')), 'hex')
                                                                   FROM pending_approvals p WHERE 'approval:' || p.id = a.call_id))
                                     ELSE a.outcome END)
           FROM audit_events a",
        "SELECT to_jsonb(e) - 'id' - 'tx' FROM agentd_events e",
        "SELECT to_jsonb(j) FROM (SELECT kind, payload, priority, max_attempts, unique_key, state
           FROM agentd_jobs WHERE kind = 'approval_expiry') j",
    ];
    let mut out = Vec::new();
    for q in queries {
        let rows: Vec<Value> = sqlx::query_scalar(q).fetch_all(&f.db.pool).await.unwrap();
        let mut rows: Vec<String> = rows
            .iter()
            .map(|r| {
                let mut s = r.to_string();
                for (id, label) in labels {
                    s = s.replace(&id.to_string(), label);
                }
                s
            })
            .collect();
        rows.sort();
        out.push(rows);
    }
    out
}

/// Batches are judged by several workers at once (`sweep.workers`), each on its own connection:
/// 60 approvals in batches of 4 over 4 workers end exactly once each, with one audit row and one
/// event apiece, and the report counts each once. Half are past their TTL; of each half, a third
/// are on a document changed since.
#[tokio::test]
async fn parallel_workers_end_every_approval_exactly_once() {
    let f = fixture().await;
    let mut touched = Vec::new();
    for i in 0..60 {
        let d = f.doc(&format!("doc{i}")).await;
        let ttl = if i % 2 == 0 {
            Duration::hours(1)
        } else {
            Duration::hours(10)
        };
        f.propose("delete_document", json!({"document_id": d}), ttl, false)
            .await;
        if i % 3 == 0 {
            touched.push(d);
        }
    }
    f.clock.advance(Duration::hours(2));
    for d in touched {
        f.touch(d, json!({"edited": true})).await;
    }
    let mut sweeper = f.sweeper(4);
    sweeper.workers = 4;
    let r = sweeper.run_once(None).await.unwrap();
    // Past the TTL: 30, of which 10 changed (i % 6 == 0); live and changed: 10 (i % 6 == 3).
    assert_eq!((r.checked, r.expired, r.stale), (60, 20, 20));
    let by_status = f
        .count("SELECT count(*) FROM pending_approvals WHERE status = 'pending'")
        .await;
    assert_eq!(by_status, 20);
    let audit = f
        .count(
            "SELECT count(*) FROM (SELECT call_id FROM audit_events WHERE category = 'approval'
                                     AND decision IN ('expired', 'stale')
                                   GROUP BY call_id HAVING count(*) = 1) once",
        )
        .await;
    assert_eq!(audit, 40, "one audit row per decision");
    let events = f
        .count(
            "SELECT count(DISTINCT subject_id) FROM agentd_events
              WHERE type IN ('approval.expired', 'approval.stale')",
        )
        .await;
    let all_events = f
        .count("SELECT count(*) FROM agentd_events WHERE type IN ('approval.expired', 'approval.stale')")
        .await;
    assert_eq!((events, all_events), (40, 40));
}

/// Progress is reported after every batch, also after one whose approvals are all live on
/// documents still at their snapshot's version (counted as checked by the id scan, no statement).
#[tokio::test]
async fn progress_reports_batches_of_unchanged_live_approvals() {
    let f = fixture().await;
    for i in 0..6 {
        let d = f.doc(&format!("doc{i}")).await;
        f.propose(
            "delete_document",
            json!({"document_id": d}),
            Duration::hours(10),
            false,
        )
        .await;
    }
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut sweeper = f.sweeper(2);
    let into = seen.clone();
    sweeper.progress = Some(Arc::new(move |r: &SweepReport| {
        into.lock().unwrap().push(r.checked)
    }));
    let r = sweeper.run_once(None).await.unwrap();
    assert_eq!((r.checked, r.expired, r.stale), (6, 0, 0));
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![2, 4, 6],
        "one report a batch, with the totals so far"
    );
}

/// The sweep reads live approvals without locking them: one decided between that read and the
/// sweep's update keeps its decision, and gets no second audit row.
#[tokio::test]
async fn an_approval_decided_meanwhile_is_not_decided_again_by_the_sweep() {
    let f = fixture().await;
    let d = f.doc("raced").await;
    let a = f
        .propose(
            "delete_document",
            json!({"document_id": d}),
            Duration::hours(10),
            false,
        )
        .await;
    let read = f.approval(a).await;
    sqlx::query(
        "UPDATE pending_approvals SET status = 'rejected', decided_by = 'user:x' WHERE id = $1",
    )
    .bind(a)
    .execute(&f.db.pool)
    .await
    .unwrap();
    let mut tx = f.db.pool.begin().await.unwrap();
    let mut rows = vec![(&read, json!({"changes": {}}))];
    let n = agentd::store::approvals_sweep::decide_many(
        &mut tx,
        &mut rows,
        "stale",
        "system:approval_expiry",
        f.clock.now(),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!((n, rows.len()), (0, 0));
    assert_eq!(f.approval(a).await.status, "rejected");
    assert!(
        f.decisions(a).await.is_empty(),
        "{:?}",
        f.decisions(a).await
    );
}

#[tokio::test]
async fn one_sweep_pass_handles_a_mixed_batch() {
    let f = fixture().await;
    let mut valid = Vec::new();
    let mut expired = Vec::new();
    let mut stale_late = Vec::new();
    let mut stale_early = Vec::new();
    for i in 0..3 {
        let d = f.doc(&format!("valid{i}")).await;
        valid.push(
            f.propose(
                "update_document",
                json!({"document_id": d, "metadata": {"i": i}}),
                Duration::hours(10),
                false,
            )
            .await,
        );
    }
    for i in 0..3 {
        let d = f.doc(&format!("expired{i}")).await;
        expired.push(
            f.propose(
                "update_document",
                json!({"document_id": d, "metadata": {"i": i}}),
                Duration::hours(1),
                false,
            )
            .await,
        );
    }
    let mut touch = Vec::new();
    for i in 0..2 {
        let d = f.doc(&format!("late{i}")).await;
        // The first one asks to be re-proposed when it goes stale.
        stale_late.push(
            f.propose(
                "update_document",
                json!({"document_id": d, "metadata": {"i": i}}),
                Duration::hours(1),
                i == 0,
            )
            .await,
        );
        touch.push(d);
    }
    for i in 0..2 {
        let d = f.doc(&format!("early{i}")).await;
        stale_early.push(
            f.propose(
                "delete_document",
                json!({"document_id": d}),
                Duration::hours(10),
                false,
            )
            .await,
        );
        touch.push(d);
    }
    f.clock.advance(Duration::hours(2));
    for d in touch {
        f.touch(d, json!({"edited": true})).await;
    }
    let r = f.sweeper(3).run_once(None).await.unwrap();
    assert_eq!(
        r,
        SweepReport {
            checked: 10,
            expired: 3,
            stale: 4,
            reproposals_enqueued: 1,
            purged: 0,
            expiring_notified: 0,
            expired_reproposals_enqueued: 0,
            suggestions_expired: 0,
        }
    );
    for id in &valid {
        assert_eq!(f.approval(*id).await.status, "pending");
    }
    for id in &expired {
        let a = f.approval(*id).await;
        assert_eq!(
            (a.status.as_str(), a.decided_by.as_deref()),
            ("expired", Some("system:approval_expiry"))
        );
        assert_eq!(
            f.decisions(*id).await,
            vec![("expired".into(), "system:approval_expiry".into())]
        );
    }
    for id in stale_late.iter().chain(&stale_early) {
        let a = f.approval(*id).await;
        assert_eq!(a.status, "stale", "{id}");
        assert!(
            a.result.as_ref().unwrap()["changes"]["metadata"].is_object(),
            "{:?}",
            a.result
        );
        assert_eq!(
            f.decisions(*id).await,
            vec![("stale".into(), "system:approval_expiry".into())]
        );
    }
    assert_eq!(
        f.count("SELECT count(*) FROM documents").await,
        10,
        "nothing executed"
    );
    let jobs: Vec<(Value, Option<String>)> = sqlx::query_as(
        "SELECT payload, unique_key FROM agentd_jobs WHERE kind = 'approval_expiry'",
    )
    .fetch_all(&f.db.pool)
    .await
    .unwrap();
    assert_eq!(
        jobs,
        vec![(
            json!({"org_id": f.org, "repropose": stale_late[0]}),
            Some(format!("repropose:{}", stale_late[0]))
        )]
    );
    // A second pass finds only the valid ones, still unchanged.
    let r = f.sweeper(3).run_once(None).await.unwrap();
    assert_eq!(
        r,
        SweepReport {
            checked: 3,
            ..Default::default()
        }
    );
}

#[tokio::test]
async fn stale_approvals_are_reproposed_in_a_chain_up_to_the_cap() {
    let f = fixture().await;
    let doc = f.doc("a.txt").await;
    let first = f
        .propose(
            "update_document",
            json!({"document_id": doc, "metadata": {"k": "v"}}),
            Duration::hours(TTL),
            true,
        )
        .await;
    let max = ApprovalExpiry::sweeper(&f.app).max_reproposals;
    assert_eq!(max, 2, "jobs/approval_expiry.toml");
    let mut current = first;
    for depth in 0..=max as i32 {
        f.touch(doc, json!({"edit": depth})).await;
        let r = f.sweeper(100).run_once(None).await.unwrap();
        assert_eq!(r.stale, 1);
        assert_eq!(f.approval(current).await.status, "stale");
        let jobs = agentd::queue::store::list(
            &f.db.pool,
            Some("approval_expiry"),
            Some(agentd::queue::JobState::Available),
            10,
        )
        .await
        .unwrap();
        if depth == max as i32 {
            assert_eq!(
                (r.reproposals_enqueued, jobs.len()),
                (0, 0),
                "the chain is at its cap"
            );
            break;
        }
        assert_eq!(r.reproposals_enqueued, 1);
        assert_eq!(jobs.len(), 1);
        assert_eq!(
            jobs[0].payload,
            json!({"org_id": f.org, "repropose": current})
        );
        // The org sees its re-proposal job (`GET /v1/jobs/{id}` reads it so), another org not
        // (review D1).
        let of = |org| agentd::store::api_reads::job(&f.db.pool, org, jobs[0].id);
        assert!(of(f.org).await.unwrap().is_some());
        assert!(of(uuid::Uuid::now_v7()).await.unwrap().is_none());
        // Run the job: the re-proposal run calls the same tool again, which is proposed.
        let p = Arc::new(ScriptedProvider::new(vec![
            Turn::tool("a", "get_document", json!({"document_id": doc})),
            Turn::tool(
                "b",
                "update_document",
                json!({"document_id": doc, "metadata": {"k": "v"}}),
            ),
            Turn::text("re-proposed"),
        ]));
        let app = f.with_provider(p.clone());
        let claimed = agentd::queue::store::claim(
            &f.db.pool,
            &["approval_expiry".to_string()],
            1,
            "test",
            Utc::now() + Duration::minutes(1),
            Duration::minutes(5),
        )
        .await
        .unwrap();
        assert_eq!(claimed.len(), 1);
        ApprovalExpiry { app }
            .handle(JobContext {
                job: claimed.into_iter().next().unwrap(),
                cancel: CancellationToken::new(),
            })
            .await
            .unwrap();
        p.assert_complete();
        let old = f.approval(current).await;
        let new: astore::ApprovalRow =
            sqlx::query_as("SELECT * FROM pending_approvals WHERE status = 'pending'")
                .fetch_one(&f.db.pool)
                .await
                .unwrap();
        assert_eq!(
            (new.chain.id, new.chain.depth, new.repropose),
            (first, old.chain.depth + 1, true)
        );
        assert_eq!(new.action.args, old.action.args);
        let run = runs::get_run(&f.db.pool, new.run_id.unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (run.kind.as_str(), run.subject),
            ("approval_expiry", format!("approval:{current}"))
        );
        current = new.id;
    }
    assert_eq!(
        f.count(&format!(
            "SELECT count(*) FROM pending_approvals WHERE chain_id = '{first}'"
        ))
        .await,
        3
    );
}

#[tokio::test]
async fn retention_purges_only_old_decided_approvals() {
    let f = fixture().await;
    let doc = f.doc("a.txt").await;
    let args = |i: i32| json!({"document_id": doc, "metadata": {"i": i}});
    let mut old = Vec::new();
    for i in 0..5 {
        let id = f
            .propose("update_document", args(i), Duration::hours(TTL), false)
            .await;
        f.decide(id, Decision::Reject { by: "alice".into() }).await;
        old.push(id);
    }
    let pending = f
        .propose("update_document", args(10), Duration::days(100), false)
        .await;
    let recent = f
        .propose("update_document", args(11), Duration::days(100), false)
        .await;
    f.clock.advance(Duration::days(31));
    f.decide(recent, Decision::Reject { by: "bob".into() })
        .await;
    let r = f.sweeper(2).run_once(None).await.unwrap();
    assert_eq!(r.purged, 5, "{r:?}");
    for id in &old {
        assert!(astore::get(&f.db.pool, *id).await.unwrap().is_none());
        assert_eq!(f.decisions(*id).await.len(), 1, "audit rows stay");
    }
    assert_eq!(f.approval(pending).await.status, "pending");
    assert_eq!(f.approval(recent).await.status, "rejected");
    assert_eq!(f.sweeper(2).run_once(None).await.unwrap().purged, 0);
}

// ---- the command ----

fn agentd(db: &TestDb, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentd"))
        .args(args)
        .env("DATABASE_URL", &db.url)
        .env("AGENTD_HTTP__ADDR", "")
        .env("AGENTD_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .output()
        .expect("run agentd")
}

fn stdout_json(o: &Output) -> Value {
    assert!(
        o.status.success(),
        "exit {:?}: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

#[tokio::test]
async fn the_command_lists_shows_approves_and_refuses_bad_input() {
    let f = fixture().await;
    let doc = f.doc("a.txt").await;
    let id = f
        .propose(
            "update_document",
            json!({"document_id": doc, "metadata": {"cli": "yes"}}),
            Duration::hours(TTL),
            false,
        )
        .await;
    let other = f
        .propose(
            "delete_document",
            json!({"document_id": doc}),
            Duration::hours(TTL),
            false,
        )
        .await;
    let (ids, org) = (id.to_string(), f.org.to_string());

    let list = stdout_json(&agentd(
        &f.db,
        &[
            "approvals",
            "list",
            "--org",
            "acme",
            "--status",
            "pending",
            "--json",
        ],
    ));
    let listed: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed.len(), 2);
    assert!(listed.contains(&ids.as_str()));
    let limited = stdout_json(&agentd(
        &f.db,
        &["approvals", "list", "--org", &org, "--limit", "1", "--json"],
    ));
    assert_eq!(limited.as_array().unwrap().len(), 1);

    let out = stdout_json(&agentd(
        &f.db,
        &["approvals", "approve", &ids, "--by", "carol", "--json"],
    ));
    assert_eq!(
        (out["status"].as_str(), out["changed"].as_bool()),
        (Some("executed"), Some(true)),
        "{out}"
    );
    assert_eq!(f.metadata(doc).await.0, json!({"cli": "yes"}));
    let again = stdout_json(&agentd(
        &f.db,
        &["approvals", "approve", &ids, "--by", "carol", "--json"],
    ));
    assert_eq!(again["changed"], json!(false));

    // The delete was proposed against the document before the update: now stale.
    let o = agentd(
        &f.db,
        &["approvals", "approve", &other.to_string(), "--by", "carol"],
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && text.contains("stale") && text.contains("metadata"),
        "{text}"
    );
    assert_eq!(f.count("SELECT count(*) FROM documents").await, 1);

    let show = stdout_json(&agentd(&f.db, &["approvals", "show", &ids, "--json"]));
    assert_eq!(
        show["action"],
        json!({"tool": "update_document", "args": {"document_id": doc, "metadata": {"cli": "yes"}}})
    );
    assert_eq!(show["status"], "executed");
    assert_eq!(show["decision"]["by"], "human:carol");
    assert_eq!(show["snapshot_hash"].as_str().unwrap().len(), 64);
    let history = show["history"].as_array().unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(
        (
            history[0]["decision"].as_str(),
            history[0]["actor"].as_str()
        ),
        (Some("human_approved"), Some("human:carol"))
    );
    let text = agentd(&f.db, &["approvals", "show", &ids]);
    assert!(
        text.status.success() && String::from_utf8_lossy(&text.stdout).contains("human_approved")
    );

    let rejected = stdout_json(&agentd(
        &f.db,
        &["approvals", "list", "--status", "stale", "--json"],
    ));
    assert_eq!(rejected.as_array().unwrap().len(), 1);

    // Bad input: exit 2, and the message names the input.
    let missing = Uuid::now_v7().to_string();
    for (args, needle) in [
        (
            vec!["approvals", "approve", missing.as_str(), "--by", "carol"],
            missing.as_str(),
        ),
        (
            vec!["approvals", "show", missing.as_str()],
            missing.as_str(),
        ),
        (
            vec![
                "approvals",
                "reject",
                missing.as_str(),
                "--by",
                "carol",
                "--reason",
                "no",
            ],
            missing.as_str(),
        ),
        (vec!["approvals", "list", "--status", "done"], "--status"),
        (vec!["approvals", "list", "--org", "nobody"], "--org"),
        (vec!["approvals", "list", "--limit", "0"], "--limit"),
        (vec!["approvals", "approve", ids.as_str()], "--by"),
        (
            vec!["approvals", "approve", ids.as_str(), "--by", " "],
            "--by",
        ),
        (
            vec!["approvals", "approve", "not-a-uuid", "--by", "carol"],
            "not-a-uuid",
        ),
    ] {
        let o = agentd(&f.db, &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[tokio::test]
async fn an_approval_a_person_found_stale_is_reproposed_by_the_next_sweep() {
    let f = fixture().await;
    let doc = f.doc("a.txt").await;
    let id = f
        .propose(
            "update_document",
            json!({"document_id": doc, "metadata": {"k": "proposed"}}),
            Duration::hours(TTL),
            true,
        )
        .await;
    f.touch(doc, json!({"owner": "someone else"})).await;
    assert_eq!(f.decide(id, approve("alice")).await.status, "stale");
    let report = f.sweeper(100).run_once(None).await.unwrap();
    assert_eq!(report.reproposals_enqueued, 1);
    let payload: Value =
        sqlx::query_scalar("SELECT payload FROM agentd_jobs WHERE kind = 'approval_expiry'")
            .fetch_one(&f.db.pool)
            .await
            .unwrap();
    assert_eq!(payload, json!({"org_id": f.org, "repropose": id}));
    // Idempotent: the next sweep does not enqueue it again.
    assert_eq!(
        f.sweeper(100)
            .run_once(None)
            .await
            .unwrap()
            .reproposals_enqueued,
        0
    );
}

/// Claims the waiting re-proposal job and runs it with `p`; the run it made.
async fn run_reproposal(f: &Fixture, p: Arc<dyn agentd::llm::LlmProvider>) -> runs::RunRow {
    let mut app = f.app.clone();
    app.provider = p;
    let claimed = agentd::queue::store::claim(
        &f.db.pool,
        &["approval_expiry".to_string()],
        1,
        "test",
        Utc::now() + Duration::minutes(1),
        Duration::minutes(5),
    )
    .await
    .unwrap();
    let job = claimed.into_iter().next().expect("a re-proposal job");
    let id = job.id;
    ApprovalExpiry { app }
        .handle(JobContext {
            job,
            cancel: CancellationToken::new(),
        })
        .await
        .unwrap();
    runs::run_for_job(&f.db.pool, id)
        .await
        .unwrap()
        .expect("a run")
}

/// A re-proposal run owes the action proposed again (issue 28, item 5): one that answers in
/// prose is nudged, and after the nudges it ends capped (`max_nudges`), not `succeeded` with
/// nothing stored; one whose document is gone owes nothing.
#[tokio::test]
async fn a_reproposal_run_that_answers_in_prose_is_nudged_then_capped() {
    let f = fixture().await;
    let doc = f.doc("a.txt").await;
    let id = f
        .propose(
            "update_document",
            json!({"document_id": doc, "metadata": {"k": "v"}}),
            Duration::hours(TTL),
            true,
        )
        .await;
    f.touch(doc, json!({"edit": 1})).await;
    assert_eq!(
        f.sweeper(100)
            .run_once(None)
            .await
            .unwrap()
            .reproposals_enqueued,
        1
    );
    let p = Arc::new(ScriptedProvider::new(vec![
        Turn::text("The data changed; it looks fine."),
        Turn::text("Still fine."),
        Turn::text("Nothing to do."),
    ]));
    let run = run_reproposal(&f, p.clone()).await;
    p.assert_complete();
    assert_eq!(
        (run.status.as_str(), run.stop_reason.as_deref()),
        ("capped", Some("max_nudges"))
    );
    // The nudges named the action to propose again.
    let reqs = p.requests.lock().unwrap().clone();
    assert_eq!(reqs[0].tool_choice, agentd::llm::ToolChoice::Required);
    let nudge = reqs[1]
        .messages
        .iter()
        .map(|m| m.joined_text())
        .find(|t| t.starts_with("Not finished"))
        .expect("a nudge");
    assert!(
        nudge.contains("no re-proposal") && nudge.contains("`update_document`"),
        "{nudge}"
    );
    assert_eq!(
        f.count(&format!(
            "SELECT count(*) FROM audit_events WHERE run_id = '{}' AND decision = 'nudged'",
            run.id
        ))
        .await,
        2
    );
    assert_eq!(
        f.count("SELECT count(*) FROM pending_approvals WHERE status = 'pending'")
            .await,
        0,
        "nothing was proposed"
    );

    // Its document deleted, a stale approval owes nothing: a prose answer ends the run.
    let other = f.doc("b.txt").await;
    let id2 = f
        .propose(
            "update_document",
            json!({"document_id": other, "metadata": {"k": "v"}}),
            Duration::hours(TTL),
            true,
        )
        .await;
    f.touch(other, json!({"edit": 1})).await;
    assert_eq!(
        f.sweeper(100)
            .run_once(None)
            .await
            .unwrap()
            .reproposals_enqueued,
        1
    );
    assert_eq!(f.approval(id2).await.status, "stale");
    sqlx::query("DELETE FROM documents WHERE id = $1")
        .bind(other)
        .execute(&f.db.pool)
        .await
        .unwrap();
    let p = Arc::new(ScriptedProvider::new(vec![Turn::text(
        "The document is gone; nothing to re-propose.",
    )]));
    let run = run_reproposal(&f, p.clone()).await;
    p.assert_complete();
    assert_eq!(
        (run.status.as_str(), run.stop_reason.as_deref()),
        ("succeeded", Some("completed"))
    );
    assert_eq!(f.approval(id).await.status, "stale", "left for a person");

    // The offline model re-proposes the stale action unchanged: the goal is met.
    let third = f.doc("c.txt").await;
    let args = json!({"document_id": third, "metadata": {"k": "w"}});
    f.propose("update_document", args.clone(), Duration::hours(TTL), true)
        .await;
    f.touch(third, json!({"edit": 2})).await;
    assert_eq!(
        f.sweeper(100)
            .run_once(None)
            .await
            .unwrap()
            .reproposals_enqueued,
        1
    );
    let offline = Arc::new(agentd::llm::offline::OfflineProvider::default());
    let run = run_reproposal(&f, offline).await;
    assert_eq!(
        (run.status.as_str(), run.stop_reason.as_deref()),
        ("succeeded", Some("completed"))
    );
    let again: Vec<Value> = sqlx::query_scalar(
        "SELECT args FROM pending_approvals WHERE run_id = $1 AND status = 'pending'",
    )
    .bind(run.id)
    .fetch_all(&f.db.pool)
    .await
    .unwrap();
    assert_eq!(again, vec![args], "the same action, for a person to decide");
}
