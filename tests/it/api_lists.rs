//! Jobs and runs to search (issue 49, item 2), over a real port: `GET /v1/jobs` with each filter
//! (kind, state, created range, document) and its cursor, `GET /v1/runs` with subject and
//! model; another org's jobs and runs never appear (its document's id lists nothing, no error);
//! a bad filter is a 400 problem naming it; a page of an org's jobs reads by index, a page's
//! rows only, whatever other orgs (or the org itself) have stored.

use crate::api_support::Api;
use crate::common::TestDb;
use agentd::api::Role;
use chrono::{DateTime, Duration, SubsecRound, Utc};
use serde_json::Value;
use std::collections::BTreeSet;
use uuid::Uuid;

/// A job inserted as a producer would store it, created at `at`; its id.
async fn job(api: &Api, kind: &str, payload: Value, state: &str, at: DateTime<Utc>) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO agentd_jobs (kind, payload, state, created_at, run_at, finished_at, locked_by, last_error)
         VALUES ($1, $2, $3, $4, $4,
                 CASE WHEN $3 IN ('succeeded', 'dead', 'cancelled') THEN $4 END,
                 CASE WHEN $3 = 'running' THEN 'host-7:4242:w1' END,
                 CASE WHEN $3 = 'dead' THEN 'provider failed: HTTP 502 from http://10.0.0.5:8000/v1' END)
         RETURNING id",
    )
    .bind(kind)
    .bind(payload)
    .bind(state)
    .bind(at)
    .fetch_one(&api.db.pool)
    .await
    .unwrap()
}

/// Every item of `path` (a query string without `limit` and `cursor`), read `limit` at a time
/// by cursor; each page's `next_cursor` is absent exactly on the last.
async fn all_pages(api: &Api, key: &str, path: &str, limit: i64) -> Vec<Value> {
    let sep = if path.contains('?') { '&' } else { '?' };
    let (mut items, mut cursor) = (Vec::new(), None::<String>);
    for _ in 0..100 {
        let url = match &cursor {
            Some(c) => format!("{path}{sep}limit={limit}&cursor={c}"),
            None => format!("{path}{sep}limit={limit}"),
        };
        let a = api.call("GET", &url, Some(key), None).await;
        assert_eq!(a.status, 200, "{url}: {}", a.body);
        let page = a.body["items"].as_array().unwrap().clone();
        assert!(page.len() as i64 <= limit, "{url}: {}", a.body);
        items.extend(page.iter().cloned());
        match a.body["next_cursor"].as_str() {
            Some(c) => {
                assert_eq!(
                    page.len() as i64,
                    limit,
                    "{url}: a short page with a next one"
                );
                cursor = Some(c.to_string());
            }
            None => return items,
        }
    }
    panic!("{path}: more than 100 pages");
}

/// The ids of `items` (job numbers), in order.
fn job_ids(items: &[Value]) -> Vec<i64> {
    items.iter().map(|j| j["id"].as_i64().unwrap()).collect()
}

/// `ids` as the list orders them: newest first (the fixtures' times are distinct).
fn newest_first(mut jobs: Vec<(DateTime<Utc>, i64)>) -> Vec<i64> {
    jobs.sort_by(|a, b| b.cmp(a));
    jobs.into_iter().map(|(_, id)| id).collect()
}

