//! The API routes the web console needs, over a real port: `GET /v1/me`, `GET /v1/queue`
//! (depth, ready age, throughput per 5-minute bucket, dead jobs; per kind over `?window=`:
//! depth and throughput; the fleet's workers, breakers and provider limits; admin only;
//! org-scoped), `GET /v1/usage?days=` (a row per day),
//! `POST /v1/jobs/{id}/retry` (dead → available; 404/409/400 otherwise), `GET /v1/runs`
//! (pages, filters), the document text in `GET /v1/documents/{id}`, and the console bundle at
//! `/` (no key needed, CSP).

use crate::api_support;
use agentd::api::Role;
use api_support::Api;
use chrono::{DateTime, Duration, Utc};
use serde_json::json;
use uuid::Uuid;

/// Inserts a job of `org` in `state`, finished `ago` before the API's clock.
async fn job(
    api: &Api,
    org: Uuid,
    kind: &str,
    state: &str,
    ago: Duration,
    key: Option<&str>,
) -> i64 {
    let now: DateTime<Utc> = agentd::clock::Clock::now(api.clock.as_ref());
    let finished = ["succeeded", "dead", "cancelled"]
        .contains(&state)
        .then(|| now - ago);
    sqlx::query_scalar(
        "INSERT INTO agentd_jobs (kind, payload, state, run_at, attempt, max_attempts, last_error,
                                  finished_at, unique_key, created_at)
         VALUES ($1, $2, $3, $4, 3, 3, $5, $6, $7, $4) RETURNING id",
    )
    .bind(kind)
    .bind(json!({"org_id": org, "document_id": Uuid::now_v7()}))
    .bind(state)
    .bind(now - ago)
    .bind((state == "dead").then_some("provider said no <b>twice</b>"))
    .bind(finished)
    .bind(key)
    .fetch_one(&api.db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn queue_view_counts_buckets_and_dead_jobs_of_the_org_only() {
    let api = Api::start().await;
    let (org, admin) = api.org("acme", Role::Admin).await;
    let (other, other_admin) = api.org("other", Role::Admin).await;
    let reviewer = api.key(org, Role::Reviewer).await;
    let m = Duration::minutes;
    // Succeeded 1 and 2 minutes ago (last bucket), 7 minutes ago (the one before), 2 hours ago
    // (outside the hour); dead 12 minutes ago; two ready, the oldest waiting 30 minutes.
    for ago in [m(1), m(2), m(7), Duration::hours(2)] {
        job(&api, org, "auto_create", "succeeded", ago, None).await;
    }
    let dead = job(&api, org, "auto_create", "dead", m(12), None).await;
    job(&api, org, "auto_create", "available", m(30), None).await;
    job(&api, org, "proactive_suggestion", "available", m(3), None).await;
    job(&api, other, "auto_create", "dead", m(1), None).await;

    let q = api.call("GET", "/v1/queue", Some(&admin), None).await;
    assert_eq!(q.status, 200, "{}", q.body);
    let b = &q.body;
    let depth = |kind: &str, state: &str| {
        b["depth"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["kind"] == kind && d["state"] == state)
            .map(|d| d["count"].as_i64().unwrap())
            .unwrap_or(0)
    };
    assert_eq!(depth("auto_create", "succeeded"), 4, "{b}");
    assert_eq!(depth("auto_create", "dead"), 1, "{b}");
    assert_eq!(depth("auto_create", "available"), 1, "{b}");
    assert_eq!(depth("proactive_suggestion", "available"), 1, "{b}");
    let oldest = b["oldest_ready_secs"].as_f64().unwrap();
    assert!((oldest - 1800.0).abs() < 1.0, "oldest ready: {oldest}");
    let buckets = b["throughput"].as_array().unwrap();
    assert_eq!(buckets.len(), 12, "{b}");
    assert_eq!(b["bucket_secs"], 300);
    let counts: Vec<(i64, i64)> = buckets
        .iter()
        .map(|x| {
            (
                x["succeeded"].as_i64().unwrap(),
                x["failed"].as_i64().unwrap(),
            )
        })
        .collect();
    let mut expected = vec![(0, 0); 12];
    expected[11] = (2, 0); // 1 and 2 minutes ago
    expected[10] = (1, 0); // 7 minutes ago
    expected[9] = (0, 1); // dead 12 minutes ago
    assert_eq!(counts, expected, "{b}");
    let dead_rows = b["dead"].as_array().unwrap();
    assert_eq!(dead_rows.len(), 1, "only the org's dead job: {b}");
    assert_eq!(dead_rows[0]["id"], dead);
    // A class and a short message (review L8); the markup stays text.
    assert_eq!(
        dead_rows[0]["last_error"],
        "job: provider said no <b>twice</b>"
    );

    // Admin only; another org sees its own queue.
    api.call("GET", "/v1/queue", Some(&reviewer), None)
        .await
        .problem(403, None);
    let o = api.call("GET", "/v1/queue", Some(&other_admin), None).await;
    assert_eq!(o.body["dead"].as_array().unwrap().len(), 1);
    assert_ne!(o.body["dead"][0]["id"], dead);
    api.call("GET", "/v1/queue?x=1", Some(&admin), None)
        .await
        .problem(400, Some("x"));
}

/// Inserts a job of `org` with its times given as ages before the API's clock.
async fn job_at(
    api: &Api,
    org: Uuid,
    kind: &str,
    state: &str,
    created: Duration,
    started: Option<Duration>,
    finished: Option<Duration>,
) -> i64 {
    let now: DateTime<Utc> = agentd::clock::Clock::now(api.clock.as_ref());
    sqlx::query_scalar(
        "INSERT INTO agentd_jobs (kind, payload, state, run_at, attempt, max_attempts, created_at,
                                  started_at, finished_at)
         VALUES ($1, $2, $3, $4, 1, 3, $4, $5, $6) RETURNING id",
    )
    .bind(kind)
    .bind(json!({"org_id": org, "document_id": Uuid::now_v7()}))
    .bind(state)
    .bind(now - created)
    .bind(started.map(|a| now - a))
    .bind(finished.map(|a| now - a))
    .fetch_one(&api.db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn queue_series_per_kind_come_from_the_org_s_job_rows() {
    let api = Api::start().await;
    let (org, admin) = api.org("acme", Role::Admin).await;
    let (other, _) = api.org("other", Role::Admin).await;
    let m = |n: i64| Some(Duration::minutes(n));
    // auto_create: waiting since 22 minutes ago, started 8 minutes ago and still running; one
    // that succeeded 2 minutes ago; one dead 12 minutes ago; one waiting 4 minutes.
    job_at(
        &api,
        org,
        "auto_create",
        "running",
        Duration::minutes(22),
        m(8),
        None,
    )
    .await;
    job_at(
        &api,
        org,
        "auto_create",
        "succeeded",
        Duration::minutes(6),
        m(3),
        m(2),
    )
    .await;
    job_at(
        &api,
        org,
        "auto_create",
        "dead",
        Duration::minutes(14),
        m(13),
        m(12),
    )
    .await;
    job_at(
        &api,
        org,
        "auto_create",
        "available",
        Duration::minutes(4),
        None,
        None,
    )
    .await;
    // proactive_suggestion: created and started 39 minutes ago, succeeded 38 minutes ago (in the
    // bucket that ends 35 minutes ago), never ready or running at a point.
    job_at(
        &api,
        org,
        "proactive_suggestion",
        "succeeded",
        Duration::minutes(39),
        m(39),
        m(38),
    )
    .await;
    // Outside the window and finished: not a kind of the series. Another org's: never counted.
    job_at(
        &api,
        org,
        "nightly_review",
        "succeeded",
        Duration::hours(3),
        Some(Duration::hours(3)),
        Some(Duration::hours(2)),
    )
    .await;
    for _ in 0..3 {
        job_at(
            &api,
            other,
            "auto_create",
            "dead",
            Duration::minutes(9),
            m(8),
            m(1),
        )
        .await;
        job_at(
            &api,
            other,
            "auto_create",
            "available",
            Duration::minutes(9),
            None,
            None,
        )
        .await;
    }

    let q = api.call("GET", "/v1/queue", Some(&admin), None).await;
    assert_eq!(q.status, 200, "{}", q.body);
    let b = &q.body;
    assert_eq!(
        (&b["window_secs"], &b["series_bucket_secs"]),
        (&json!(3600), &json!(300)),
        "{b}"
    );
    let series = b["series"].as_array().unwrap();
    let kinds: Vec<_> = series.iter().map(|s| s["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["auto_create", "proactive_suggestion"], "{b}");
    let col = |s: &serde_json::Value, k: &str| -> Vec<i64> {
        s["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p[k].as_i64().unwrap())
            .collect()
    };
    let ac = &series[0];
    // Points end at now - 55 min, …, now - 5 min, now (index 11). Ready: the running job from
    // 22 to 8 minutes ago, the succeeded one from 6 to 3, the waiting one from 4 on.
    assert_eq!(
        col(ac, "ready"),
        [0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1],
        "{ac}"
    );
    assert_eq!(
        col(ac, "running"),
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1],
        "{ac}"
    );
    assert_eq!(
        col(ac, "dead"),
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1],
        "{ac}"
    );
    assert_eq!(
        col(ac, "succeeded"),
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        "{ac}"
    );
    assert_eq!(
        col(ac, "failed"),
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0],
        "{ac}"
    );
    let now: DateTime<Utc> = b["now"].as_str().unwrap().parse().unwrap();
    let last: DateTime<Utc> = ac["points"][11]["at"].as_str().unwrap().parse().unwrap();
    assert_eq!(last, now, "the last point ends now");
    let ps = &series[1];
    assert_eq!(
        col(ps, "succeeded"),
        [0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0],
        "{ps}"
    );
    assert_eq!(
        col(ps, "ready").iter().sum::<i64>() + col(ps, "running").iter().sum::<i64>(),
        0,
        "{ps}"
    );

    // A longer window: 12 points of 30 minutes; nightly_review is in it.
    let q = api
        .call("GET", "/v1/queue?window=6h", Some(&admin), None)
        .await;
    assert_eq!(q.status, 200, "{}", q.body);
    assert_eq!(
        (&q.body["window_secs"], &q.body["series_bucket_secs"]),
        (&json!(21600), &json!(1800))
    );
    let kinds: Vec<_> = q.body["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["auto_create", "nightly_review", "proactive_suggestion"],
        "{}",
        q.body
    );
    for bad in ["2h", "", "1H"] {
        api.call(
            "GET",
            &format!("/v1/queue?window={bad}"),
            Some(&admin),
            None,
        )
        .await
        .problem(400, Some("window"));
    }
}

#[tokio::test]
async fn queue_shows_live_workers_and_provider_limits_without_their_hosts() {
    let api = Api::start().await;
    let (org, admin) = api.org("acme", Role::Admin).await;
    let reviewer = api.key(org, Role::Reviewer).await;
    let now: DateTime<Utc> = agentd::clock::Clock::now(api.clock.as_ref());
    let breakers = json!([
        {"provider": "primary", "state": "open", "since": now - Duration::seconds(30),
         "until": now + Duration::seconds(30), "failures": 0},
        {"provider": "backup", "state": "closed", "since": null, "until": null, "failures": 2},
    ]);
    for (id, expires, b) in [
        (
            "build-host-7.internal:4242:ab",
            now + Duration::seconds(20),
            breakers.clone(),
        ),
        (
            "old-host.internal:1:cd",
            now - Duration::seconds(5),
            json!([]),
        ),
        (
            "new-host.internal:2:ef",
            now + Duration::seconds(20),
            json!({"a newer": "shape"}),
        ),
    ] {
        sqlx::query(
            "INSERT INTO agentd_workers (id, host, pid, kinds, started_at, seen_at, expires_at, breakers)
             VALUES ($1, split_part($1, ':', 1), 1, ARRAY['auto_create', 'refine'], $2, $3, $4, $5)",
        )
        .bind(id)
        .bind(now - Duration::minutes(10))
        .bind(now - Duration::seconds(3))
        .bind(expires)
        .bind(b)
        .execute(&api.db.pool)
        .await
        .unwrap();
    }
    agentd::store::provider_limits::ensure(&api.db.pool, "http://10.0.0.5:8000/v1", 60, 90000)
        .await
        .unwrap();

    let q = api.call("GET", "/v1/queue", Some(&admin), None).await;
    assert_eq!(q.status, 200, "{}", q.body);
    let text = q.body.to_string();
    assert!(
        !text.contains("internal") && !text.contains("10.0.0.5"),
        "no host or address is named: {text}"
    );
    let workers = q.body["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 2, "the expired worker is not online: {text}");
    let names: Vec<&str> = workers
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    assert!(
        names.iter().all(|n| n.len() == 10 && n.starts_with("w-")) && names[0] != names[1],
        "{names:?}"
    );
    let w = workers
        .iter()
        .find(|w| w["breakers_unreadable"] == false)
        .unwrap();
    assert_eq!(w["kinds"], json!(["auto_create", "refine"]));
    let seen: DateTime<Utc> = w["seen_at"].as_str().unwrap().parse().unwrap();
    assert_eq!(seen, now - Duration::seconds(3));
    assert_eq!(
        w["breakers"],
        json!([
            {"provider": "primary", "state": "open", "since": now - Duration::seconds(30),
             "until": now + Duration::seconds(30), "failures": 0},
            {"provider": "backup", "state": "closed", "since": null, "until": null, "failures": 2},
        ])
    );
    let unreadable = workers
        .iter()
        .find(|w| w["breakers_unreadable"] == true)
        .unwrap();
    assert_eq!(unreadable["breakers"], json!([]));
    let limits = q.body["provider_limits"].as_array().unwrap();
    assert_eq!(limits.len(), 1, "{text}");
    let name = limits[0]["name"].as_str().unwrap();
    assert!(name.len() == 10 && name.starts_with("e-"), "{name}");
    assert_eq!(
        (
            &limits[0]["requests_per_minute"],
            &limits[0]["tokens_per_minute"],
            &limits[0]["blocked_secs"]
        ),
        (&json!(60), &json!(90000), &json!(0.0))
    );
    // Fleet-wide: admins only.
    api.call("GET", "/v1/queue", Some(&reviewer), None)
        .await
        .problem(403, None);
}

#[tokio::test]
async fn usage_has_a_row_per_day_of_the_org_s_runs() {
    let api = Api::start().await;
    let (org, key) = api.org("acme", Role::Reader).await;
    let (other, other_key) = api.org("other", Role::Reader).await;
    let now: DateTime<Utc> = agentd::clock::Clock::now(api.clock.as_ref());
    for (o, ago, input, output, cost) in [
        (org, Duration::zero(), 1000, 200, Some(3_000_000i64)),
        (org, Duration::zero(), 500, 100, Some(1_000_000)),
        (org, Duration::days(2), 40, 4, None),
        (other, Duration::zero(), 999_999, 1, Some(9_000_000_000)),
    ] {
        sqlx::query(
            "INSERT INTO agent_runs (id, org_id, kind, subject, provider, model, status, started_at,
                                     input_tokens, output_tokens, cost_nano_usd)
             VALUES ($1, $2, 'auto_create', 'x', 'offline', 'm', 'succeeded', $3, $4, $5, $6)",
        )
        .bind(Uuid::now_v7())
        .bind(o)
        .bind(now - ago)
        .bind(input as i64)
        .bind(output as i64)
        .bind(cost)
        .execute(&api.db.pool)
        .await
        .unwrap();
    }
    let u = api.call("GET", "/v1/usage?days=7", Some(&key), None).await;
    assert_eq!(u.status, 200, "{}", u.body);
    let daily = u.body["daily"].as_array().unwrap();
    assert_eq!(daily.len(), 7, "{}", u.body);
    let today = now.date_naive();
    let days: Vec<String> = daily
        .iter()
        .map(|d| d["day"].as_str().unwrap().to_string())
        .collect();
    let want: Vec<String> = (0..7)
        .rev()
        .map(|i| (today - Duration::days(i)).to_string())
        .collect();
    assert_eq!(days, want, "oldest first, ending today");
    assert_eq!(
        daily[6],
        json!({"day": today.to_string(), "runs": 2, "tokens": 1800, "input_tokens": 1500,
               "output_tokens": 300, "cost_usd": 0.004, "priced_cost_usd": 0.004, "cost_note": null}),
        "today: the org's two runs only"
    );
    assert_eq!(daily[4]["runs"], 1);
    assert_eq!(
        daily[4]["cost_usd"],
        serde_json::Value::Null,
        "a run before cost accounting"
    );
    assert!(
        daily[4]["cost_note"]
            .as_str()
            .unwrap()
            .contains("predate cost accounting")
    );
    assert_eq!(
        (
            &daily[5]["runs"],
            &daily[5]["tokens"],
            &daily[5]["cost_usd"]
        ),
        (&json!(0), &json!(0), &json!(0.0)),
        "a day without runs"
    );
    // Default: 30 days.
    let u = api.call("GET", "/v1/usage", Some(&key), None).await;
    assert_eq!(u.body["daily"].as_array().unwrap().len(), 30);
    let o = api
        .call("GET", "/v1/usage?days=1", Some(&other_key), None)
        .await;
    assert_eq!(o.body["daily"][0]["input_tokens"], 999_999, "{}", o.body);
    for bad in ["0", "367", "-1", "x", "1.5"] {
        api.call("GET", &format!("/v1/usage?days={bad}"), Some(&key), None)
            .await
            .problem(400, Some("days"));
    }
    api.call("GET", "/v1/usage?day=3", Some(&key), None)
        .await
        .problem(400, Some("day"));
}

#[tokio::test]
async fn retry_puts_a_dead_job_back_and_refuses_everything_else() {
    let api = Api::start().await;
    let (org, admin) = api.org("acme", Role::Admin).await;
    let (_, other_admin) = api.org("other", Role::Admin).await;
    let reviewer = api.key(org, Role::Reviewer).await;
    let dead = job(&api, org, "auto_create", "dead", Duration::minutes(5), None).await;
    let running = job(
        &api,
        org,
        "auto_create",
        "running",
        Duration::minutes(1),
        None,
    )
    .await;

    api.call(
        "POST",
        &format!("/v1/jobs/{dead}/retry"),
        Some(&reviewer),
        None,
    )
    .await
    .problem(403, None);
    api.call(
        "POST",
        &format!("/v1/jobs/{dead}/retry"),
        Some(&other_admin),
        None,
    )
    .await
    .problem(404, None);
    api.call("POST", "/v1/jobs/abc/retry", Some(&admin), None)
        .await
        .problem(400, Some("id"));
    api.call("POST", "/v1/jobs/999999/retry", Some(&admin), None)
        .await
        .problem(404, None);
    let r = api
        .call(
            "POST",
            &format!("/v1/jobs/{running}/retry"),
            Some(&admin),
            None,
        )
        .await;
    r.problem(409, None);
    assert_eq!(r.body["state"], "running");
    assert_eq!(
        api.count(&format!(
            "SELECT count(*) FROM agentd_jobs WHERE id = {dead} AND state = 'dead'"
        ))
        .await,
        1,
        "refusals changed nothing"
    );

    let r = api
        .call(
            "POST",
            &format!("/v1/jobs/{dead}/retry"),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["state"], "available");
    let (state, released, attempt, finished): (String, i32, i32, Option<DateTime<Utc>>) =
        sqlx::query_as(
            "SELECT state, released, attempt, finished_at FROM agentd_jobs WHERE id = $1",
        )
        .bind(dead)
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    assert_eq!(state, "available");
    assert_eq!(released, attempt, "a fresh attempt budget");
    assert!(finished.is_none());
    // Twice: it is no longer dead.
    api.call(
        "POST",
        &format!("/v1/jobs/{dead}/retry"),
        Some(&admin),
        None,
    )
    .await
    .problem(409, None);

    // A dead job whose unique key a waiting job holds again (the key binds only while a job
    // waits or runs): refused with 409 naming the key, the dead job unchanged.
    let busy = job(
        &api,
        org,
        "auto_create",
        "dead",
        Duration::minutes(4),
        Some("k2"),
    )
    .await;
    job(
        &api,
        org,
        "auto_create",
        "available",
        Duration::minutes(1),
        Some("k2"),
    )
    .await;
    let r = api
        .call(
            "POST",
            &format!("/v1/jobs/{busy}/retry"),
            Some(&admin),
            None,
        )
        .await;
    r.problem(409, None);
    assert!(
        r.body["detail"].as_str().unwrap().contains("unique key"),
        "{}",
        r.body
    );
    assert_eq!(
        api.count(&format!(
            "SELECT count(*) FROM agentd_jobs WHERE id = {busy} AND state = 'dead'"
        ))
        .await,
        1
    );
}

#[tokio::test]
async fn runs_list_pages_filters_and_stays_in_the_org() {
    let api = Api::start().await;
    let (org, reader) = api.org("acme", Role::Reader).await;
    let (other, other_key) = api.org("other", Role::Reader).await;
    let base = Utc::now();
    for (i, status) in ["succeeded", "capped", "failed", "succeeded", "running"]
        .iter()
        .enumerate()
    {
        sqlx::query("INSERT INTO agent_runs (id, org_id, kind, subject, provider, model, status, stop_reason, input_tokens, output_tokens, started_at) VALUES ($1, $2, 'auto_create', 'doc', 'offline', 'm', $3, $4, 100, 20, $5)")
            .bind(Uuid::now_v7()).bind(org).bind(status)
            .bind((*status == "capped").then_some("max_rounds"))
            .bind(base - Duration::minutes(i as i64))
            .execute(&api.db.pool).await.unwrap();
    }
    sqlx::query("INSERT INTO agent_runs (id, org_id, kind, subject, provider, model, status, started_at) VALUES ($1, $2, 'auto_create', 'x', 'offline', 'm', 'succeeded', now())")
        .bind(Uuid::now_v7()).bind(other).execute(&api.db.pool).await.unwrap();

    let p1 = api
        .call("GET", "/v1/runs?limit=3", Some(&reader), None)
        .await;
    assert_eq!(p1.status, 200, "{}", p1.body);
    let items = p1.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    assert_eq!(items[0]["status"], "succeeded", "newest first");
    assert_eq!(items[1]["stop_reason"], "max_rounds");
    assert_eq!(items[0]["input_tokens"], 100);
    let cursor = p1.body["next_cursor"].as_str().unwrap();
    let p2 = api
        .call(
            "GET",
            &format!("/v1/runs?limit=3&cursor={cursor}"),
            Some(&reader),
            None,
        )
        .await;
    let items2 = p2.body["items"].as_array().unwrap();
    assert_eq!(items2.len(), 2);
    assert!(p2.body["next_cursor"].is_null());
    assert_eq!(items2[1]["status"], "running");
    let failed = api
        .call(
            "GET",
            "/v1/runs?status=failed&kind=auto_create",
            Some(&reader),
            None,
        )
        .await;
    assert_eq!(failed.body["items"].as_array().unwrap().len(), 1);
    api.call("GET", "/v1/runs?status=nope", Some(&reader), None)
        .await
        .problem(400, Some("status"));
    api.call("GET", "/v1/runs?kind=nope", Some(&reader), None)
        .await
        .problem(400, Some("kind"));
    api.call("GET", "/v1/runs?limit=0", Some(&reader), None)
        .await
        .problem(400, Some("limit"));
    let theirs = api.call("GET", "/v1/runs", Some(&other_key), None).await;
    assert_eq!(theirs.body["items"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn me_names_the_role_and_documents_carry_their_text() {
    let api = Api::start().await;
    let (org, reviewer) = api.org("acme", Role::Reviewer).await;
    let me = api.call("GET", "/v1/me", Some(&reviewer), None).await;
    assert_eq!(me.status, 200, "{}", me.body);
    assert_eq!(me.body["role"], "reviewer");
    assert_eq!(me.body["org_id"], json!(org));
    assert_eq!(me.body["org_name"], "acme");
    api.call("GET", "/v1/me", None, None)
        .await
        .problem(401, None);

    let text = "Invoice Number: <script>alert(1)</script>\nTotal: 1";
    // Roles are cumulative (reader < uploader < reviewer < admin): a reader may not upload.
    let reader = api.key(org, Role::Reader).await;
    let r = api
        .call(
            "POST",
            "/v1/documents",
            Some(&reader),
            Some(json!({"name": "x", "text": text})),
        )
        .await;
    assert_eq!(r.status, 403, "a reader may not upload: {}", r.body);
    let up = api.key(org, Role::Uploader).await;
    let r = api
        .call(
            "POST",
            "/v1/documents",
            Some(&up),
            Some(json!({"name": "x", "text": text})),
        )
        .await;
    let id = r.body["id"].as_str().unwrap();
    let d = api
        .call("GET", &format!("/v1/documents/{id}"), Some(&reviewer), None)
        .await;
    assert_eq!(d.status, 200, "{}", d.body);
    assert_eq!(d.body["text"], text);
    assert_eq!(d.body["text_chars"], text.chars().count());
    assert_eq!(d.body["text_truncated"], false);
}

#[tokio::test]
async fn the_console_bundle_is_served_without_a_key_with_a_strict_csp() {
    let api = Api::start().await;
    let http = reqwest::Client::new();
    let index = http.get(format!("{}/", api.base)).send().await.unwrap();
    assert_eq!(index.status(), 200);
    let h = index.headers().clone();
    assert_eq!(h["content-type"], "text/html; charset=utf-8");
    let csp = h["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert_eq!(h["x-content-type-options"], "nosniff");
    let html = index.text().await.unwrap();
    assert!(
        html.contains("<label for=\"api-key\">API key</label>"),
        "{html}"
    );
    for (name, ctype, _) in agentd::console::ASSETS {
        let r = http
            .get(format!("{}/console/{name}", api.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{name}");
        assert_eq!(r.headers()["content-type"], ctype, "{name}");
        let body = r.text().await.unwrap();
        assert!(!body.contains("innerHTML"), "{name} must not use innerHTML");
        assert!(
            !body.contains("insertAdjacentHTML") && !body.contains("document.write"),
            "{name}"
        );
        if name.ends_with(".html") {
            assert!(!body.contains("<script>"), "no inline script in {name}");
        }
    }
    let missing = http
        .get(format!("{}/console/nope.js", api.base))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    // The API is still behind the key.
    let r = http
        .get(format!("{}/v1/documents", api.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}
