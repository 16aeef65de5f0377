//! The HTTP API over a real port with reqwest against a real PostgreSQL: one test per route
//! group and per error class (idempotency, pagination, approvals' 412/410/409/200).

use crate::api_support;
use crate::common;
use agentd::api::Role;
use api_support::Api;
use chrono::Duration;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// The properties the OpenAPI document gives the 200 answer of `GET path` (following `$ref` and
/// `allOf`, which `#[serde(flatten)]` becomes), and the schema's name.
/// The properties `schema` documents, through `$ref`s and `allOf` parts (flattened fields).
fn props(doc: &Value, schema: &Value, out: &mut BTreeSet<String>) {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap();
        return props(doc, &doc["components"]["schemas"][name], out);
    }
    for part in schema["allOf"].as_array().into_iter().flatten() {
        props(doc, part, out);
    }
    if let Some(p) = schema["properties"].as_object() {
        out.extend(p.keys().cloned());
    }
}

async fn documented(api: &Api, path: &str) -> (String, BTreeSet<String>) {
    let doc = api.call("GET", "/v1/openapi.json", None, None).await.body;
    let schema =
        &doc["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"];
    let name = schema["$ref"]
        .as_str()
        .unwrap_or("(inline)")
        .rsplit('/')
        .next();
    let mut out = BTreeSet::new();
    props(&doc, schema, &mut out);
    (name.unwrap().to_string(), out)
}

/// The properties of a component of the OpenAPI document.
async fn component(api: &Api, name: &str) -> BTreeSet<String> {
    let doc = api.call("GET", "/v1/openapi.json", None, None).await.body;
    let mut out = BTreeSet::new();
    props(&doc, &doc["components"]["schemas"][name], &mut out);
    out
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().expect("an object").keys().cloned().collect()
}

