//! Working through a pooler in transaction mode (PgBouncer `pool_mode = transaction`,
//! `database.transaction_pooling = true`).
//!
//! Such a pooler hands each *transaction* a server connection and takes it back at the next
//! idle ReadyForQuery. Three things agentd does on a direct connection break there, so in this
//! mode the pool works differently:
//!
//! - **Session state.** Startup `options` (how `lock_timeout` and
//!   `idle_in_transaction_session_timeout` reach a direct session) are refused by PgBouncer, and
//!   a session `SET` would land on some server connection and stay there for other clients.
//!   Here every checkout of a pooled connection *is* a transaction, opened by
//!   `BEGIN; SET LOCAL …` (one round trip): the settings hold for everything the checkout runs
//!   and vanish with it.
//! - **Prepared statements.** sqlx parses a statement (Parse, Describe, Sync) and executes it
//!   (Bind, Execute, Sync) in two round trips; between them the pooler may hand the server to
//!   another client — with statements named or unnamed — unless a transaction pins it. The
//!   checkout transaction pins it. sqlx's statement cache is off (a cached name would point at
//!   another server next time), and the statements a checkout prepared are deallocated before
//!   it commits, so no name is left on a server for the next client. PgBouncer 1.18 (Debian 12)
//!   has no `max_prepared_statements` (≥ 1.21); this works with either.
//! - **LISTEN and migrations** need a session: they use a direct connection,
//!   `database.listen_url` (falling back to `database.url`).
//!
//! The checkout transaction is opened *behind sqlx's back* (a plain `BEGIN` sent as a simple
//! query; sqlx's transaction depth stays 0), so `pool.begin()` on a checkout is an ordinary,
//! outermost sqlx transaction: its `BEGIN` is a no-op on the open checkout transaction (the
//! "already in progress" warning is silenced by `client_min_messages`), and its `commit()` sends
//! a real `COMMIT` that makes the work durable and visible **before `commit()` returns** — the
//! read-your-writes a direct connection gives. (An earlier version let sqlx count the checkout
//! as the outer transaction, so a committed `pool.begin()` was only a released savepoint and the
//! real commit waited for the connection's return to the pool, after the caller had moved on: a
//! worker's next step could read the checkpoint before its last step had committed, and write
//! the same step twice.) A dropped transaction rolls the checkout back; nested transactions are
//! savepoints, as on a direct connection.
//!
//! A statement run on the pool outside any transaction commits when its connection returns to
//! the pool: before that connection serves anyone else, but a moment after the call returned.
//! Where a later read depends on such a write, both belong in one `pool.begin()` transaction
//! (the code does this). After a connection's transaction commits, nothing more may run on that
//! checkout unpinned: agentd never runs statements on a connection after committing on it
//! (`pool.begin()` hands the connection back on commit).
//!
//! At release, `DEALLOCATE ALL; SET LOCAL client_min_messages = error; COMMIT` (one simple query)
//! ends the checkout whichever state it is in — still open (commits it), or already committed
//! by the caller (the three statements then form their own implicit transaction, without a
//! warning). A checkout whose transaction failed is closed instead of reused (the pooler then
//! drops its server connection, and with it anything it prepared).
//!
//! The price is two extra round trips per checkout and a Parse per statement: measured by the
//! PgBouncer test, not on the direct path, which is unchanged.

use super::{DbError, connect_options, redact, session_options};
use crate::config::DatabaseConfig;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgTransactionManager};
use sqlx::{AssertSqlSafe, PgConnection, PgPool};
use sqlx_core::transaction::TransactionManager;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Direct pools (LISTEN, migrations) of the pooled pools this process opened.
static DIRECT: Mutex<Vec<(Arc<PgConnectOptions>, PgPool)>> = Mutex::new(Vec::new());

/// The direct pool registered for `pool` (transaction pooling), if any.
pub fn direct_for(pool: &PgPool) -> Option<PgPool> {
    let key = pool.connect_options();
    DIRECT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(k, _)| Arc::ptr_eq(k, &key))
        .map(|(_, p)| p.clone())
}

/// Whether `pool` works through a pooler in transaction mode (opened by [`open`]).
pub fn is_pooled(pool: &PgPool) -> bool {
    direct_for(pool).is_some()
}

