//! Event delivery over real ports against a real PostgreSQL: `GET /v1/events` (cursor, org
//! scope, bad cursors), `GET /v1/events/stream` (SSE with `Last-Event-ID` resume and wake-up on
//! new events), the webhook routes (validation naming the field, admin only, org scope, no
//! secret in answers), and deliveries as `webhook_delivery` jobs to a real HTTP receiver that
//! fails the first attempts: retried, signature verified by the receiver's side, one job per
//! (event, webhook), `dead` after the attempts run out.

use crate::api_support;
use crate::common;
use agentd::api::Role;
use agentd::app::{App, WorkerArgs};
use agentd::store::events::{self, EventType, NewEvent};
use api_support::Api;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Writes one event of `kind` for `org` (its own transaction).
async fn emit(pool: &sqlx::PgPool, org: Uuid, kind: EventType, n: i64) -> i64 {
    let mut conn = pool.acquire().await.unwrap();
    let payload = json!({"n": n});
    events::emit(
        &mut conn,
        &NewEvent {
            org_id: org,
            kind,
            subject_id: None,
            occurred_at: chrono::Utc::now(),
            payload: &payload,
            dedupe_key: None,
        },
    )
    .await
    .unwrap()
    .unwrap()
}

#[tokio::test]
async fn events_page_by_cursor_within_the_org() {
    let api = Api::start().await;
    let (org, key) = api.org("acme", Role::Reader).await;
    let (other, other_key) = api.org("globex", Role::Reader).await;
    let k = Some(key.as_str());
    let mut ids = Vec::new();
    for n in 0..5 {
        ids.push(emit(&api.db.pool, org, EventType::RunFailed, n).await);
    }
    let theirs = emit(&api.db.pool, other, EventType::RunFailed, 99).await;
    let mut seen = Vec::new();
    let mut after = 0;
    common::wait_until(30, "all five events readable", || {
        let pool = api.db.pool.clone();
        async move {
            events::list_after(&pool, org, 0, &[], 10)
                .await
                .unwrap()
                .len()
                == 5
        }
    })
    .await;
    loop {
        let r = api
            .call("GET", &format!("/v1/events?after={after}&limit=2"), k, None)
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        let page = r.body["events"].as_array().unwrap().clone();
        if page.is_empty() {
            assert_eq!(r.body["next_after"], json!(after));
            break;
        }
        for e in &page {
            assert_eq!(e["org_id"], json!(org));
            assert_eq!(e["type"], "run.failed");
            assert!(e["created_at"].is_string());
            seen.push(e["id"].as_i64().unwrap());
        }
        after = r.body["next_after"].as_i64().unwrap();
        assert_eq!(after, *seen.last().unwrap());
    }
    assert_eq!(seen, ids);
    // Another org's event id is no cursor here (not found, as any other org's id); garbage is 400.
    let r = api
        .call("GET", &format!("/v1/events?after={theirs}"), k, None)
        .await;
    r.problem(404, Some("after"));
    let o = api
        .call("GET", "/v1/events", Some(other_key.as_str()), None)
        .await;
    assert_eq!(o.body["events"].as_array().unwrap().len(), 1, "{}", o.body);
    api.call("GET", "/v1/events?limit=0", k, None)
        .await
        .problem(400, Some("limit"));
    api.call("GET", "/v1/events?after=x", k, None)
        .await
        .problem(400, Some("after"));
    api.call("GET", "/v1/events?afterr=1", k, None)
        .await
        .problem(400, Some("afterr"));
}

/// Reads SSE frames from `res` until `n` events arrived: `(id, type, data)`.
async fn sse_events(
    res: &mut reqwest::Response,
    buf: &mut String,
    n: usize,
) -> Vec<(i64, String, Value)> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while out.len() < n {
        while let Some(end) = buf.find("\n\n") {
            let frame: String = buf.drain(..end + 2).collect();
            let (mut id, mut ev, mut data) = (None, String::new(), String::new());
            for line in frame.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    id = Some(v.trim().parse::<i64>().unwrap());
                } else if let Some(v) = line.strip_prefix("event:") {
                    ev = v.trim().to_string();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim());
                }
            }
            if let Some(id) = id {
                out.push((id, ev, serde_json::from_str(&data).unwrap()));
            }
        }
        if out.len() >= n {
            break;
        }
        let chunk = tokio::time::timeout_at(deadline, res.chunk())
            .await
            .unwrap_or_else(|_| panic!("{n} events did not arrive; got {out:?}"))
            .unwrap()
            .expect("the stream stays open");
        buf.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    out
}

