//! Review D9 against a real PostgreSQL: the master key that seals org provider keys and webhook
//! secrets rotates. A row sealed under key 1 still opens once key 2 is current and key 1 only
//! listed as previous; `agentd orgs rekey` (`llm::org_keys::rekey`) moves every row — keys from
//! before key ids, webhook secrets in clear — to key 2, after which key 1 can be removed (and
//! a server that lacks a key some row needs refuses to start, naming it). A ciphertext copied
//! to another provider entry, org or subscription does not decrypt. Webhook secrets are sealed
//! in the table and deliveries are signed with the secret given, before and after a re-key.

use crate::api_support::Api;
use crate::common::{self, TestDb};
use agentd::api::Role;
use agentd::app::{App, WorkerArgs};
use agentd::config::Config;
use agentd::llm::org_keys::{self, Cipher, StartupCheckError};
use agentd::store::events::{self, EventType, NewEvent};
use agentd::store::webhooks::{self, NewWebhook};
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use serde_json::json;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const K1: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const K2: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";
const KEY_A: &str = "sk-org-a-0123456789abcdefghij";
const KEY_B: &str = "sk-org-b-0123456789abcdefghij";
const KEY_C: &str = "sk-org-c-0123456789abcdefghij";
const SECRET: &str = "hook-secret-0123456789abcdef";

/// Two entries that take a key (no call is made to them) and the master keys given.
fn config(current: &str, previous: &[&str]) -> Config {
    let text = format!(
        "[llm]\norg_key_encryption_key = \"{current}\"\norg_key_previous_encryption_keys = {previous:?}\n\
         [[llm.providers]]\nname = \"primary\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\napi_key = \"sk-operator-1\"\n\
         [[llm.providers]]\nname = \"secondary\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\napi_key = \"sk-operator-2\"\n"
    );
    let loaded = Config::load_text(Some(("agentd.toml", &text)), std::iter::empty())
        .expect("a valid config");
    let mut c = common::test_config();
    c.llm = loaded.llm;
    c.webhooks.allow_private_networks = true;
    c
}

fn cipher(c: &Config) -> Arc<Cipher> {
    Cipher::from_config(&c.llm).expect("a master key is set")
}

/// An App whose provider is the config's chain of entries (which reads the org's key when
/// scoped), not the offline provider tests usually inject.
fn app(db: &TestDb, c: Config) -> App {
    App::new(
        db.pool.clone(),
        agentd::clock::system(),
        c,
        agentd::catalog::Catalog::builtin(&agentd::known_tool_names()).unwrap(),
    )
}

async fn org(pool: &sqlx::PgPool, name: &str) -> Uuid {
    agentd::store::api_keys::create_org(pool, name)
        .await
        .unwrap()
        .unwrap()
}

/// Stores `key` for `org` as `PUT /v1/settings/provider-key` does.
async fn set_key(app: &App, org: Uuid, key: &str, provider: Option<&str>) {
    org_keys::set_key(
        &app.pool,
        &app.config.llm,
        org,
        key,
        provider,
        chrono::Utc::now(),
    )
    .await
    .unwrap();
}

