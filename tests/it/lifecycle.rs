//! The life cycle of approvals and suggestions (issue 15) against a real PostgreSQL with a
//! manual clock: the nightly fan-out on each org's local date across DST changes, per-org
//! approval TTL, `approval.expiring` once, expired approvals re-proposed on the next working
//! day, rationale and summary, rejection reasons, edited approvals (re-validated, re-hashed,
//! audited), suggestion transitions and the nightly skip of dismissed subjects, and settings
//! validation through `agentd orgs set`.

use crate::common;
use agentd::app::App;
use agentd::approvals::{self, Decision, DecisionExtra, ProposalOrigin};
use agentd::clock::{Clock, ManualClock, SharedClock};
use agentd::llm::scripted::{ScriptedProvider, Turn};
use agentd::llm::{
    Block, CompletionRequest, CompletionResponse, FinishReason, LlmError, Message, Role, Usage,
};
use agentd::org_settings::{self, Patch};
use agentd::queue::cron::{CronEntry, Scheduler};
use agentd::store::{approvals as astore, documents, orgs};
use chrono::{Duration, NaiveDate, SubsecRound, TimeZone, Utc};
use common::TestDb;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

struct F {
    db: TestDb,
    clock: Arc<ManualClock>,
    app: App,
    org: Uuid,
}

async fn fixture() -> F {
    let db = TestDb::new().await;
    let clock = ManualClock::new(Utc::now().trunc_subsecs(6));
    let app = common::app(&db, clock.clone() as SharedClock);
    let org = orgs::ensure(&db.pool, "acme").await.unwrap().id;
    F {
        db,
        clock,
        app,
        org,
    }
}

impl F {
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

    async fn set(&self, p: Value) {
        let p: Patch = serde_json::from_value(p).unwrap();
        org_settings::apply(
            &self.db.pool,
            &self.app.config,
            self.org,
            &p,
            self.clock.now(),
            org_settings::SetBy::Operator,
        )
        .await
        .unwrap();
    }

    async fn propose(&self, args: Value, ttl: Duration, rationale: Option<&str>) -> Uuid {
        let env = self.app.tool_env(self.app.spec("proactive_suggestion"));
        let tool = self.app.registry.get("update_document").unwrap().clone();
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
            repropose: false,
            chain: None,
            rationale,
        };
        let id = approvals::propose(&mut ctx, tool.as_ref(), &args, origin)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        id
    }

    async fn decide(
        &self,
        id: Uuid,
        d: Decision,
        extra: DecisionExtra,
    ) -> Result<approvals::DecideOutcome, approvals::DecideError> {
        let env = self.app.tool_env(self.app.spec("proactive_suggestion"));
        approvals::decide(&self.db.pool, &self.app.clock, &env, id, None, d, extra).await
    }

    async fn approval(&self, id: Uuid) -> astore::ApprovalRow {
        astore::get(&self.db.pool, id).await.unwrap().unwrap()
    }

    async fn count(&self, sql: &str) -> i64 {
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
            .fetch_one(&self.db.pool)
            .await
            .unwrap()
    }

    async fn events(&self, kind: &str) -> Vec<Uuid> {
        sqlx::query_scalar("SELECT subject_id FROM agentd_events WHERE type = $1 ORDER BY id")
            .bind(kind)
            .fetch_all(&self.db.pool)
            .await
            .unwrap()
    }

    async fn sweep(&self) -> approvals::SweepReport {
        agentd::jobs::approval_expiry::ApprovalExpiry::sweeper(&self.app)
            .run_once(None)
            .await
            .unwrap()
    }
}

// ---- local time ----

