//! Inputs that crashed or broke a promise, found by review or by the fuzz targets (fuzz/), kept
//! as tests of the normal suite. Unit-sized findings sit next to their code; the ones here need
//! the whole path (a real PostgreSQL, a worker, the offline provider) or cross modules.

use crate::common;
use agentd::app::WorkerArgs;
use agentd::clock::{SharedClock, SystemClock};
use agentd::documents::add_document;
use agentd::queue::{self, NewJob};
use common::{TestDb, wait_until};
use serde_json::json;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Full-width digits (U+FF11, U+FF12: three bytes each) where an IBAN's check digits go.
const POISON: &str = "DE１２ABCDABCDABCD";

async fn job_state(db: &TestDb, id: i64) -> (queue::JobState, Option<String>) {
    let job = queue::store::get(&db.pool, id).await.unwrap().unwrap();
    (job.state, job.last_error)
}

/// Review 2026-11-26, N1: `iban_valid` sliced at byte 4, inside the first full-width digit, and
/// panicked in every redaction pass — the document's run died after its retries, the org's
/// nightly run every night. Now the document named and holding that string reaches `proposed`,
/// and the nightly run over an org that lists it succeeds.
#[tokio::test]
async fn a_document_named_and_holding_full_width_iban_digits_reaches_proposed() {
    let db = TestDb::new().await;
    let app = common::app(&db, Arc::new(SystemClock) as SharedClock);
    let org = agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id;
    let text = format!(
        "Invoice Number: INV-77\nInvoice Date: 2026-11-02\nTotal Due: 1,250.00\n\
         IBAN: {POISON}\nCustomer: Blue Fox\n"
    );
    let (doc, _) = add_document(&app, org, POISON, &text, true).await.unwrap();
    let (w, stop) = common::start_worker(&app, "auto_create", None).await;
    let pool = db.pool.clone();
    wait_until(60, "the document reaches a final status", || {
        let pool = pool.clone();
        async move {
            let s: String =
                sqlx::query_scalar("SELECT auto_create_status FROM documents WHERE id = $1")
                    .bind(doc)
                    .fetch_one(&pool)
                    .await
                    .unwrap();
            ["proposed", "failed", "skipped"].contains(&s.as_str())
        }
    })
    .await;
    stop.cancel();
    w.join().await;
    let (status, error): (String, Option<String>) =
        sqlx::query_as("SELECT auto_create_status, auto_create_error FROM documents WHERE id = $1")
            .bind(doc)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(status, "proposed", "{error:?}");
    let panicked: i64 =
        sqlx::query_scalar("SELECT count(*) FROM agentd_jobs WHERE last_error LIKE '%panicked%'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(panicked, 0);

    // The org's nightly run reads the document's name in its overview: the proposal has waited
    // five days (a signal, so the model runs: `only_with_signals`).
    sqlx::query("UPDATE documents SET updated_at = now() - interval '5 days' WHERE id = $1")
        .bind(doc)
        .execute(&db.pool)
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let worker = app
        .start_worker(
            WorkerArgs {
                kinds: vec!["proactive_suggestion".into()],
                concurrency: None,
                cron: false,
                only_org: None,
            },
            stop.clone(),
        )
        .await
        .unwrap();
    let night = chrono::NaiveDate::from_ymd_opt(2026, 3, 1).unwrap();
    let job = queue::enqueue(
        &db.pool,
        &NewJob::new(
            "proactive_suggestion",
            json!({"org_id": org, "night": night}),
        )
        .unique_key(format!("proactive_suggestion:{org}:{night}"))
        .unique_until_purged(),
    )
    .await
    .unwrap()
    .expect("a new job");
    wait_until(60, "the nightly job ends", || async {
        let (state, _) = job_state(&db, job).await;
        state.is_finished()
    })
    .await;
    stop.cancel();
    worker.join().await;
    let (state, last_error) = job_state(&db, job).await;
    assert_eq!(state, "succeeded", "{last_error:?}");
    let run: Option<Uuid> = sqlx::query_scalar(
        "SELECT id FROM agent_runs WHERE org_id = $1 AND status = 'succeeded' AND subject <> $2",
    )
    .bind(org)
    .bind(doc.to_string())
    .fetch_optional(&db.pool)
    .await
    .unwrap();
    assert!(run.is_some(), "the nightly agent run succeeded");
}

/// The same string in the other places N1 named: audit arguments (redacted whatever the org's
/// setting) and a vault's redaction, without a panic and with the value round-tripping.
#[test]
fn full_width_digits_pass_redaction_and_audit_summaries() {
    let vault = agentd::pii::Vault::in_memory(Vec::new());
    let text = format!("Name: Jane Doe\nIBAN: {POISON}\n");
    let redacted = vault.redact(&text);
    assert!(!redacted.contains("Jane Doe"), "{redacted}");
    assert_eq!(vault.rehydrate(&redacted), text);
    let args = json!({"metadata": {"iban": POISON, "note": text}});
    let back = vault.rehydrate_json(&vault.redact_json(&args));
    assert_eq!(back, args);
}

/// Found by the `api_extract` fuzz target: a body or query with a key named `""` that the route
/// does not take was refused naming the field `""` — nothing a client can find. It is named as
/// the empty key now.
#[test]
fn an_unknown_empty_key_is_named() {
    use agentd::api::extract::{ListQuery, parse_json, parse_query};

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        name: Option<String>,
        limits: Option<Limits>,
    }
    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Limits {
        max_rounds: Option<u32>,
    }

    for (body, field) in [
        (r#"{"": 1}"#, r#"body (a key named "")"#),
        (r#"{"limits": {"": 1}}"#, r#"limits."""#),
    ] {
        let p = parse_json::<Body>(body.as_bytes()).unwrap_err();
        assert_eq!(p.field.as_deref(), Some(field), "{body}: {p:?}");
        assert!(p.detail.starts_with(field), "{p:?}");
    }
    let p = parse_query::<ListQuery>(Some("=1")).unwrap_err();
    assert_eq!(
        p.field.as_deref(),
        Some(r#"query (a key named "")"#),
        "{p:?}"
    );
}