#[tokio::test]
async fn sse_stream_resumes_after_last_event_id_and_wakes_on_new_events() {
    let api = Api::start().await;
    let (org, key) = api.org("acme", Role::Reader).await;
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(emit(&api.db.pool, org, EventType::SuggestionCreated, n).await);
    }
    let open = |last: Option<i64>, after: Option<i64>| {
        let mut req = api
            .http
            .get(format!(
                "{}/v1/events/stream{}",
                api.base,
                after.map(|a| format!("?after={a}")).unwrap_or_default()
            ))
            .bearer_auth(&key);
        if let Some(l) = last {
            req = req.header("Last-Event-ID", l.to_string());
        }
        req.send()
    };
    // From the start.
    let mut res = open(None, Some(0)).await.unwrap();
    assert_eq!(res.status(), 200);
    assert!(
        res.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut buf = String::new();
    let got = sse_events(&mut res, &mut buf, 3).await;
    assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), ids);
    assert_eq!(got[0].1, "suggestion.created");
    assert_eq!(got[0].2["id"], json!(ids[0]));
    assert_eq!(got[0].2["payload"], json!({"n": 0}));
    drop(res);
    // Resume after the first: the other two, then one written while connected.
    let mut res = open(Some(ids[0]), None).await.unwrap();
    let mut buf = String::new();
    let got = sse_events(&mut res, &mut buf, 2).await;
    assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), ids[1..]);
    let late = emit(&api.db.pool, org, EventType::RunFailed, 9).await;
    let got = sse_events(&mut res, &mut buf, 1).await;
    assert_eq!((got[0].0, got[0].1.as_str()), (late, "run.failed"));
    // A Last-Event-ID that is no event of the org is refused before streaming, naming the header.
    let r = open(Some(999_999), None).await.unwrap();
    assert_eq!(r.status(), 404);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["field"], "Last-Event-ID");
}

#[tokio::test]
async fn webhook_routes_validate_and_are_admin_only_and_org_scoped() {
    let api = Api::start().await;
    let (org, admin) = api.org("acme", Role::Admin).await;
    let reviewer = api.key(org, Role::Reviewer).await;
    let (_, other) = api.org("globex", Role::Admin).await;
    let a = Some(admin.as_str());
    let good = json!({"url": "https://example.com/hook", "events": ["proposal.ready"],
                      "secret": "0123456789abcdef"});
    let cases = [
        (
            json!({"url": "ftp://x", "events": ["run.failed"], "secret": "0123456789abcdef"}),
            "url",
        ),
        (
            json!({"url": "not a url", "events": ["run.failed"], "secret": "0123456789abcdef"}),
            "url",
        ),
        (
            json!({"url": "https://x.test", "events": [], "secret": "0123456789abcdef"}),
            "events",
        ),
        (
            json!({"url": "https://x.test", "events": ["run.failed", "run.flied"], "secret": "0123456789abcdef"}),
            "events[1]",
        ),
        (
            json!({"url": "https://x.test", "events": ["run.failed"], "secret": "short"}),
            "secret",
        ),
        (
            json!({"url": "https://x.test", "events": ["run.failed"]}),
            "secret",
        ),
        (
            json!({"url": "https://x.test", "events": "run.failed", "secret": "0123456789abcdef"}),
            "events",
        ),
    ];
    for (body, field) in cases {
        let r = api
            .call("POST", "/v1/webhooks", a, Some(body.clone()))
            .await;
        r.problem_in(&body.to_string(), 422, Some(field));
    }
    api.call(
        "POST",
        "/v1/webhooks",
        Some(reviewer.as_str()),
        Some(good.clone()),
    )
    .await
    .problem(403, None);
    let r = api.call("POST", "/v1/webhooks", a, Some(good)).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(r.body.get("secret").is_none(), "{}", r.body);
    assert_eq!(r.body["events"], json!(["proposal.ready"]));
    let id = r.body["id"].as_str().unwrap().to_string();
    let l = api.call("GET", "/v1/webhooks", a, None).await;
    assert_eq!(l.body["webhooks"].as_array().unwrap().len(), 1);
    assert!(!l.body.to_string().contains("0123456789abcdef"));
    let o = api
        .call("GET", "/v1/webhooks", Some(other.as_str()), None)
        .await;
    assert_eq!(o.body["webhooks"], json!([]));
    api.call(
        "DELETE",
        &format!("/v1/webhooks/{id}"),
        Some(other.as_str()),
        None,
    )
    .await
    .problem(404, None);
    let d = api
        .call("DELETE", &format!("/v1/webhooks/{id}"), a, None)
        .await;
    assert_eq!(d.status, 204);
    api.call("DELETE", &format!("/v1/webhooks/{id}"), a, None)
        .await
        .problem(404, None);
}