#[tokio::test]
async fn jobs_filter_by_kind_state_time_and_document_and_page_each_once_in_the_org() {
    let api = Api::start().await;
    let (a, key) = api.org("a", Role::Reader).await;
    let (b, key_b) = api.org("b", Role::Reader).await;
    let (doc1, doc2) = (api.doc(a, "one.txt").await, api.doc(a, "two.txt").await);
    let doc_b = api.doc(b, "theirs.txt").await;
    let t0 = Utc::now().trunc_subsecs(6) - Duration::days(3);
    let at = |minutes: i64| t0 + Duration::minutes(minutes);

    // Org a: 9 jobs of three kinds and four states over 9 minutes; org b: 3, one a minute
    // apart from each of a's (the same times would not tell the orgs apart).
    let ac = |doc: Uuid, org: Uuid| serde_json::json!({"org_id": org, "document_id": doc});
    let night = |org: Uuid| serde_json::json!({"org_id": org, "night": "2026-12-01"});
    let sweep = |org: Uuid| serde_json::json!({"org_id": org});
    let fixtures = [
        ("auto_create", ac(doc1, a), "succeeded", 0),
        ("auto_create", ac(doc2, a), "dead", 1),
        ("proactive_suggestion", night(a), "succeeded", 2),
        ("auto_create", ac(doc1, a), "succeeded", 3),
        ("approval_expiry", sweep(a), "available", 4),
        ("auto_create", ac(doc2, a), "running", 5),
        ("proactive_suggestion", night(a), "dead", 6),
        ("auto_create", ac(doc1, a), "available", 7),
        ("approval_expiry", sweep(a), "succeeded", 8),
    ];
    let mut mine = Vec::new();
    for (kind, payload, state, minute) in fixtures.clone() {
        let id = job(&api, kind, payload, state, at(minute)).await;
        mine.push((kind, state, minute, id));
    }
    let mut theirs = Vec::new();
    for (minute, payload) in [(0, ac(doc_b, b)), (4, night(b)), (8, ac(doc_b, b))] {
        let kind = if payload.get("document_id").is_some() {
            "auto_create"
        } else {
            "proactive_suggestion"
        };
        theirs.push(
            job(
                &api,
                kind,
                payload,
                "succeeded",
                at(minute) + Duration::seconds(30),
            )
            .await,
        );
    }
    let expect = |keep: &dyn Fn(&str, &str, i64, usize) -> bool| {
        newest_first(
            mine.iter()
                .enumerate()
                .filter(|(i, (k, s, m, _))| keep(k, s, *m, *i))
                .map(|(_, (_, _, m, id))| (at(*m), *id))
                .collect(),
        )
    };
    let doc_of = |i: usize| {
        fixtures[i]
            .1
            .get("document_id")
            .and_then(|d| d.as_str())
            .map(String::from)
    };

    // No filter: every job of the org once, newest first, over pages of 2, 4 and 50.
    let every = expect(&|_, _, _, _| true);
    assert_eq!(every.len(), 9);
    for limit in [2, 4, 50] {
        let got = job_ids(&all_pages(&api, &key, "/v1/jobs", limit).await);
        assert_eq!(got, every, "limit {limit}");
    }
    let all_b = job_ids(&all_pages(&api, &key_b, "/v1/jobs", 2).await);
    assert_eq!(
        BTreeSet::from_iter(all_b),
        BTreeSet::from_iter(theirs.iter().copied())
    );

    // Each filter alone narrows the list to exactly its jobs, paged 2 at a time.
    let (after, before) = (at(2).to_rfc3339(), at(6).to_rfc3339());
    let cases: Vec<(String, Vec<i64>)> = vec![
        (
            "kind=auto_create".into(),
            expect(&|k, _, _, _| k == "auto_create"),
        ),
        (
            "kind=approval_expiry".into(),
            expect(&|k, _, _, _| k == "approval_expiry"),
        ),
        ("state=dead".into(), expect(&|_, s, _, _| s == "dead")),
        (
            "state=available".into(),
            expect(&|_, s, _, _| s == "available"),
        ),
        ("state=cancelled".into(), vec![]),
        // [after, before): the job created at `after` is in, the one at `before` is not.
        (
            format!("created_after={}", urlencode(&after)),
            expect(&|_, _, m, _| m >= 2),
        ),
        (
            format!("created_before={}", urlencode(&before)),
            expect(&|_, _, m, _| m < 6),
        ),
        (
            format!(
                "created_after={}&created_before={}",
                urlencode(&after),
                urlencode(&before)
            ),
            expect(&|_, _, m, _| (2..6).contains(&m)),
        ),
        // Another offset names the same instant.
        (
            format!(
                "created_after={}",
                urlencode(
                    &at(7)
                        .with_timezone(&chrono::FixedOffset::east_opt(5 * 3600 + 1800).unwrap())
                        .to_rfc3339()
                )
            ),
            expect(&|_, _, m, _| m >= 7),
        ),
        (
            format!("document={doc1}"),
            expect(&|_, _, _, i| doc_of(i) == Some(doc1.to_string())),
        ),
        (
            format!("document={doc2}"),
            expect(&|_, _, _, i| doc_of(i) == Some(doc2.to_string())),
        ),
        // All at once.
        (
            format!(
                "kind=auto_create&state=succeeded&document={doc1}&created_after={}",
                urlencode(&at(1).to_rfc3339())
            ),
            expect(&|k, s, m, i| {
                k == "auto_create"
                    && s == "succeeded"
                    && m >= 1
                    && doc_of(i) == Some(doc1.to_string())
            }),
        ),
    ];
    for (query, want) in &cases {
        let got = job_ids(&all_pages(&api, &key, &format!("/v1/jobs?{query}"), 2).await);
        assert_eq!(&got, want, "{query}");
    }
    assert!(
        cases
            .iter()
            .filter(|(_, w)| !w.is_empty())
            .all(|(_, w)| w.len() < every.len())
    );

    // Another org's document (or a document that does not exist) lists nothing: no error that
    // would tell it exists. Org b sees its own document's jobs, not a's.
    for other in [doc_b, Uuid::now_v7()] {
        let a_sees = api
            .call(
                "GET",
                &format!("/v1/jobs?document={other}"),
                Some(&key),
                None,
            )
            .await;
        assert_eq!(
            (
                a_sees.status.as_u16(),
                a_sees.body["items"].as_array().map(Vec::len)
            ),
            (200, Some(0)),
            "{}",
            a_sees.body
        );
        assert!(a_sees.body["next_cursor"].is_null());
    }
    let b_doc = job_ids(&all_pages(&api, &key_b, &format!("/v1/jobs?document={doc_b}"), 1).await);
    assert_eq!(
        BTreeSet::from_iter(b_doc),
        BTreeSet::from([theirs[0], theirs[2]])
    );
    let b_sees_a = api
        .call(
            "GET",
            &format!("/v1/jobs?document={doc1}"),
            Some(&key_b),
            None,
        )
        .await;
    assert_eq!(
        b_sees_a.body["items"],
        serde_json::json!([]),
        "{}",
        b_sees_a.body
    );

    // Items are jobs as `GET /v1/jobs/{id}` shows them: no worker, the error as a class.
    let dead = api
        .call(
            "GET",
            "/v1/jobs?state=dead&kind=auto_create",
            Some(&key),
            None,
        )
        .await;
    let item = &dead.body["items"][0];
    assert_eq!(
        item["last_error"], "provider: the model provider failed",
        "{item}"
    );
    let running = api
        .call("GET", "/v1/jobs?state=running", Some(&key), None)
        .await;
    let item = &running.body["items"][0];
    assert_eq!(item["state"], "running", "{item}");
    assert!(item.get("locked_by").is_none(), "{item}");
    let one = api
        .call("GET", &format!("/v1/jobs/{}", item["id"]), Some(&key), None)
        .await;
    assert_eq!(&one.body, item);

    // Bad filters: 400 naming the parameter, with what it takes.
    let run_cursor = agentd::api::extract::encode_cursor(Utc::now(), Uuid::now_v7());
    let bad = [
        ("kind=nope", "kind", "auto_create"),
        ("kind=", "kind", "auto_create"),
        (
            "state=failed",
            "state",
            "available, running, succeeded, dead, cancelled",
        ),
        ("created_after=yesterday", "created_after", "RFC 3339"),
        ("created_after=2026-12-03", "created_after", "RFC 3339"),
        (
            "created_before=2026-12-03T09:00:00",
            "created_before",
            "RFC 3339",
        ),
        (
            "created_before=2026-02-30T09:00:00Z",
            "created_before",
            "RFC 3339",
        ),
        ("document=doc-1", "document", "UUID"),
        ("document=", "document", "UUID"),
        ("cursor=zz", "cursor", "next_cursor"),
        ("limit=0", "limit", "between 1 and 200"),
        ("limit=201", "limit", "between 1 and 200"),
        ("limit=ten", "limit", "limit"),
        ("status=dead", "status", "unknown field"),
    ];
    for (query, field, says) in bad {
        let a = api
            .call("GET", &format!("/v1/jobs?{query}"), Some(&key), None)
            .await;
        a.problem_in(query, 400, Some(field));
        let detail = a.body["detail"].as_str().unwrap();
        assert!(detail.contains(says), "{query}: {detail}");
    }
    // A cursor of another list (a run's) is not a job cursor.
    api.call(
        "GET",
        &format!("/v1/jobs?cursor={run_cursor}"),
        Some(&key),
        None,
    )
    .await
    .problem(400, Some("cursor"));
    // A job cursor is exactly what the pattern says: leading zeros or an id of 0 are refused.
    for forged in [
        hex::encode("0.0"),
        hex::encode("01.5"),
        hex::encode("5.05"),
        hex::encode("5.-5"),
    ] {
        api.call(
            "GET",
            &format!("/v1/jobs?cursor={forged}"),
            Some(&key),
            None,
        )
        .await
        .problem(400, Some("cursor"));
    }
    // A well-formed cursor from the far past or future lists what lies beyond it.
    let ancient = hex::encode("-999999999999999999.1");
    let past = api
        .call(
            "GET",
            &format!("/v1/jobs?cursor={ancient}"),
            Some(&key),
            None,
        )
        .await;
    assert_eq!(past.body["items"], serde_json::json!([]), "{}", past.body);
    let future = hex::encode("999999999999999999.1");
    let all = api
        .call(
            "GET",
            &format!("/v1/jobs?cursor={future}"),
            Some(&key),
            None,
        )
        .await;
    assert_eq!(job_ids(all.body["items"].as_array().unwrap()), every);
    // No key: 401; POST with a query string is still refused naming it.
    assert_eq!(api.call("GET", "/v1/jobs", None, None).await.status, 401);
    let body = serde_json::json!({"kind": "proactive_suggestion"});
    api.call("POST", "/v1/jobs?state=dead", Some(&key), Some(body))
        .await
        .problem(400, Some("state"));
}

