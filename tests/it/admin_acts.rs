//! Review D5: every consequential act through the API — a proposal accepted or rejected, a key
//! made or revoked, the org's provider key set or removed, a webhook added or removed, settings
//! changed, a kind paused or resumed, a job cancelled, dead jobs retried or cancelled — appends
//! exactly one audit row naming the key that did it and writes one event, and neither holds a
//! secret (the provider key, a webhook's secret, a new API key).

use crate::api_support::Api;
use agentd::api::auth::Role;
use agentd::clock::Clock;
use agentd::config::{ProviderEntry, ProviderKind};
use agentd::store::auto_create::{self as ac, Proposed};
use agentd::store::documents;
use agentd::store::runs::{self, NewRun};
use serde_json::{Value, json};
use uuid::Uuid;

const PROVIDER_KEY: &str = "sk-org-0123456789abcdefghij";
const WEBHOOK_SECRET: &str = "whsec-0123456789abcdefghij";

/// A document of `org` in `proposed`, by a run of its own (what a worker leaves).
async fn proposed_doc(api: &Api, org: Uuid, name: &str) -> Uuid {
    let now = api.clock.now();
    let mut tx = api.db.pool.begin().await.unwrap();
    let doc = documents::insert(&mut tx, org, name, Some("x"), &json!({}), now)
        .await
        .unwrap();
    let run = Uuid::now_v7();
    runs::create_run(
        &mut tx,
        &NewRun {
            id: run,
            org_id: org,
            kind: "auto_create",
            subject: &doc.to_string(),
            job_id: None,
            provider: "scripted",
            model: "m",
            started_at: now,
        },
    )
    .await
    .unwrap();
    ac::set_proposed(&mut tx, org, doc, run, &Proposed::default(), now)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    doc
}

/// The audit rows and events written since `since` (ids above it).
async fn written_since(
    api: &Api,
    since: (i64, i64),
) -> (Vec<(String, String, String, Value)>, Vec<(String, Value)>) {
    let audit = sqlx::query_as(
        "SELECT actor, tool, decision, coalesce(args, 'null') FROM audit_events WHERE id > $1 ORDER BY id",
    )
    .bind(since.0)
    .fetch_all(&api.db.pool)
    .await
    .unwrap();
    let events =
        sqlx::query_as("SELECT type, payload FROM agentd_events WHERE id > $1 ORDER BY id")
            .bind(since.1)
            .fetch_all(&api.db.pool)
            .await
            .unwrap();
    (audit, events)
}

