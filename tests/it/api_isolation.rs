//! The API's boundaries over real HTTP: roles and revoked keys; another org's ids are "not found" on every route; bad
//! input on every route is a problem detail and writes nothing; the OpenAPI document lists
//! every route (and every listed route exists); `agentd serve` as a process never logs a key.

use crate::api_support;
use crate::common;
use agentd::api::Role;
use api_support::Api;
use chrono::Duration;
use serde_json::{Value, json};

/// Every route of the API: (method, OpenAPI path).
const ROUTES: [(&str, &str); 48] = [
    ("post", "/v1/documents"),
    ("get", "/v1/documents"),
    ("get", "/v1/documents/{id}"),
    ("post", "/v1/documents/{id}/accept"),
    ("post", "/v1/documents/{id}/reject"),
    ("post", "/v1/documents/{id}/refine"),
    ("post", "/v1/documents/{id}/fields"),
    ("get", "/v1/schemas"),
    ("get", "/v1/prompts"),
    ("get", "/v1/tags"),
    ("get", "/v1/approvals"),
    ("get", "/v1/approvals/{id}"),
    ("post", "/v1/approvals/{id}/approve"),
    ("post", "/v1/approvals/{id}/reject"),
    ("get", "/v1/suggestions"),
    ("post", "/v1/suggestions/{id}/dismiss"),
    ("post", "/v1/suggestions/{id}/shown"),
    ("get", "/v1/runs"),
    ("get", "/v1/runs/{id}"),
    ("get", "/v1/me"),
    ("get", "/v1/queue"),
    ("post", "/v1/jobs/{id}/retry"),
    ("get", "/v1/status"),
    ("get", "/v1/usage"),
    ("get", "/v1/events"),
    ("get", "/v1/events/stream"),
    ("post", "/v1/webhooks"),
    ("get", "/v1/webhooks"),
    ("delete", "/v1/webhooks/{id}"),
    ("post", "/v1/jobs"),
    ("get", "/v1/jobs"),
    ("get", "/v1/jobs/{id}"),
    ("get", "/v1/settings"),
    ("patch", "/v1/settings"),
    ("put", "/v1/settings/provider-key"),
    ("get", "/v1/settings/provider-key"),
    ("delete", "/v1/settings/provider-key"),
    ("post", "/v1/jobs/{id}/cancel"),
    ("post", "/v1/jobs/dead/retry"),
    ("post", "/v1/jobs/dead/cancel"),
    ("post", "/v1/runs/{id}/cancel"),
    ("post", "/v1/runs/{id}/fork"),
    ("post", "/v1/runs/{id}/adopt"),
    ("post", "/v1/queue/{kind}/pause"),
    ("post", "/v1/queue/{kind}/resume"),
    ("get", "/v1/keys"),
    ("post", "/v1/keys"),
    ("post", "/v1/keys/{id}/revoke"),
];