/// `s` as a query value (`+` of an offset must not read as a space).
fn urlencode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// A finished run inserted directly; its id.
async fn run(
    db: &TestDb,
    org: Uuid,
    kind: &str,
    subject: &str,
    model: &str,
    status: &str,
    at: DateTime<Utc>,
) -> Uuid {
    let id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO agent_runs (id, org_id, kind, subject, provider, model, status, started_at, finished_at)
         VALUES ($1, $2, $3, $4, 'offline', $5, $6, $7, $7)",
    )
    .bind(id)
    .bind(org)
    .bind(kind)
    .bind(subject)
    .bind(model)
    .bind(status)
    .bind(at)
    .execute(&db.pool)
    .await
    .unwrap();
    id
}

#[tokio::test]
async fn runs_filter_by_subject_and_model_with_status_and_kind_in_the_org() {
    let api = Api::start().await;
    let (a, key) = api.org("a", Role::Reader).await;
    let (b, _) = api.org("b", Role::Reader).await;
    let (doc1, doc2) = (Uuid::now_v7().to_string(), Uuid::now_v7().to_string());
    let t0 = Utc::now().trunc_subsecs(6) - Duration::hours(5);
    let at = |m: i64| t0 + Duration::minutes(m);
    let fixtures = [
        ("auto_create", doc1.as_str(), "gpt-x", "succeeded"),
        ("auto_create", doc1.as_str(), "gpt-y", "failed"),
        ("auto_create", doc2.as_str(), "gpt-x", "succeeded"),
        ("proactive_suggestion", "2026-12-01", "gpt-y", "succeeded"),
        ("auto_create", doc1.as_str(), "gpt-x", "capped"),
        ("proactive_suggestion", "2026-12-02", "gpt-x", "failed"),
    ];
    let mut mine = Vec::new();
    for (i, (kind, subject, model, status)) in fixtures.iter().enumerate() {
        let id = run(&api.db, a, kind, subject, model, status, at(i as i64)).await;
        mine.push((i, id));
    }
    // Org b: a run of the same subject and model (subjects are only unique in an org).
    let theirs = run(
        &api.db,
        b,
        "auto_create",
        &doc1,
        "gpt-x",
        "succeeded",
        at(10),
    )
    .await;
    let expect = |keep: &dyn Fn(&str, &str, &str, &str) -> bool| -> Vec<String> {
        let mut ids: Vec<(usize, Uuid)> = mine
            .iter()
            .filter(|(i, _)| {
                let (k, s, m, st) = fixtures[*i];
                keep(k, s, m, st)
            })
            .copied()
            .collect();
        ids.reverse();
        ids.into_iter().map(|(_, id)| id.to_string()).collect()
    };
    let ids = |items: Vec<Value>| -> Vec<String> {
        items
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect()
    };
    let cases: Vec<(String, Vec<String>)> = vec![
        (String::new(), expect(&|_, _, _, _| true)),
        (format!("subject={doc1}"), expect(&|_, s, _, _| s == doc1)),
        (format!("subject={doc2}"), expect(&|_, s, _, _| s == doc2)),
        (
            "subject=2026-12-01".into(),
            expect(&|_, s, _, _| s == "2026-12-01"),
        ),
        ("model=gpt-x".into(), expect(&|_, _, m, _| m == "gpt-x")),
        ("model=gpt-y".into(), expect(&|_, _, m, _| m == "gpt-y")),
        ("model=gpt-z".into(), vec![]),
        (
            format!("subject={doc1}&model=gpt-x"),
            expect(&|_, s, m, _| s == doc1 && m == "gpt-x"),
        ),
        (
            "kind=proactive_suggestion&model=gpt-x&status=failed".into(),
            expect(&|k, _, m, st| k == "proactive_suggestion" && m == "gpt-x" && st == "failed"),
        ),
        (
            format!("subject={doc1}&status=succeeded"),
            expect(&|_, s, _, st| s == doc1 && st == "succeeded"),
        ),
    ];
    for (query, want) in &cases {
        let got = ids(all_pages(&api, &key, &format!("/v1/runs?{query}"), 1).await);
        assert_eq!(&got, want, "{query}");
        assert!(!got.contains(&theirs.to_string()), "{query}: org b's run");
    }
    assert_eq!(cases[1].1.len(), 3);

    let long = "x".repeat(201);
    let bad = [
        ("subject=".to_string(), "subject", "1–200 characters"),
        (format!("subject={long}"), "subject", "1–200 characters"),
        ("model=".to_string(), "model", "1–200 characters"),
        ("model=gpt%00x".to_string(), "model", "NUL"),
        ("subject=a%00".to_string(), "subject", "NUL"),
        ("kind=nope".to_string(), "kind", "auto_create"),
        ("status=done".to_string(), "status", "running"),
        ("document=x".to_string(), "document", "unknown field"),
    ];
    for (query, field, says) in bad {
        let a = api
            .call("GET", &format!("/v1/runs?{query}"), Some(&key), None)
            .await;
        a.problem_in(&query, 400, Some(field));
        let detail = a.body["detail"].as_str().unwrap();
        assert!(detail.contains(says), "{query}: {detail}");
    }
}

