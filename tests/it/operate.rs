//! Operators act from the API (issue 33, item 4), over a real port: cancel a waiting job, and a
//! running one through its run (the attempt stops at its next step, the run ends `cancelled`);
//! pause and resume a kind (the org's claims stop on every claim path, other orgs' go on; shown
//! in `GET /v1/status`, the queue view and `/metrics`); retry and cancel dead jobs in bulk
//! (by kind and/or ids, bounded, unique keys respected); the nightly job through `POST /v1/jobs`
//! once per org and night, as the CLI and cron make it; the org's keys (list, create once-shown,
//! revoke). Admin only, another org's ids are "not found".

use crate::api_support;
use crate::common;
use agentd::api::Role;
use agentd::llm::{CompletionRequest, CompletionResponse, LlmError, LlmProvider};
use agentd::queue::store;
use api_support::Api;
use chrono::Duration;
use common::wait_until;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use uuid::Uuid;

/// A provider whose calls never answer; counts calls entered and calls dropped unanswered.
#[derive(Default)]
struct Hangs {
    entered: AtomicUsize,
    dropped: Arc<AtomicUsize>,
}

struct DropCount(Arc<AtomicUsize>);
impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl LlmProvider for Hangs {
    fn name(&self) -> &str {
        "hangs"
    }
    async fn complete(&self, _req: CompletionRequest) -> Result<CompletionResponse, LlmError> {
        self.entered.fetch_add(1, Ordering::SeqCst);
        let _guard = DropCount(self.dropped.clone());
        std::future::pending::<()>().await;
        unreachable!()
    }
}

async fn text(api: &Api, sql: &str, id: impl ToString) -> String {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .bind(id.to_string())
        .fetch_one(&api.db.pool)
        .await
        .unwrap()
}

/// Inserts a job of `org` (none: a job without an org) in `state`; returns its id.
async fn job(api: &Api, org: Option<Uuid>, kind: &str, state: &str, key: Option<&str>) -> i64 {
    let payload = match org {
        Some(o) => json!({"org_id": o, "document_id": Uuid::now_v7()}),
        None => json!({}),
    };
    sqlx::query_scalar(
        "INSERT INTO agentd_jobs (kind, payload, state, run_at, attempt, max_attempts, last_error,
                                  finished_at, unique_key)
         VALUES ($1, $2, $3, now() - interval '1 hour', 3, 3,
                 CASE WHEN $3 = 'dead' THEN 'gave up' END,
                 CASE WHEN $3 = 'dead' THEN now() END, $4) RETURNING id",
    )
    .bind(kind)
    .bind(payload)
    .bind(state)
    .bind(key)
    .fetch_one(&api.db.pool)
    .await
    .unwrap()
}

async fn state_of(api: &Api, id: i64) -> String {
    text(api, "SELECT state FROM agentd_jobs WHERE id = $1::int8", id).await
}