/// The org's key as its calls would use it: through `provider_for_org` (the chain scoped
/// with the org's key) — Ok when the stored row opens, the reason when it does not.
async fn scope(app: &App, org: Uuid) -> Result<(), String> {
    assert!(
        app.provider.scopable(),
        "a chain, which reads the org's key"
    );
    let c = Cipher::from_config(&app.config.llm);
    org_keys::provider_for_org(&app.provider, &app.pool, c.as_deref(), org, None)
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

/// The key stored for `org`, opened with `cipher`.
async fn opened(pool: &sqlx::PgPool, cipher: &Cipher, org: Uuid) -> Result<String, String> {
    let row = agentd::store::org_keys::get(pool, org)
        .await
        .unwrap()
        .expect("the org has a key");
    cipher
        .open(org, row.provider.as_deref(), &row.sealed)
        .map(|k| k.expose().to_string())
}

/// Webhook `id`'s secret as a delivery opens it.
async fn secret_of(
    pool: &sqlx::PgPool,
    cipher: Option<&Cipher>,
    org: Uuid,
    id: Uuid,
) -> Result<String, String> {
    let (_, stored, _) = webhooks::target(pool, org, id)
        .await
        .unwrap()
        .expect("the webhook exists");
    Cipher::open_webhook_secret(cipher, org, id, &stored)
}

/// A row as the code before migration 0102 sealed it: AES-256-GCM under `master`, the org id
/// alone as associated data, no key id.
async fn legacy_key(pool: &sqlx::PgPool, master: &str, org: Uuid, key: &str) {
    use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
    let bytes = agentd::config::decode_org_key(master).unwrap();
    let aead = aes_gcm::Aes256Gcm::new_from_slice(&bytes).unwrap();
    let nonce = aes_gcm::Aes256Gcm::generate_nonce(&mut OsRng);
    let ciphertext = aead
        .encrypt(
            &nonce,
            Payload {
                msg: key.as_bytes(),
                aad: org.as_bytes(),
            },
        )
        .unwrap();
    sqlx::query(
        "INSERT INTO org_provider_keys (org_id, provider, nonce, ciphertext, last4, set_at)
         VALUES ($1, NULL, $2, $3, 'ghij', now())",
    )
    .bind(org)
    .bind(nonce.to_vec())
    .bind(ciphertext)
    .execute(pool)
    .await
    .unwrap();
}

/// A subscription as the API makes one on a server with `app`'s config (sealed when it has a
/// master key, else in clear).
async fn webhook(app: &App, org: Uuid, url: &str) -> Uuid {
    let new = NewWebhook {
        org_id: org,
        url,
        events: &["proposal.ready".to_string()],
        secret: SECRET,
        max_attempts: 3,
        priority: 0,
        now: chrono::Utc::now(),
    };
    let id = Uuid::now_v7();
    let sealed = Cipher::from_config(&app.config.llm)
        .map(|c| c.seal_webhook_secret(org, id, SECRET).unwrap());
    webhooks::insert_as(&app.pool, id, &new, sealed.as_ref())
        .await
        .unwrap()
        .id
}

/// `(key_id, count)` of every org key and every webhook secret (`None`: no key id / clear).
async fn key_ids(pool: &sqlx::PgPool) -> (Vec<(Option<String>, i64)>, Vec<(Option<String>, i64)>) {
    (
        agentd::store::org_keys::per_key_id(pool).await.unwrap(),
        webhooks::secrets_per_key_id(pool).await.unwrap(),
    )
}

#[tokio::test]
async fn rows_of_key_1_open_after_key_2_is_added_and_rekey_moves_every_row_so_key_1_can_go() {
    let db = TestDb::new().await;
    let pool = db.pool.clone();
    let (c1, c2, c2_only) = (config(K1, &[]), config(K2, &[K1]), config(K2, &[]));
    let (id1, id2) = (
        cipher(&c1).current_id().to_string(),
        cipher(&c2).current_id().to_string(),
    );
    assert_ne!(id1, id2);
    let (a, b, legacy) = (
        org(&pool, "a").await,
        org(&pool, "b").await,
        org(&pool, "c").await,
    );
    // Under key 1: A's key for `primary`, B's for the first entry, C's from before key ids,
    // one sealed webhook secret and one stored in clear (a row from before migration 0103).
    let app1 = app(&db, c1.clone());
    set_key(&app1, a, KEY_A, Some("primary")).await;
    set_key(&app1, b, KEY_B, None).await;
    legacy_key(&pool, K1, legacy, KEY_C).await;
    let sealed_hook = webhook(&app1, a, "https://hooks.example.com/a").await;
    let clear_hook = webhook(
        &app(&db, common::test_config()),
        b,
        "https://hooks.example.com/b",
    )
    .await;
    assert_eq!(
        key_ids(&pool).await,
        (
            vec![(Some(id1.clone()), 2), (None, 1)],
            vec![(Some(id1.clone()), 1), (None, 1)]
        )
    );
    org_keys::check_startup(&pool, Some(&cipher(&c1)))
        .await
        .unwrap();

    // Key 2 is current, key 1 listed as previous: every row still opens, nothing rewritten.
    let app2 = app(&db, c2.clone());
    let k2 = cipher(&c2);
    org_keys::check_startup(&pool, Some(&k2)).await.unwrap();
    assert_eq!(opened(&pool, &k2, a).await.unwrap(), KEY_A);
    assert_eq!(opened(&pool, &k2, b).await.unwrap(), KEY_B);
    assert_eq!(opened(&pool, &k2, legacy).await.unwrap(), KEY_C);
    for o in [a, b, legacy] {
        scope(&app2, o).await.unwrap();
    }
    assert_eq!(
        secret_of(&pool, Some(&k2), a, sealed_hook).await.unwrap(),
        SECRET
    );
    assert_eq!(
        secret_of(&pool, Some(&k2), b, clear_hook).await.unwrap(),
        SECRET
    );
    // Key 1 removed too early: the start-up check names it and how many rows need it.
    let early = org_keys::check_startup(&pool, Some(&cipher(&c2_only)))
        .await
        .unwrap_err();
    assert!(
        matches!(&early, StartupCheckError::UnknownKey { key_id, rows: 3 } if *key_id == id1),
        "{early}"
    );
    assert!(
        opened(&pool, &cipher(&c2_only), a)
            .await
            .unwrap_err()
            .contains(&id1)
    );

    // The re-key: every row under key 2, no secret left in clear.
    let done = org_keys::rekey(&pool, &k2).await.unwrap();
    assert_eq!(
        (done.key_id.as_str(), done.org_keys, done.webhook_secrets),
        (id2.as_str(), 3, 2)
    );
    assert_eq!(
        key_ids(&pool).await,
        (vec![(Some(id2.clone()), 3)], vec![(Some(id2.clone()), 2)])
    );
    let clear: i64 =
        sqlx::query_scalar("SELECT count(*) FROM agentd_webhooks WHERE secret IS NOT NULL")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(clear, 0);
    let again = org_keys::rekey(&pool, &k2).await.unwrap();
    assert_eq!(
        (again.org_keys, again.webhook_secrets),
        (0, 0),
        "a second re-key changes nothing"
    );

    // Key 1 removed: the server starts and every row opens with key 2 alone.
    let only2 = cipher(&c2_only);
    org_keys::check_startup(&pool, Some(&only2)).await.unwrap();
    let app3 = app(&db, c2_only);
    for (o, key) in [(a, KEY_A), (b, KEY_B), (legacy, KEY_C)] {
        assert_eq!(opened(&pool, &only2, o).await.unwrap(), key);
        scope(&app3, o).await.unwrap();
    }
    assert_eq!(
        secret_of(&pool, Some(&only2), a, sealed_hook)
            .await
            .unwrap(),
        SECRET
    );
    assert_eq!(
        secret_of(&pool, Some(&only2), b, clear_hook).await.unwrap(),
        SECRET
    );
    // The legacy row is now bound to its entry: moved to another one, it no longer opens.
    sqlx::query("UPDATE org_provider_keys SET provider = 'primary' WHERE org_id = $1")
        .bind(legacy)
        .execute(&pool)
        .await
        .unwrap();
    assert!(opened(&pool, &only2, legacy).await.is_err());
    // And key 1 alone opens nothing any more.
    let e = org_keys::check_startup(&pool, Some(&cipher(&c1)))
        .await
        .unwrap_err();
    assert!(
        matches!(e, StartupCheckError::UnknownKey { ref key_id, .. } if *key_id == id2),
        "{e}"
    );
    // Without any key the sealed rows refuse the start.
    let none = org_keys::check_startup(&pool, None).await.unwrap_err();
    assert!(
        matches!(none, StartupCheckError::KeysWithoutCipher(5)),
        "{none}"
    );
}

#[tokio::test]
async fn a_rekey_that_cannot_open_a_row_changes_nothing_and_names_it() {
    let db = TestDb::new().await;
    let pool = db.pool.clone();
    let a = org(&pool, "a").await;
    let b = org(&pool, "b").await;
    set_key(&app(&db, config(K1, &[])), a, KEY_A, None).await;
    // B's row sealed under a key the new config does not list.
    set_key(&app(&db, config(K2, &[])), b, KEY_B, None).await;
    let before = key_ids(&pool).await;
    let c = config(K2, &[]);
    let e = org_keys::rekey(&pool, &cipher(&c)).await.unwrap_err();
    assert!(
        matches!(e, org_keys::RekeyError::OrgKey { org, .. } if org == a),
        "{e}"
    );
    assert_eq!(key_ids(&pool).await, before, "all rows or none");
}

#[tokio::test]
async fn a_ciphertext_copied_to_another_provider_org_or_webhook_does_not_decrypt() {
    let db = TestDb::new().await;
    let pool = db.pool.clone();
    let c = config(K1, &[]);
    let k = cipher(&c);
    let app = app(&db, c);
    let (a, b) = (org(&pool, "a").await, org(&pool, "b").await);
    set_key(&app, a, KEY_A, Some("primary")).await;
    set_key(&app, b, KEY_B, Some("primary")).await;
    scope(&app, a).await.unwrap();
    // A's row re-pointed to the other entry (a database writer's edit): A's runs cannot use it.
    sqlx::query("UPDATE org_provider_keys SET provider = 'secondary' WHERE org_id = $1")
        .bind(a)
        .execute(&pool)
        .await
        .unwrap();
    let e = scope(&app, a).await.unwrap_err();
    assert!(e.contains("cannot be decrypted"), "{e}");
    assert!(opened(&pool, &k, a).await.is_err());
    sqlx::query("UPDATE org_provider_keys SET provider = 'primary' WHERE org_id = $1")
        .bind(a)
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(
        opened(&pool, &k, a).await.unwrap(),
        KEY_A,
        "back where it was sealed, it opens"
    );
    // A's ciphertext copied into B's row: B's calls do not get A's key.
    sqlx::query(
        "UPDATE org_provider_keys d SET nonce = s.nonce, ciphertext = s.ciphertext, key_id = s.key_id
           FROM org_provider_keys s WHERE s.org_id = $1 AND d.org_id = $2",
    )
    .bind(a)
    .bind(b)
    .execute(&pool)
    .await
    .unwrap();
    assert!(opened(&pool, &k, b).await.is_err());
    assert!(scope(&app, b).await.is_err());
    // A webhook's sealed secret copied to another subscription, of its org and of another.
    let h1 = webhook(&app, a, "https://hooks.example.com/1").await;
    let h2 = webhook(&app, a, "https://hooks.example.com/2").await;
    let h3 = webhook(&app, b, "https://hooks.example.com/3").await;
    for to in [h2, h3] {
        sqlx::query(
            "UPDATE agentd_webhooks d
                SET secret_nonce = s.secret_nonce, secret_ciphertext = s.secret_ciphertext
               FROM agentd_webhooks s WHERE s.id = $1 AND d.id = $2",
        )
        .bind(h1)
        .bind(to)
        .execute(&pool)
        .await
        .unwrap();
    }
    assert_eq!(secret_of(&pool, Some(&k), a, h1).await.unwrap(), SECRET);
    assert!(secret_of(&pool, Some(&k), a, h2).await.is_err());
    assert!(secret_of(&pool, Some(&k), b, h3).await.is_err());
}

/// What the receiver got: (headers, body) per request.
type Seen = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

/// A receiver on a real port that accepts every delivery.
async fn receiver() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let s = s.clone();
            async move {
                s.lock().unwrap().push((headers, body));
                StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

async fn emit(pool: &sqlx::PgPool, org: Uuid, n: i64) -> i64 {
    let mut conn = pool.acquire().await.unwrap();
    let payload = json!({"n": n});
    events::emit(
        &mut conn,
        &NewEvent {
            org_id: org,
            kind: EventType::ProposalReady,
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

/// Waits until `seen` holds `n` deliveries; checks the last one is signed with [`SECRET`].
async fn signed_deliveries(seen: &Seen, n: usize) {
    common::wait_until(60, "the delivery arrived", || {
        let len = seen.lock().unwrap().len();
        async move { len >= n }
    })
    .await;
    let seen = seen.lock().unwrap();
    let (h, body) = seen.last().unwrap();
    let sig = h["agentd-signature"].to_str().unwrap();
    let now = chrono::Utc::now().timestamp();
    agentd::webhooks::verify(SECRET, sig, body, now).expect("signed with the secret given");
    assert_eq!(
        agentd::webhooks::verify("another-secret-0123456789", sig, body, now),
        Err(agentd::webhooks::VerifyError::Mismatch)
    );
}

#[tokio::test]
async fn webhook_secrets_are_sealed_in_the_table_and_deliveries_sign_with_them_before_and_after_a_rekey()
 {
    let mut api = Api::start_with(|c| *c = config(K1, &[])).await;
    let mut catalog = (*api.app.catalog).clone();
    let spec = catalog.kinds.get_mut("webhook_delivery").unwrap();
    spec.queue.backoff_base_ms = 1;
    spec.queue.backoff_max_ms = 5;
    api.app.catalog = Arc::new(catalog);
    api.app.clock = agentd::clock::system();
    let (org, admin) = api.org("acme", Role::Admin).await;
    let (url, seen) = receiver().await;
    let r = api
        .call(
            "POST",
            "/v1/webhooks",
            Some(&admin),
            Some(json!({"url": url, "events": ["proposal.ready"], "secret": SECRET})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let hook: Uuid = r.body["id"].as_str().unwrap().parse().unwrap();
    // Sealed: not in `secret`, not in its ciphertext, in no column of any table.
    let (clear, in_ciphertext): (Option<String>, bool) = sqlx::query_as(
        "SELECT secret, position(convert_to($2, 'UTF8') in secret_ciphertext) > 0
           FROM agentd_webhooks WHERE id = $1",
    )
    .bind(hook)
    .bind(SECRET)
    .fetch_one(&api.db.pool)
    .await
    .unwrap();
    assert_eq!((clear, in_ciphertext), (None, false));
    assert_eq!(
        tables_holding(&api.db.pool, SECRET).await,
        Vec::<String>::new()
    );

    let shutdown = CancellationToken::new();
    let args = || WorkerArgs {
        kinds: vec!["webhook_delivery".into()],
        ..Default::default()
    };
    let worker = api
        .app
        .start_worker(args(), shutdown.clone())
        .await
        .unwrap();
    emit(&api.db.pool, org, 1).await;
    signed_deliveries(&seen, 1).await;
    shutdown.cancel();
    worker.join().await;

    // Rotated: key 2 current, the row re-keyed; a worker with key 2 alone still signs right.
    let c2 = config(K2, &[K1]);
    org_keys::rekey(&api.db.pool, &cipher(&c2)).await.unwrap();
    let mut app = api.app.clone();
    app.config = Arc::new(config(K2, &[]));
    let shutdown = CancellationToken::new();
    let worker = app.start_worker(args(), shutdown.clone()).await.unwrap();
    emit(&api.db.pool, org, 2).await;
    signed_deliveries(&seen, 2).await;
    shutdown.cancel();
    worker.join().await;
    assert_eq!(
        tables_holding(&api.db.pool, SECRET).await,
        Vec::<String>::new()
    );
}

/// The `table.column`s of the schema whose values contain `needle`.
async fn tables_holding(pool: &sqlx::PgPool, needle: &str) -> Vec<String> {
    let cols: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT table_name::text, column_name::text, data_type::text FROM information_schema.columns
          WHERE table_schema = current_schema()
            AND data_type IN ('text', 'character varying', 'jsonb', 'json', 'bytea', 'ARRAY')",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert!(cols.len() > 20, "the scan reads the schema's columns");
    let mut found = Vec::new();
    for (table, column, ty) in cols {
        // The names come from the catalogue, quoted.
        let hit: bool = if ty == "bytea" {
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT EXISTS (SELECT 1 FROM \"{table}\" WHERE position(convert_to($1, 'UTF8') in \"{column}\") > 0)"
            )))
        } else {
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT EXISTS (SELECT 1 FROM \"{table}\" WHERE \"{column}\"::text LIKE '%' || $1 || '%')"
            )))
        }
        .bind(needle)
        .fetch_one(pool)
        .await
        .unwrap();
        if hit {
            found.push(format!("{table}.{column}"));
        }
    }
    found
}