#[tokio::test]
async fn the_document_lists_jobs_and_the_filters_with_their_enums() {
    let api = Api::start().await;
    let doc = api.call("GET", "/v1/openapi.json", None, None).await.body;
    let op = &doc["paths"]["/v1/jobs"]["get"];
    assert_eq!(op["operationId"], "listJobs");
    let params: Vec<&Value> = op["parameters"].as_array().unwrap().iter().collect();
    let param = |name: &str| {
        params
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no {name}: {op}"))
            .to_owned()
    };
    let names: Vec<&str> = params.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "limit",
            "cursor",
            "kind",
            "state",
            "created_after",
            "created_before",
            "document"
        ]
    );
    assert!(
        params
            .iter()
            .all(|p| p["in"] == "query" && p["required"] == false)
    );
    let kinds = param("kind")["schema"]["enum"].clone();
    assert!(
        kinds.as_array().unwrap().contains(&"auto_create".into()),
        "{kinds}"
    );
    assert_eq!(
        param("state")["schema"]["enum"],
        serde_json::json!(["available", "running", "succeeded", "dead", "cancelled"])
    );
    for t in ["created_after", "created_before"] {
        assert_eq!(param(t)["schema"]["format"], "date-time");
    }
    assert_eq!(param("document")["schema"]["format"], "uuid");
    // The cursor's pattern is the one of job cursors the server writes, and it matches one.
    let pattern = param("cursor")["schema"]["pattern"]
        .as_str()
        .unwrap()
        .to_string();
    let re = regex::Regex::new(&pattern).unwrap();
    assert!(re.is_match(&hex::encode("1733217000000000.42")));
    assert!(!re.is_match(&agentd::api::extract::encode_cursor(
        Utc::now(),
        Uuid::now_v7()
    )));
    assert_eq!(
        op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/Paged_Job"
    );
    let runs: Vec<String> = doc["paths"]["/v1/runs"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        runs,
        ["limit", "cursor", "status", "kind", "subject", "model"]
    );
}