#[tokio::test]
async fn upload_with_auto_create_poll_until_proposed_then_accept_and_reject() {
    let api = Api::start().await;
    let (_, key) = api.org("acme", Role::Reviewer).await;
    let k = Some(key.as_str());
    let mut ids = Vec::new();
    for (name, text) in agentd::documents::SAMPLES.iter().take(2) {
        let r = api
            .call(
                "POST",
                "/v1/documents",
                k,
                Some(json!({"name": name, "text": text, "auto_create": true})),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!(r.body["auto_create_status"], "queued");
        let job = r.body["job_id"].as_i64().expect("a job was enqueued");
        let j = api.call("GET", &format!("/v1/jobs/{job}"), k, None).await;
        assert_eq!(j.status, 200, "{}", j.body);
        assert_eq!(j.body["kind"], "auto_create");
        assert_eq!(j.body["payload"]["document_id"], r.body["id"]);
        ids.push(r.body["id"].as_str().unwrap().to_string());
    }
    // The jobs' run_at is the database's now(); the manual clock must be past it.
    api.clock.advance(Duration::seconds(60));
    let (_w, stop) = common::start_worker(&api.app, "auto_create", None).await;
    let mut reports: Vec<Value> = Vec::new();
    for id in &ids {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let last = loop {
            let r = api
                .call("GET", &format!("/v1/documents/{id}"), k, None)
                .await;
            assert_eq!(r.status, 200, "{}", r.body);
            if r.body["auto_create_status"] == "proposed" {
                break r.body;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "not proposed in 60s: {}",
                r.body
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        reports.push(last);
    }
    stop.cancel();
    let doc = &reports[0];
    assert!(!doc["fields"].as_array().unwrap().is_empty(), "{doc}");
    assert!(doc["prompt"]["content"].is_string(), "{doc}");
    assert!(doc["extraction"]["result"].is_object(), "{doc}");
    // The document report is built as JSON: its schema (`DocumentReport`) says every key it has,
    // and each part's.
    let (name, props) = documented(&api, "/v1/documents/{id}").await;
    assert_eq!((name.as_str(), props), ("DocumentReport", keys(doc)));
    for (part, schema) in [
        ("schema", "ReportSchema"),
        ("prompt", "ReportPrompt"),
        ("extraction", "ReportExtraction"),
        ("run", "ReportRun"),
    ] {
        assert_eq!(component(&api, schema).await, keys(&doc[part]), "{part}");
    }
    assert_eq!(
        component(&api, "ReportField").await,
        keys(&doc["fields"][0])
    );
    let run = doc["run"]["id"].as_str().expect("the run id");
    let r = api.call("GET", &format!("/v1/runs/{run}"), k, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(!r.body["steps"].as_array().unwrap().is_empty());
    assert!(!r.body["audit"].as_array().unwrap().is_empty());
    // The OpenAPI document describes what is served, key for key.
    let (name, props) = documented(&api, "/v1/runs/{id}").await;
    assert_eq!((name.as_str(), props), ("RunDetail", keys(&r.body)));
    assert_eq!(component(&api, "Run").await, keys(&r.body["run"]));
    assert_eq!(component(&api, "RunStep").await, keys(&r.body["steps"][0]));
    assert_eq!(
        component(&api, "AuditEvent").await,
        keys(&r.body["audit"][0])
    );

    let r = api
        .call("POST", &format!("/v1/documents/{}/accept", ids[0]), k, None)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let after = api
        .call("GET", &format!("/v1/documents/{}", ids[0]), k, None)
        .await;
    assert_eq!(after.body["auto_create_status"], "accepted");
    assert_eq!(after.body["schema"]["status"], "active", "{}", after.body);
    // Deciding again: nothing left to decide.
    api.call("POST", &format!("/v1/documents/{}/accept", ids[0]), k, None)
        .await
        .problem(409, None);
    let r = api
        .call("POST", &format!("/v1/documents/{}/reject", ids[1]), k, None)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let after = api
        .call("GET", &format!("/v1/documents/{}", ids[1]), k, None)
        .await;
    assert_eq!(after.body["auto_create_status"], "rejected");
    assert!(after.body["schema"].is_null(), "{}", after.body);
}

/// Issue 33, item 5: a document's snapshot holds only what an action on it depends on. Accepting
/// or rejecting the document's proposal writes `updated_at` and `auto_create_status`; its
/// pending `update_document` approvals stay valid (same hash, ETag and all) and execute.
#[tokio::test]
async fn deciding_a_proposal_leaves_the_documents_pending_update_valid() {
    let api = Api::start().await;
    let (org, key) = api.org("acme", Role::Reviewer).await;
    let k = Some(key.as_str());
    let mut ids = Vec::new();
    for (name, text) in agentd::documents::SAMPLES.iter().take(2) {
        let r = api
            .call(
                "POST",
                "/v1/documents",
                k,
                Some(json!({"name": name, "text": text, "auto_create": true})),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
        ids.push(r.body["id"].as_str().unwrap().to_string());
    }
    api.clock.advance(Duration::seconds(60));
    let (_w, stop) = common::start_worker(&api.app, "auto_create", None).await;
    for id in &ids {
        common::wait_until(60, "proposed", || async {
            api.call("GET", &format!("/v1/documents/{id}"), k, None)
                .await
                .body["auto_create_status"]
                == "proposed"
        })
        .await;
    }
    stop.cancel();
    let mut approvals = Vec::new();
    for id in &ids {
        let a = api
            .propose(
                org,
                json!({"document_id": id, "metadata": {"checked": "yes"}}),
                Duration::hours(1),
            )
            .await;
        let before = api
            .call("GET", &format!("/v1/approvals/{a}"), k, None)
            .await;
        approvals.push((a, before.headers["etag"].to_str().unwrap().to_string()));
    }
    let accepted = api
        .call("POST", &format!("/v1/documents/{}/accept", ids[0]), k, None)
        .await;
    assert_eq!(accepted.status, 200, "{}", accepted.body);
    let rejected = api
        .call("POST", &format!("/v1/documents/{}/reject", ids[1]), k, None)
        .await;
    assert_eq!(rejected.status, 200, "{}", rejected.body);
    for ((a, etag), id) in approvals.iter().zip(&ids) {
        let now = api
            .call("GET", &format!("/v1/approvals/{a}"), k, None)
            .await;
        assert_eq!(now.headers["etag"].to_str().unwrap(), etag, "{}", now.body);
        let r = api
            .raw(
                "POST",
                &format!("/v1/approvals/{a}/approve"),
                &key,
                "application/json",
                b"{}".to_vec(),
                &[("If-Match", etag.as_str())],
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["approval"]["status"], "executed", "{}", r.body);
        let doc = api
            .call("GET", &format!("/v1/documents/{id}"), k, None)
            .await;
        assert_ne!(doc.body["auto_create_status"], "proposed");
    }
    let checked = api
        .count("SELECT count(*) FROM documents WHERE metadata->>'checked' = 'yes'")
        .await;
    assert_eq!(checked, 2);
}

#[tokio::test]
async fn idempotency_key_replays_the_answer_and_refuses_another_body() {
    let api = Api::start().await;
    let (_, key) = api.org("acme", Role::Uploader).await;
    let body = br#"{"name": "a.txt", "text": "hello", "auto_create": true}"#.to_vec();
    let send = |b: Vec<u8>, idem: &'static str| {
        let (api, key) = (&api, key.clone());
        async move {
            api.raw(
                "POST",
                "/v1/documents",
                &key,
                "application/json",
                b,
                &[("Idempotency-Key", idem)],
            )
            .await
        }
    };
    let first = send(body.clone(), "k-1").await;
    assert_eq!(first.status, 201, "{}", first.body);
    // Same body with other whitespace and key order: the same request.
    let again = send(
        br#"{"auto_create":true,"text":"hello","name":"a.txt"}"#.to_vec(),
        "k-1",
    )
    .await;
    assert_eq!(again.status, 201);
    assert_eq!(again.body, first.body);
    let other = send(br#"{"name": "b.txt", "text": "hello"}"#.to_vec(), "k-1").await;
    other.problem(422, Some("Idempotency-Key"));
    // Concurrent requests with one new key: one document.
    let answers = futures::future::join_all((0..8).map(|_| send(body.clone(), "k-2"))).await;
    let ids: std::collections::HashSet<String> = answers
        .iter()
        .map(|a| a.body["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 1, "one document for one key");
    assert_eq!(api.count("SELECT count(*) FROM documents").await, 2);
    assert_eq!(api.count("SELECT count(*) FROM agentd_jobs").await, 2);
    // Another org may use the same key string: keys are per org.
    let (_, key2) = api.org("other", Role::Uploader).await;
    let r = api
        .raw(
            "POST",
            "/v1/documents",
            &key2,
            "application/json",
            body,
            &[("Idempotency-Key", "k-1")],
        )
        .await;
    assert_eq!(r.status, 201);
    assert_ne!(r.body["id"], first.body["id"]);
    // Answers older than the TTL are forgotten (the server purges hourly; here, directly).
    let later = chrono::Utc::now() + Duration::hours(agentd::api::IDEMPOTENCY_TTL_HOURS + 1);
    let purged = agentd::store::api_keys::purge_idempotency(
        &api.db.pool,
        later - Duration::hours(agentd::api::IDEMPOTENCY_TTL_HOURS),
    )
    .await
    .unwrap();
    assert_eq!(purged, 3);
    let reused = send(br#"{"name": "c.txt", "text": "new"}"#.to_vec(), "k-1").await;
    assert_eq!(
        reused.status, 201,
        "a forgotten key is new again: {}",
        reused.body
    );
}

#[tokio::test]
async fn lists_page_with_cursors_newest_first() {
    let api = Api::start().await;
    let (org, key) = api.org("acme", Role::Reader).await;
    let mut made = Vec::new();
    for i in 0..5 {
        made.push(api.doc(org, &format!("d{i}")).await.to_string());
    }
    made.reverse();
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/documents?limit=2&cursor={c}"),
            None => "/v1/documents?limit=2".into(),
        };
        let r = api.call("GET", &path, Some(&key), None).await;
        assert_eq!(r.status, 200, "{}", r.body);
        pages += 1;
        for d in r.body["items"].as_array().unwrap() {
            seen.push(d["id"].as_str().unwrap().to_string());
        }
        match r.body["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, made, "every document once, newest first");
    let r = api
        .call("GET", "/v1/documents?status=queued", Some(&key), None)
        .await;
    assert_eq!(r.body["items"], json!([]));
    // A well-formed cursor before PostgreSQL's first time (Schemathesis drew one; it was a
    // 500): nothing is older, an empty page.
    let ancient = hex::encode(format!("-882247267297580789.{}", uuid::Uuid::nil()));
    let r = api
        .call(
            "GET",
            &format!("/v1/documents?cursor={ancient}"),
            Some(&key),
            None,
        )
        .await;
    assert_eq!(
        (r.status.as_u16(), &r.body["items"]),
        (200, &json!([])),
        "{}",
        r.body
    );
}

#[tokio::test]
async fn approvals_etag_if_match_expired_stale_and_decided_once() {
    let api = Api::start().await;
    let (org, key) = api.org("acme", Role::Reviewer).await;
    let k = Some(key.as_str());
    let doc = api.doc(org, "a.txt").await;
    let args = |v: &str| json!({"document_id": doc, "metadata": {"k": v}});
    let id = api.propose(org, args("one"), Duration::hours(1)).await;

    let list = api
        .call("GET", "/v1/approvals?status=pending", k, None)
        .await;
    assert_eq!(list.body["items"][0]["id"], json!(id), "{}", list.body);
    let got = api
        .call("GET", &format!("/v1/approvals/{id}"), k, None)
        .await;
    assert_eq!(got.status, 200);
    let hash = got.body["snapshot_hash"].as_str().unwrap().to_string();
    assert_eq!(got.headers["etag"].to_str().unwrap(), format!("\"{hash}\""));
    assert!(got.body["expires_at"].is_string());
    // The OpenAPI document describes what is served, key for key.
    let (name, props) = documented(&api, "/v1/approvals/{id}").await;
    assert_eq!((name.as_str(), props), ("ApprovalDetail", keys(&got.body)));
    assert_eq!(
        component(&api, "Approval").await,
        keys(&list.body["items"][0])
    );
    assert_eq!(
        component(&api, "ApprovalAction").await,
        keys(&got.body["action"])
    );

    let approve = |id: uuid::Uuid, if_match: &str| {
        let mut h = vec![];
        if !if_match.is_empty() {
            h.push(("If-Match", if_match.to_string()));
        }
        let hs: Vec<(&str, String)> = h;
        let api = &api;
        let key = key.clone();
        async move {
            let refs: Vec<(&str, &str)> = hs.iter().map(|(a, b)| (*a, b.as_str())).collect();
            api.raw(
                "POST",
                &format!("/v1/approvals/{id}/approve"),
                &key,
                "application/json",
                br#"{"by": "alice"}"#.to_vec(),
                &refs,
            )
            .await
        }
    };
    // A body is absent or an object (the document's optional `DecisionBody`): `null` and an
    // array (which serde would read as the fields in order) are 422, and nothing runs.
    for body in ["null", "[null, null]"] {
        let path = format!("/v1/approvals/{id}/approve");
        let r = api
            .raw("POST", &path, &key, "application/json", body.into(), &[])
            .await;
        r.problem_in(body, 422, Some("body"));
    }
    let wrong = approve(id, "\"0000\"").await;
    wrong.problem(412, Some("If-Match"));
    assert_eq!(
        api.count("SELECT count(*) FROM audit_events WHERE decision = 'human_approved'")
            .await,
        0
    );
    let ok = approve(id, &format!("\"{hash}\"")).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(ok.body["approval"]["status"], "executed");
    assert_eq!(ok.body["changed"], true);
    let twice = approve(id, "").await;
    assert_eq!(twice.status, 200);
    assert_eq!(twice.body["changed"], false);
    assert_eq!(twice.body["approval"]["status"], "executed");
    assert_eq!(
        api.count("SELECT count(*) FROM audit_events WHERE decision = 'human_approved'")
            .await,
        1,
        "executed once"
    );
    let actor: String =
        sqlx::query_scalar("SELECT decided_by FROM pending_approvals WHERE id = $1")
            .bind(id)
            .fetch_one(&api.db.pool)
            .await
            .unwrap();
    assert!(actor.starts_with("human:alice (key "), "{actor}");

    let expired = api.propose(org, args("two"), Duration::seconds(5)).await;
    api.clock.advance(Duration::seconds(10));
    approve(expired, "").await.problem(410, None);
    // Asking again: still the same answer, still nothing executed.
    approve(expired, "").await.problem(410, None);

    let stale = api.propose(org, args("three"), Duration::hours(1)).await;
    sqlx::query("UPDATE documents SET metadata = '{\"owner\": \"bob\"}', updated_at = updated_at + interval '1 second' WHERE id = $1")
        .bind(doc).execute(&api.db.pool).await.unwrap();
    let r = approve(stale, "").await;
    r.problem(409, None);
    assert!(
        r.body["changes"]["metadata"]["after"].is_object(),
        "{}",
        r.body
    );

    let rej = api.propose(org, args("four"), Duration::hours(1)).await;
    let r = api
        .call(
            "POST",
            &format!("/v1/approvals/{rej}/reject"),
            k,
            Some(json!({"reason": "not this one"})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["approval"]["status"], "rejected");
    let meta: Value = sqlx::query_scalar("SELECT metadata FROM documents WHERE id = $1")
        .bind(doc)
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    assert_eq!(
        meta,
        json!({"owner": "bob"}),
        "nothing ran after the first: {meta}"
    );
    assert_eq!(
        api.count("SELECT count(*) FROM audit_events WHERE decision = 'human_approved'")
            .await,
        1
    );
}

#[tokio::test]
async fn jobs_settings_suggestions_and_status() {
    let api = Api::start().await;
    let (org, key) = api.org("acme", Role::Admin).await;
    let k = Some(key.as_str());
    let doc = api.doc(org, "a").await;
    let r = api
        .call(
            "POST",
            "/v1/jobs",
            k,
            Some(json!({"kind": "auto_create", "document_id": doc})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let again = api
        .call(
            "POST",
            "/v1/jobs",
            k,
            Some(json!({"kind": "auto_create", "document_id": doc})),
        )
        .await;
    assert_eq!(
        (again.status.as_u16(), &again.body["duplicate"]),
        (200, &json!(true))
    );
    assert_eq!(again.body["id"], r.body["id"]);
    let r = api
        .call(
            "POST",
            "/v1/jobs",
            k,
            Some(json!({"kind": "proactive_suggestion", "night": "2026-01-02"})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let job = api
        .call("GET", &format!("/v1/jobs/{}", r.body["id"]), k, None)
        .await;
    assert_eq!(
        job.body["payload"],
        json!({"org_id": org, "night": "2026-01-02"})
    );
    api.call(
        "POST",
        "/v1/jobs",
        k,
        Some(json!({"kind": "approval_expiry"})),
    )
    .await
    // Nothing to sweep: the org's state, not the request, is at fault.
    .problem(409, Some("approval_ids"));
    let a = api
        .propose(
            org,
            json!({"document_id": doc, "metadata": {"x": 1}}),
            Duration::hours(1),
        )
        .await;
    let r = api
        .call(
            "POST",
            "/v1/jobs",
            k,
            Some(json!({"kind": "approval_expiry"})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let job = api
        .call("GET", &format!("/v1/jobs/{}", r.body["id"]), k, None)
        .await;
    assert_eq!(job.body["payload"]["approval_ids"], json!([a]));
    // The sweep names its org (review D1), and while it waits the org's next one is a duplicate.
    assert_eq!(job.body["payload"]["org_id"], json!(org));
    let again = api
        .call(
            "POST",
            "/v1/jobs",
            k,
            Some(json!({"kind": "approval_expiry", "approval_ids": [a]})),
        )
        .await;
    assert_eq!(
        (
            again.status.as_u16(),
            &again.body["duplicate"],
            &again.body["id"]
        ),
        (200, &json!(true), &r.body["id"])
    );
    api.call("POST", "/v1/jobs", k, Some(json!({"kind": "nightly"})))
        .await
        .problem(422, Some("kind"));
    api.call("POST", "/v1/jobs", k, Some(json!({"kind": "auto_create"})))
        .await
        .problem(422, Some("document_id"));
    api.call(
        "POST",
        "/v1/jobs",
        k,
        Some(json!({"kind": "proactive_suggestion", "document_id": doc})),
    )
    .await
    .problem(422, Some("document_id"));
    api.call(
        "POST",
        "/v1/jobs",
        k,
        Some(json!({"kind": "proactive_suggestion", "night": "tomorrow"})),
    )
    .await
    .problem(422, Some("night"));

    let s = api.call("GET", "/v1/settings", k, None).await;
    assert_eq!(
        s.body,
        json!({"monthly_token_budget": null, "tokens_used_this_month": 0,
               "approval_ttl_secs": null, "auto_create": true, "cost_cap_cents": null,
               "effective_token_limit": null, "model": null, "nightly_hour": 2,
               "repropose_expired": false, "timezone": "UTC", "byok_fallback": "none",
               "requests_per_minute": null, "runs_per_minute": null})
    );
    // Where calls with the org's own key may fall back (review D2): none or operator.
    api.call(
        "PATCH",
        "/v1/settings",
        k,
        Some(json!({"byok_fallback": "anyone"})),
    )
    .await
    .problem(422, Some("byok_fallback"));
    let r = api
        .call(
            "PATCH",
            "/v1/settings",
            k,
            Some(json!({"byok_fallback": "operator"})),
        )
        .await;
    assert_eq!(
        (r.status.as_u16(), r.body["byok_fallback"].clone()),
        (200, json!("operator"))
    );
    let r = api
        .call(
            "PATCH",
            "/v1/settings",
            k,
            Some(json!({"byok_fallback": "none"})),
        )
        .await;
    assert_eq!(r.body["byok_fallback"], "none");
    api.call(
        "PATCH",
        "/v1/settings",
        k,
        Some(json!({"monthly_token_budget": -1})),
    )
    .await
    .problem(422, Some("monthly_token_budget"));
    api.call(
        "PATCH",
        "/v1/settings",
        k,
        Some(json!({"monthly_token_budget": 100})),
    )
    .await;
    assert_eq!(
        api.call("GET", "/v1/settings", k, None).await.body["monthly_token_budget"],
        100
    );
    // The org's own key may lower its budget, not lift it (review N13).
    api.call(
        "PATCH",
        "/v1/settings",
        k,
        Some(json!({"monthly_token_budget": null})),
    )
    .await
    .problem(422, Some("monthly_token_budget"));
    assert_eq!(
        api.call("GET", "/v1/settings", k, None).await.body["monthly_token_budget"],
        100
    );

    for i in 0..3 {
        sqlx::query("INSERT INTO suggestions (id, org_id, kind, subject, night, title, message) VALUES ($1, $2, 'waiting', $3, '2026-01-02', 't', 'm')")
            .bind(uuid::Uuid::now_v7()).bind(org).bind(format!("s{i}")).execute(&api.db.pool).await.unwrap();
    }
    let r = api.call("GET", "/v1/suggestions?limit=2", k, None).await;
    assert_eq!(r.body["items"].as_array().unwrap().len(), 2, "{}", r.body);
    let c = r.body["next_cursor"].as_str().unwrap().to_string();
    let r = api
        .call(
            "GET",
            &format!("/v1/suggestions?limit=2&cursor={c}"),
            k,
            None,
        )
        .await;
    assert_eq!(r.body["items"].as_array().unwrap().len(), 1);
    assert!(r.body["next_cursor"].is_null());

    let st = api.call("GET", "/v1/status", k, None).await;
    assert_eq!(st.status, 200);
    let jobs: i64 = st.body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["count"].as_i64().unwrap())
        .sum();
    assert_eq!(jobs, 3, "the org's three jobs: {}", st.body);
    assert_eq!(st.body["approvals"][0]["status"], "pending");
    for k in [
        "ready",
        "running",
        "recent_dead",
        "runs_last_hour",
        "budgets",
        "kinds_without_handler",
        "provider",
    ] {
        assert!(st.body.get(k).is_some(), "status has {k}: {}", st.body);
    }
}

/// Review L11: a request that is not answered within `api.request_timeout_secs` (here a body
/// that stops arriving) gets a 503 problem, and past `api.max_concurrent_requests` another
/// request is refused at once with 503 and `Retry-After` instead of waiting in a queue.
#[tokio::test]
async fn slow_requests_time_out_and_requests_past_the_limit_are_refused() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let api = Api::start_with(|c| {
        c.api.request_timeout_secs = 1;
        c.api.max_concurrent_requests = 1;
    })
    .await;
    let (_, key) = api.org("acme", Role::Uploader).await;
    let addr = api.base.trim_start_matches("http://").to_string();
    // Headers and half a body, then nothing: the handler waits for the rest.
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(
        format!(
            "POST /v1/documents HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"name\": \"a.txt\","
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    // Give the slow request time to take the one slot (it is past authentication, reading).
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let refused = api.call("GET", "/v1/me", Some(&key), None).await;
    refused.problem(503, None);
    assert_eq!(refused.headers["retry-after"], "1");
    assert!(
        refused.body["detail"]
            .as_str()
            .unwrap()
            .contains("api.max_concurrent_requests"),
        "{}",
        refused.body
    );
    // The slow one is answered at its timeout, not held open.
    let mut answer = Vec::new();
    let read = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        let mut buf = [0u8; 4096];
        loop {
            let n = slow.read(&mut buf).await.unwrap();
            answer.extend_from_slice(&buf[..n]);
            if n == 0 || answer.windows(4).any(|w| w == b"\r\n\r\n") && answer.ends_with(b"}") {
                break;
            }
        }
    })
    .await;
    assert!(read.is_ok(), "no answer to the stalled request");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(text.contains("api.request_timeout_secs"), "{text}");
    // The slot is free again.
    let me = api.call("GET", "/v1/me", Some(&key), None).await;
    assert_eq!(me.status.as_u16(), 200, "{}", me.body);
}

/// Review L5: below admin only tonight's or last night's review; `force` on an accepted
/// document takes a reviewer. Review L8: the API shows no worker names and no raw job errors.
#[tokio::test]
async fn uploaders_enqueue_recent_nights_only_and_jobs_hide_workers_and_raw_errors() {
    use agentd::clock::Clock;
    let api = Api::start().await;
    let (org, up) = api.org("acme", Role::Uploader).await;
    let rev = api.key(org, Role::Reviewer).await;
    let admin = api.key(org, Role::Admin).await;
    let today = api.clock.now().date_naive();
    let night = |d: chrono::NaiveDate| Some(json!({"kind": "proactive_suggestion", "night": d}));
    for d in [today, today.pred_opt().unwrap()] {
        let r = api.call("POST", "/v1/jobs", Some(&up), night(d)).await;
        assert_eq!(r.status, 201, "{d}: {}", r.body);
    }
    let old = today - Duration::days(2);
    api.call("POST", "/v1/jobs", Some(&up), night(old))
        .await
        .problem(422, Some("night"));
    let r = api.call("POST", "/v1/jobs", Some(&admin), night(old)).await;
    assert_eq!(r.status, 201, "an admin may review any night: {}", r.body);
    let running = r.body["id"].as_i64().unwrap();
    sqlx::query(
        "UPDATE agentd_jobs SET state = 'running', attempt = 1, started_at = now(),
                lease_expires_at = now() + interval '1 hour', locked_by = 'db-host-7:4242:w2'
          WHERE id = $1",
    )
    .bind(running)
    .execute(&api.db.pool)
    .await
    .unwrap();

    let doc = api.doc(org, "a").await;
    sqlx::query("UPDATE documents SET auto_create_status = 'accepted' WHERE id = $1")
        .bind(doc)
        .execute(&api.db.pool)
        .await
        .unwrap();
    let force = Some(json!({"kind": "auto_create", "document_id": doc, "force": true}));
    api.call("POST", "/v1/jobs", Some(&up), force.clone())
        .await
        .problem(403, Some("force"));
    let r = api.call("POST", "/v1/jobs", Some(&rev), force).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let job = r.body["id"].as_i64().unwrap();

    sqlx::query(
        "UPDATE agentd_jobs SET state = 'dead', finished_at = now(), locked_by = 'db-host-7:4242:w1',
                last_error = 'provider failed: openai: HTTP 502 from http://10.0.0.5:8000/v1'
          WHERE id = $1",
    )
    .bind(job)
    .execute(&api.db.pool)
    .await
    .unwrap();
    let j = api
        .call("GET", &format!("/v1/jobs/{job}"), Some(&up), None)
        .await;
    assert_eq!(j.status, 200, "{}", j.body);
    assert!(j.body.get("locked_by").is_none(), "{}", j.body);
    assert_eq!(j.body["last_error"], "provider: the model provider failed");
    for path in ["/v1/status", "/v1/queue"] {
        let r = api.call("GET", path, Some(&admin), None).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        let text = r.body.to_string();
        assert!(
            text.contains("provider: the model provider failed"),
            "{path} lists the dead job: {text}"
        );
        assert!(
            !text.contains("10.0.0.5") && !text.contains("db-host-7"),
            "{path}: {text}"
        );
    }
}

/// Review S5: a client that trickles its request head (a header line every 200 ms, never the
/// blank line that ends it) is cut at `api.header_read_timeout_secs`; a client that sends its
/// request at once is served.
#[tokio::test]
async fn a_client_trickling_headers_is_cut() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let api = Api::start_with(|c| c.api.header_read_timeout_secs = 1).await;
    let addr = api.base.trim_start_matches("http://").to_string();
    let slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (mut rd, mut wr) = slow.into_split();
    wr.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n").as_bytes())
        .await
        .unwrap();
    let trickle = tokio::spawn(async move {
        for i in 0..100 {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            if wr
                .write_all(format!("X-Slow-{i}: a\r\n").as_bytes())
                .await
                .is_err()
            {
                return i;
            }
        }
        100
    });
    // Generous: the connection is closed long before the trickle ends (20 s).
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(
        std::time::Duration::from_secs(15),
        rd.read_to_end(&mut rest),
    )
    .await;
    assert!(
        matches!(closed, Ok(Ok(_)) | Ok(Err(_))),
        "the trickling connection is still open after 15 s"
    );
    assert!(
        !String::from_utf8_lossy(&rest).contains("200 OK"),
        "an unfinished request head is not served: {}",
        String::from_utf8_lossy(&rest)
    );
    trickle.abort();
    let ok = api.call("GET", "/healthz", None, None).await;
    assert_eq!(ok.status, 200);
}

/// Issue 47, item 5: a key past its rate gets 429 with `Retry-After` before its handler runs,
/// a key past its rate of run-enqueuing requests cannot upload more (its reads go on), and
/// another org's requests are not slowed.
#[tokio::test]
async fn a_key_over_its_rate_gets_429_with_retry_after_and_other_orgs_are_not_slowed() {
    let api = Api::start_with(|c| {
        c.api.requests_per_minute_per_key = 6;
        c.api.requests_per_minute_per_org = 0;
        c.api.runs_per_minute_per_key = 2;
    })
    .await;
    let (_, a) = api.org("noisy", Role::Admin).await;
    let (_, b) = api.org("quiet", Role::Admin).await;
    let upload =
        |n: usize| json!({"name": format!("{n}.txt"), "text": "Invoice 1", "auto_create": false});
    for n in 0..2 {
        let r = api
            .call("POST", "/v1/documents", Some(&a), Some(upload(n)))
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let r = api
        .call("POST", "/v1/documents", Some(&a), Some(upload(2)))
        .await;
    r.problem(429, None);
    assert!(
        r.body["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("api.runs_per_minute_per_key"),
        "{}",
        r.body
    );
    let wait: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert_eq!(wait, 30, "2 a minute: a token every 30 s");
    assert_eq!(
        api.count("SELECT count(*) FROM documents").await,
        2,
        "the refused upload stored nothing"
    );
    // The key still reads, up to its own rate: 6 in all, the 2 uploads counted (a refused
    // request takes no token), so 4 reads.
    for _ in 0..4 {
        let r = api.call("GET", "/v1/me", Some(&a), None).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let r = api.call("GET", "/v1/me", Some(&a), None).await;
    r.problem(429, None);
    assert!(r.headers.contains_key("retry-after"));
    // The other org is not slowed: its key has its own buckets.
    for n in 0..2 {
        let r = api
            .call("POST", "/v1/documents", Some(&b), Some(upload(n)))
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let r = api.call("GET", "/v1/me", Some(&b), None).await;
    assert_eq!(r.status, 200, "{}", r.body);

    // An org's own rates (org settings) are the operator's: an org key cannot change them (it
    // could lock itself out); the operator's takes effect at the next request.
    let (c_org, c) = api.org("careful", Role::Admin).await;
    for (body, field) in [
        (json!({"runs_per_minute": 1}), "runs_per_minute"),
        (json!({"requests_per_minute": 5}), "requests_per_minute"),
    ] {
        api.call("PATCH", "/v1/settings", Some(&c), Some(body.clone()))
            .await
            .problem_in(&body.to_string(), 422, Some(field));
    }
    let operator = |patch: Value| {
        let app = api.app.clone();
        async move {
            let p: agentd::org_settings::Patch = serde_json::from_value(patch).unwrap();
            let by = agentd::org_settings::SetBy::Operator;
            agentd::org_settings::apply(&app.pool, &app.config, c_org, &p, app.clock.now(), by)
                .await
                .unwrap();
        }
    };
    operator(json!({"runs_per_minute": 1})).await;
    let s = api.call("GET", "/v1/settings", Some(&c), None).await;
    assert_eq!(s.body["runs_per_minute"], 1, "{}", s.body);
    let r = api
        .call("POST", "/v1/documents", Some(&c), Some(upload(0)))
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = api
        .call("POST", "/v1/documents", Some(&c), Some(upload(1)))
        .await;
    r.problem(429, None);
    assert!(
        r.body["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("the org's setting runs_per_minute"),
        "{}",
        r.body
    );
    assert_eq!(r.headers["retry-after"], "60", "1 a minute");
    // The operator may raise an org past the service's rate (2 a minute here).
    operator(json!({"runs_per_minute": 600})).await;
    let c2 = api.key(c_org, Role::Uploader).await;
    for n in 0..3 {
        let r = api
            .call("POST", "/v1/documents", Some(&c2), Some(upload(10 + n)))
            .await;
        assert_eq!(r.status, 201, "the operator's rate: {}", r.body);
    }
}

/// Starts a request that holds its slot: headers and the first part of a body whose rest is
/// sent by the caller later (`Connection: close`, so the answer ends at EOF).
async fn held_upload(api: &Api, key: &str, body: &str, sent: usize) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let addr = api.base.trim_start_matches("http://").to_string();
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /v1/documents HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&body.as_bytes()[..sent]).await.unwrap();
    // Time for the request to pass authentication and take its slots.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    s
}

/// Everything the server sends on `s` until it closes (within 10 s).
async fn answer_of(mut s: tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        s.read_to_end(&mut answer),
    )
    .await;
    assert!(read.is_ok(), "no answer within 10 s");
    String::from_utf8_lossy(&answer).into_owned()
}

/// Review D8: the routes without a key — `/healthz`, `/readyz`, the console's pages — are
/// behind the same concurrency limit (and timeout) as `/v1`: with the one slot held, each gets
/// the 503 problem with `Retry-After` at once, and answers again once the slot is free.
#[tokio::test]
async fn public_routes_wait_behind_the_same_limit_as_the_api() {
    let api = Api::start_with(|c| {
        c.api.request_timeout_secs = 2;
        c.api.max_concurrent_requests = 1;
    })
    .await;
    let (_, key) = api.org("acme", Role::Uploader).await;
    let public = ["/healthz", "/readyz", "/", "/console/core.js"];
    for path in public {
        let r = api.call("GET", path, None, None).await;
        assert_ne!(r.status.as_u16(), 503, "{path} before: {}", r.body);
    }
    let body = r#"{"name": "a.txt", "text": "Invoice Number: INV-1"}"#;
    let slow = held_upload(&api, &key, body, 10).await;
    for path in public {
        let r = api.call("GET", path, None, None).await;
        r.problem_in(path, 503, None);
        assert_eq!(r.headers["retry-after"], "1", "{path}");
        let detail = r.body["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains("api.max_concurrent_requests"),
            "{path}: {detail}"
        );
    }
    // The held request ends at its timeout; the public routes answer again.
    let text = answer_of(slow).await;
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    let r = api.call("GET", "/healthz", None, None).await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.body);
}

/// Review D8: a refused bearer token is remembered by its hash and refused again without a
/// database query (shown with `api_keys` renamed away: the remembered token still gets 401,
/// a new one the 500 of a failed query); past `api.refused_per_minute_per_source` refused
/// tokens a source gets 429 with `Retry-After` before any query, except for a key that worked
/// from it lately (a new good key waits like an unknown one).
#[tokio::test]
async fn refused_tokens_are_remembered_and_a_source_past_its_refusals_waits() {
    let api = Api::start_with(|c| c.api.refused_per_minute_per_source = 5).await;
    let (org, good) = api.org("acme", Role::Reader).await;
    let fresh = api.key(org, Role::Reader).await;
    let me = |key: String| {
        let api = &api;
        async move { api.call("GET", "/v1/me", Some(&key), None).await }
    };
    let bad = |n: u32| format!("agentd_{n:064x}");
    let away = |to: bool| {
        let pool = api.db.pool.clone();
        async move {
            let sql = if to {
                "ALTER TABLE api_keys RENAME TO api_keys_away"
            } else {
                "ALTER TABLE api_keys_away RENAME TO api_keys"
            };
            sqlx::query(sql).execute(&pool).await.unwrap();
        }
    };
    assert_eq!(me(good.clone()).await.status.as_u16(), 200);
    me(bad(1)).await.problem(401, None);
    away(true).await;
    me(bad(1)).await.problem_in("remembered", 401, None);
    me(bad(2))
        .await
        .problem_in("a new token is looked up", 500, None);
    away(false).await;
    for n in 3..7 {
        me(bad(n))
            .await
            .problem_in(&format!("refusal {n}"), 401, None);
    }
    // Five refused (1, 3–6): the sixth unknown token waits, and costs no query.
    away(true).await;
    let r = me(bad(7)).await;
    r.problem_in("past the source's refusals", 429, None);
    assert_eq!(r.headers["retry-after"], "12", "5 a minute: one per 12 s");
    let detail = r.body["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("api.refused_per_minute_per_source"),
        "{detail}"
    );
    me(bad(1)).await.problem_in("still remembered", 401, None);
    away(false).await;
    // The key that worked from this source lately still does; a new one waits.
    assert_eq!(me(good.clone()).await.status.as_u16(), 200);
    me(fresh)
        .await
        .problem_in("a key new to this source", 429, None);
}

/// Review D8: at most `api.max_concurrent_uploads` uploads are read at once: with the one slot
/// held by an upload whose body is still arriving, another upload gets 503 with `Retry-After`
/// before its body is read, other requests are answered, and the slot is free again once the
/// held upload is stored.
#[tokio::test]
async fn uploads_past_max_concurrent_uploads_get_503_and_other_requests_do_not() {
    use tokio::io::AsyncWriteExt;
    let api = Api::start_with(|c| c.api.max_concurrent_uploads = 1).await;
    let (_, key) = api.org("acme", Role::Uploader).await;
    let body = r#"{"name": "held.txt", "text": "Invoice Number: INV-1"}"#;
    let mut held = held_upload(&api, &key, body, 12).await;
    let upload = json!({"name": "b.txt", "text": "Invoice Number: INV-2"});
    let r = api
        .call("POST", "/v1/documents", Some(&key), Some(upload.clone()))
        .await;
    r.problem(503, None);
    assert_eq!(r.headers["retry-after"], "1");
    let detail = r.body["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("api.max_concurrent_uploads"), "{detail}");
    let me = api.call("GET", "/v1/me", Some(&key), None).await;
    assert_eq!(me.status.as_u16(), 200, "{}", me.body);
    held.write_all(&body.as_bytes()[12..]).await.unwrap();
    let text = answer_of(held).await;
    assert!(text.starts_with("HTTP/1.1 201"), "{text}");
    let r = api
        .call("POST", "/v1/documents", Some(&key), Some(upload))
        .await;
    assert_eq!(r.status.as_u16(), 201, "{}", r.body);
    assert_eq!(api.count("SELECT count(*) FROM documents").await, 2);
}

/// Review D8: the public `/readyz` checks the database at most once a second — with
/// `_sqlx_migrations` renamed away, the answer checked just before is given again without a
/// query, and the next check a second later says not ready — so a flood of it costs one query
/// a second, not one each.
#[tokio::test]
async fn the_public_readyz_checks_the_database_at_most_once_a_second() {
    let api = Api::start().await;
    let rename = |from: &str, to: &str| {
        let pool = api.db.pool.clone();
        let sql = format!("ALTER TABLE {from} RENAME TO {to}");
        async move {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&pool)
                .await
                .unwrap();
        }
    };
    let ready = || async { api.call("GET", "/readyz", None, None).await.status.as_u16() };
    assert_eq!(ready().await, 200);
    rename("_sqlx_migrations", "_sqlx_migrations_away").await;
    assert_eq!(ready().await, 200, "the answer of the check just made");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(ready().await, 503, "checked again a second later");
    rename("_sqlx_migrations_away", "_sqlx_migrations").await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(ready().await, 200);
}
