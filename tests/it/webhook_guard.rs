//! The SSRF guard on webhook URLs, over real ports against a real PostgreSQL: with the default
//! `webhooks.allow_private_networks = false`, `POST /v1/webhooks` refuses every class of the
//! service's own network (loopback, link-local with cloud metadata, private v4 and v6,
//! unspecified, multicast, broadcast, `localhost` names) with a problem naming `url` and stores
//! nothing; an operator who sets it to true may register a loopback receiver. At delivery time
//! (a subscription stored while the guard was off, or whose name now resolves inward) the job
//! re-checks after DNS resolution: `localhost` (resolving to 127.0.0.1) and a literal 127.0.0.1
//! are never sent and the job is `dead` with the reason; the same receiver gets the delivery
//! when the guard is off.

use crate::api_support;
use crate::common;
use agentd::api::Role;
use agentd::app::App;
use agentd::store::events::{self, EventType, NewEvent};
use agentd::store::webhooks::{self, NewWebhook};
use api_support::Api;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const SECRET: &str = "0123456789abcdef";

/// `app` with the guard set as given (explicitly, either way), on any port (the receivers
/// listen on random ports; `webhooks.allowed_ports` has a test of its own below).
fn with_guard(app: &App, allow_private_networks: bool) -> App {
    let mut config = (*app.config).clone();
    config.webhooks.allow_private_networks = allow_private_networks;
    config.webhooks.allowed_ports.clear();
    let mut app = app.clone();
    app.config = Arc::new(config);
    app.clock = agentd::clock::system();
    app
}

/// Restarts the API of `api` over `app`.
async fn serve(api: &mut Api, app: App) -> CancellationToken {
    api.app = app;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    api.base = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    tokio::spawn(agentd::api::serve(
        listener,
        None,
        api.app.clone(),
        stop.clone(),
    ));
    stop
}

