//! Test harness: one fresh database per test, created from a migrated template (fast), dropped
//! when the test ends. The server is AGENTD_TEST_DATABASE_URL, or postgres@127.0.0.1:5432.
#![allow(dead_code)]

use agentd::app::App;
use agentd::catalog::Catalog;
use agentd::clock::SharedClock;
use agentd::config::Config;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, PgPool};
use std::sync::{Arc, Mutex};

/// The admin URL of the test server.
pub fn server_url() -> String {
    std::env::var("AGENTD_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

fn with_db(url: &str, db: &str) -> String {
    let (base, _) = url.rsplit_once('/').expect("URL with a database");
    format!("{base}/{db}")
}

fn template_name() -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for m in agentd::db::MIGRATOR.iter() {
        h.update(m.version.to_le_bytes());
        h.update(m.checksum.as_ref());
    }
    format!("agentd_tmpl_{}", &hex::encode(h.finalize())[..12])
}

static TEMPLATE: Mutex<Option<String>> = Mutex::new(None);

// A std mutex held across awaits is fine here: each test has its own runtime, and the lock
// only serialises template creation.
#[allow(clippy::await_holding_lock)]
async fn ensure_template() -> String {
    let mut guard = TEMPLATE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = guard.as_ref() {
        return t.clone();
    }
    let name = template_name();
    let mut admin = PgConnection::connect(&server_url())
        .await
        .expect("connect to the test PostgreSQL (is it running? see README)");
    // Several test processes may race: one advisory lock serialises them.
    sqlx::query("SELECT pg_advisory_lock(727274)")
        .execute(&mut admin)
        .await
        .unwrap();
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(&name)
            .fetch_one(&mut admin)
            .await
            .unwrap();
    if !exists {
        let building = format!("{name}_building");
        exec(
            &mut admin,
            &format!("DROP DATABASE IF EXISTS {building} WITH (FORCE)"),
        )
        .await;
        exec(&mut admin, &format!("CREATE DATABASE {building}")).await;
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect(&with_db(&server_url(), &building))
            .await
            .unwrap();
        agentd::db::migrate(&pool)
            .await
            .expect("migrate the template");
        pool.close().await;
        exec(
            &mut admin,
            &format!("ALTER DATABASE {building} RENAME TO {name}"),
        )
        .await;
    }
    sqlx::query("SELECT pg_advisory_unlock(727274)")
        .execute(&mut admin)
        .await
        .unwrap();
    *guard = Some(name.clone());
    name
}

async fn exec(conn: &mut PgConnection, sql: &str) {
    sqlx::query(sqlx::AssertSqlSafe(sql.to_string()))
        .execute(conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// A fresh, migrated database for one test; dropped on drop.
pub struct TestDb {
    pub pool: PgPool,
    pub name: String,
    pub url: String,
}

impl TestDb {
    /// Creates the database from the template.
    pub async fn new() -> Self {
        let template = ensure_template().await;
        let name = format!("agentd_t_{}", uuid::Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(&server_url()).await.unwrap();
        exec(
            &mut admin,
            &format!("CREATE DATABASE {name} TEMPLATE {template}"),
        )
        .await;
        let url = with_db(&server_url(), &name);
        let pool = PgPoolOptions::new()
            .max_connections(20)
            .connect(&url)
            .await
            .unwrap();
        Self { pool, name, url }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Drop from a plain thread with its own runtime: Drop cannot await.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if let Ok(mut admin) = PgConnection::connect(&server_url()).await {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .execute(&mut admin)
                    .await;
                }
            });
        })
        .join();
    }
}

/// Config for tests: fast heartbeats and polls, no HTTP server.
pub fn test_config() -> Config {
    let mut c = Config::defaults();
    c.http.addr = String::new();
    c.worker.poll_interval_ms = 200;
    c.worker.lease_secs = 4;
    c.worker.heartbeat_secs = 1;
    c.worker.shutdown_grace_secs = 2;
    c.worker.rescue_interval_secs = 1;
    c
}

/// An App over `db` with the built-in job files and `clock`.
pub fn app(db: &TestDb, clock: SharedClock) -> App {
    app_with(db, clock, test_config())
}

/// An App over `db` with a given config.
pub fn app_with(db: &TestDb, clock: SharedClock, config: Config) -> App {
    let mut app = App::new(
        db.pool.clone(),
        clock,
        config,
        Catalog::builtin(&agentd::known_tool_names()).unwrap(),
    );
    app.provider = Arc::new(agentd::llm::offline::OfflineProvider::default());
    app
}

/// Polls `f` every 20 ms until it returns true or `secs` pass; panics with `what` on timeout.
pub async fn wait_until<F, Fut>(secs: u64, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if f().await {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("timed out after {secs}s waiting for: {what}");
}

/// Starts `app`'s workers for one kind in this process (no cron); cancel the token to stop them.
pub async fn start_worker(
    app: &App,
    kind: &str,
    concurrency: Option<usize>,
) -> (
    agentd::app::RunningWorker,
    tokio_util::sync::CancellationToken,
) {
    let stop = tokio_util::sync::CancellationToken::new();
    let args = agentd::app::WorkerArgs {
        kinds: vec![kind.to_string()],
        concurrency,
        cron: false,
        only_org: None,
    };
    let w = app
        .start_worker(args, stop.clone())
        .await
        .expect("start worker");
    (w, stop)
}