/// What the receiver got: (headers, body) per request.
type Seen = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

/// A receiver on a real port: answers 500 to the first `fail_first` requests, then 200.
async fn receiver(fail_first: usize) -> (String, Seen) {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let s = s.clone();
            async move {
                let mut v = s.lock().unwrap();
                v.push((headers, body));
                if v.len() <= fail_first {
                    StatusCode::INTERNAL_SERVER_ERROR
                } else {
                    StatusCode::OK
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

/// The API's app with deliveries retried fast (1 ms backoff) and `attempts` per delivery, and
/// private networks allowed.
fn fast(app: &App, attempts: i32) -> App {
    let mut catalog = (*app.catalog).clone();
    let spec = catalog.kinds.get_mut("webhook_delivery").unwrap();
    spec.queue.backoff_base_ms = 1;
    spec.queue.backoff_max_ms = 5;
    spec.queue.max_attempts = attempts;
    let mut app = app.clone();
    app.catalog = Arc::new(catalog);
    app.clock = agentd::clock::system();
    // The receivers are on 127.0.0.1, which the SSRF guard refuses by default.
    let mut config = (*app.config).clone();
    config.webhooks.allow_private_networks = true;
    app.config = Arc::new(config);
    app
}

#[tokio::test]
async fn deliveries_retry_until_accepted_are_signed_once_per_event_and_die_after_n() {
    let mut api = Api::start().await;
    api.app = fast(&api.app, 3);
    // Restart the API over the fast app (webhooks copy max_attempts when they are made).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    api.base = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    tokio::spawn(agentd::api::serve(
        listener,
        None,
        api.app.clone(),
        stop.clone(),
    ));
    let (org, admin) = api.org("acme", Role::Admin).await;
    let (other, _) = api.org("globex", Role::Admin).await;
    let a = Some(admin.as_str());
    let (ok_url, ok_seen) = receiver(2).await;
    let (dead_url, dead_seen) = receiver(usize::MAX).await;
    let secret = "s3cret-s3cret-s3cret";
    let mk = |url: &str, events: Value| json!({"url": url, "events": events, "secret": secret});
    let r = api
        .call(
            "POST",
            "/v1/webhooks",
            a,
            Some(mk(&ok_url, json!(["proposal.ready", "run.failed"]))),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let ok_hook = r.body["id"].as_str().unwrap().to_string();
    let r = api
        .call(
            "POST",
            "/v1/webhooks",
            a,
            Some(mk(&dead_url, json!(["run.failed"]))),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);

    let pool = api.db.pool.clone();
    let ready = emit(&pool, org, EventType::ProposalReady, 1).await;
    // Types nobody subscribed to, and other orgs' events, make no delivery.
    emit(&pool, org, EventType::SuggestionCreated, 2).await;
    emit(&pool, other, EventType::ProposalReady, 3).await;
    let jobs: Vec<(Value, i32)> = sqlx::query_as(
        "SELECT payload, max_attempts FROM agentd_jobs WHERE kind = 'webhook_delivery' ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(
        jobs[0],
        (
            json!({"org_id": org, "event_id": ready, "webhook_id": ok_hook}),
            3
        )
    );

    let shutdown = CancellationToken::new();
    let worker = api
        .app
        .start_worker(
            WorkerArgs {
                kinds: vec!["webhook_delivery".into()],
                ..Default::default()
            },
            shutdown.clone(),
        )
        .await
        .unwrap();
    let state = |id: Value| {
        let pool = pool.clone();
        async move {
            sqlx::query_as::<_, (String, i32, Option<String>)>(
                "SELECT state, attempt, last_error FROM agentd_jobs
                  WHERE kind = 'webhook_delivery' AND (payload->'event_id') = $1",
            )
            .bind(id)
            .fetch_all(&pool)
            .await
            .unwrap()
        }
    };
    common::wait_until(60, "the delivery succeeded", || {
        let s = state(json!(ready));
        async move { s.await.first().is_some_and(|r| r.0 == "succeeded") }
    })
    .await;
    assert_eq!(state(json!(ready)).await[0].1, 3, "two 500s, then accepted");
    {
        let seen = ok_seen.lock().unwrap();
        assert_eq!(seen.len(), 3);
        let now = chrono::Utc::now().timestamp();
        for (i, (h, body)) in seen.iter().enumerate() {
            let sig = h["agentd-signature"].to_str().unwrap();
            agentd::webhooks::verify(secret, sig, body, now).unwrap();
            assert_eq!(
                agentd::webhooks::verify("another-secret-value", sig, body, now),
                Err(agentd::webhooks::VerifyError::Mismatch)
            );
            assert_eq!(h["agentd-event-id"].to_str().unwrap(), ready.to_string());
            assert_eq!(h["agentd-event-type"].to_str().unwrap(), "proposal.ready");
            assert_eq!(
                h["agentd-delivery-attempt"].to_str().unwrap(),
                (i + 1).to_string()
            );
            let b: Value = serde_json::from_slice(body).unwrap();
            assert_eq!(b["id"], json!(ready));
            assert_eq!(b["type"], "proposal.ready");
            assert_eq!(b["org_id"], json!(org));
            assert_eq!(b["payload"], json!({"n": 1}));
        }
    }

    // run.failed goes to both; the receiver that always fails makes its job dead after 3.
    let failed = emit(&pool, org, EventType::RunFailed, 4).await;
    common::wait_until(60, "one delivery succeeded and one is dead", || {
        let s = state(json!(failed));
        async move {
            let mut st: Vec<String> = s.await.into_iter().map(|r| r.0).collect();
            st.sort();
            st == ["dead", "succeeded"]
        }
    })
    .await;
    let dead = state(json!(failed))
        .await
        .into_iter()
        .find(|r| r.0 == "dead")
        .unwrap();
    assert_eq!(dead.1, 3);
    assert!(dead.2.as_deref().unwrap().contains("HTTP 500"), "{dead:?}");
    assert_eq!(dead_seen.lock().unwrap().len(), 3);
    // Exactly once per (event, webhook): the first receiver got run.failed once.
    let firsts = ok_seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(h, _)| h["agentd-event-id"].to_str().unwrap() == failed.to_string())
        .count();
    assert_eq!(firsts, 1);
    shutdown.cancel();
    worker.join().await;
    stop.cancel();
}

#[test]
fn the_webhook_delivery_job_file_is_validated_naming_file_and_key() {
    let (_, text) = agentd::catalog::BUILTIN
        .iter()
        .find(|(k, _)| *k == "webhook_delivery")
        .unwrap();
    let file = "jobs/webhook_delivery.toml";
    let parse = |t: &str| agentd::catalog::parse(file, "webhook_delivery", t, &[]);
    let spec = parse(text).unwrap();
    assert_eq!(spec.webhook.as_ref().unwrap().request_timeout_secs, 10);
    assert!(spec.agent.tools.is_empty());
    let cases = [
        (
            text.replace("request_timeout_secs = 10", "request_timeout_secs = 30"),
            "webhook.request_timeout_secs must be ≥ 1 and below queue.timeout_secs (30)",
        ),
        (
            text.replace("max_per_org = 20", "max_per_org = 0"),
            "webhook.max_per_org must be ≥ 1",
        ),
        (
            text.replace("[webhook]", "[webhooks]"),
            "unknown field `webhooks`",
        ),
        (
            format!("{text}\n[agent]\nmodel = \"\"\n"),
            "agent: kind webhook_delivery runs no agent",
        ),
        (
            text.replace("max_attempts = 8", "max_attempts = 0"),
            "queue.max_attempts must be ≥ 1",
        ),
    ];
    for (t, want) in cases {
        let e = parse(&t).unwrap_err();
        assert_eq!(e.file, file);
        assert!(e.message.contains(want), "{want}: {}", e.message);
    }
    // Agent kinds still need their [agent] section, and take no [webhook].
    let (_, ac) = agentd::catalog::BUILTIN[0];
    let e = agentd::catalog::parse(
        "a.toml",
        "auto_create",
        &format!("{ac}\n[webhook]\nrequest_timeout_secs = 1\nmax_per_org = 1\n"),
        &[],
    )
    .unwrap_err();
    assert!(e.message.contains("only webhook_delivery"), "{}", e.message);
}

/// Review N6: an open stream is re-authorised before it reads new events — revoking its key
/// ends it, and what was written after the revocation never reaches it; one key may hold only
/// so many streams.
#[tokio::test]
async fn a_revoked_key_loses_its_stream_and_streams_per_key_are_capped() {
    let api = Api::start().await;
    let (org, key) = api.org("acme", Role::Reader).await;
    let first = emit(&api.db.pool, org, EventType::SuggestionCreated, 0).await;
    let open = |key: String| {
        api.http
            .get(format!("{}/v1/events/stream?after=0", api.base))
            .bearer_auth(key)
            .send()
    };
    let mut res = open(key.clone()).await.unwrap();
    assert_eq!(res.status(), 200);
    let mut buf = String::new();
    let got = sse_events(&mut res, &mut buf, 1).await;
    assert_eq!(got[0].0, first);
    sqlx::query("UPDATE api_keys SET revoked_at = now() WHERE org_id = $1")
        .bind(org)
        .execute(&api.db.pool)
        .await
        .unwrap();
    let late = emit(&api.db.pool, org, EventType::RunFailed, 1).await;
    // The stream ends (within its poll interval) without the late event.
    let mut rest = String::new();
    let ended = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        while let Some(chunk) = res.chunk().await.unwrap() {
            rest.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream of a revoked key ends");
    assert!(
        !rest.contains(&format!("id: {late}")) && !rest.contains(&format!("id:{late}")),
        "{rest}"
    );

    let other = api.key(org, Role::Reader).await;
    let mut streams = Vec::new();
    for _ in 0..agentd::api::events::MAX_STREAMS_PER_KEY {
        let r = open(other.clone()).await.unwrap();
        assert_eq!(r.status(), 200);
        streams.push(r);
    }
    let r = open(other.clone()).await.unwrap();
    assert_eq!(r.status(), 429);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["type"], "urn:agentd:problem:too-many-streams");
    // A closed stream gives its place back.
    drop(streams.pop());
    let mut admitted = false;
    for _ in 0..50 {
        let r = open(other.clone()).await.unwrap();
        if r.status() == 200 {
            admitted = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(admitted, "a closed stream's place is given back");
}

/// A receiver that accepts and holds every connection, never reading or answering.
async fn black_hole() -> String {
    let hole = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", hole.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = hole.accept().await {
            held.push(s);
        }
    });
    url
}