#[tokio::test]
async fn another_orgs_ids_are_not_found_on_every_route() {
    let api = Api::start().await;
    let (a, ka) = api.org("a", Role::Admin).await;
    let (_, kb) = api.org("b", Role::Admin).await;
    let r = api
        .call(
            "POST",
            "/v1/documents",
            Some(&ka),
            Some(json!({"name": "x", "text": "Total: 1", "auto_create": true})),
        )
        .await;
    let doc = r.body["id"].as_str().unwrap().to_string();
    let job = r.body["job_id"].as_i64().unwrap();
    sqlx::query("UPDATE documents SET auto_create_status = 'proposed', auto_create_run_id = $2 WHERE id = $1::uuid")
        .bind(&doc).bind(uuid::Uuid::now_v7()).execute(&api.db.pool).await.unwrap();
    let approval = api
        .propose(
            a,
            json!({"document_id": doc, "metadata": {"k": 1}}),
            Duration::hours(1),
        )
        .await;
    let run = uuid::Uuid::now_v7();
    sqlx::query("INSERT INTO agent_runs (id, org_id, kind, subject, provider, model, status, started_at) VALUES ($1, $2, 'auto_create', 'x', 'offline', 'm', 'succeeded', now())")
        .bind(run).bind(a).execute(&api.db.pool).await.unwrap();
    let sug = uuid::Uuid::now_v7();
    sqlx::query("INSERT INTO suggestions (id, org_id, kind, subject, night, title, message) VALUES ($1, $2, 'k', '', '2026-01-01', 't', 'm')")
        .bind(sug).bind(a).execute(&api.db.pool).await.unwrap();
    api.call(
        "PATCH",
        "/v1/settings",
        Some(&ka),
        Some(json!({"monthly_token_budget": 7})),
    )
    .await;

    let by_id: Vec<(&str, String, Option<Value>)> = vec![
        ("GET", format!("/v1/documents/{doc}"), None),
        ("POST", format!("/v1/documents/{doc}/accept"), None),
        ("POST", format!("/v1/documents/{doc}/reject"), None),
        (
            "POST",
            format!("/v1/documents/{doc}/refine"),
            Some(json!({"instructions": "add a field x"})),
        ),
        (
            "POST",
            format!("/v1/documents/{doc}/fields"),
            Some(json!({"name": "x"})),
        ),
        ("GET", format!("/v1/approvals/{approval}"), None),
        ("POST", format!("/v1/approvals/{approval}/approve"), None),
        ("POST", format!("/v1/approvals/{approval}/reject"), None),
        ("GET", format!("/v1/runs/{run}"), None),
        (
            "POST",
            format!("/v1/suggestions/{sug}/dismiss"),
            Some(json!({"reason": "x"})),
        ),
        ("POST", format!("/v1/suggestions/{sug}/shown"), None),
        ("GET", format!("/v1/jobs/{job}"), None),
        ("POST", format!("/v1/jobs/{job}/retry"), None),
        ("POST", format!("/v1/jobs/{job}/cancel"), None),
        ("POST", format!("/v1/runs/{run}/cancel"), None),
        (
            "POST",
            "/v1/jobs".into(),
            Some(json!({"kind": "auto_create", "document_id": doc})),
        ),
        (
            "POST",
            "/v1/jobs".into(),
            Some(json!({"kind": "approval_expiry", "approval_ids": [approval]})),
        ),
    ];
    for (m, path, body) in &by_id {
        api.call(m, path, Some(&kb), body.clone())
            .await
            .problem(404, None);
    }
    let (of_doc, of_subject) = (format!("/v1/jobs?document={doc}"), "/v1/runs?subject=x");
    for path in [
        "/v1/documents",
        "/v1/approvals",
        "/v1/suggestions",
        "/v1/runs",
        "/v1/jobs",
        of_doc.as_str(),
        of_subject,
    ] {
        let r = api.call("GET", path, Some(&kb), None).await;
        assert_eq!(r.body["items"], json!([]), "{path}: {}", r.body);
        let mine = api.call("GET", path, Some(&ka), None).await;
        assert_eq!(
            mine.body["items"].as_array().unwrap().len(),
            1,
            "{path}: {}",
            mine.body
        );
    }
    // What an upload may start from: A's schema (two versions, listed once as the latest),
    // prompt and tag; B lists none of them.
    let (schema, prompt) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    for v in [1, 2] {
        sqlx::query("INSERT INTO schemas (schema_id, version, org_id, name, response_format, status) VALUES ($1, $2, $3, 'invoice', '{}', 'active')")
            .bind(schema).bind(v).bind(a).execute(&api.db.pool).await.unwrap();
    }
    sqlx::query("INSERT INTO prompts (prompt_id, version, org_id, name, content, schema_id, schema_version, status) VALUES ($1, 1, $2, 'p', 'c', $3, 2, 'proposed')")
        .bind(prompt).bind(a).bind(schema).execute(&api.db.pool).await.unwrap();
    sqlx::query("INSERT INTO tags (id, org_id, name, color) VALUES ($1, $2, 'urgent', '#f00')")
        .bind(uuid::Uuid::now_v7())
        .bind(a)
        .execute(&api.db.pool)
        .await
        .unwrap();
    for path in ["/v1/schemas", "/v1/prompts", "/v1/tags"] {
        let r = api.call("GET", path, Some(&kb), None).await;
        assert_eq!(r.body["items"], json!([]), "{path}: {}", r.body);
        let mine = api.call("GET", path, Some(&ka), None).await;
        assert_eq!(
            mine.body["items"].as_array().map(Vec::len),
            Some(1),
            "{path}: {}",
            mine.body
        );
    }
    let latest = api
        .call("GET", "/v1/schemas?status=active", Some(&ka), None)
        .await;
    assert_eq!(
        (
            &latest.body["items"][0]["id"],
            &latest.body["items"][0]["version"]
        ),
        (&json!(schema), &json!(2)),
        "{}",
        latest.body
    );
    let st = api.call("GET", "/v1/status", Some(&kb), None).await;
    assert_eq!(
        (st.body["jobs"].clone(), st.body["approvals"].clone()),
        (json!([]), json!([]))
    );
    let q = api.call("GET", "/v1/queue", Some(&kb), None).await;
    assert_eq!(q.status, 200, "{}", q.body);
    assert_eq!(
        (q.body["depth"].clone(), q.body["ready"].clone()),
        (json!([]), json!([])),
        "B's queue view shows none of A's jobs"
    );
    let s = api.call("GET", "/v1/settings", Some(&kb), None).await;
    assert_eq!(s.body["monthly_token_budget"], Value::Null);
    // Nothing of A's changed; with A's own key every id answers.
    assert_eq!(
        api.count("SELECT count(*) FROM pending_approvals WHERE status = 'pending'")
            .await,
        1
    );
    assert_eq!(api.count("SELECT count(*) FROM agentd_jobs").await, 1);
    for (m, path, _) in by_id.iter().filter(|(m, _, _)| *m == "GET") {
        assert_eq!(
            api.call(m, path, Some(&ka), None).await.status,
            200,
            "{path}"
        );
    }
}

