//! The web console in a real browser: headless Chromium driven over WebDriver (chromedriver)
//! against a real `agentd serve` router on a real port with a fresh database. A reviewer signs
//! in, sees the queue and retries a dead job, opens a proposal (whose document and extracted
//! values hold `<script>` — shown as text, never run) and accepts it, approves a pending
//! approval and sees it executed, rejects another with a reason, reads a run and the
//! suggestions; a reader key is offered no decisions. Screenshots of each page are saved under
//! `target/console-screenshots/`. Without Chromium and chromedriver the test fails and says how
//! to install them (`scripts/test` installs them).

mod api_support;
mod common;
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
    b.screenshot("queue").await;
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

    // Documents: the list, then the proposal beside the text, markup shown as text.
    b.goto(&format!("{base}/#/documents")).await;
    b.wait_text("invoice <b>7</b>.txt").await;
    b.screenshot("documents").await;
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
    b.click(&b.find("#accept-proposal").await).await;
    b.wait_text("Proposal accepted").await;
    let after = api
        .call("GET", &format!("/v1/documents/{doc}"), Some(&admin), None)
        .await;
    assert_eq!(after.body["auto_create_status"], "accepted");

    // Approvals: pending first; approve one (If-Match) and see it executed.
    b.goto(&format!("{base}/#/approvals")).await;
    b.wait_text("Pending (2)").await;
    assert_eq!(injected(&b).await["pwned"], Value::Null);
    b.screenshot("approvals").await;
    b.click(
        &b.find(&format!("[data-approval=\"{approve_me}\"] h2 a"))
            .await,
    )
    .await;
    b.find("#approve-approval").await;
    let page = b.wait_text("Snapshot (what the agent saw)").await;
    assert!(page.contains("left"), "time left is shown: {page}");
    b.screenshot("approval").await;
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

    // Runs: the list and the auto_create run's audit trail and transcript.
    b.goto(&format!("{base}/#/runs")).await;
    b.wait_text("auto_create").await;
    b.screenshot("runs").await;
    b.goto(&format!("{base}/#/runs/{run}")).await;
    let page = b.wait_text("Audit trail").await;
    assert!(
        page.contains("Transcript") && page.contains("tokens"),
        "{page}"
    );
    assert_eq!(injected(&b).await["pwned"], Value::Null);
    b.screenshot("run").await;

    // Suggestions: the linked approval opens from there.
    b.goto(&format!("{base}/#/suggestions")).await;
    b.wait_text("Add a note to contract.txt").await;
    b.screenshot("suggestions").await;
    b.click(
        &b.find(&format!("a[href=\"#/approvals/{approve_me}\"]"))
            .await,
    )
    .await;
    b.wait_text("Snapshot (what the agent saw)").await;

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