/// `org` subscribes `url` to `run.failed`.
async fn subscribe(pool: &sqlx::PgPool, org: Uuid, url: &str) {
    agentd::store::webhooks::insert(
        pool,
        &agentd::store::webhooks::NewWebhook {
            org_id: org,
            url,
            events: &["run.failed".to_string()],
            secret: "s3cret-s3cret-s3cret",
            max_attempts: 8,
            priority: 0,
            now: chrono::Utc::now(),
        },
    )
    .await
    .unwrap();
}

/// Review N3: org A's receiver accepts connections and never answers; org B's answers at once.
/// A's breaker opens after `failures_to_open` failures, its waiting deliveries are pushed out
/// (none lost: they wait, still `available`), and B's deliveries, queued behind A's, land
/// without waiting for A's backlog to time out attempt by attempt.
#[tokio::test]
async fn a_black_holed_receiver_does_not_hold_up_other_orgs_deliveries() {
    let mut api = Api::start().await;
    api.app = fast(&api.app, 8);
    {
        let mut catalog = (*api.app.catalog).clone();
        let spec = catalog.kinds.get_mut("webhook_delivery").unwrap();
        spec.queue.concurrency = 4;
        // The breaker alone (the per-org cap has its own test below).
        spec.queue.max_running_per_org = None;
        let w = spec.webhook.as_mut().unwrap();
        w.request_timeout_secs = 2;
        w.failures_to_open = 3;
        api.app.catalog = Arc::new(catalog);
    }
    let (a, _) = api.org("a", Role::Admin).await;
    let (b, _) = api.org("b", Role::Admin).await;
    let hole_url = black_hole().await;
    let (ok_url, ok_seen) = receiver(0).await;
    let pool = api.db.pool.clone();
    subscribe(&pool, a, &hole_url).await;
    subscribe(&pool, b, &ok_url).await;
    // A's backlog first, then B's: FIFO would serve B after 30 × 2 s / 4 slots = 15 s.
    for n in 0..30 {
        emit(&pool, a, EventType::RunFailed, n).await;
    }
    for n in 0..5 {
        emit(&pool, b, EventType::RunFailed, n).await;
    }
    let shutdown = CancellationToken::new();
    let started = std::time::Instant::now();
    let worker = api
        .app
        .start_worker(
            WorkerArgs {
                kinds: vec!["webhook_delivery".into()],
                ..Default::default()
            },
            shutdown.clone(),
        )
        .await
        .unwrap();
    common::wait_until(30, "B's five deliveries landed", || {
        let n = ok_seen.lock().unwrap().len();
        async move { n >= 5 }
    })
    .await;
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_secs(9),
        "B waited {took:?} behind A's black hole"
    );
    common::wait_until(30, "A's subscription is failing with its breaker open", || {
        let pool = pool.clone();
        async move {
            let (failing, open): (bool, Option<bool>) = sqlx::query_as(
                "SELECT failing_since IS NOT NULL, open_until > now() FROM agentd_webhooks WHERE org_id = $1",
            )
            .bind(a)
            .fetch_one(&pool)
            .await
            .unwrap();
            failing && open == Some(true)
        }
    })
    .await;
    let (waiting, dead): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE state IN ('available', 'running')),
                count(*) FILTER (WHERE state = 'dead')
           FROM agentd_jobs WHERE kind = 'webhook_delivery' AND payload->>'org_id' = $1::text",
    )
    .bind(a)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        (waiting, dead),
        (30, 0),
        "A's deliveries wait; none is lost"
    );
    shutdown.cancel();
    worker.join().await;
}