/// Walks the clock in 15-minute ticks over `days` from `start` and returns, per org, the
/// nights enqueued.
async fn walk(f: &F, start: chrono::DateTime<Utc>, days: i64) -> BTreeMap<Uuid, Vec<NaiveDate>> {
    let entry = CronEntry {
        kind: "proactive_suggestion".into(),
        schedule: cron::Schedule::from_str("0 */15 * * * *").unwrap(),
        fan_out: Some(agentd::store::nightly::fan_out(
            agentd::catalog::FanOut::Orgs,
            0,
        )),
        priority: 0,
        max_attempts: 3,
    };
    let s = Scheduler::new(f.db.pool.clone(), f.clock.clone(), vec![entry]);
    f.clock.set(start);
    while f.clock.now() < start + Duration::days(days) {
        s.run_once().await.unwrap();
        f.clock.advance(Duration::minutes(15));
    }
    let rows: Vec<(Value,)> = sqlx::query_as(
        "SELECT payload FROM agentd_jobs WHERE kind = 'proactive_suggestion' ORDER BY id",
    )
    .fetch_all(&f.db.pool)
    .await
    .unwrap();
    let mut out: BTreeMap<Uuid, Vec<NaiveDate>> = BTreeMap::new();
    for (p,) in rows {
        out.entry(Uuid::parse_str(p["org_id"].as_str().unwrap()).unwrap())
            .or_default()
            .push(p["night"].as_str().unwrap().parse().unwrap());
    }
    out
}

#[tokio::test]
async fn the_nightly_fan_out_runs_once_per_local_date_across_dst_changes() {
    let f = fixture().await;
    // Berlin at 02:00 local: the hour that does not exist in spring and happens twice in autumn.
    f.set(json!({"timezone": "Europe/Berlin", "nightly_hour": 2}))
        .await;
    let ny = orgs::ensure(&f.db.pool, "newyork").await.unwrap().id;
    let p: Patch =
        serde_json::from_value(json!({"timezone": "America/New_York", "nightly_hour": 1})).unwrap();
    org_settings::apply(
        &f.db.pool,
        &f.app.config,
        ny,
        &p,
        f.clock.now(),
        org_settings::SetBy::Operator,
    )
    .await
    .unwrap();

    // Spring: Berlin skips 02:00–03:00 on 2026-03-29. Each org's local dates from the start
    // (already past its hour that day) to the end of the walk, once each.
    let spring = walk(&f, Utc.with_ymd_and_hms(2026, 3, 27, 12, 0, 0).unwrap(), 4).await;
    let days = |from: (i32, u32, u32), n: i64| -> Vec<NaiveDate> {
        let d0 = NaiveDate::from_ymd_opt(from.0, from.1, from.2).unwrap();
        (0..n).map(|i| d0 + Duration::days(i)).collect()
    };
    assert_eq!(spring[&f.org], days((2026, 3, 27), 5));
    assert_eq!(spring[&ny], days((2026, 3, 27), 5));
    // Each job runs at (or after) the org's local nightly hour: Berlin's 2026-03-29 job at
    // 01:00 UTC = 03:00 CEST, the first hour of that date at or past 02:00.
    let run_at: chrono::DateTime<Utc> = sqlx::query_scalar(
        "SELECT run_at FROM agentd_jobs WHERE payload->>'org_id' = $1 AND payload->>'night' = '2026-03-29'",
    )
    .bind(f.org.to_string())
    .fetch_one(&f.db.pool)
    .await
    .unwrap();
    assert_eq!(run_at, Utc.with_ymd_and_hms(2026, 3, 29, 1, 0, 0).unwrap());

    sqlx::query("DELETE FROM agentd_jobs")
        .execute(&f.db.pool)
        .await
        .unwrap();
    // Autumn: Berlin repeats 02:00–03:00 on 2026-10-25 — still one job that night.
    let autumn = walk(&f, Utc.with_ymd_and_hms(2026, 10, 23, 12, 0, 0).unwrap(), 4).await;
    assert_eq!(autumn[&f.org], days((2026, 10, 23), 5));
    assert_eq!(autumn[&ny], days((2026, 10, 23), 5));
    let run_at: chrono::DateTime<Utc> = sqlx::query_scalar(
        "SELECT run_at FROM agentd_jobs WHERE payload->>'org_id' = $1 AND payload->>'night' = '2026-10-25'",
    )
    .bind(f.org.to_string())
    .fetch_one(&f.db.pool)
    .await
    .unwrap();
    // The first 02:00 (CEST, UTC+2) of the two.
    assert_eq!(run_at, Utc.with_ymd_and_hms(2026, 10, 25, 0, 0, 0).unwrap());
}