#[tokio::test]
async fn a_waiting_job_is_cancelled_and_a_running_one_stops_at_its_next_step() {
    let api = Api::start().await;
    let (org, admin) = api.org("acme", Role::Admin).await;
    let reviewer = api.key(org, Role::Reviewer).await;
    let (_, other) = api.org("other", Role::Admin).await;

    // A waiting job: cancelled, never runs.
    let doc = api.doc(org, "a.txt").await;
    let r = api
        .call(
            "POST",
            "/v1/jobs",
            Some(&admin),
            Some(json!({"kind": "auto_create", "document_id": doc})),
        )
        .await;
    let waiting = r.body["id"].as_i64().unwrap();
    let path = format!("/v1/jobs/{waiting}/cancel");
    api.call("POST", &path, Some(&reviewer), None)
        .await
        .problem(403, None);
    api.call("POST", &path, Some(&other), None)
        .await
        .problem(404, None);
    api.call("POST", "/v1/jobs/0/cancel", Some(&admin), None)
        .await
        .problem(400, Some("id"));
    let c = api.call("POST", &path, Some(&admin), None).await;
    assert_eq!(c.status, 200, "{}", c.body);
    assert_eq!(
        c.body,
        json!({"id": waiting, "state": "cancelled", "run_id": null})
    );
    assert_eq!(state_of(&api, waiting).await, "cancelled");
    let again = api.call("POST", &path, Some(&admin), None).await;
    again.problem(409, None);
    assert_eq!(again.body["state"], "cancelled");

    // A running job, cancelled through its run: the provider call in flight is dropped once
    // the worker's heartbeat finds the job no longer its own, and nothing it did is recorded.
    let r = api
        .call(
            "POST",
            "/v1/documents",
            Some(&admin),
            Some(json!({"name": "b.txt", "text": "Invoice Number: INV-9\nTotal: 3.00\n", "auto_create": true})),
        )
        .await;
    let (doc, running) = (
        r.body["id"].as_str().unwrap().to_string(),
        r.body["job_id"].as_i64().unwrap(),
    );
    api.clock.advance(Duration::seconds(60));
    let hangs = Arc::new(Hangs::default());
    let mut app = api.app.clone();
    app.provider = hangs.clone();
    let (w, stop) = common::start_worker(&app, "auto_create", None).await;
    wait_until(30, "the run's provider call started", || async {
        hangs.entered.load(Ordering::SeqCst) == 1
    })
    .await;
    let run = text(
        &api,
        "SELECT id::text FROM agent_runs WHERE subject = $1",
        &doc,
    )
    .await;
    let path = format!("/v1/runs/{run}/cancel");
    api.call("POST", &path, Some(&other), None)
        .await
        .problem(404, None);
    let c = api.call("POST", &path, Some(&admin), None).await;
    assert_eq!(c.status, 200, "{}", c.body);
    assert_eq!(
        c.body,
        json!({"id": running, "state": "cancelled", "run_id": run})
    );
    wait_until(30, "the running attempt stopped", || async {
        hangs.dropped.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(state_of(&api, running).await, "cancelled");
    assert_eq!(
        text(
            &api,
            "SELECT status FROM agent_runs WHERE id = $1::uuid",
            &run
        )
        .await,
        "cancelled"
    );
    assert_eq!(
        text(
            &api,
            "SELECT auto_create_status FROM documents WHERE id = $1::uuid",
            &doc
        )
        .await,
        "failed"
    );
    api.call("POST", &path, Some(&admin), None)
        .await
        .problem(409, None);
    stop.cancel();
    w.join().await;
    assert_eq!(
        hangs.entered.load(Ordering::SeqCst),
        1,
        "it never ran again"
    );
}

#[tokio::test]
async fn a_paused_kind_is_not_claimed_for_that_org_until_it_resumes() {
    let api = Api::start().await;
    let ops = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ops_url = format!("http://{}/metrics", ops.local_addr().unwrap());
    let public = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(agentd::api::serve(
        public,
        Some(ops),
        api.app.clone(),
        stop.clone(),
    ));
    let (a, admin_a) = api.org("a", Role::Admin).await;
    let (b, admin_b) = api.org("b", Role::Admin).await;
    let (c, _) = api.org("c", Role::Admin).await;
    let reviewer = api.key(a, Role::Reviewer).await;
    let mut jobs_a = Vec::new();
    for _ in 0..3 {
        jobs_a.push(job(&api, Some(a), "auto_create", "available", None).await);
    }
    let jobs_b = [
        job(&api, Some(b), "auto_create", "available", None).await,
        job(&api, Some(b), "auto_create", "available", None).await,
    ];
    let job_c = job(&api, Some(c), "auto_create", "available", None).await;

    api.call("POST", "/v1/queue/auto_create/pause", Some(&reviewer), None)
        .await
        .problem(403, None);
    api.call("POST", "/v1/queue/nightly/pause", Some(&admin_a), None)
        .await
        .problem(400, Some("kind"));
    let p = api
        .call("POST", "/v1/queue/auto_create/pause", Some(&admin_a), None)
        .await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert_eq!(
        (&p.body["kind"], &p.body["paused"]),
        (&json!("auto_create"), &json!(true))
    );
    let again = api
        .call("POST", "/v1/queue/auto_create/pause", Some(&admin_a), None)
        .await;
    assert_eq!(
        again.body["paused_at"], p.body["paused_at"],
        "the first pause stands"
    );

    // Shown to the org (status, queue view), not to another org; counted in the metrics.
    let s = api.call("GET", "/v1/status", Some(&admin_a), None).await;
    assert_eq!(s.body["paused"].as_array().unwrap().len(), 1, "{}", s.body);
    assert_eq!(s.body["paused"][0]["kind"], "auto_create");
    let q = api.call("GET", "/v1/queue", Some(&admin_a), None).await;
    assert_eq!(q.body["paused"][0]["kind"], "auto_create", "{}", q.body);
    assert!(
        q.body["kinds"]
            .as_array()
            .unwrap()
            .contains(&json!("auto_create"))
    );
    let s = api.call("GET", "/v1/status", Some(&admin_b), None).await;
    assert_eq!(s.body["paused"], json!([]));
    let metrics = reqwest::get(&ops_url).await.unwrap().text().await.unwrap();
    assert!(
        metrics.contains("agentd_queue_paused_orgs{kind=\"auto_create\"} 1"),
        "{metrics}"
    );

    // One slot at a time: the ring walks past the paused org and serves the others in turn.
    let now = agentd::clock::Clock::now(api.clock.as_ref());
    let lease = Duration::seconds(30);
    let kinds = vec!["auto_create".to_string()];
    let mut claimed = Vec::new();
    for _ in 0..4 {
        for j in store::claim(&api.db.pool, &kinds, 1, "w", now, lease)
            .await
            .unwrap()
        {
            claimed.push(j.id);
        }
    }
    claimed.sort();
    let mut others = vec![jobs_b[0], jobs_b[1], job_c];
    others.sort();
    assert_eq!(claimed, others, "every other org's job, none of a's");
    // The eval's one-org claim and claims of several kinds leave them too.
    let scoped = store::claim_scoped(&api.db.pool, &kinds, Some(a), None, 10, "w", now, lease)
        .await
        .unwrap();
    assert!(scoped.is_empty(), "{scoped:?}");
    let several = vec!["auto_create".to_string(), "approval_expiry".to_string()];
    assert!(
        store::claim(&api.db.pool, &several, 10, "w", now, lease)
            .await
            .unwrap()
            .is_empty()
    );
    for id in &jobs_a {
        assert_eq!(state_of(&api, *id).await, "available");
    }

    // Resumed: a's jobs are claimed again.
    let r = api
        .call("POST", "/v1/queue/auto_create/resume", Some(&admin_a), None)
        .await;
    assert_eq!(
        r.body,
        json!({"kind": "auto_create", "paused": false, "paused_at": null})
    );
    let got = store::claim(&api.db.pool, &kinds, 10, "w", now, lease)
        .await
        .unwrap();
    let mut got: Vec<i64> = got.iter().map(|j| j.id).collect();
    got.sort();
    assert_eq!(got, jobs_a);
    let s = api.call("GET", "/v1/status", Some(&admin_a), None).await;
    assert_eq!(s.body["paused"], json!([]));
    stop.cancel();
}

#[tokio::test]
async fn dead_jobs_are_retried_and_cancelled_in_bulk_by_kind_and_ids() {
    let api = Api::start().await;
    let (org, admin) = api.org("acme", Role::Admin).await;
    let reviewer = api.key(org, Role::Reviewer).await;
    let (other, _) = api.org("other", Role::Admin).await;
    let d1 = job(&api, Some(org), "auto_create", "dead", None).await;
    let d2 = job(
        &api,
        Some(org),
        "auto_create",
        "dead",
        Some("auto_create:k"),
    )
    .await;
    // Another job holds d2's unique key: d2 must stay dead.
    job(
        &api,
        Some(org),
        "auto_create",
        "available",
        Some("auto_create:k"),
    )
    .await;
    let d3 = job(&api, Some(org), "auto_create", "dead", None).await;
    let p1 = job(&api, Some(org), "proactive_suggestion", "dead", None).await;
    let theirs = job(&api, Some(other), "auto_create", "dead", None).await;
    let succeeded = job(&api, Some(org), "auto_create", "succeeded", None).await;

    let post = |path: &'static str, key: String, body: Value| {
        let api = &api;
        async move { api.call("POST", path, Some(&key), Some(body)).await }
    };
    post("/v1/jobs/dead/retry", reviewer.clone(), json!({}))
        .await
        .problem(403, None);
    for (body, field) in [
        (json!({"kind": "nightly"}), "kind"),
        (json!({"ids": []}), "ids"),
        (json!({"limit": 0}), "limit"),
        (json!({"limit": 1001}), "limit"),
        (json!({"state": "dead"}), "state"),
    ] {
        post("/v1/jobs/dead/retry", admin.clone(), body.clone())
            .await
            .problem_in(&body.to_string(), 422, Some(field));
    }

    // By kind, two at a time: d1 retried, d2 skipped (its key is busy), more to come.
    let r = post(
        "/v1/jobs/dead/retry",
        admin.clone(),
        json!({"kind": "auto_create", "limit": 2}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body, json!({"ids": [d1], "skipped": [d2], "more": true}));
    assert_eq!(state_of(&api, d1).await, "available");
    assert_eq!(state_of(&api, d2).await, "dead");
    // By ids: only the org's dead ones among them.
    let r = post(
        "/v1/jobs/dead/cancel",
        admin.clone(),
        json!({"ids": [d3, theirs, succeeded, d1]}),
    )
    .await;
    assert_eq!(r.body, json!({"ids": [d3], "skipped": [], "more": false}));
    assert_eq!(state_of(&api, d3).await, "cancelled");
    assert_eq!(state_of(&api, theirs).await, "dead");
    assert_eq!(state_of(&api, succeeded).await, "succeeded");
    // Kind and ids together; then everything left of the org.
    let r = post(
        "/v1/jobs/dead/retry",
        admin.clone(),
        json!({"kind": "auto_create", "ids": [p1]}),
    )
    .await;
    assert_eq!(r.body, json!({"ids": [], "skipped": [], "more": false}));
    let r = post("/v1/jobs/dead/cancel", admin.clone(), json!({})).await;
    assert_eq!(
        r.body,
        json!({"ids": [d2, p1], "skipped": [], "more": false})
    );
    assert_eq!(state_of(&api, theirs).await, "dead", "another org's job");
}

#[tokio::test]
async fn the_nightly_job_is_made_once_per_org_and_local_night() {
    let api = Api::start().await;
    let (org, admin) = api.org("acme", Role::Admin).await;
    let k = Some(admin.as_str());
    // Far east of UTC: the org's night is usually not the UTC date.
    let s = api
        .call(
            "PATCH",
            "/v1/settings",
            k,
            Some(json!({"timezone": "Pacific/Kiritimati"})),
        )
        .await;
    assert_eq!(s.status, 200, "{}", s.body);
    let r = api
        .call(
            "POST",
            "/v1/jobs",
            k,
            Some(json!({"kind": "proactive_suggestion"})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.body["id"].as_i64().unwrap();
    let now = agentd::clock::Clock::now(api.clock.as_ref());
    let night = now
        .with_timezone(&"Pacific/Kiritimati".parse::<chrono_tz::Tz>().unwrap())
        .date_naive();
    let j = api.call("GET", &format!("/v1/jobs/{id}"), k, None).await;
    assert_eq!(
        j.body["payload"],
        json!({"org_id": org, "night": night.to_string()})
    );
    // The night was reviewed (the job finished): asking again, with or without the night, is
    // the same job, not a second review (before: a new job once the first had finished).
    sqlx::query("UPDATE agentd_jobs SET state = 'succeeded', finished_at = now() WHERE id = $1")
        .bind(id)
        .execute(&api.db.pool)
        .await
        .unwrap();
    for body in [
        json!({"kind": "proactive_suggestion"}),
        json!({"kind": "proactive_suggestion", "night": night.to_string()}),
    ] {
        let again = api.call("POST", "/v1/jobs", k, Some(body)).await;
        assert_eq!(
            (
                again.status.as_u16(),
                &again.body["duplicate"],
                &again.body["id"]
            ),
            (200, &json!(true), &json!(id)),
            "{}",
            again.body
        );
    }
    assert_eq!(
        api.count("SELECT count(*) FROM agentd_jobs WHERE kind = 'proactive_suggestion'")
            .await,
        1
    );
}

#[tokio::test]
async fn keys_are_listed_made_once_shown_and_revoked_within_the_org() {
    let api = Api::start().await;
    let (org, admin) = api.org("acme", Role::Admin).await;
    let reviewer = api.key(org, Role::Reviewer).await;
    let (_, other) = api.org("other", Role::Admin).await;
    api.call("GET", "/v1/keys", Some(&reviewer), None)
        .await
        .problem(403, None);
    api.call(
        "POST",
        "/v1/keys",
        Some(&admin),
        Some(json!({"role": "root"})),
    )
    .await
    .problem(422, Some("role"));
    let made = api
        .call(
            "POST",
            "/v1/keys",
            Some(&admin),
            Some(json!({"role": "uploader"})),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let (id, key) = (
        made.body["id"].as_str().unwrap().to_string(),
        made.body["key"].as_str().unwrap().to_string(),
    );
    assert_eq!(made.body["role"], "uploader");
    let me = api.call("GET", "/v1/me", Some(&key), None).await;
    assert_eq!(me.body["role"], "uploader", "the new key works");
    let list = api.call("GET", "/v1/keys", Some(&admin), None).await;
    let keys = list.body["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 3, "{}", list.body);
    assert!(
        !list.body.to_string().contains(&key),
        "keys are never listed"
    );
    assert!(keys.iter().all(|k| k["org_id"] == json!(org)));
    let own = api.call("GET", "/v1/me", Some(&admin), None).await.body["key_id"].clone();
    api.call(
        "POST",
        &format!("/v1/keys/{}/revoke", own.as_str().unwrap()),
        Some(&admin),
        None,
    )
    .await
    .problem(409, None);
    let path = format!("/v1/keys/{id}/revoke");
    api.call("POST", &path, Some(&other), None)
        .await
        .problem(404, None);
    let r = api.call("POST", &path, Some(&admin), None).await;
    assert_eq!(r.body, json!({"id": id, "revoked": true}));
    api.call("GET", "/v1/me", Some(&key), None)
        .await
        .problem(401, None);
    api.call("POST", &path, Some(&admin), None)
        .await
        .problem(409, None);
}