/// The `(seq_scan, idx_scan, idx_tup_fetch)` of `agentd_jobs` in this transaction so far.
async fn scans(tx: &mut sqlx::PgConnection) -> (i64, i64, i64) {
    sqlx::query_as(
        "SELECT coalesce(seq_scan, 0), coalesce(idx_scan, 0), coalesce(idx_tup_fetch, 0)
           FROM pg_stat_xact_user_tables WHERE relname = 'agentd_jobs'",
    )
    .fetch_one(tx)
    .await
    .unwrap()
}

/// A page of an org's jobs, with any filter, reads by index (no sequential scan), and only about
/// a page's rows: not every job of the other orgs, nor every job of a busy org (the index of
/// migration 0098 is in the list's order).
#[tokio::test]
async fn a_page_of_an_orgs_jobs_reads_a_page_by_index_however_many_jobs_there_are() {
    use agentd::store::api_reads::{JobFilter, jobs_page};
    let db = TestDb::new().await;
    let (quiet, noisy) = (Uuid::now_v7(), Uuid::now_v7());
    sqlx::query(
        "INSERT INTO agentd_jobs (kind, payload, state, finished_at, created_at)
         SELECT 'auto_create', jsonb_build_object('org_id', $1::text, 'document_id', gen_random_uuid()),
                'succeeded', now(), now() - make_interval(secs => g)
           FROM generate_series(1, 30000) g",
    )
    .bind(noisy)
    .execute(&db.pool)
    .await
    .unwrap();
    let doc = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO agentd_jobs (kind, payload, created_at)
         SELECT 'auto_create', jsonb_build_object('org_id', $1::text, 'document_id', $2::text),
                now() - make_interval(days => g)
           FROM generate_series(1, 3) g",
    )
    .bind(quiet)
    .bind(doc)
    .execute(&db.pool)
    .await
    .unwrap();
    let noisy_doc: String = sqlx::query_scalar(
        "SELECT payload->>'document_id' FROM agentd_jobs WHERE payload->>'org_id' = $1::text
          ORDER BY created_at LIMIT 1",
    )
    .bind(noisy)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE agentd_jobs")
        .execute(&db.pool)
        .await
        .unwrap();

    let now = Utc::now();
    let filters = [
        JobFilter::default(),
        JobFilter {
            kind: Some("auto_create".into()),
            ..Default::default()
        },
        JobFilter {
            state: Some(agentd::queue::JobState::Succeeded),
            ..Default::default()
        },
        JobFilter {
            state: Some(agentd::queue::JobState::Available),
            ..Default::default()
        },
        JobFilter {
            created_after: Some(now - Duration::hours(3)),
            created_before: Some(now - Duration::hours(1)),
            ..Default::default()
        },
        JobFilter {
            document: Some(doc),
            ..Default::default()
        },
        JobFilter {
            document: noisy_doc.parse().ok(),
            ..Default::default()
        },
    ];
    let mut tx = db.pool.begin().await.unwrap();
    for (org, name) in [(quiet, "quiet"), (noisy, "noisy")] {
        for f in &filters {
            // A cursor in the middle of the noisy org's jobs, as a later page starts.
            for after in [None, Some((now - Duration::hours(2), i64::MAX))] {
                let before = scans(&mut tx).await;
                let page = jobs_page(&mut *tx, Some(org), f, after, 51).await.unwrap();
                let after_scans = scans(&mut tx).await;
                let what = format!("{name} {f:?} after {after:?}");
                assert_eq!(
                    after_scans.0 - before.0,
                    0,
                    "{what}: a sequential scan of agentd_jobs"
                );
                assert!(after_scans.1 > before.1, "{what}: no index scan");
                let fetched = after_scans.2 - before.2;
                assert!(
                    fetched <= 200,
                    "{what}: {fetched} rows read for a page of {}",
                    page.len()
                );
                if org == quiet && f.document == Some(doc) && after.is_none() {
                    assert_eq!(page.len(), 3, "{what}");
                }
                if org == noisy && *f == JobFilter::default() {
                    assert_eq!(page.len(), 51, "{what}");
                }
            }
        }
    }
    // The quiet org's list names only its jobs, whatever the noisy org stores.
    let quiet_all = jobs_page(&mut *tx, Some(quiet), &JobFilter::default(), None, 51)
        .await
        .unwrap();
    assert_eq!(quiet_all.len(), 3);
    assert!(
        quiet_all
            .iter()
            .all(|j| j.payload["org_id"] == quiet.to_string())
    );
}