/// Closes `pool` after the checkouts being returned have ended. `PgPool::close` closes a
/// connection that comes back after it was called without `after_release`, which here would
/// roll back the checkout transaction — and with it a statement that ran outside a
/// transaction just before the process exits. Waits at most `wait` for them.
pub async fn close(pool: &PgPool, wait: Duration) {
    if is_pooled(pool) {
        let until = tokio::time::Instant::now() + wait;
        while pool.num_idle() < pool.size() as usize && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    pool.close().await;
}

/// The pool LISTEN should use: the direct one behind a pooler, else `pool` itself.
pub fn listen_pool(pool: &PgPool) -> PgPool {
    direct_for(pool).unwrap_or_else(|| pool.clone())
}

/// The statement that opens every checkout: the session settings, local to the transaction.
pub fn begin_sql(cfg: &DatabaseConfig) -> String {
    // `client_min_messages`: the caller's own `BEGIN` on this open transaction is expected.
    let mut sql = String::from("BEGIN; SET LOCAL client_min_messages = error");
    for (name, value) in session_options(cfg) {
        // Values are integers with a unit, formatted by us: nothing to quote.
        sql.push_str(&format!("; SET LOCAL {name} = '{value}'"));
    }
    sql
}

/// Opens a pool on `url` (a pooler in transaction mode) with the checkout transaction above,
/// and a lazy direct pool (`cfg.listen_url`, else `url`) for LISTEN and migrations.
pub async fn open(url: &str, cfg: &DatabaseConfig) -> Result<PgPool, DbError> {
    // No startup `options` and no `extra_float_digits`: PgBouncer refuses startup parameters
    // it does not know unless `ignore_startup_parameters` lists them.
    let opts = connect_options(url)?
        .statement_cache_capacity(0)
        .extra_float_digits(None::<i8>);
    let begin: Arc<str> = begin_sql(cfg).into();
    let b1 = begin.clone();
    let b2 = begin;
    let pool = PgPoolOptions::new()
        .max_connections(cfg.max_connections)
        .acquire_timeout(Duration::from_secs(10))
        // The checkout's BEGIN tests the connection; a ping first would be one more round trip.
        .test_before_acquire(false)
        .after_connect(move |c, _| {
            let b = b1.clone();
            Box::pin(async move { open_checkout(c, &b).await })
        })
        .before_acquire(move |c, _| {
            let b = b2.clone();
            Box::pin(async move { open_checkout(c, &b).await.map(|_| true) })
        })
        .after_release(|c, _| Box::pin(close_checkout(c)))
        .connect_with(opts)
        .await
        .map_err(|e| DbError::Connect {
            url: redact(url),
            cause: e,
        })?;
    let direct_url = if cfg.listen_url.is_empty() {
        url
    } else {
        &cfg.listen_url
    };
    let direct = PgPoolOptions::new()
        .max_connections(4)
        .min_connections(0)
        .acquire_timeout(Duration::from_secs(10))
        .connect_lazy_with(connect_options(direct_url)?.options(session_options(cfg)));
    DIRECT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((pool.connect_options(), direct));
    Ok(pool)
}

async fn open_checkout(c: &mut PgConnection, begin: &str) -> sqlx::Result<()> {
    sqlx::raw_sql(AssertSqlSafe(begin.to_string()))
        .execute(c)
        .await
        .map(|_| ())
}

/// Ends a checkout: deallocates what it prepared and commits (the checkout transaction, or an
/// implicit one when the caller already committed); a checkout whose transaction failed is
/// closed rather than reused.
async fn close_checkout(c: &mut PgConnection) -> sqlx::Result<bool> {
    // A dropped sqlx transaction has already lowered the depth (its ROLLBACK is queued and runs
    // before CLOSE_SQL). Depth left here means a caller's transaction nobody ended: close the
    // connection rather than let CLOSE_SQL's COMMIT make its work durable.
    if PgTransactionManager::get_transaction_depth(c) > 0 {
        return Ok(false);
    }
    Ok(sqlx::raw_sql(CLOSE_SQL).execute(&mut *c).await.is_ok())
}

/// Ends a checkout in either state (see the module's notes).
const CLOSE_SQL: &str = "DEALLOCATE ALL; SET LOCAL client_min_messages = error; COMMIT";
