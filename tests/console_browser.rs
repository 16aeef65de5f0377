//! The web console in a real browser: headless Chromium driven over WebDriver (chromedriver)
//! against a real `agentd serve` router on a real port with a fresh database. A reviewer signs
//! in, sees the queue and retries a dead job, opens a proposal (whose document and extracted
//! values hold `<script>` — shown as text, never run) and accepts it, approves a pending
//! approval and sees it executed, rejects another with a reason, reads a run and the
//! suggestions; an admin pauses and resumes a kind, cancels dead jobs in bulk, approves edited
//! arguments, cancels a running run, refines a proposal from its page (empty instructions show
//! the API's problem), uploads a document starting from an existing schema and tag, changes the org's settings, adds (secret shown once),
//! reads the failing state of and deletes a webhook, makes and revokes a key; reads the queue's
//! per-kind charts, workers and provider limits, filters the job list and retries and cancels a
//! job from its row, pages it, reads the usage per day; a reader key is offered no decisions. Every page's visible text is checked for values printed as JavaScript
//! prints them (`[object …]`, `undefined`, `NaN`, a bare `null`: `console_support::stray_text`,
//! in every `wait_text`) and axe-core finds no accessibility violation on it. Screenshots of
//! each page are saved under `target/console-screenshots/`. Without Chromium, chromedriver and
//! axe-core the test fails and says how to install them (`scripts/test` installs them).

#[path = "it/api_support/mod.rs"]
mod api_support;
#[path = "it/common/mod.rs"]
mod common;
#[path = "it/console_support/mod.rs"]
mod console_support;

use agentd::api::Role;
use api_support::Api;
use chrono::Duration;
use console_support::Browser;
use serde_json::{Value, json};
use uuid::Uuid;

const HOSTILE: &str = "Invoice Number: INV-7<script>window.__pwned = 1</script>\n\
Vendor: <img src=x onerror=\"window.__pwned = 2\">ACME\n\
Total: 12.50\n";

/// `window.__pwned` (set by any injected script that ran) and how many script/img elements
/// the page's own content holds.
async fn injected(b: &Browser) -> Value {
    b.exec(
        "return {pwned: window.__pwned === undefined ? null : window.__pwned, \
                 scripts: document.querySelectorAll('#page script').length, \
                 imgs: document.querySelectorAll('#page img').length};",
        vec![],
    )
    .await
}

/// axe-core finds nothing on the page as it is now.
async fn accessible(b: &Browser, page: &str) {
    let violations = b.axe().await;
    assert!(
        violations.is_empty(),
        "axe-core on the {page} page: {violations:#?}"
    );
}