/// `agentd …` over `db`: exit code, stdout, stderr.
fn cli(db: &TestDb, args: &[&str]) -> (Option<i32>, String, String) {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_agentd"))
        .args(args)
        .env("DATABASE_URL", &db.url)
        .env("AGENTD_HTTP__ADDR", "")
        .env_remove("OPENAI_API_KEY")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run agentd");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (o.status.code(), text(&o.stdout), text(&o.stderr))
}

/// The ids a `--json` list printed.
fn printed_ids(out: &str) -> Vec<Value> {
    let rows: Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"));
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].clone())
        .collect()
}

#[tokio::test]
async fn the_cli_lists_take_the_same_filters() {
    let api = Api::start().await;
    let (a, _) = api.org("acme", Role::Reader).await;
    let (b, _) = api.org("other", Role::Reader).await;
    let doc = api.doc(a, "one.txt").await;
    let t0 = Utc::now().trunc_subsecs(6) - Duration::days(1);
    let at = |m: i64| t0 + Duration::minutes(m);
    let ac = |org: Uuid| serde_json::json!({"org_id": org, "document_id": doc});
    let j1 = job(&api, "auto_create", ac(a), "dead", at(0)).await;
    let j2 = job(&api, "auto_create", ac(a), "succeeded", at(2)).await;
    let j3 = job(
        &api,
        "proactive_suggestion",
        serde_json::json!({"org_id": a, "night": "2026-12-01"}),
        "succeeded",
        at(4),
    )
    .await;
    let jb = job(&api, "auto_create", ac(b), "succeeded", at(3)).await;
    let db = &api.db;
    let list = |extra: &[&str]| {
        let mut args = vec!["jobs", "list", "--json"];
        args.extend_from_slice(extra);
        let (code, out, err) = cli(db, &args);
        assert_eq!(code, Some(0), "{args:?}: {err}");
        printed_ids(&out)
    };
    let ids = |v: &[i64]| v.iter().map(|i| Value::from(*i)).collect::<Vec<_>>();
    assert_eq!(
        list(&[]),
        ids(&[j3, jb, j2, j1]),
        "every org's, newest first"
    );
    assert_eq!(list(&["--org", "acme"]), ids(&[j3, j2, j1]));
    assert_eq!(
        list(&["--org", &a.to_string(), "--kind", "auto_create"]),
        ids(&[j2, j1])
    );
    assert_eq!(list(&["--org", "acme", "--state", "dead"]), ids(&[j1]));
    let (after, before) = (at(1).to_rfc3339(), at(4).to_rfc3339());
    assert_eq!(
        list(&["--created-after", &after, "--created-before", &before]),
        ids(&[jb, j2])
    );
    assert_eq!(list(&["--document", &doc.to_string()]), ids(&[jb, j2, j1]));
    assert_eq!(
        list(&["--document", &doc.to_string(), "--org", "other"]),
        ids(&[jb])
    );
    assert_eq!(list(&["--org", "acme", "--limit", "1"]), ids(&[j3]));
    for (bad, says) in [
        (vec!["--kind", "nope"], "--kind must be one of"),
        (vec!["--state", "failed"], "--state must be one of"),
        (
            vec!["--created-after", "yesterday"],
            "--created-after must be an RFC 3339 time",
        ),
        (
            vec!["--created-before", "2026-12-03"],
            "--created-before must be an RFC 3339 time",
        ),
        (
            vec!["--document", "doc-1"],
            "--document must be a document id",
        ),
        (vec!["--org", "nobody"], "--org: no org"),
        (vec!["--limit", "0"], "--limit must be between 1 and 1000"),
    ] {
        let mut args = vec!["jobs", "list"];
        args.extend_from_slice(&bad);
        let (code, _, err) = cli(db, &args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }

    let subject = doc.to_string();
    let r1 = run(db, a, "auto_create", &subject, "gpt-x", "succeeded", at(0)).await;
    let r2 = run(db, a, "auto_create", &subject, "gpt-y", "failed", at(1)).await;
    let r3 = run(
        db,
        a,
        "proactive_suggestion",
        "2026-12-01",
        "gpt-x",
        "succeeded",
        at(2),
    )
    .await;
    let rb = run(db, b, "auto_create", &subject, "gpt-x", "succeeded", at(3)).await;
    let runs = |extra: &[&str]| {
        let mut args = vec!["runs", "list", "--json"];
        args.extend_from_slice(extra);
        let (code, out, err) = cli(db, &args);
        assert_eq!(code, Some(0), "{args:?}: {err}");
        printed_ids(&out)
    };
    let rids = |v: &[Uuid]| {
        v.iter()
            .map(|i| Value::from(i.to_string()))
            .collect::<Vec<_>>()
    };
    assert_eq!(runs(&[]), rids(&[rb, r3, r2, r1]));
    assert_eq!(
        runs(&["--org", "acme", "--subject", &subject]),
        rids(&[r2, r1])
    );
    assert_eq!(runs(&["--subject", &subject]), rids(&[rb, r2, r1]));
    assert_eq!(
        runs(&["--org", "acme", "--model", "gpt-x"]),
        rids(&[r3, r1])
    );
    assert_eq!(runs(&["--status", "failed"]), rids(&[r2]));
    assert_eq!(
        runs(&["--kind", "proactive_suggestion", "--model", "gpt-x"]),
        rids(&[r3])
    );
    for (bad, says) in [
        (vec!["--kind", "nope"], "--kind must be one of"),
        (vec!["--status", "done"], "--status must be one of"),
        (vec!["--subject", ""], "--subject must be"),
        (vec!["--org", "nobody"], "--org: no org"),
        (
            vec!["--limit", "1001"],
            "--limit must be between 1 and 1000",
        ),
    ] {
        let mut args = vec!["runs", "list"];
        args.extend_from_slice(&bad);
        let (code, _, err) = cli(db, &args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