/// Review N3, the per-org cap: with the breaker out of reach, A's black-holed deliveries hold one
/// of the four slots (`max_running_per_org = 1`, as shipped), not all four, so B's deliveries
/// written while A's are hanging go out at once. Without the cap B waited for A's attempts to
/// time out (10 s each).
#[tokio::test]
async fn a_black_holed_receiver_holds_one_delivery_slot_not_all() {
    let mut api = Api::start().await;
    api.app = fast(&api.app, 8);
    {
        let mut catalog = (*api.app.catalog).clone();
        let spec = catalog.kinds.get_mut("webhook_delivery").unwrap();
        assert_eq!(
            spec.queue.max_running_per_org,
            Some(1),
            "as jobs/webhook_delivery.toml ships"
        );
        spec.queue.concurrency = 4;
        let w = spec.webhook.as_mut().unwrap();
        w.request_timeout_secs = 10;
        w.failures_to_open = 1_000;
        api.app.catalog = Arc::new(catalog);
    }
    let (a, _) = api.org("a", Role::Admin).await;
    let (b, _) = api.org("b", Role::Admin).await;
    let hole_url = black_hole().await;
    let (ok_url, ok_seen) = receiver(0).await;
    let pool = api.db.pool.clone();
    subscribe(&pool, a, &hole_url).await;
    subscribe(&pool, b, &ok_url).await;
    for n in 0..10 {
        emit(&pool, a, EventType::RunFailed, n).await;
    }
    let shutdown = CancellationToken::new();
    let worker = api
        .app
        .start_worker(
            WorkerArgs {
                kinds: vec!["webhook_delivery".into()],
                ..Default::default()
            },
            shutdown.clone(),
        )
        .await
        .unwrap();
    let running_of_a = || {
        let pool = pool.clone();
        async move {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM agentd_jobs
                  WHERE kind = 'webhook_delivery' AND state = 'running'
                    AND payload->>'org_id' = $1::text",
            )
            .bind(a)
            .fetch_one(&pool)
            .await
            .unwrap();
            n
        }
    };
    common::wait_until(10, "one of A's deliveries hangs", || {
        let f = running_of_a();
        async move { f.await >= 1 }
    })
    .await;
    let started = std::time::Instant::now();
    for n in 0..5 {
        emit(&pool, b, EventType::RunFailed, n).await;
    }
    common::wait_until(30, "B's five deliveries landed", || {
        let n = ok_seen.lock().unwrap().len();
        async move { n >= 5 }
    })
    .await;
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_secs(5),
        "B waited {took:?} behind A's hanging deliveries"
    );
    assert!(running_of_a().await <= 1, "A holds one slot at most");
    shutdown.cancel();
    worker.join().await;
}