#[tokio::test]
async fn keys_and_roles_decide_access() {
    let api = Api::start().await;
    let (org, reader) = api.org("acme", Role::Reader).await;
    let uploader = api.key(org, Role::Uploader).await;
    let reviewer = api.key(org, Role::Reviewer).await;
    let admin = api.key(org, Role::Admin).await;
    let doc = json!({"name": "a", "text": "x"});
    api.call("GET", "/v1/documents", None, None)
        .await
        .problem(401, None);
    api.call("GET", "/v1/documents", Some("agentd_nope"), None)
        .await
        .problem(401, None);
    assert_eq!(
        api.call("GET", "/v1/status", Some(&reader), None)
            .await
            .status,
        200
    );
    api.call("POST", "/v1/documents", Some(&reader), Some(doc.clone()))
        .await
        .problem(403, None);
    // The role is checked before the body is read: a reader learns nothing from a bad body.
    api.call("POST", "/v1/jobs", Some(&reader), Some(json!({"nope": 1})))
        .await
        .problem(403, None);
    api.call(
        "POST",
        "/v1/jobs",
        Some(&uploader),
        Some(json!({"nope": 1})),
    )
    .await
    .problem(422, Some("nope"));
    assert_eq!(
        api.call("POST", "/v1/documents", Some(&uploader), Some(doc.clone()))
            .await
            .status,
        201
    );
    let id = api
        .propose(
            org,
            json!({"document_id": api.doc(org, "b").await, "metadata": {"a": 1}}),
            Duration::hours(1),
        )
        .await;
    let path = format!("/v1/approvals/{id}/approve");
    api.call("POST", &path, Some(&uploader), None)
        .await
        .problem(403, None);
    assert_eq!(
        api.call("POST", &path, Some(&reviewer), None).await.status,
        200
    );
    api.call("GET", "/v1/settings", Some(&reviewer), None)
        .await
        .problem(403, None);
    let r = api
        .call(
            "PATCH",
            "/v1/settings",
            Some(&admin),
            Some(json!({"monthly_token_budget": 5000})),
        )
        .await;
    assert_eq!(r.body["monthly_token_budget"], 5000, "{}", r.body);
    // Revoked: 401 from then on.
    let kid: uuid::Uuid = sqlx::query_scalar("SELECT id FROM api_keys WHERE key_hash = $1")
        .bind(agentd::api::hash_key(&reader))
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    agentd::store::api_keys::revoke_key(&api.db.pool, kid, None, chrono::Utc::now())
        .await
        .unwrap();
    api.call("GET", "/v1/status", Some(&reader), None)
        .await
        .problem(401, None);
}