/// A provider whose calls never answer; counts calls entered and calls dropped unanswered.
#[derive(Default)]
struct Hangs {
    entered: std::sync::atomic::AtomicUsize,
    dropped: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

struct DropCount(std::sync::Arc<std::sync::atomic::AtomicUsize>);
impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl agentd::llm::LlmProvider for Hangs {
    fn name(&self) -> &str {
        "hangs"
    }
    async fn complete(
        &self,
        _req: agentd::llm::CompletionRequest,
    ) -> Result<agentd::llm::CompletionResponse, agentd::llm::LlmError> {
        self.entered
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let _guard = DropCount(self.dropped.clone());
        std::future::pending::<()>().await;
        unreachable!()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reviewer_signs_in_reads_decides_and_nothing_untrusted_runs() {
    let api = Api::start().await;
    let (org, admin) = api.org("acme", Role::Admin).await;
    let reader = api.key(org, Role::Reader).await;

    // A document whose text (and so its proposal's extracted values) carries markup.
    let r = api
        .call(
            "POST",
            "/v1/documents",
            Some(&admin),
            Some(json!({"name": "invoice <b>7</b>.txt", "text": HOSTILE, "auto_create": true})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let doc = r.body["id"].as_str().unwrap().to_string();
    api.clock.advance(Duration::seconds(60));
    let (_w, stop) = common::start_worker(&api.app, "auto_create", None).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let report = loop {
        let r = api
            .call("GET", &format!("/v1/documents/{doc}"), Some(&admin), None)
            .await;
        if r.body["auto_create_status"] == "proposed" {
            break r.body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not proposed in 60 s: {}",
            r.body
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    stop.cancel();
    let proposal = report["extraction"]["result"].to_string();
    assert!(
        proposal.contains("<script>") || proposal.contains("<img"),
        "the proposal itself must carry the markup for this test to mean anything: {proposal}"
    );
    let run = report["run"]["id"].as_str().unwrap().to_string();

    // Two pending approvals on another document (one with markup in its arguments), a dead
    // job, a suggestion linked to the first approval.
    let target = api.doc(org, "contract.txt").await;
    let approve_me = api
        .propose(
            org,
            json!({"document_id": target, "metadata": {"note": "<img src=x onerror=\"window.__pwned = 3\">"}}),
            Duration::hours(2),
        )
        .await;
    let reject_me = api
        .propose(
            org,
            json!({"document_id": target, "metadata": {"owner": "mallory"}}),
            Duration::hours(1),
        )
        .await;
    let dead: i64 = sqlx::query_scalar(
        "INSERT INTO agentd_jobs (kind, payload, state, attempt, max_attempts, last_error, finished_at)
         VALUES ('auto_create', $1, 'dead', 3, 3, 'provider timed out after 3 attempts', now()) RETURNING id",
    )
    .bind(json!({"org_id": org, "document_id": target}))
    .fetch_one(&api.db.pool)
    .await
    .unwrap();
    let suggestion = Uuid::now_v7();
    sqlx::query("INSERT INTO suggestions (id, org_id, kind, subject, night, title, message, document_id) VALUES ($1, $2, 'metadata', $3, CURRENT_DATE, 'Add a note to contract.txt', 'It has no note yet.', $4)")
        .bind(suggestion).bind(org).bind(target.to_string()).bind(target)
        .execute(&api.db.pool).await.unwrap();
    sqlx::query("UPDATE pending_approvals SET suggestion_id = $1 WHERE id = $2")
        .bind(suggestion)
        .bind(approve_me)
        .execute(&api.db.pool)
        .await
        .unwrap();

    // On a document of its own: approving the first approval changes `target`'s metadata,
    // which turns any other approval on `target` stale.
    let edit_target = api.doc(org, "lease.txt").await;
    let edit_me = api
        .propose(
            org,
            json!({"document_id": edit_target, "metadata": {"owner": "bob"}}),
            Duration::hours(3),
        )
        .await;
    let mut dead_nightly = Vec::new();
    for _ in 0..2 {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO agentd_jobs (kind, payload, state, attempt, max_attempts, last_error, finished_at)
             VALUES ('proactive_suggestion', $1, 'dead', 5, 5, 'model unreachable', now()) RETURNING id",
        )
        .bind(json!({"org_id": org, "night": "2026-01-01"}))
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
        dead_nightly.push(id);
    }

    // A live worker with an open breaker and a provider endpoint with fleet limits (the queue
    // page's workers and limits); a scheduled auto_create job for the job list to cancel from its
    // row; 55 old succeeded nightly jobs (two pages of it).
    let now = agentd::clock::Clock::now(api.clock.as_ref());
    sqlx::query(
        "INSERT INTO agentd_workers (id, host, pid, kinds, started_at, seen_at, expires_at, breakers)
         VALUES ('ci-host.internal:77:zz', 'ci-host.internal', 77, ARRAY['auto_create'], $1, $2, $3, $4)",
    )
    .bind(now - Duration::minutes(5))
    .bind(now - Duration::seconds(2))
    .bind(now + Duration::days(1))
    .bind(json!([{"provider": "primary", "state": "open", "since": now - Duration::seconds(40),
        "until": now + Duration::seconds(20), "failures": 0}]))
    .execute(&api.db.pool)
    .await
    .unwrap();
    agentd::store::provider_limits::ensure(&api.db.pool, "https://llm.example.com/v1", 120, 400000)
        .await
        .unwrap();
    let list_waiting: i64 = sqlx::query_scalar(
        "INSERT INTO agentd_jobs (kind, payload, state, run_at) VALUES ('auto_create', $1, 'available', now() + interval '1 day') RETURNING id",
    )
    .bind(json!({"org_id": org, "document_id": target}))
    .fetch_one(&api.db.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO agentd_jobs (kind, payload, state, attempt, created_at, started_at, finished_at)
         SELECT 'proactive_suggestion', jsonb_build_object('org_id', $1::text, 'night', '2026-01-0' || (i % 9 + 1)),
                'succeeded', 1, now() - interval '3 days' + i * interval '1 minute',
                now() - interval '3 days' + i * interval '1 minute', now() - interval '3 days' + i * interval '2 minute'
           FROM generate_series(1, 55) i",
    )
    .bind(org)
    .execute(&api.db.pool)
    .await
    .unwrap();

    let b = Browser::start().await;
    let base = &api.base;

    // Sign in (admin: every page is offered).
    b.goto(&format!("{base}/")).await;
    let key = b.find("#api-key").await;
    b.type_into(&key, &admin).await;
    b.click(&b.find("#sign-in-button").await).await;
    b.wait_text("Depth by kind and state").await;
    let stored = b
        .exec("return sessionStorage.getItem('agentd.console.key') !== null && localStorage.length === 0;", vec![])
        .await;
    assert_eq!(stored, json!(true), "the key lives in sessionStorage only");

    // Queue: dead job with its error; retry it.
    let page = b.wait_text("provider timed out after 3 attempts").await;
    assert!(
        page.contains("Throughput and failures, last hour"),
        "{page}"
    );
    b.find(".chart").await;
    // Per kind over the last hour: an SVG chart each, with a bar per bucket and outcome.
    let bars = b
        .exec(
            "return Object.fromEntries([...document.querySelectorAll('svg.chart[data-kind]')].map((c) => \
             [c.dataset.kind, c.querySelectorAll('rect.ok, rect.bad').length - 2]));",
            vec![],
        )
        .await;
    assert_eq!(
        bars,
        json!({"auto_create": 24, "proactive_suggestion": 24}),
        "12 buckets × (succeeded, went dead) per kind, besides the legend's two"
    );
    assert!(page.contains("Per kind over time"), "{page}");
    // Workers online (no host named) with the open breaker; the provider's limits.
    let page = b.wait_text("Workers online").await;
    assert!(
        page.contains("primary") && page.contains("open") && page.contains("auto_create"),
        "{page}"
    );
    assert!(
        !page.contains("ci-host"),
        "the worker's host is not shown: {page}"
    );
    assert!(
        page.contains("Provider limits")
            && page.contains("400000")
            && !page.contains("llm.example.com"),
        "the endpoint's limits, not its address: {page}"
    );
    b.screenshot("queue").await;
    accessible(&b, "queue").await;
    b.click(&b.find("#queue-window option[value=\"24h\"]").await)
        .await;
    b.click(&b.find("#queue-window-show").await).await;
    b.wait_text("the last 24 hours").await;
    b.find("svg.chart[data-kind=\"auto_create\"]").await;
    b.exec(
        "document.getElementById('kind-charts').scrollIntoView(); return null;",
        vec![],
    )
    .await;
    b.screenshot("queue-24h").await;
    accessible(&b, "queue (24 hours)").await;
    b.goto(&format!("{base}/#/queue")).await;
    b.wait_text("provider timed out after 3 attempts").await;
    b.click(&b.find(&format!("[data-retry=\"{dead}\"]")).await)
        .await;
    b.wait_text(&format!("Job {dead} is ready again.")).await;
    assert_eq!(
        api.count(&format!(
            "SELECT count(*) FROM agentd_jobs WHERE id = {dead} AND state = 'available'"
        ))
        .await,
        1
    );
    // The two dead nightly jobs left: cancelled in one go.
    b.click(&b.find("#cancel-dead-all").await).await;
    b.wait_text("2 dead job(s) cancelled").await;
    assert_eq!(
        api.count(&format!(
            "SELECT count(*) FROM agentd_jobs WHERE id IN ({}, {}) AND state = 'cancelled'",
            dead_nightly[0], dead_nightly[1]
        ))
        .await,
        2
    );
    // Pause auto_create for the org, then resume it.
    b.click(&b.find("#pause-auto_create").await).await;
    let page = b.wait_text("auto_create is paused").await;
    assert!(page.contains("paused since"), "{page}");
    assert_eq!(
        api.count("SELECT count(*) FROM agentd_paused_kinds WHERE kind = 'auto_create'")
            .await,
        1
    );
    b.screenshot("queue-paused").await;
    accessible(&b, "queue (paused)").await;
    b.click(&b.find("#resume-auto_create").await).await;
    b.wait_text("auto_create is resumed").await;
    assert_eq!(
        api.count("SELECT count(*) FROM agentd_paused_kinds").await,
        0
    );

    // Jobs: the list with its filters; retry and cancel from a row; a bad filter shows the
    // API's problem; the next page follows the cursor.
    // (A dead job made after the queue page cancelled the dead ones it listed.)
    let list_dead: i64 = sqlx::query_scalar(
        "INSERT INTO agentd_jobs (kind, payload, state, attempt, max_attempts, last_error, finished_at)
         VALUES ('proactive_suggestion', $1, 'dead', 5, 5, 'the list retries me', now()) RETURNING id",
    )
    .bind(json!({"org_id": org, "night": "2026-02-02"}))
    .fetch_one(&api.db.pool)
    .await
    .unwrap();
    b.goto(&format!("{base}/#/jobs")).await;
    b.wait_text("job(s) on this page; more on the next page.")
        .await;
    b.screenshot("jobs").await;
    accessible(&b, "jobs").await;
    b.click(&b.find("#jobs-state option[value=\"dead\"]").await)
        .await;
    b.click(&b.find("#jobs-apply").await).await;
    let page = b.wait_text("filtered by state").await;
    assert!(page.contains("the list retries me"), "{page}");
    let states = b
        .exec(
            "return [...document.querySelectorAll('#page tbody tr td:nth-child(3)')].map((td) => td.textContent);",
            vec![],
        )
        .await;
    assert!(
        states.as_array().unwrap().iter().all(|s| s == "dead"),
        "{states}"
    );
    b.screenshot("jobs-dead").await;
    accessible(&b, "jobs (dead)").await;
    b.click(&b.find(&format!("[data-job-retry=\"{list_dead}\"]")).await)
        .await;
    b.wait_text(&format!("Job {list_dead} is ready again."))
        .await;
    assert_eq!(
        api.count(&format!(
            "SELECT count(*) FROM agentd_jobs WHERE id = {list_dead} AND state = 'available'"
        ))
        .await,
        1
    );
    b.goto(&format!("{base}/#/jobs?kind=auto_create&state=available"))
        .await;
    b.wait_text("filtered by kind, state").await;
    b.click(
        &b.find(&format!("[data-job-cancel=\"{list_waiting}\"]"))
            .await,
    )
    .await;
    b.wait_text(&format!("Job {list_waiting} is cancelled."))
        .await;
    assert_eq!(
        api.count(&format!(
            "SELECT count(*) FROM agentd_jobs WHERE id = {list_waiting} AND state = 'cancelled'"
        ))
        .await,
        1
    );
    b.goto(&format!(
        "{base}/#/jobs?kind=proactive_suggestion&state=succeeded"
    ))
    .await;
    b.wait_text("50 job(s) on this page").await;
    b.click(&b.find("#jobs-next").await).await;
    let page = b.wait_text("5 job(s) on this page").await;
    assert!(page.contains("first page"), "{page}");
    let kind = b.find("#jobs-kind").await;
    b.clear(&kind).await;
    b.type_into(&kind, "no_such_kind").await;
    b.click(&b.find("#jobs-apply").await).await;
    let page = b.wait_text("The jobs could not be listed: 400").await;
    assert!(
        page.contains("kind must be one of") && page.contains("(field: kind)"),
        "{page}"
    );
    b.screenshot("jobs-bad-filter").await;
    accessible(&b, "jobs (bad filter)").await;

    // Usage: this month and a bar per day (tokens in and out, cost), the same in a table.
    b.goto(&format!("{base}/#/usage")).await;
    let page = b.wait_text("This month").await;
    assert!(page.contains("Per day (UTC)"), "{page}");
    let bars = b
        .exec(
            "return [document.querySelectorAll('#usage-tokens rect.in').length - 1, \
                     document.querySelectorAll('#usage-cost rect.ok, #usage-cost rect.bad').length - 2];",
            vec![],
        )
        .await;
    assert_eq!(bars, json!([30, 30]), "a bar per day of 30 in each chart");
    b.screenshot("usage").await;
    accessible(&b, "usage").await;
    b.click(&b.find("#usage-days option[value=\"7\"]").await)
        .await;
    b.click(&b.find("#usage-show").await).await;
    b.wait_text("Per day (UTC), last 7 days").await;
    let rows = b
        .exec(
            "return document.querySelectorAll('#usage-table tbody tr').length;",
            vec![],
        )
        .await;
    assert_eq!(rows, json!(7));

    // Documents: the list, then the proposal beside the text, markup shown as text.
    b.goto(&format!("{base}/#/documents")).await;
    b.wait_text("invoice <b>7</b>.txt").await;
    b.screenshot("documents").await;
    accessible(&b, "documents").await;
    b.goto(&format!("{base}/#/documents/{doc}")).await;
    let text = b.text(&b.find("#document-text").await).await;
    assert!(
        text.contains("<script>window.__pwned = 1</script>"),
        "{text}"
    );
    let page = b.wait_text("Schema fields and extracted values").await;
    assert!(page.contains("<script>") || page.contains("<img"), "{page}");
    assert_eq!(
        injected(&b).await,
        json!({"pwned": null, "scripts": 0, "imgs": 0})
    );
    b.screenshot("document").await;
    accessible(&b, "document").await;
    b.click(&b.find("#accept-proposal").await).await;
    b.wait_text("Proposal accepted").await;
    let after = api
        .call("GET", &format!("/v1/documents/{doc}"), Some(&admin), None)
        .await;
    assert_eq!(after.body["auto_create_status"], "accepted");

    // Approvals: pending first; approve one (If-Match) and see it executed.
    b.goto(&format!("{base}/#/approvals")).await;
    b.wait_text("Pending (3)").await;
    assert_eq!(injected(&b).await["pwned"], Value::Null);
    b.screenshot("approvals").await;
    accessible(&b, "approvals").await;
    b.click(
        &b.find(&format!("[data-approval=\"{approve_me}\"] h2 a"))
            .await,
    )
    .await;
    b.find("#approve-approval").await;
    let page = b.wait_text("Snapshot (what the agent saw)").await;
    assert!(page.contains("left"), "time left is shown: {page}");
    b.screenshot("approval").await;
    accessible(&b, "approval").await;
    b.click(&b.find("#approve-approval").await).await;
    b.wait_text("now executed").await;
    let status: String = sqlx::query_scalar("SELECT status FROM pending_approvals WHERE id = $1")
        .bind(approve_me)
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    assert_eq!(status, "executed");
    let meta: Value = sqlx::query_scalar("SELECT metadata FROM documents WHERE id = $1")
        .bind(target)
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    assert_eq!(
        meta["note"], "<img src=x onerror=\"window.__pwned = 3\">",
        "{meta}"
    );
    assert_eq!(injected(&b).await["pwned"], Value::Null);

    // Reject the other with a reason.
    b.goto(&format!("{base}/#/approvals/{reject_me}")).await;
    let reason = b.find("#reject-reason").await;
    b.type_into(&reason, "Mallory does not own this contract")
        .await;
    b.click(&b.find("#reject-approval").await).await;
    b.wait_text("Rejected: nothing was executed").await;
    let got = api
        .call(
            "GET",
            &format!("/v1/approvals/{reject_me}"),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(got.body["status"], "rejected", "{}", got.body);
    if got.body.get("decision_reason").is_some() {
        assert_eq!(
            got.body["decision_reason"],
            "Mallory does not own this contract"
        );
    }
    let meta: Value = sqlx::query_scalar("SELECT metadata FROM documents WHERE id = $1")
        .bind(target)
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    assert!(meta.get("owner").is_none(), "nothing ran: {meta}");

    // Edit the arguments before approving: what runs is the edit.
    b.goto(&format!("{base}/#/approvals/{edit_me}")).await;
    b.wait_text("Edit the arguments, then approve").await;
    b.click(&b.find("#edit summary").await).await;
    let args = b.find("#edit-args").await;
    b.clear(&args).await;
    b.type_into(
        &args,
        &json!({"document_id": edit_target, "metadata": {"owner": "carol"}}).to_string(),
    )
    .await;
    b.click(&b.find("#approve-edited").await).await;
    b.wait_text("now executed").await;
    let (meta, edited): (Value, bool) =
        sqlx::query_as("SELECT d.metadata, p.edited FROM documents d, pending_approvals p WHERE d.id = $1 AND p.id = $2")
            .bind(edit_target)
            .bind(edit_me)
            .fetch_one(&api.db.pool)
            .await
            .unwrap();
    assert_eq!(
        (meta["owner"].as_str(), edited),
        (Some("carol"), true),
        "{meta}"
    );

    // An approval whose arguments are longer than their box: the <pre> scrolls, so it takes the
    // keyboard's focus (axe's scrollable-region-focusable, which this page broke before: taking
    // the focus away brings the violation back).
    let long: serde_json::Map<String, Value> = (0..80)
        .map(|i| (format!("field_{i:02}"), json!(format!("value {i}"))))
        .collect();
    let long_args = api
        .propose(
            org,
            json!({"document_id": edit_target, "metadata": long}),
            Duration::hours(1),
        )
        .await;
    b.goto(&format!("{base}/#/approvals/{long_args}")).await;
    b.wait_text("field_79").await;
    let pre = b
        .exec(
            "const p = document.getElementById('approval-args'); \
             return [p.scrollHeight > p.clientHeight, p.getAttribute('tabindex')];",
            vec![],
        )
        .await;
    assert_eq!(
        pre,
        json!([true, "0"]),
        "the arguments scroll and take the focus"
    );
    accessible(&b, "approval (long arguments)").await;
    b.screenshot("approval-long").await;
    b.exec(
        "document.querySelectorAll('#page pre').forEach((p) => p.removeAttribute('tabindex')); return null;",
        vec![],
    )
    .await;
    let without = b.axe().await;
    assert!(
        without
            .iter()
            .any(|v| v.starts_with("scrollable-region-focusable")),
        "without the focus the rule fires: {without:?}"
    );

    // Runs: the list and the auto_create run's audit trail and transcript.
    b.goto(&format!("{base}/#/runs")).await;
    b.wait_text("auto_create").await;
    b.screenshot("runs").await;
    accessible(&b, "runs").await;
    // From the document to its runs, and on to the run.
    b.goto(&format!("{base}/#/documents/{doc}")).await;
    b.click(&b.find("#document-runs").await).await;
    b.wait_text("Runs of").await;
    b.find(&format!("a[href=\"#/runs/{run}\"]")).await;
    b.screenshot("runs-document").await;
    accessible(&b, "runs (document)").await;
    b.goto(&format!("{base}/#/runs/{run}")).await;
    let page = b.wait_text("Audit trail").await;
    assert!(
        page.contains("Transcript") && page.contains("tokens"),
        "{page}"
    );
    assert_eq!(injected(&b).await["pwned"], Value::Null);
    assert!(
        page.contains("offline / heuristic"),
        "the offline provider runs no model: {page}"
    );
    // The timeline: one row per checkpoint, in order, each with its time and (a model
    // answer's) tokens in/out; the whole run's totals below.
    let steps: Vec<(i32, String)> =
        sqlx::query_as("SELECT seq, kind FROM agent_steps WHERE run_id = $1::uuid ORDER BY seq")
            .bind(&run)
            .fetch_all(&api.db.pool)
            .await
            .unwrap();
    assert!(!steps.is_empty(), "the finished run has checkpoints");
    let rows = b
        .exec(
            "return [...document.querySelectorAll('#timeline tbody tr')].map((tr) => \
             [tr.dataset.seq, ...[...tr.cells].map((td) => td.textContent)]);",
            vec![],
        )
        .await;
    let rows = rows.as_array().unwrap();
    assert_eq!(
        rows.len(),
        steps.len(),
        "one timeline row per step: {rows:?}"
    );
    let took = regex::Regex::new(r"^\d+ ms$|^\d+\.\d s$").unwrap();
    let tokens = regex::Regex::new(r"^\d+ / \d+$").unwrap();
    for ((seq, kind), row) in steps.iter().zip(rows) {
        let cell = |i: usize| row[i].as_str().unwrap_or_default().to_string();
        assert_eq!(cell(0), seq.to_string(), "in order: {rows:?}");
        assert!(took.is_match(&cell(3)), "a duration for step {seq}: {row}");
        match kind.as_str() {
            "llm_response" => {
                assert!(cell(2).starts_with("model round"), "{row}");
                assert!(
                    tokens.is_match(&cell(4)),
                    "tokens in/out for step {seq}: {row}"
                );
            }
            "tool_result" => {
                assert!(cell(2).starts_with("tool "), "{row}");
                assert!(
                    cell(5).contains("no error") || cell(5).contains("error"),
                    "{row}"
                );
            }
            _ => {}
        }
    }
    let foot = b
        .exec(
            "return document.querySelector('#timeline tfoot').textContent;",
            vec![],
        )
        .await;
    assert!(foot.as_str().unwrap().contains("whole run"), "{foot}");
    b.screenshot("run").await;
    accessible(&b, "run").await;

    // Fork from here (issue 50): the finished run forked from its second step with another
    // model; the page goes to the fork, which names its parent. Its job is cancelled after
    // (no worker here), which ends the fork and leaves the document as it was.
    let step = b.find("#fork-step").await;
    b.clear(&step).await;
    b.type_into(&step, "2").await;
    b.type_into(&b.find("#fork-model").await, "other-model")
        .await;
    b.click(&b.find("#fork-run").await).await;
    let page = b.wait_text("A fork of").await;
    assert!(page.contains("made from step 2"), "{page}");
    let (fork, parent, parent_step, model): (uuid::Uuid, uuid::Uuid, i32, String) = sqlx::query_as(
        "SELECT id, parent_run_id, parent_step, model FROM agent_runs WHERE parent_run_id IS NOT NULL",
    )
    .fetch_one(&api.db.pool)
    .await
    .unwrap();
    assert_eq!(
        (parent.to_string(), parent_step, model.as_str()),
        (run.clone(), 2, "other-model")
    );
    accessible(&b, "run (fork)").await;
    let r = api
        .call(
            "POST",
            &format!("/v1/runs/{fork}/cancel"),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.body);

    // Suggestions: the linked approval opens from there.
    b.goto(&format!("{base}/#/suggestions")).await;
    b.wait_text("Add a note to contract.txt").await;
    b.screenshot("suggestions").await;
    accessible(&b, "suggestions").await;
    b.click(
        &b.find(&format!("a[href=\"#/approvals/{approve_me}\"]"))
            .await,
    )
    .await;
    b.wait_text("Snapshot (what the agent saw)").await;

    // Settings: budget, time zone and approval TTL saved; what was not touched stays.
    b.goto(&format!("{base}/#/settings")).await;
    b.wait_text("Monthly token budget").await;
    for (field, value) in [
        ("monthly_token_budget", "900000"),
        ("timezone", "Europe/Berlin"),
        ("approval_ttl_secs", "3600"),
    ] {
        let input = b.find(&format!("#setting-{field}")).await;
        b.clear(&input).await;
        b.type_into(&input, value).await;
    }
    b.screenshot("settings").await;
    accessible(&b, "settings").await;
    b.click(&b.find("#save-settings").await).await;
    b.wait_text("Settings saved: monthly_token_budget, timezone, approval_ttl_secs.")
        .await;
    let s = api.call("GET", "/v1/settings", Some(&admin), None).await;
    assert_eq!(
        (
            &s.body["monthly_token_budget"],
            &s.body["timezone"],
            &s.body["approval_ttl_secs"],
            &s.body["model"]
        ),
        (
            &json!(900000),
            &json!("Europe/Berlin"),
            &json!(3600),
            &Value::Null
        ),
        "{}",
        s.body
    );

    // Webhooks: add one (its secret shown once), see it failing, delete it.
    b.goto(&format!("{base}/#/webhooks")).await;
    b.wait_text("No webhooks.").await;
    b.type_into(
        &b.find("#webhook-url").await,
        "https://93.184.216.34/agentd",
    )
    .await;
    b.click(&b.find("#add-webhook").await).await;
    b.wait_text("Added the webhook to https://93.184.216.34/agentd.")
        .await;
    let secret = b.text(&b.find("#webhook-secret-value").await).await;
    assert_eq!(secret.len(), 64, "{secret}");
    let hook: Uuid = sqlx::query_scalar("SELECT id FROM agentd_webhooks WHERE secret = $1")
        .bind(&secret)
        .fetch_one(&api.db.pool)
        .await
        .expect("the secret shown is the one stored");
    sqlx::query("UPDATE agentd_webhooks SET consecutive_failures = 4, failing_since = now(), open_until = now() + interval '1 minute' WHERE id = $1")
        .bind(hook)
        .execute(&api.db.pool)
        .await
        .unwrap();
    b.goto(&format!("{base}/#/keys")).await;
    b.wait_text("Make a key").await;
    b.goto(&format!("{base}/#/webhooks")).await;
    let page = b.wait_text("4 failed in a row").await;
    assert!(page.contains("failing since"), "{page}");
    assert!(!page.contains(&secret), "the secret is shown once only");
    b.screenshot("webhooks").await;
    accessible(&b, "webhooks").await;
    b.click(&b.find(&format!("[data-delete-webhook=\"{hook}\"]")).await)
        .await;
    b.wait_text("Deleted the webhook").await;
    assert_eq!(api.count("SELECT count(*) FROM agentd_webhooks").await, 0);

    // Keys: make a reviewer key (shown once), then revoke it.
    b.goto(&format!("{base}/#/keys")).await;
    b.wait_text("Make a key").await;
    b.click(&b.find("#key-role option[value=\"reviewer\"]").await)
        .await;
    b.click(&b.find("#create-key").await).await;
    b.wait_text("Made a reviewer key.").await;
    let new_key = b.text(&b.find("#new-key-value").await).await;
    let me = api.call("GET", "/v1/me", Some(&new_key), None).await;
    assert_eq!(me.body["role"], "reviewer", "{}", me.body);
    b.screenshot("keys").await;
    accessible(&b, "keys").await;
    let new_id = me.body["key_id"].as_str().unwrap().to_string();
    b.click(&b.find(&format!("[data-revoke-key=\"{new_id}\"]")).await)
        .await;
    b.wait_text("Revoked key").await;
    api.call("GET", "/v1/me", Some(&new_key), None)
        .await
        .problem(401, None);

    // Cancel a running run: its provider call is dropped, the run and job end cancelled.
    let r = api
        .call(
            "POST",
            "/v1/documents",
            Some(&admin),
            Some(json!({"name": "slow.txt", "text": "Invoice Number: INV-8\nTotal: 1.00\n", "auto_create": true})),
        )
        .await;
    let slow_doc = r.body["id"].as_str().unwrap().to_string();
    api.clock.advance(Duration::seconds(60));
    // The dead job retried on the queue page waits too: cancelled, so the slow worker's only
    // provider call is the slow run's (it would otherwise claim both, and both would hang).
    let r = api
        .call(
            "POST",
            &format!("/v1/jobs/{dead}/cancel"),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let hangs = std::sync::Arc::new(Hangs::default());
    let mut slow_app = api.app.clone();
    slow_app.provider = hangs.clone();
    let (slow_worker, slow_stop) = common::start_worker(&slow_app, "auto_create", None).await;
    // The retried dead job above may be claimed by this worker too: its call hangs as well.
    common::wait_until(30, "the slow run's provider call started", || async {
        hangs.entered.load(std::sync::atomic::Ordering::SeqCst) >= 1
    })
    .await;
    let slow_run: Uuid = sqlx::query_scalar("SELECT id FROM agent_runs WHERE subject = $1")
        .bind(&slow_doc)
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    b.goto(&format!("{base}/#/runs/{slow_run}")).await;
    b.wait_text("Cancel run").await;
    b.wait_text("Live: new steps appear").await;
    // A step checkpointed while the page is open appears on it without a reload: the page
    // follows the run's event stream (a checkpoint and its run.step event, as the checkpoint
    // statement writes them).
    let mut tx = api.db.pool.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO agent_steps (run_id, seq, kind, payload, created_at)
         VALUES ($1, 900, 'llm_response', $2, now())",
    )
    .bind(slow_run)
    .bind(
        json!({"v": 1, "summary": false, "response": {"model": "m", "finish": "stop",
        "message": {"role": "assistant", "content": []},
        "usage": {"input_tokens": 4321, "output_tokens": 87}}}),
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO agentd_events (org_id, type, subject_id, occurred_at, payload, dedupe_key)
         VALUES ($1, 'run.step', $2, now(), $3, 'run.step:test:900')",
    )
    .bind(org)
    .bind(slow_run)
    .bind(
        json!({"run_id": slow_run, "seq": 900, "step": "model", "model_call": "round",
        "input_tokens": 4321, "output_tokens": 87}),
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    // And a tool result that flagged a field: its pointer is highlighted, never a value.
    sqlx::query(
        "INSERT INTO agent_steps (run_id, seq, kind, call_id, payload, created_at)
         VALUES ($1, 901, 'tool_result', 'r1.0', $2, now())",
    )
    .bind(slow_run)
    .bind(
        json!({"v": 1, "call_id": "r1.0", "tool": "run_extraction", "is_error": false,
        "decision": "auto_approved", "content": json!({"ungrounded": ["/total_due"]}).to_string()}),
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let page = b.wait_text("4321 / 87").await;
    assert!(page.contains("model round 1"), "{page}");
    let flagged = b
        .exec(
            "return [...document.querySelectorAll('#timeline tr.flagged-row mark.flagged')].map((m) => m.textContent);",
            vec![],
        )
        .await;
    assert_eq!(flagged, json!(["/total_due"]), "{page}");
    b.screenshot("run-live").await;
    accessible(&b, "run (live)").await;
    b.click(&b.find("#cancel-run").await).await;
    b.wait_text("it stops at its next step").await;
    common::wait_until(30, "the running attempt stopped", || async {
        hangs.dropped.load(std::sync::atomic::Ordering::SeqCst) == 1
    })
    .await;
    let status: String = sqlx::query_scalar("SELECT status FROM agent_runs WHERE id = $1")
        .bind(slow_run)
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    assert_eq!(status, "cancelled");
    slow_stop.cancel();
    slow_worker.join().await;

    // Refine the accepted proposal from the document's page: empty instructions are the
    // API's 422 naming the field, shown as it says it; instructions queue a refine run.
    b.goto(&format!("{base}/#/documents/{doc}")).await;
    b.click(&b.find("#refine-proposal").await).await;
    let page = b.wait_text("Could not refine: 422").await;
    assert!(page.contains("(field: instructions)"), "{page}");
    b.screenshot("document-refine").await;
    accessible(&b, "document (refine)").await;
    b.type_into(
        &b.find("#refine-instructions").await,
        "Add a field due_date; rename total to total_due.",
    )
    .await;
    b.click(&b.find("#refine-proposal").await).await;
    let page = b.wait_text("Refine queued as job").await;
    assert!(page.contains("queued"), "{page}");
    let after = api
        .call("GET", &format!("/v1/documents/{doc}"), Some(&admin), None)
        .await;
    assert_eq!(after.body["auto_create_status"], "queued", "{}", after.body);
    let refine_job: i64 = sqlx::query_scalar(
        "SELECT id FROM agentd_jobs WHERE kind = 'auto_create' AND payload ? 'refine' AND payload->>'document_id' = $1",
    )
    .bind(&doc)
    .fetch_one(&api.db.pool)
    .await
    .unwrap();
    let job = api
        .call("GET", &format!("/v1/jobs/{refine_job}"), Some(&admin), None)
        .await;
    assert_eq!(job.status, 200, "{}", job.body);
    // The words live beside the job (`refine_requests`, migration 0100), not in its payload.
    let instructions: String =
        sqlx::query_scalar("SELECT instructions FROM refine_requests WHERE job_id = $1")
            .bind(refine_job)
            .fetch_one(&api.db.pool)
            .await
            .unwrap();
    assert!(
        instructions.contains("rename total to total_due"),
        "the refine keeps the instructions: {instructions}"
    );
    assert_eq!(
        api.count(&format!(
            "SELECT count(*) FROM audit_events WHERE tool = 'refine_document' AND outcome->>'job_id' = '{refine_job}'"
        ))
        .await,
        1,
        "the refine is audited"
    );
    // While the refine waits there is no proposal to refine: none is offered.
    assert_eq!(
        b.exec(
            "return document.querySelector('#refine-proposal') === null;",
            vec![]
        )
        .await,
        json!(true),
        "a queued document offers no refine"
    );

    // Upload starting from the accepted schema and a tag of the org: the job carries them.
    let tag = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO tags (id, org_id, name, color) VALUES ($1, $2, 'priority <b>1</b>', '#c00')",
    )
    .bind(tag)
    .bind(org)
    .execute(&api.db.pool)
    .await
    .unwrap();
    let schema_id = report["schema"]["revid"]
        .as_str()
        .and_then(|r| r.split(':').next())
        .unwrap()
        .to_string();
    b.goto(&format!("{base}/#/documents")).await;
    b.wait_text("Start from existing").await;
    b.wait_text("priority <b>1</b>").await;
    b.screenshot("documents-upload").await;
    accessible(&b, "documents (upload)").await;
    b.type_into(&b.find("#upload-name").await, "po-9.txt").await;
    b.type_into(&b.find("#upload-text").await, "Order: PO-9\nTotal: 3.00\n")
        .await;
    b.click(
        &b.find(&format!("#upload-schema option[value=\"{schema_id}\"]"))
            .await,
    )
    .await;
    b.click(&b.find(&format!("#upload-tag-{tag}")).await).await;
    b.click(&b.find("#upload-document").await).await;
    b.wait_text("Uploaded po-9.txt: auto-create queued (job ")
        .await;
    let payload: Value = sqlx::query_scalar(
        "SELECT j.payload FROM agentd_jobs j JOIN documents d ON j.payload->>'document_id' = d.id::text
          WHERE j.kind = 'auto_create' AND d.name = 'po-9.txt'",
    )
    .fetch_one(&api.db.pool)
    .await
    .unwrap();
    assert_eq!(
        (
            &payload["schema_id"],
            &payload["tag_ids"],
            payload.get("prompt_id")
        ),
        (&json!(schema_id), &json!([tag]), None),
        "{payload}"
    );

    // A reader: no Queue, no decisions offered.
    b.click(&b.find("#sign-out").await).await;
    b.type_into(&b.find("#api-key").await, &reader).await;
    b.click(&b.find("#sign-in-button").await).await;
    b.wait_text("role reader").await;
    let hidden = b
        .exec(
            "return document.querySelector('#nav li[data-role=admin]').hidden;",
            vec![],
        )
        .await;
    assert_eq!(hidden, json!(true));
    // The job list: read, but no retry or cancel offered.
    b.goto(&format!("{base}/#/jobs?state=dead")).await;
    b.wait_text("An admin key can retry a dead job or cancel a waiting or running one here.")
        .await;
    assert_eq!(
        b.exec(
            "return document.querySelectorAll('[data-job-retry], [data-job-cancel]').length;",
            vec![]
        )
        .await,
        json!(0),
        "a reader is offered no retry or cancel"
    );
    accessible(&b, "jobs (reader)").await;
    let pending = api
        .propose(
            org,
            json!({"document_id": target, "metadata": {"x": 1}}),
            Duration::hours(1),
        )
        .await;
    b.goto(&format!("{base}/#/approvals/{pending}")).await;
    b.wait_text("A reviewer key can approve or reject this.")
        .await;
    assert!(
        b.exec(
            "return document.querySelector('#approve-approval') === null;",
            vec![]
        )
        .await
            == json!(true)
    );
    // A wrong key is refused with the reason.
    b.click(&b.find("#sign-out").await).await;
    b.type_into(&b.find("#api-key").await, "agentd_wrong").await;
    b.click(&b.find("#sign-in-button").await).await;
    b.wait_text("Sign-in failed: 401").await;
}