/// The types of `GET /v1/events?subject=…`, read again until `want` is among them (an event
/// is readable once no older transaction on the server is still open).
async fn subject_types(api: &Api, key: &str, subject: &str, want: &str) -> Vec<String> {
    let mut types = Vec::new();
    for _ in 0..300 {
        let r = api
            .call(
                "GET",
                &format!("/v1/events?subject={subject}&limit=1000"),
                Some(key),
                None,
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        types = r.body["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["type"].as_str().unwrap().to_string())
            .collect();
        if types.iter().any(|t| t == want) {
            return types;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("no {want} about {subject}: {types:?}")
}

/// Issue 49: one upload's progress from the stream alone. The product uploads over the API and
/// opens `GET /v1/events/stream?subject=DOC` (no cursor: the subject's events from its first);
/// a worker runs the auto-create with the scripted provider; the stream shows `run.started`,
/// a `run.step` per model round (tokens) and per tool call (name, decision, duration), then
/// `proposal.ready` — and nothing about another document.
#[tokio::test]
async fn an_uploads_progress_streams_from_run_started_to_proposal_ready_by_subject() {
    let api = Api::start().await;
    let (_, key) = api.org("acme", Role::Reviewer).await;
    let k = Some(key.as_str());
    let upload = async |name: &str, auto_create: bool| {
        let r = api
            .call(
                "POST",
                "/v1/documents",
                k,
                Some(json!({"name": name, "text": crate::auto_create::INVOICE,
                            "auto_create": auto_create})),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
        r.body["id"].as_str().unwrap().to_string()
    };
    let doc = upload("invoice.txt", true).await;
    // Another document's events are not in this stream.
    let other = upload("other.txt", false).await;
    let other_id: Uuid = other.parse().unwrap();
    sqlx::query("UPDATE documents SET auto_create_status = 'failed' WHERE id = $1")
        .bind(other_id)
        .execute(&api.db.pool)
        .await
        .unwrap();
    let mut res = api
        .http
        .get(format!("{}/v1/events/stream?subject={doc}", api.base))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);

    let provider = Arc::new(agentd::llm::scripted::ScriptedProvider::new(
        crate::auto_create::scripted_happy_path(),
    ));
    let mut app = api.app.clone();
    app.provider = provider.clone();
    // The job's run_at is the database's now(); the manual clock must be past it.
    api.clock.advance(chrono::Duration::seconds(60));
    let (w, stop) = common::start_worker(&app, "auto_create", None).await;

    let mut buf = String::new();
    let mut got: Vec<(i64, String, Value)> = Vec::new();
    while !got.iter().any(|(_, t, _)| t == "proposal.ready") {
        got.extend(sse_events(&mut res, &mut buf, 1).await);
        assert!(got.len() < 100, "no proposal.ready in {got:?}");
    }
    stop.cancel();
    w.join().await;
    provider.assert_complete();

    let types: Vec<&str> = got.iter().map(|(_, t, _)| t.as_str()).collect();
    assert_eq!(types.first(), Some(&"run.started"), "{types:?}");
    assert_eq!(types.last(), Some(&"proposal.ready"), "{types:?}");
    for (_, t, e) in &got {
        assert_eq!(e["type"], json!(t));
        let about = [&e["subject_id"], &e["payload"]["document_id"]];
        assert!(about.contains(&&json!(doc)), "not about {doc}: {e}");
        // No document text in any event.
        for word in ["INV-77", "Blue Fox", "1,250"] {
            assert!(!e.to_string().contains(word), "{word} in {e}");
        }
    }
    let run = &got[0].2["payload"]["run_id"];
    let steps: Vec<&Value> = got
        .iter()
        .filter(|(_, t, _)| t == "run.step")
        .map(|(_, _, e)| &e["payload"])
        .collect();
    let tools: Vec<&str> = steps
        .iter()
        .filter(|p| p["step"] == "tool")
        .map(|p| p["tool"].as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        [
            "get_document",
            "create_schema",
            "create_prompt",
            "run_extraction"
        ],
        "{steps:?}"
    );
    for p in &steps {
        assert_eq!(&p["run_id"], run);
        match p["step"].as_str() {
            Some("tool") => {
                assert_eq!(p["decision"], "auto_approved", "{p}");
                assert!(p["duration_ms"].as_i64().is_some_and(|d| d >= 0), "{p}");
            }
            Some("model") => {
                assert_eq!(
                    (&p["input_tokens"], &p["output_tokens"]),
                    (&json!(100), &json!(20))
                );
            }
            _ => panic!("a step that is neither: {p}"),
        }
    }
    // The rounds and the extraction's own model call: one step each, at distinct seqs.
    let models = steps.iter().filter(|p| p["step"] == "model").count();
    assert!(models >= 5, "{steps:?}");
    let mut seqs: Vec<i64> = steps.iter().map(|p| p["seq"].as_i64().unwrap()).collect();
    seqs.dedup();
    assert_eq!(seqs.len(), steps.len(), "one event per checkpoint");
    // The page reads the same, and another org's key sees nothing about this document.
    let page = api
        .call(
            "GET",
            &format!("/v1/events?subject={doc}&limit=1000"),
            k,
            None,
        )
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    let ids: Vec<i64> = page.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    let streamed: Vec<i64> = got.iter().map(|g| g.0).collect();
    assert!(ids.starts_with(&streamed), "{ids:?} {streamed:?}");
    let run = run.as_str().unwrap();
    let run_types = subject_types(&api, &key, run, "run.finished").await;
    assert!(
        run_types.contains(&"run.started".to_string()),
        "{run_types:?}"
    );
    assert!(
        run_types.contains(&"proposal.ready".to_string()),
        "{run_types:?}"
    );
    let (_, theirs) = api.org("globex", Role::Reader).await;
    let r = api
        .call(
            "GET",
            &format!("/v1/events?subject={doc}"),
            Some(theirs.as_str()),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["events"], json!([]));
    let mine = subject_types(&api, &key, &other, "auto_create.failed").await;
    assert_eq!(mine, ["auto_create.failed"]);
    // A subject that is not an id is 400 naming it, on both routes.
    api.call("GET", "/v1/events?subject=doc-1", k, None)
        .await
        .problem(400, Some("subject"));
    let r = api
        .http
        .get(format!("{}/v1/events/stream?subject=x", api.base))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["field"], "subject");
}

/// Issue 49: a subscription may name the run events (validated against the same list), and a
/// run's `run.started` gets its delivery job in the statement that wrote it.
#[tokio::test]
async fn a_webhook_subscribes_to_the_run_events_and_a_run_start_is_delivered() {
    let api = Api::start().await;
    let (org, admin) = api.org("acme", Role::Admin).await;
    let a = Some(admin.as_str());
    let types = [
        "run.started",
        "run.step",
        "run.finished",
        "extraction.flagged",
        "job.dead",
        "suggestion.dismissed",
    ];
    let r = api
        .call(
            "POST",
            "/v1/webhooks",
            a,
            Some(json!({"url": "https://example.com/hook", "events": types,
                        "secret": "0123456789abcdef"})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["events"], json!(types));
    api.call(
        "POST",
        "/v1/webhooks",
        a,
        Some(
            json!({"url": "https://example.com/hook", "events": ["run.started", "run.stepp"],
                    "secret": "0123456789abcdef"}),
        ),
    )
    .await
    .problem(422, Some("events[1]"));
    let mut conn = api.db.pool.acquire().await.unwrap();
    let run = agentd::store::runs::create_run(
        &mut conn,
        &agentd::store::runs::NewRun {
            id: Uuid::now_v7(),
            org_id: org,
            kind: "auto_create",
            subject: "s",
            job_id: None,
            provider: "scripted",
            model: "m",
            started_at: chrono::Utc::now(),
        },
    )
    .await
    .unwrap();
    drop(conn);
    let jobs: Vec<Value> = sqlx::query_scalar(
        "SELECT j.payload FROM agentd_jobs j JOIN agentd_events e
             ON e.id = (j.payload->>'event_id')::bigint
          WHERE j.kind = 'webhook_delivery' AND e.type = 'run.started' AND e.subject_id = $1",
    )
    .bind(run.id)
    .fetch_all(&api.db.pool)
    .await
    .unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0]["webhook_id"], r.body["id"]);
}