async fn high_water(api: &Api) -> (i64, i64) {
    sqlx::query_as(
        "SELECT (SELECT coalesce(max(id), 0) FROM audit_events), (SELECT coalesce(max(id), 0) FROM agentd_events)",
    )
    .fetch_one(&api.db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn every_admin_act_leaves_one_audit_row_naming_the_key_and_one_event_without_secrets() {
    let api = Api::start_with(|c| {
        c.llm.org_key_encryption_key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=".into();
        c.llm.providers = vec![ProviderEntry {
            name: "main".into(),
            kind: ProviderKind::OpenAi,
            base_url: "http://127.0.0.1:9/v1".into(),
            api_key: "sk-operator-000000000000000000".into(),
            api_key_env: String::new(),
            models: Vec::new(),
            requests_per_minute: 0,
            tokens_per_minute: 0,
            request_timeout_secs: Some(1),
            max_retries: Some(0),
            stream: Some(false),
        }];
        c.webhooks.allow_private_networks = true;
    })
    .await;
    let (org, key) = api.org("acme", Role::Admin).await;
    let k = Some(key.as_str());
    let me = api.call("GET", "/v1/me", k, None).await;
    let actor = format!("key {}", me.body["key_id"].as_str().unwrap());
    let (accepted, rejected) = (
        proposed_doc(&api, org, "a.txt").await,
        proposed_doc(&api, org, "b.txt").await,
    );
    let job = api
        .call(
            "POST",
            "/v1/jobs",
            k,
            Some(json!({"kind": "auto_create", "document_id": accepted})),
        )
        .await;
    assert_eq!(job.status, 201, "{}", job.body);
    let dead: i64 = sqlx::query_scalar(
        "INSERT INTO agentd_jobs (kind, payload, state, finished_at)
         VALUES ('auto_create', jsonb_build_object('org_id', $1::text, 'document_id', gen_random_uuid()), 'dead', now())
         RETURNING id",
    )
    .bind(org)
    .fetch_one(&api.db.pool)
    .await
    .unwrap();

    // (method, path, body, the act's name, the event type)
    let mut acts: Vec<(&str, String, Option<Value>, &str, &str)> = vec![
        (
            "POST",
            format!("/v1/documents/{accepted}/accept"),
            None,
            "accept_proposal",
            "proposal.accepted",
        ),
        (
            "POST",
            format!("/v1/documents/{rejected}/reject"),
            None,
            "reject_proposal",
            "proposal.rejected",
        ),
        (
            "POST",
            "/v1/keys".into(),
            Some(json!({"role": "uploader"})),
            "create_api_key",
            "admin.changed",
        ),
        (
            "PUT",
            "/v1/settings/provider-key".into(),
            Some(json!({"key": PROVIDER_KEY})),
            "set_provider_key",
            "admin.changed",
        ),
        (
            "DELETE",
            "/v1/settings/provider-key".into(),
            None,
            "delete_provider_key",
            "admin.changed",
        ),
        (
            "POST",
            "/v1/webhooks".into(),
            Some(
                json!({"url": "http://127.0.0.1:9/hook", "events": ["proposal.ready"], "secret": WEBHOOK_SECRET}),
            ),
            "create_webhook",
            "admin.changed",
        ),
        (
            "PATCH",
            "/v1/settings".into(),
            Some(json!({"nightly_hour": 4, "auto_create": false})),
            "update_settings",
            "admin.changed",
        ),
        (
            "POST",
            "/v1/queue/auto_create/pause".into(),
            None,
            "pause_queue",
            "admin.changed",
        ),
        (
            "POST",
            "/v1/queue/auto_create/resume".into(),
            None,
            "resume_queue",
            "admin.changed",
        ),
        (
            "POST",
            format!("/v1/jobs/{}/cancel", job.body["id"]),
            None,
            "cancel_job",
            "admin.changed",
        ),
        (
            "POST",
            "/v1/jobs/dead/retry".into(),
            Some(json!({"ids": [dead]})),
            "retry_dead_jobs",
            "admin.changed",
        ),
    ];
    let mut secrets: Vec<String> = vec![PROVIDER_KEY.into(), WEBHOOK_SECRET.into(), "ghij".into()];
    let mut made_key = None;
    let mut webhook = None;
    // Acts on what the acts above made (their ids are known only then).
    acts.push((
        "__revoke",
        String::new(),
        None,
        "revoke_api_key",
        "admin.changed",
    ));
    acts.push((
        "__delete_webhook",
        String::new(),
        None,
        "delete_webhook",
        "admin.changed",
    ));
    acts.push((
        "POST",
        "/v1/jobs/dead/cancel".into(),
        Some(json!({"ids": [dead]})),
        "cancel_dead_jobs",
        "admin.changed",
    ));
    for (method, path, body, act, event) in acts {
        let (method, path) = match method {
            "__revoke" => (
                "POST",
                format!("/v1/keys/{}/revoke", made_key.clone().unwrap_or_default()),
            ),
            "__delete_webhook" => (
                "DELETE",
                format!("/v1/webhooks/{}", webhook.clone().unwrap_or_default()),
            ),
            m => (m, path),
        };
        if act == "cancel_dead_jobs" {
            // The retried job is dead again (its document is not there to run).
            sqlx::query("UPDATE agentd_jobs SET state = 'dead', finished_at = now() WHERE id = $1")
                .bind(dead)
                .execute(&api.db.pool)
                .await
                .unwrap();
        }
        let since = high_water(&api).await;
        let r = api.call(method, &path, k, body).await;
        assert!(
            r.status.is_success(),
            "{method} {path}: {} {}",
            r.status,
            r.body
        );
        if act == "create_api_key" {
            made_key = r.body["id"].as_str().map(str::to_string);
            secrets.push(r.body["key"].as_str().unwrap().to_string());
        }
        if act == "create_webhook" {
            webhook = r.body["id"].as_str().map(str::to_string);
        }
        let (audit, events) = written_since(&api, since).await;
        let mine: Vec<_> = audit.iter().filter(|a| a.1 == act).collect();
        assert_eq!(mine.len(), 1, "{act}: one audit row: {audit:?}");
        assert_eq!(mine[0].0, actor, "{act}: the row names the key");
        let theirs: Vec<_> = events
            .iter()
            .filter(|e| e.0 == event && e.1["action"] == act)
            .collect();
        assert_eq!(theirs.len(), 1, "{act}: one {event} event: {events:?}");
        assert_eq!(theirs[0].1["by"], json!(actor), "{act}");
        let written = format!("{audit:?} {events:?}");
        for s in &secrets {
            assert!(
                !written.contains(s.as_str()),
                "{act}: a secret in the trail: {written}"
            );
        }
    }
    // A settings change names what changed.
    let row: Value =
        sqlx::query_scalar("SELECT args FROM audit_events WHERE tool = 'update_settings'")
            .fetch_one(&api.db.pool)
            .await
            .unwrap();
    assert_eq!(row["changed"], json!(["auto_create", "nightly_hour"]));
    // A refused act (another org's document) writes nothing.
    let (_, other_key) = api.org("other", Role::Admin).await;
    let since = high_water(&api).await;
    api.call(
        "POST",
        &format!("/v1/documents/{accepted}/accept"),
        Some(&other_key),
        None,
    )
    .await
    .problem(404, None);
    assert_eq!(written_since(&api, since).await, (vec![], vec![]));
}
