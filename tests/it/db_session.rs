//! agentd's sessions (issue 12, item 4): every pooled connection has `lock_timeout` and
//! `idle_in_transaction_session_timeout` from the config, and a worker whose concurrency cannot
//! fit `database.max_connections` refuses to start (exit 2, naming the key and the sum).

use crate::common;
use agentd::config::Config;
use common::{TestDb, wait_until};
use sqlx::{Connection, PgConnection};

fn config(lock_ms: u64, idle_ms: u64) -> agentd::config::DatabaseConfig {
    let mut c = Config::defaults().database;
    c.lock_timeout_ms = lock_ms;
    c.idle_in_transaction_timeout_ms = idle_ms;
    c.max_connections = 4;
    c
}

#[tokio::test]
async fn pooled_sessions_carry_the_configured_timeouts() {
    let db = TestDb::new().await;
    let pool = agentd::db::pool_for_config(&db.url, &config(1500, 90_000), false)
        .await
        .unwrap();
    let lock: String = sqlx::query_scalar("SHOW lock_timeout")
        .fetch_one(&pool)
        .await
        .unwrap();
    let idle: String = sqlx::query_scalar("SHOW idle_in_transaction_session_timeout")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!((lock.as_str(), idle.as_str()), ("1500ms", "90s"));
    // The defaults are on.
    let d = Config::defaults().database;
    assert_eq!(
        (d.lock_timeout_ms, d.idle_in_transaction_timeout_ms),
        (5000, 60_000)
    );
}

#[tokio::test]
async fn a_statement_behind_a_held_lock_fails_instead_of_waiting() {
    let db = TestDb::new().await;
    let pool = agentd::db::pool_for_config(&db.url, &config(200, 0), false)
        .await
        .unwrap();
    // Another session (a migration, a long transaction) holds the queue table.
    let mut other = PgConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql("BEGIN; LOCK TABLE agentd_jobs IN ACCESS EXCLUSIVE MODE")
        .execute(&mut other)
        .await
        .unwrap();
    let err = sqlx::query("SELECT count(*) FROM agentd_jobs")
        .fetch_one(&pool)
        .await
        .unwrap_err();
    let code = err
        .as_database_error()
        .and_then(|d| d.code())
        .map(|c| c.to_string());
    assert_eq!(code.as_deref(), Some("55P03"), "lock_not_available: {err}");
    sqlx::raw_sql("ROLLBACK").execute(&mut other).await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM agentd_jobs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n, 0);
}

#[tokio::test]
async fn a_session_idle_in_a_transaction_is_ended_by_the_server() {
    let db = TestDb::new().await;
    let pool = agentd::db::pool_for_config(&db.url, &config(0, 300), false)
        .await
        .unwrap();
    let mut tx = pool.begin().await.unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    // The transaction now waits (as on a slow model); the server ends the session.
    wait_until(30, "the idle-in-transaction session is gone", || async {
        let alive: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)")
                .bind(pid)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        !alive
    })
    .await;
    assert!(
        sqlx::query("SELECT 1").execute(&mut *tx).await.is_err(),
        "the transaction's connection was closed by the server"
    );
}

#[tokio::test]
async fn a_worker_that_cannot_fit_the_pool_refuses_to_start() {
    let db = TestDb::new().await;
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_agentd"))
        .args(["worker"])
        .env("DATABASE_URL", &db.url)
        .env("AGENTD_HTTP__ADDR", "")
        .env("AGENTD_DATABASE__MAX_CONNECTIONS", "12")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("database.max_connections (12) cannot fit this worker")
            && err.contains("= 28")
            && err.contains("auto_create 8"),
        "{err}"
    );
    // The arithmetic, and the built-in configuration fits.
    let kinds = vec![("a".to_string(), 3), ("b".to_string(), 1)];
    assert_eq!(agentd::db::worker_connections(&kinds).0, 3 + 1 + 4 + 2);
    assert!(agentd::db::check_worker_fits(10, &kinds).is_ok());
    assert!(agentd::db::check_worker_fits(9, &kinds).is_err());
    let app = common::app(
        &db,
        std::sync::Arc::new(agentd::clock::SystemClock) as agentd::clock::SharedClock,
    );
    let (w, stop) = common::start_worker(&app, "auto_create", None).await;
    stop.cancel();
    w.join().await;
}

#[tokio::test]
async fn an_unflushed_transaction_skips_the_wal_wait_for_itself_only() {
    let db = TestDb::new().await;
    let pool = agentd::db::pool_for_config(&db.url, &config(1500, 90_000), false)
        .await
        .unwrap();
    sqlx::query("CREATE TABLE t (v int)")
        .execute(&pool)
        .await
        .unwrap();
    let mut tx = agentd::store::agent_loop::begin_unflushed(&pool)
        .await
        .unwrap();
    let inside: String = sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    sqlx::query("INSERT INTO t VALUES (1)")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // The same connection (the pool holds one idle) is back to durable commits.
    let after: String = sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(&pool)
        .await
        .unwrap();
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM t")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!((inside.as_str(), after.as_str(), rows), ("off", "on", 1));
}

/// A checkout is not pinged when its connection was just used (one round trip less on every
/// statement of a hot path), but one idle for `PING_WHEN_IDLE_FOR` is: a connection the server
/// dropped meanwhile is replaced before anyone sees it.
#[tokio::test]
async fn a_connection_dropped_while_idle_is_replaced_before_use() {
    let db = TestDb::new().await;
    let pool = agentd::db::pool_for_config(&db.url, &config(5000, 60_000), false)
        .await
        .unwrap();
    let first: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&pool)
        .await
        .unwrap();
    tokio::time::sleep(agentd::db::PING_WHEN_IDLE_FOR + std::time::Duration::from_millis(300))
        .await;
    let mut admin = PgConnection::connect(&common::server_url()).await.unwrap();
    let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(first)
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert!(killed);
    wait_until(5, "the backend is gone", || async {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = $1")
            .bind(first)
            .fetch_one(&mut PgConnection::connect(&common::server_url()).await.unwrap())
            .await
            .unwrap();
        n == 0
    })
    .await;
    // The idle connection is pinged, found dead and replaced: the statement succeeds.
    let now: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&pool)
        .await
        .expect("a dead idle connection is replaced, not handed out");
    assert_ne!(now, first);
}