#[test]
fn the_next_working_day_skips_weekends_in_the_orgs_zone() {
    use agentd::approvals::expiring::repropose_at;
    let tz: chrono_tz::Tz = "Europe/Berlin".parse().unwrap();
    // Friday 2026-11-20 23:30 UTC is already Saturday in Berlin → Monday 07:00 CET = 06:00 UTC.
    let at = repropose_at(
        tz,
        7,
        Utc.with_ymd_and_hms(2026, 11, 20, 23, 30, 0).unwrap(),
    );
    assert_eq!(at, Utc.with_ymd_and_hms(2026, 11, 23, 6, 0, 0).unwrap());
    // Tuesday → Wednesday.
    let at = repropose_at(tz, 2, Utc.with_ymd_and_hms(2026, 11, 24, 10, 0, 0).unwrap());
    assert_eq!(at, Utc.with_ymd_and_hms(2026, 11, 25, 1, 0, 0).unwrap());
}

// ---- expiry with care ----

#[tokio::test]
async fn the_orgs_ttl_applies_and_approval_expiring_is_written_once() {
    let f = fixture().await;
    f.set(json!({"approval_ttl_secs": 7200})).await;
    let doc = f.doc("a.txt").await;
    let id = f
        .propose(
            json!({"document_id": doc, "metadata": {"k": "v"}}),
            Duration::hours(4),
            None,
        )
        .await;
    let a = f.approval(id).await;
    assert_eq!(
        a.expires_at - a.created_at,
        Duration::hours(2),
        "the org's TTL, not the job file's"
    );
    // Default notice: 1 h before expiry.
    assert_eq!(f.sweep().await.expiring_notified, 0);
    assert!(f.events("approval.expiring").await.is_empty());
    f.clock.advance(Duration::minutes(61));
    assert_eq!(f.sweep().await.expiring_notified, 1);
    f.clock.advance(Duration::minutes(10));
    assert_eq!(f.sweep().await.expiring_notified, 0, "once per approval");
    assert_eq!(f.events("approval.expiring").await, vec![id]);
    assert!(f.approval(id).await.expiring_notified_at.is_some());
}

#[tokio::test]
async fn expired_approvals_are_reproposed_once_on_the_next_working_day_if_unchanged() {
    let f = fixture().await;
    // Wednesday 2026-11-25 10:00 UTC.
    f.clock
        .set(Utc.with_ymd_and_hms(2026, 11, 25, 10, 0, 0).unwrap());
    let doc = f.doc("a.txt").await;
    let other = f.doc("b.txt").await;
    let keep = f
        .propose(
            json!({"document_id": doc, "metadata": {"k": "v"}}),
            Duration::hours(1),
            Some("why"),
        )
        .await;
    let changed = f
        .propose(
            json!({"document_id": other, "metadata": {"k": "v"}}),
            Duration::hours(1),
            None,
        )
        .await;
    // Without the opt-in nothing is re-proposed.
    f.clock.advance(Duration::hours(2));
    let r = f.sweep().await;
    assert_eq!((r.expired, r.expired_reproposals_enqueued), (2, 0));
    // Opt in; the next sweep (within the day) queues both for the next working day.
    f.set(json!({"repropose_expired": true, "timezone": "Europe/Berlin", "nightly_hour": 6}))
        .await;
    let r = f.sweep().await;
    assert_eq!(r.expired_reproposals_enqueued, 2);
    assert_eq!(
        f.sweep().await.expired_reproposals_enqueued,
        0,
        "one job per approval"
    );
    let run_at: Vec<chrono::DateTime<Utc>> = sqlx::query_scalar(
        "SELECT run_at FROM agentd_jobs WHERE payload ? 'repropose_expired' ORDER BY id",
    )
    .fetch_all(&f.db.pool)
    .await
    .unwrap();
    // Thursday 06:00 in Berlin (CET) = 05:00 UTC.
    assert_eq!(
        run_at,
        vec![Utc.with_ymd_and_hms(2026, 11, 26, 5, 0, 0).unwrap(); 2]
    );
    // One document changes before then.
    let mut conn = f.db.pool.acquire().await.unwrap();
    documents::update(
        &mut conn,
        f.org,
        other,
        None,
        Some(&json!({"x": 1})),
        f.clock.now(),
    )
    .await
    .unwrap()
    .unwrap();
    drop(conn);
    f.clock
        .set(Utc.with_ymd_and_hms(2026, 11, 26, 5, 0, 0).unwrap());
    let env = f.app.tool_env(f.app.spec("proactive_suggestion"));
    let ttl = Duration::hours(4);
    use agentd::approvals::expiring::{Reproposed, repropose_expired};
    let now = f.clock.now();
    let out = repropose_expired(&f.db.pool, &env, keep, ttl, now)
        .await
        .unwrap();
    let Reproposed::New(new_id) = out else {
        panic!("{out:?}")
    };
    assert_eq!(
        repropose_expired(&f.db.pool, &env, changed, ttl, now)
            .await
            .unwrap(),
        Reproposed::Changed
    );
    assert_eq!(
        repropose_expired(&f.db.pool, &env, keep, ttl, now)
            .await
            .unwrap(),
        Reproposed::Nothing,
        "once"
    );
    let (old, new) = (f.approval(keep).await, f.approval(new_id).await);
    assert_eq!(old.reproposed_as, Some(new_id));
    assert_eq!(
        (
            new.status.as_str(),
            &new.action.args,
            &new.snapshot_hash,
            new.chain.id,
            new.chain.depth
        ),
        (
            "pending",
            &old.action.args,
            &old.snapshot_hash,
            old.chain.id,
            1
        )
    );
    assert_eq!(new.rationale.as_deref(), Some("why"));
    assert_eq!(new.expires_at, now + ttl);
}