/// A bad request and the problem it must get: (method, path, content type, body, status, field).
type Case<'a> = (&'a str, String, &'a str, Vec<u8>, u16, &'a str);

#[tokio::test]
async fn bad_input_on_every_route_is_a_problem_and_writes_nothing() {
    let api = Api::start().await;
    let (_, k) = api.org("a", Role::Admin).await;
    let id = uuid::Uuid::now_v7();
    let big =
        |n: usize| format!("{{\"name\": \"a\", \"text\": \"{}\"}}", "x".repeat(n)).into_bytes();
    let j = "application/json";
    // (method, path, content type, body, status, field)
    #[rustfmt::skip]
    let cases: Vec<Case> = vec![
        ("POST", "/v1/documents".into(), j, b"{\"name\": ".to_vec(), 400, "body"),
        ("POST", "/v1/documents".into(), j, b"{\"name\": \"a\", \"text\": \"b\"} x".to_vec(), 400, "body"),
        ("POST", "/v1/documents".into(), j, br#"{"name": "a", "text": 5}"#.to_vec(), 422, "text"),
        ("POST", "/v1/documents".into(), j, br#"{"name": "a", "text": "b", "auto_create": "yes"}"#.to_vec(), 422, "auto_create"),
        ("POST", "/v1/documents".into(), j, br#"{"name": "a", "text": "b", "org_id": "x"}"#.to_vec(), 422, "org_id"),
        ("POST", "/v1/documents".into(), j, br#"{"name": "a"}"#.to_vec(), 422, "text"),
        ("POST", "/v1/documents".into(), j, br#"{"name": " ", "text": "b"}"#.to_vec(), 422, "name"),
        ("POST", "/v1/documents".into(), j, br#"{"name": "a", "text": "b\u0000c"}"#.to_vec(), 422, "text"),
        ("POST", "/v1/documents".into(), j, b"{\"name\": \"a\", \"text\": \"\xff\xfe\"}".to_vec(), 422, "body"),
        ("POST", "/v1/documents".into(), j, big(5 * 1024 * 1024), 413, "body"),
        ("POST", "/v1/documents".into(), j, big(4 * 1024 * 1024 + 1), 413, "text"),
        ("POST", "/v1/documents".into(), "text/plain", br#"{"name": "a", "text": "b"}"#.to_vec(), 415, "Content-Type"),
        ("GET", "/v1/documents?cursor=zz".into(), j, vec![], 400, "cursor"),
        ("GET", "/v1/documents?cursor=3132".into(), j, vec![], 400, "cursor"),
        ("GET", "/v1/documents?limit=0".into(), j, vec![], 400, "limit"),
        ("GET", "/v1/documents?limit=ten".into(), j, vec![], 400, "limit"),
        ("GET", "/v1/documents?org=b".into(), j, vec![], 400, "org"),
        ("GET", "/v1/documents?status=done".into(), j, vec![], 400, "status"),
        ("GET", "/v1/documents/not-a-uuid".into(), j, vec![], 400, "id"),
        ("POST", "/v1/documents/123/accept".into(), j, vec![], 400, "id"),
        ("POST", "/v1/documents/123/reject".into(), j, vec![], 400, "id"),
        ("GET", "/v1/approvals?status=maybe".into(), j, vec![], 400, "status"),
        ("GET", "/v1/approvals?cursor=!!".into(), j, vec![], 400, "cursor"),
        ("GET", "/v1/approvals?limit=1000".into(), j, vec![], 400, "limit"),
        ("GET", "/v1/approvals/xyz".into(), j, vec![], 400, "id"),
        ("POST", "/v1/approvals/xyz/approve".into(), j, vec![], 400, "id"),
        ("POST", format!("/v1/approvals/{id}/approve"), j, b"{".to_vec(), 400, "body"),
        ("POST", format!("/v1/approvals/{id}/approve"), j, br#"{"by": 7}"#.to_vec(), 422, "by"),
        ("POST", format!("/v1/approvals/{id}/approve"), j, br#"{"who": "a"}"#.to_vec(), 422, "who"),
        ("POST", format!("/v1/approvals/{id}/reject"), j, format!("{{\"by\": \"{}\"}}", "a".repeat(70_000)).into_bytes(), 413, "body"),
        ("POST", "/v1/approvals/xyz/reject".into(), j, vec![], 400, "id"),
        ("GET", "/v1/suggestions?cursor=abc".into(), j, vec![], 400, "cursor"),
        ("GET", "/v1/suggestions?status=new".into(), j, vec![], 400, "status"),
        ("GET", "/v1/runs/1".into(), j, vec![], 400, "id"),
        ("GET", "/v1/status?verbose=1".into(), j, vec![], 400, "verbose"),
        ("GET", format!("/v1/runs/{id}?steps=all"), j, vec![], 400, "steps"),
        ("GET", "/v1/settings?org=b".into(), j, vec![], 400, "org"),
        ("POST", "/v1/jobs".into(), j, b"{\"kind\": ".to_vec(), 400, "body"),
        ("POST", "/v1/jobs".into(), j, br#"{"kind": 1}"#.to_vec(), 422, "kind"),
        ("POST", "/v1/jobs?org_id=x".into(), j, br#"{"kind": "auto_create"}"#.to_vec(), 400, "org_id"),
        ("POST", "/v1/jobs".into(), j, br#"{"kind": "auto_create", "document_id": "d"}"#.to_vec(), 422, "document_id"),
        ("POST", "/v1/jobs".into(), j, br#"{"kind": "auto_create", "payload": {}}"#.to_vec(), 422, "payload"),
        ("POST", "/v1/jobs".into(), j, br#"{"kind": "approval_expiry", "approval_ids": ["x"]}"#.to_vec(), 422, "approval_ids[0]"),
        ("POST", "/v1/jobs".into(), j, vec![b' '; 70_000], 413, "body"),
        ("GET", "/v1/jobs/abc".into(), j, vec![], 400, "id"),
        ("GET", "/v1/jobs/-4".into(), j, vec![], 400, "id"),
        ("PATCH", "/v1/settings".into(), j, b"nope".to_vec(), 400, "body"),
        ("PATCH", "/v1/settings".into(), j, br#"{"monthly_token_budget": "lots"}"#.to_vec(), 422, "monthly_token_budget"),
        ("PATCH", "/v1/settings".into(), j, br#"{"monthly_token_budget": 1.5}"#.to_vec(), 422, "monthly_token_budget"),
        ("PATCH", "/v1/settings".into(), j, br#"{"budget": 1}"#.to_vec(), 422, "budget"),
        ("PATCH", "/v1/settings".into(), j, vec![b' '; 70_000], 413, "body"),
        ("GET", "/v1/nowhere".into(), j, vec![], 404, ""),
        ("DELETE", "/v1/documents".into(), j, vec![], 405, ""),
    ];
    for (m, path, ct, body, status, field) in cases {
        let r = api.raw(m, &path, &k, ct, body, &[]).await;
        let f = (!field.is_empty()).then_some(field);
        r.problem_in(&format!("{m} {path}"), status, f);
        assert!(
            r.body["detail"].as_str().unwrap().len() > 5,
            "{m} {path}: {}",
            r.body
        );
    }
    let r = api
        .raw(
            "POST",
            "/v1/documents",
            &k,
            j,
            br#"{"name": "a", "text": "b"}"#.to_vec(),
            &[("Idempotency-Key", "")],
        )
        .await;
    r.problem(400, Some("Idempotency-Key"));
    for table in [
        "documents",
        "agentd_jobs",
        "api_idempotency",
        "org_budgets",
        "audit_events",
    ] {
        assert_eq!(
            api.count(&format!("SELECT count(*) FROM {table}")).await,
            0,
            "{table} untouched"
        );
    }
}

#[tokio::test]
async fn the_openapi_document_lists_every_route_and_every_listed_route_exists() {
    let api = Api::start().await;
    let (_, k) = api.org("a", Role::Admin).await;
    let doc = api.call("GET", "/v1/openapi.json", None, None).await;
    assert_eq!(doc.status, 200);
    assert!(
        doc.body["openapi"].as_str().unwrap().starts_with("3.1"),
        "{}",
        doc.body["openapi"]
    );
    let paths = doc.body["paths"].as_object().unwrap();
    let mut listed = Vec::new();
    for (path, ops) in paths {
        for m in ops.as_object().unwrap().keys() {
            if ["get", "post", "patch", "put", "delete"].contains(&m.as_str()) {
                listed.push((m.clone(), path.clone()));
            }
        }
    }
    listed.sort();
    let mut expected: Vec<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    expected.sort();
    assert_eq!(listed, expected);
    assert!(doc.body["components"]["securitySchemes"]["bearer"].is_object());
    // Every route needs a key, said once for the whole document.
    assert_eq!(doc.body["security"], json!([{"bearer": []}]));
    for (m, p) in ROUTES {
        if p == "/v1/events/stream" {
            // An SSE stream never ends its body; tests/it/webhooks.rs reads it with resume.
            continue;
        }
        let path = p
            .replace("{id}", &uuid::Uuid::now_v7().to_string())
            .replace("/jobs/0", "/jobs/1");
        let path = if p == "/v1/jobs/{id}" {
            "/v1/jobs/1".to_string()
        } else {
            path
        };
        let r = api.call(&m.to_uppercase(), &path, Some(&k), None).await;
        let no_route = r.body["detail"] == "no such route" || r.status == 405;
        assert!(
            !no_route,
            "{m} {p} is documented but not served: {}",
            r.body
        );
    }
}

#[tokio::test]
async fn serve_process_works_from_the_cli_and_never_logs_a_key() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let db = common::TestDb::new().await;
    let agentd = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_agentd"))
            .args(args)
            .env("DATABASE_URL", &db.url)
            .env("AGENTD_HTTP__ADDR", "")
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    let org: Value = serde_json::from_str(&agentd(&["orgs", "create", "acme", "--json"])).unwrap();
    let admin = org["key"].as_str().unwrap().to_string();
    let dup = Command::new(env!("CARGO_BIN_EXE_agentd"))
        .args(["orgs", "create", "acme"])
        .env("DATABASE_URL", &db.url)
        .output()
        .unwrap();
    assert_eq!(dup.status.code(), Some(2), "a taken name is bad input");
    assert!(String::from_utf8_lossy(&dup.stderr).contains("exists already"));
    let reader: Value = serde_json::from_str(&agentd(&[
        "keys", "create", "--org", "acme", "--role", "reader", "--json",
    ]))
    .unwrap();
    let reader_key = reader["key"].as_str().unwrap().to_string();
    let listed = agentd(&["keys", "list", "--json"]);
    assert!(
        !listed.contains(&admin) && !listed.contains(&reader_key),
        "{listed}"
    );
    assert_eq!(
        serde_json::from_str::<Value>(&listed)
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        2
    );

    let mut child = Command::new(env!("CARGO_BIN_EXE_agentd"))
        .args(["serve", "--addr", "127.0.0.1:0"])
        .env("DATABASE_URL", &db.url)
        .env("AGENTD_LOG", "trace")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stderr = child.stderr.take().unwrap();
    let reader_thread = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split("listening on http://").nth(1) {
                let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_string());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let addr = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("serve prints its address");
    let base = format!("http://{addr}");
    let http = reqwest::Client::new();
    let get = |key: &str, path: &str| http.get(format!("{base}{path}")).bearer_auth(key).send();
    assert_eq!(get(&admin, "/v1/status").await.unwrap().status(), 200);
    assert_eq!(
        get(&reader_key, "/v1/documents").await.unwrap().status(),
        200
    );
    let wrong = "agentd_0123456789abcdef0123456789abcdef0123456789abcdef0123456789ab";
    assert_eq!(get(wrong, "/v1/status").await.unwrap().status(), 401);
    let r = http
        .post(format!("{base}/v1/documents"))
        .bearer_auth(&reader_key)
        .json(&json!({"name": "a", "text": "b"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(
        http.get(format!("{base}/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    agentd(&["keys", "revoke", reader["id"].as_str().unwrap()]);
    assert_eq!(
        get(&reader_key, "/v1/documents").await.unwrap().status(),
        401
    );

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "serve stops cleanly on SIGTERM: {status:?}"
    );
    let log = reader_thread.join().unwrap();
    assert!(
        log.contains("api request"),
        "the requests were logged: {log}"
    );
    assert!(
        log.contains(org["key_id"].as_str().unwrap()),
        "the log names the key id"
    );
    for secret in [&admin, &reader_key, &wrong.to_string()] {
        assert!(!log.contains(secret.as_str()), "a key appears in the log");
        assert!(
            !log.contains(&secret[7..30]),
            "part of a key appears in the log"
        );
    }
}

/// Review D11: a run's error (into which the reconciler copies a job's raw `last_error`) and a
/// document's `auto_create_error` reach API readers as a class and a short message, never the
/// provider's internal URL or the database's text; operators read them raw.
#[tokio::test]
async fn run_and_document_errors_reach_readers_as_a_class_not_raw_text() {
    let api = Api::start().await;
    let (org, reader) = api.org("a", Role::Reader).await;
    let provider_raw = "provider failed: openai: HTTP 502 from http://10.0.0.5:8000/v1 (retryable)";
    let db_raw = "database error: error returned from database: relation \"agentd_secret_table\" \
                  does not exist at db-host-7";
    let run = uuid::Uuid::now_v7();
    sqlx::query(
        "INSERT INTO agent_runs (id, org_id, kind, subject, provider, model, status, started_at,
                                 finished_at, error)
         VALUES ($1, $2, 'auto_create', 'x', 'openai', 'm', 'failed', now(), now(), $3)",
    )
    .bind(run)
    .bind(org)
    .bind(provider_raw)
    .execute(&api.db.pool)
    .await
    .unwrap();
    let doc = api.doc(org, "a").await;
    sqlx::query(
        "UPDATE documents SET auto_create_status = 'failed', auto_create_error = $2 WHERE id = $1",
    )
    .bind(doc)
    .bind(db_raw)
    .execute(&api.db.pool)
    .await
    .unwrap();

    let one = api
        .call("GET", &format!("/v1/runs/{run}"), Some(&reader), None)
        .await;
    assert_eq!(one.status, 200, "{}", one.body);
    assert_eq!(
        one.body["run"]["error"],
        "provider: the model provider failed"
    );
    let list = api.call("GET", "/v1/runs", Some(&reader), None).await;
    assert_eq!(list.status, 200, "{}", list.body);
    assert_eq!(
        list.body["items"][0]["error"], "provider: the model provider failed",
        "{}",
        list.body
    );
    let d = api
        .call("GET", &format!("/v1/documents/{doc}"), Some(&reader), None)
        .await;
    assert_eq!(d.status, 200, "{}", d.body);
    assert_eq!(
        d.body["error"], "database: a database error interrupted the job",
        "{}",
        d.body
    );
    for body in [&one.body, &list.body, &d.body] {
        let text = body.to_string();
        for secret in ["10.0.0.5", "agentd_secret_table", "db-host-7"] {
            assert!(!text.contains(secret), "{secret} reached a reader: {text}");
        }
    }
    // The operator's view keeps the raw text.
    let stored: (Option<String>,) = sqlx::query_as("SELECT error FROM agent_runs WHERE id = $1")
        .bind(run)
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    assert_eq!(stored.0.as_deref(), Some(provider_raw));
}