/// A receiver on 127.0.0.1 that answers 200 and counts requests; returns its port.
async fn receiver() -> (u16, Arc<AtomicUsize>) {
    let n = Arc::new(AtomicUsize::new(0));
    let c = n.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            let c = c.clone();
            async move {
                c.fetch_add(1, Ordering::SeqCst);
                axum::http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (port, n)
}

#[tokio::test]
async fn registration_refuses_every_internal_address_class_unless_the_operator_allows_it() {
    let mut api = Api::start().await;
    assert!(
        !api.app.config.webhooks.allow_private_networks,
        "the guard is on by default"
    );
    let (org, admin) = api.org("acme", Role::Admin).await;
    let a = Some(admin.as_str());
    let cases = [
        ("http://127.0.0.1:8080/hook", "loopback"),
        ("http://127.9.9.9/hook", "loopback"),
        ("http://[::1]:8080/hook", "loopback"),
        ("http://[::ffff:127.0.0.1]/hook", "loopback"),
        ("http://localhost:8080/hook", "loopback"),
        ("https://api.localhost/hook", "loopback"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://[fe80::1]/hook", "link-local"),
        ("http://10.0.0.8/hook", "private"),
        ("http://172.16.5.4/hook", "private"),
        ("https://192.168.1.20/hook", "private"),
        ("http://[fd00::1]/hook", "private"),
        ("http://0.0.0.0:8080/hook", "unspecified"),
        ("http://[::]/hook", "unspecified"),
        ("http://224.0.0.251/hook", "multicast"),
        ("http://[ff02::1]/hook", "multicast"),
        ("http://255.255.255.255/hook", "broadcast"),
    ];
    for (url, class) in cases {
        let body = json!({"url": url, "events": ["run.failed"], "secret": SECRET});
        let r = api
            .call("POST", "/v1/webhooks", a, Some(body.clone()))
            .await;
        r.problem_in(url, 422, Some("url"));
        let detail = r.body["detail"].as_str().unwrap_or_default().to_string();
        assert!(
            detail.contains(class) && detail.contains("webhooks.allow_private_networks"),
            "{url}: {}",
            r.body
        );
    }
    // Not http(s): refused too.
    let r = api
        .call(
            "POST",
            "/v1/webhooks",
            a,
            Some(json!({"url": "file:///etc/passwd", "events": ["run.failed"], "secret": SECRET})),
        )
        .await;
    r.problem_in("file URL", 422, Some("url"));
    assert_eq!(
        api.count("SELECT count(*) FROM agentd_webhooks").await,
        0,
        "nothing stored"
    );

    // A public address passes the guard.
    let public =
        json!({"url": "http://93.184.216.34/hook", "events": ["run.failed"], "secret": SECRET});
    let r = api.call("POST", "/v1/webhooks", a, Some(public)).await;
    assert_eq!(r.status, 201, "{}", r.body);

    // The operator turns the guard off: a loopback receiver may be registered.
    let app = with_guard(&api.app, true);
    let stop = serve(&mut api, app).await;
    let local =
        json!({"url": "http://127.0.0.1:8080/hook", "events": ["run.failed"], "secret": SECRET});
    let r = api.call("POST", "/v1/webhooks", a, Some(local)).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM agentd_webhooks WHERE org_id = $1")
        .bind(org)
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    assert_eq!(n, 2);
    stop.cancel();
}

/// Stores a subscription of `org` to `run.failed` at `url` without the registration check.
async fn subscribe(pool: &sqlx::PgPool, org: Uuid, url: &str) -> Uuid {
    webhooks::insert(
        pool,
        &NewWebhook {
            org_id: org,
            url,
            events: &["run.failed".to_string()],
            secret: SECRET,
            max_attempts: 3,
            priority: 0,
            now: chrono::Utc::now(),
        },
    )
    .await
    .unwrap()
    .id
}

/// Emits one `run.failed` for `org`, runs a delivery worker of `app` until every delivery job
/// of that event ends, and returns `(webhook_id, state, attempt, last_error)` per job.
async fn deliver(app: &App, org: Uuid) -> Vec<(Value, String, i32, Option<String>)> {
    let pool = app.pool.clone();
    let payload = json!({});
    let mut conn = pool.acquire().await.unwrap();
    let event = events::emit(
        &mut conn,
        &NewEvent {
            org_id: org,
            kind: EventType::RunFailed,
            subject_id: None,
            occurred_at: chrono::Utc::now(),
            payload: &payload,
            dedupe_key: None,
        },
    )
    .await
    .unwrap()
    .unwrap();
    drop(conn);
    let (worker, stop) = common::start_worker(app, "webhook_delivery", None).await;
    let rows = || {
        let pool = pool.clone();
        async move {
            sqlx::query_as::<_, (Value, String, i32, Option<String>)>(
                "SELECT payload->'webhook_id', state, attempt, last_error FROM agentd_jobs
                  WHERE kind = 'webhook_delivery' AND payload->'event_id' = $1 ORDER BY id",
            )
            .bind(json!(event))
            .fetch_all(&pool)
            .await
            .unwrap()
        }
    };
    common::wait_until(30, "the deliveries ended", || {
        let r = rows();
        async move {
            let r = r.await;
            !r.is_empty() && r.iter().all(|j| j.1 == "succeeded" || j.1 == "dead")
        }
    })
    .await;
    stop.cancel();
    worker.join().await;
    rows().await
}

#[tokio::test]
async fn deliveries_recheck_after_resolution_and_never_send_inward() {
    let api = Api::start().await;
    let (org, _) = api.org("acme", Role::Admin).await;
    let (port, seen) = receiver().await;
    let by_name = subscribe(&api.db.pool, org, &format!("http://localhost:{port}/hook")).await;
    let literal = subscribe(&api.db.pool, org, &format!("http://127.0.0.1:{port}/hook")).await;

    // Guard on (the default, set explicitly here): never sent, dead on the first attempt.
    let guarded = with_guard(&api.app, false);
    let jobs = deliver(&guarded, org).await;
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    for (hook, state, attempt, error) in &jobs {
        let error = error.as_deref().unwrap_or_default();
        assert_eq!((state.as_str(), *attempt), ("dead", 1), "{hook}: {error}");
        assert!(
            error.contains("not sent") && error.contains("loopback"),
            "{hook}: {error}"
        );
        if *hook == json!(by_name) {
            assert!(error.contains("resolves to"), "after DNS: {error}");
        } else {
            assert_eq!(*hook, json!(literal));
            assert!(error.contains("is a loopback address"), "{error}");
        }
    }
    assert_eq!(
        seen.load(Ordering::SeqCst),
        0,
        "nothing reached the receiver"
    );

    // Guard off: the same subscriptions deliver to the same receiver.
    let open = with_guard(&api.app, true);
    let jobs = deliver(&open, org).await;
    assert!(jobs.iter().all(|j| j.1 == "succeeded"), "{jobs:?}");
    assert_eq!(seen.load(Ordering::SeqCst), 2);
}

/// `app` with its `[webhooks]` changed by `f` (and the system clock, for the delivery worker).
fn with_webhooks(app: &App, f: impl FnOnce(&mut agentd::config::WebhooksConfig)) -> App {
    let mut config = (*app.config).clone();
    f(&mut config.webhooks);
    let mut app = app.clone();
    app.config = Arc::new(config);
    app.clock = agentd::clock::system();
    app
}

/// Review D12: the operator's `webhooks.denied_cidrs` are refused at registration (literal, and
/// in IPv6 forms of a denied IPv4 address) and at every delivery, literal or resolved, even with
/// `allow_private_networks = true` — the receiver that gets the same deliveries without them gets
/// nothing; with the guard on, a URL on a port outside `webhooks.allowed_ports` (80 and 443 by
/// default) is refused at registration and, stored before the list, dead at its first delivery
/// attempt without a connection (`not sent`, not a failed request retried).
#[tokio::test]
async fn denied_networks_and_ports_outside_the_list_are_refused_at_registration_and_delivery() {
    let api = Api::start_with(|c| {
        c.webhooks.denied_cidrs = vec!["93.184.216.0/24".into(), "2606:4700::/32".into()];
    })
    .await;
    assert_eq!(api.app.config.webhooks.allowed_ports, vec![80, 443]);
    let (_, admin) = api.org("acme", Role::Admin).await;
    let a = Some(admin.as_str());
    // Subscribed to an event the deliveries below do not emit.
    let body = |url: &str| json!({"url": url, "events": ["proposal.ready"], "secret": SECRET});
    for (url, says) in [
        (
            "http://93.184.216.34/hook",
            "inside 93.184.216.0/24 of webhooks.denied_cidrs",
        ),
        (
            "http://[::ffff:93.184.216.34]/hook",
            "webhooks.denied_cidrs",
        ),
        ("https://[64:ff9b::5db8:d822]/hook", "webhooks.denied_cidrs"),
        ("https://[2606:4700::1111]/hook", "inside 2606:4700::/32"),
        (
            "https://93.184.217.1:8443/hook",
            "url port 8443 is not one of webhooks.allowed_ports (80, 443)",
        ),
        (
            "http://hooks.example.com:22/hook",
            "url port 22 is not one of webhooks.allowed_ports",
        ),
    ] {
        let r = api.call("POST", "/v1/webhooks", a, Some(body(url))).await;
        r.problem_in(url, 422, Some("url"));
        let detail = r.body["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(says), "{url}: {}", r.body);
    }
    for url in ["https://93.184.217.1/hook", "http://93.184.217.1:80/hook"] {
        let r = api.call("POST", "/v1/webhooks", a, Some(body(url))).await;
        assert_eq!(r.status, 201, "{url}: {}", r.body);
    }
    assert_eq!(api.count("SELECT count(*) FROM agentd_webhooks").await, 2);

    // Delivery: private networks allowed, loopback denied by the operator. Stored without the
    // registration check (as if made before the operator denied it).
    let (port, seen) = receiver().await;
    let (local, _) = api.org("local", Role::Admin).await;
    let by_name = subscribe(
        &api.db.pool,
        local,
        &format!("http://localhost:{port}/hook"),
    )
    .await;
    let literal = subscribe(
        &api.db.pool,
        local,
        &format!("http://127.0.0.1:{port}/hook"),
    )
    .await;
    let denied = with_webhooks(&api.app, |w| {
        w.allow_private_networks = true;
        w.denied_cidrs = vec!["127.0.0.0/8".into(), "::1".into()];
    });
    let jobs = deliver(&denied, local).await;
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    for (hook, state, attempt, error) in &jobs {
        let error = error.as_deref().unwrap_or_default();
        assert_eq!((state.as_str(), *attempt), ("dead", 1), "{hook}: {error}");
        assert!(
            error.contains("not sent") && error.contains("of webhooks.denied_cidrs"),
            "{hook}: {error}"
        );
        if *hook == json!(by_name) {
            assert!(error.contains("resolves to"), "after DNS: {error}");
        } else {
            assert_eq!(*hook, json!(literal));
            assert!(
                error.contains("url is 127.0.0.1, inside 127.0.0.0/8"),
                "{error}"
            );
        }
    }
    assert_eq!(
        seen.load(Ordering::SeqCst),
        0,
        "nothing reached the receiver"
    );
    // Without the denied networks the same subscriptions deliver to the same receiver.
    let open = with_webhooks(&api.app, |w| {
        w.allow_private_networks = true;
        w.denied_cidrs.clear();
    });
    let jobs = deliver(&open, local).await;
    assert!(jobs.iter().all(|j| j.1 == "succeeded"), "{jobs:?}");
    assert_eq!(seen.load(Ordering::SeqCst), 2);

    // The port list at delivery (guard on): a public address on port 22, never connected to.
    let (public, _) = api.org("public", Role::Admin).await;
    subscribe(&api.db.pool, public, "http://93.184.217.1:22/hook").await;
    let guarded = with_webhooks(&api.app, |w| w.denied_cidrs.clear());
    let jobs = deliver(&guarded, public).await;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let error = jobs[0].3.as_deref().unwrap_or_default();
    assert_eq!((jobs[0].1.as_str(), jobs[0].2), ("dead", 1), "{error}");
    assert!(
        error.contains("not sent: url port 22 is not one of webhooks.allowed_ports (80, 443)"),
        "{error}"
    );
}