// ---- reasons ----

fn with_rationale(req: &CompletionRequest) -> Result<CompletionResponse, LlmError> {
    // The document id is in the first message ("doc=<uuid>").
    let first = req
        .messages
        .iter()
        .find(|m| m.role == Role::User)
        .unwrap()
        .joined_text();
    let doc: String = first
        .split("doc=")
        .nth(1)
        .unwrap()
        .chars()
        .take(36)
        .collect();
    Ok(CompletionResponse {
        message: Message {
            role: Role::Assistant,
            content: vec![
                Block::Text {
                    text: "The vendor is missing on this invoice; setting it.".into(),
                },
                Block::ToolUse {
                    id: "a".into(),
                    name: "update_document".into(),
                    arguments: json!({"document_id": doc, "metadata": {"vendor": "ACME"}})
                        .to_string(),
                },
            ],
        },
        usage: Usage {
            input_tokens: 10,
            output_tokens: 10,
            ..Default::default()
        },
        finish: FinishReason::ToolUse,
        model: "scripted".into(),
    })
}

#[tokio::test]
async fn a_proposal_carries_the_models_rationale_and_a_summary_and_a_rejection_its_reason() {
    let f = fixture().await;
    let doc = f.doc("invoice.txt").await;
    let p = Arc::new(ScriptedProvider::new(vec![
        Turn::Dynamic(with_rationale),
        Turn::text("done"),
    ]));
    let mut app = f.app.clone();
    app.provider = p.clone();
    let spec = app.spec("proactive_suggestion");
    let mut rs = app.run_spec(
        spec,
        f.org,
        "2026-01-01".into(),
        Some(1),
        format!("doc={doc}"),
    );
    rs.night = Some(NaiveDate::from_ymd_opt(2026, 1, 1).unwrap());
    app.engine(spec)
        .run(&rs, &CancellationToken::new())
        .await
        .unwrap();
    p.assert_complete();
    let id: Uuid = sqlx::query_scalar("SELECT id FROM pending_approvals")
        .fetch_one(&f.db.pool)
        .await
        .unwrap();
    let a = f.approval(id).await;
    assert_eq!(
        a.rationale.as_deref(),
        Some("The vendor is missing on this invoice; setting it.")
    );
    assert_eq!(
        a.summary.as_deref(),
        Some("Update document 'invoice.txt': metadata")
    );

    let o = f
        .decide(
            id,
            Decision::Reject { by: "bob".into() },
            DecisionExtra {
                reason: Some("vendor is not ACME".into()),
                edited_args: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(o.status, "rejected");
    let a = f.approval(id).await;
    assert_eq!(a.decision_reason.as_deref(), Some("vendor is not ACME"));
    let outcome: Value = sqlx::query_scalar(
        "SELECT outcome FROM audit_events WHERE call_id = $1 AND decision = 'human_rejected'",
    )
    .bind(format!("approval:{id}"))
    .fetch_one(&f.db.pool)
    .await
    .unwrap();
    // The audit row keeps a summary of the outcome (personal data stays out of audit rows);
    // the reason itself is on the approval.
    assert_eq!(
        outcome,
        agentd::pii::audit::summarise(&json!({"reason": "vendor is not ACME"}))
    );
}

#[tokio::test]
async fn approving_with_edited_arguments_revalidates_rehashes_and_audits_the_edit() {
    let f = fixture().await;
    let doc = f.doc("a.txt").await;
    let other = f.doc("b.txt").await;
    let id = f
        .propose(
            json!({"document_id": doc, "metadata": {"vendor": "ACNE"}}),
            Duration::hours(4),
            None,
        )
        .await;
    let before = f.approval(id).await;
    let approve = || Decision::Approve { by: "alice".into() };
    // Refused edits change nothing: bad schema, another document.
    for (args, needle) in [
        (json!({"metadata": "not an object"}), "arguments"),
        (
            json!({"document_id": other, "metadata": {}}),
            "another document",
        ),
    ] {
        let e = f
            .decide(
                id,
                approve(),
                DecisionExtra {
                    reason: None,
                    edited_args: Some(args),
                },
            )
            .await
            .unwrap_err();
        assert!(matches!(e, approvals::DecideError::InvalidEdit(_)), "{e}");
        assert!(e.to_string().contains(needle), "{e}");
        assert_eq!(f.approval(id).await.snapshot_hash, before.snapshot_hash);
    }
    let o = f
        .decide(
            id,
            approve(),
            DecisionExtra {
                reason: None,
                edited_args: Some(json!({"metadata": {"vendor": "ACME"}})),
            },
        )
        .await
        .unwrap();
    assert_eq!(o.status, "executed", "{o:?}");
    let a = f.approval(id).await;
    assert!(a.edited);
    assert_eq!(
        a.action.args,
        json!({"document_id": doc, "metadata": {"vendor": "ACME"}})
    );
    assert_ne!(a.snapshot_hash, before.snapshot_hash);
    assert_eq!(
        a.snapshot_hash,
        approvals::snapshot_hash(&a.action.tool, &a.action.args, &a.snapshot)
    );
    let meta: Value = sqlx::query_scalar("SELECT metadata FROM documents WHERE id = $1")
        .bind(doc)
        .fetch_one(&f.db.pool)
        .await
        .unwrap();
    assert_eq!(meta, json!({"vendor": "ACME"}), "the edited action ran");
    let rows: Vec<(String, Value)> =
        sqlx::query_as("SELECT decision, outcome FROM audit_events WHERE call_id = $1 ORDER BY id")
            .bind(format!("approval:{id}"))
            .fetch_all(&f.db.pool)
            .await
            .unwrap();
    assert_eq!(
        rows.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(),
        ["edited", "human_approved"]
    );
    // Audit rows keep a summary (ids, no free text): the arguments before the edit are named
    // by their document…
    assert_eq!(
        rows[0].1["before"]["document_id"],
        before.action.args["document_id"]
    );
    // …and the summary's sha256 proves the full record: before, old and new hash.
    assert_eq!(
        rows[0].1["sha256"],
        agentd::pii::audit::summarise(&json!({"before": before.action.args,
            "before_hash": before.snapshot_hash, "after_hash": a.snapshot_hash}))["sha256"]
    );
}

// ---- suggestions ----

#[tokio::test]
async fn suggestions_are_shown_acted_dismissed_and_expired_and_dismissed_subjects_are_skipped() {
    let f = fixture().await;
    let doc = f.doc("a.txt").await;
    let night = NaiveDate::from_ymd_opt(2026, 1, 1).unwrap();
    // The nightly run writes a suggestion with an action → pending approval with the message as
    // its rationale.
    let p = Arc::new(ScriptedProvider::new(vec![
        Turn::tool(
            "s",
            "create_suggestion",
            json!({"kind": "other", "title": "Set the vendor", "message": "The vendor is missing.",
                   "document_id": doc,
                   "proposed_action": {"tool": "update_document",
                                       "args": {"document_id": doc, "metadata": {"vendor": "ACME"}}}}),
        ),
        Turn::text("done"),
    ]));
    let mut app = f.app.clone();
    app.provider = p.clone();
    let spec = app.spec("proactive_suggestion");
    let mut rs = app.run_spec(spec, f.org, night.to_string(), Some(1), "night".into());
    rs.night = Some(night);
    app.engine(spec)
        .run(&rs, &CancellationToken::new())
        .await
        .unwrap();
    p.assert_complete();
    let (sid, aid): (Uuid, Uuid) =
        sqlx::query_as("SELECT suggestion_id, id FROM pending_approvals")
            .fetch_one(&f.db.pool)
            .await
            .unwrap();
    assert_eq!(
        f.approval(aid).await.rationale.as_deref(),
        Some("The vendor is missing.")
    );
    use agentd::store::suggestions::{SuggestionStatus, Transition, transition};
    let mut conn = f.db.pool.acquire().await.unwrap();
    let now = f.clock.now();
    assert_eq!(
        transition(
            &mut conn,
            f.org,
            sid,
            SuggestionStatus::Shown,
            None,
            "t",
            now
        )
        .await
        .unwrap(),
        Transition::Done(SuggestionStatus::Shown)
    );
    // Another org cannot touch it.
    let other = orgs::ensure(&f.db.pool, "other").await.unwrap().id;
    assert_eq!(
        transition(
            &mut conn,
            other,
            sid,
            SuggestionStatus::Dismissed,
            Some("x"),
            "t",
            now
        )
        .await
        .unwrap(),
        Transition::NotFound
    );
    drop(conn);
    // Its approval executes → acted.
    let o = f
        .decide(
            aid,
            Decision::Approve { by: "alice".into() },
            DecisionExtra::default(),
        )
        .await
        .unwrap();
    assert_eq!(o.status, "executed");
    assert_eq!(state(&f, sid).await, "acted");
    let mut conn = f.db.pool.acquire().await.unwrap();
    assert_eq!(
        transition(
            &mut conn,
            f.org,
            sid,
            SuggestionStatus::Dismissed,
            Some("x"),
            "t",
            now
        )
        .await
        .unwrap(),
        Transition::Refused(SuggestionStatus::Acted),
        "an acted suggestion cannot be dismissed"
    );

    // A dismissed subject is skipped by the next nights' runs (same kind and subject).
    let n2 = night.succ_opt().unwrap();
    let s2 = agentd::store::suggestions::SuggestionFields {
        kind: "tag_documents".into(),
        subject: doc.to_string(),
        night: n2,
        title: "t".into(),
        message: "m".into(),
        document_id: Some(doc),
        proposed_action: None,
    };
    use agentd::store::suggestions::{Created, create};
    let Created::New(s2id) = create(&mut conn, f.org, &s2, None, None, now)
        .await
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(
        transition(
            &mut conn,
            f.org,
            s2id,
            SuggestionStatus::Dismissed,
            Some("we do not tag these"),
            "t",
            now
        )
        .await
        .unwrap(),
        Transition::Done(SuggestionStatus::Dismissed)
    );
    let s3 = agentd::store::suggestions::SuggestionFields {
        night: n2.succ_opt().unwrap(),
        ..s2.clone()
    };
    let got = create(&mut conn, f.org, &s3, None, None, now + Duration::days(1))
        .await
        .unwrap();
    assert!(
        matches!(&got, Created::Dismissed { reason: Some(r), .. } if r == "we do not tag these"),
        "{got:?}"
    );
    // After the skip window the subject may be suggested again.
    let later = now + Duration::days(agentd::store::suggestions::DISMISSED_DAYS + 1);
    let s4 = agentd::store::suggestions::SuggestionFields {
        night: n2 + Duration::days(20),
        ..s2.clone()
    };
    assert!(matches!(
        create(&mut conn, f.org, &s4, None, None, later)
            .await
            .unwrap(),
        Created::New(_)
    ));
    drop(conn);
    // Untouched suggestions expire after a week.
    f.clock.advance(Duration::days(
        agentd::approvals::sweep::SUGGESTION_TTL_DAYS + 30,
    ));
    let r = f.sweep().await;
    assert_eq!(r.suggestions_expired, 1, "{r:?}");
    assert_eq!(
        f.count("SELECT count(*) FROM suggestions WHERE status = 'expired'")
            .await,
        1
    );
    assert_eq!(state(&f, sid).await, "acted", "acted stays acted");
}

// ---- settings ----

#[tokio::test]
async fn settings_are_validated_and_the_cost_cap_becomes_a_token_limit() {
    let f = fixture().await;
    let bad = [
        (json!({"timezone": "Mars/Olympus"}), "timezone"),
        (json!({"nightly_hour": 24}), "nightly_hour"),
        (json!({"approval_ttl_secs": 10}), "approval_ttl_secs"),
        (json!({"monthly_token_budget": -1}), "monthly_token_budget"),
        (json!({"model": " "}), "model"),
        (
            json!({"model": "no-such-model", "cost_cap_cents": 100}),
            "cost_cap_cents",
        ),
    ];
    for (p, field) in bad {
        let patch: Patch = serde_json::from_value(p.clone()).unwrap();
        let by = org_settings::SetBy::Operator;
        let e = org_settings::apply(&f.db.pool, &f.app.config, f.org, &patch, f.clock.now(), by)
            .await
            .unwrap_err();
        match e {
            org_settings::ApplyError::Invalid(e) => assert_eq!(e.field, field, "{p}: {e}"),
            other => panic!("{p}: {other}"),
        }
    }
    let s = agentd::store::org_settings::get(&f.db.pool, f.org)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (s.timezone.as_str(), s.nightly_hour, s.model),
        ("UTC", 2, None),
        "nothing written"
    );
    // gpt-4o-mini: 60 cents per million output tokens → 300 cents buy 5,000,000 tokens.
    f.set(json!({"model": "gpt-4o-mini", "cost_cap_cents": 300, "monthly_token_budget": 9000000}))
        .await;
    let b = agentd::store::runs::budget(&f.db.pool, f.org, f.clock.now())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(b.monthly_limit, 5_000_000);
    f.set(json!({"monthly_token_budget": 1000})).await;
    let b = agentd::store::runs::budget(&f.db.pool, f.org, f.clock.now())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(b.monthly_limit, 1000);
    f.set(json!({"monthly_token_budget": null, "cost_cap_cents": null}))
        .await;
    assert!(
        agentd::store::runs::budget(&f.db.pool, f.org, f.clock.now())
            .await
            .unwrap()
            .is_none()
    );
}

#[test]
fn orgs_set_parses_pairs_by_key_and_names_the_bad_one() {
    let p = org_settings::parse_pairs(&[
        "timezone=Europe/Berlin".into(),
        "nightly_hour=3".into(),
        "auto_create=off".into(),
        "approval_ttl_secs=null".into(),
        "byok_fallback=operator".into(),
        "requests_per_minute=600".into(),
        "runs_per_minute=null".into(),
    ])
    .unwrap();
    assert_eq!(
        (p.requests_per_minute, p.runs_per_minute),
        (Some(Some(600)), Some(None))
    );
    assert_eq!(p.timezone.as_deref(), Some("Europe/Berlin"));
    assert_eq!(
        p.byok_fallback,
        Some(agentd::store::org_settings::ByokFallback::Operator)
    );
    assert_eq!(
        (p.nightly_hour, p.auto_create, p.approval_ttl_secs),
        (Some(3), Some(false), Some(None))
    );
    for (pair, key) in [
        ("colour=red", "colour"),
        ("nightly_hour=three", "nightly_hour"),
        ("auto_create=maybe", "auto_create"),
        ("timezone", "timezone"),
        ("byok_fallback=anyone", "byok_fallback"),
        ("byok_fallback=null", "byok_fallback"),
        ("runs_per_minute=fast", "runs_per_minute"),
    ] {
        let e = org_settings::parse_pairs(&[pair.into()]).unwrap_err();
        assert_eq!(e.field, key, "{pair}: {e}");
    }
}

async fn state(f: &F, id: Uuid) -> String {
    sqlx::query_scalar("SELECT status FROM suggestions WHERE id = $1")
        .bind(id)
        .fetch_one(&f.db.pool)
        .await
        .unwrap()
}
