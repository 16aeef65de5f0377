//! Finding the database: `database.url`, else `DATABASE_URL`, else the local default
//! (`postgres://localhost:5432/agentd`, created if missing); if nothing answers there, a private
//! PostgreSQL cluster started from the machine's binaries under agentd's own data directory,
//! stopped again on exit.

use crate::config::DatabaseConfig;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, PgPool};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;
use std::time::Duration;
use tracing::info;

pub mod pooling;

/// Why no database could be used.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("invalid database URL {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("cannot connect to {url}: {cause}")]
    Connect { url: String, cause: sqlx::Error },
    #[error("{0}")]
    Private(String),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("database error: {0}")]
    Sql(#[from] sqlx::Error),
}

/// A connected database, and the private cluster behind it if agentd started one.
pub struct Database {
    pub pool: PgPool,
    /// The URL in use, without password.
    pub display_url: String,
    /// Stops the private cluster on drop, if this process started it.
    pub private: Option<PrivateCluster>,
}

/// The migrations in `migrations/`, embedded.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// Applies pending migrations (safe with many processes: sqlx takes an advisory lock). The
/// migrating session waits for locks as long as it takes (`lock_timeout = 0`): another process
/// may hold the migration lock while it migrates.
///
/// When every migration is applied already, nothing runs: the application role (which may
/// not create or alter anything, see docs/operations.md) can start without the owner.
pub async fn migrate(pool: &PgPool) -> Result<(), DbError> {
    // Behind a pooler in transaction mode, on the direct connection (the lock and the
    // `SET lock_timeout` are session state).
    let direct = pooling::direct_for(pool);
    let pool = direct.as_ref().unwrap_or(pool);
    if migrations_current(pool).await.unwrap_or(false) {
        return Ok(());
    }
    let mut conn = pool.acquire().await?;
    // A migration may rewrite a large table: no statement timeout either.
    sqlx::raw_sql("SET lock_timeout = 0; SET statement_timeout = 0")
        .execute(&mut *conn)
        .await?;
    let result = MIGRATOR.run(&mut *conn).await;
    sqlx::raw_sql("RESET lock_timeout; RESET statement_timeout")
        .execute(&mut *conn)
        .await?;
    result?;
    Ok(())
}

/// True if every embedded migration is applied.
pub async fn migrations_current(pool: &PgPool) -> sqlx::Result<bool> {
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
        .fetch_one(pool)
        .await?;
    Ok(applied as usize >= MIGRATOR.iter().count())
}

/// Connects following the embedded-defaults rules above.
pub async fn connect(cfg: &DatabaseConfig) -> Result<Database, DbError> {
    let explicit = if !cfg.url.is_empty() {
        Some(cfg.url.clone())
    } else {
        std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty())
    };
    if let Some(url) = explicit {
        let pool = pool_waiting(&url, cfg).await?;
        return Ok(Database {
            pool,
            display_url: redact(&url),
            private: None,
        });
    }
    if !answers(&cfg.local_url).await {
        info!(url = %cfg.local_url, "no PostgreSQL answers at the local default; starting a private cluster");
        let cluster = PrivateCluster::start(cfg)?;
        let url = cluster.url();
        let pool = pool_for_config(&url, cfg, true).await?;
        eprintln!(
            "agentd: no PostgreSQL at {}; using a private PostgreSQL cluster in {} (port {})",
            redact(&cfg.local_url),
            cluster.dir.display(),
            cluster.port
        );
        return Ok(Database {
            pool,
            display_url: url,
            private: Some(cluster),
        });
    }
    let pool = pool_waiting(&cfg.local_url, cfg).await?;
    Ok(Database {
        pool,
        display_url: redact(&cfg.local_url),
        private: None,
    })
}

/// [`pool_for_config`], retried with backoff (0.2 s doubling to 5 s) while the server does not
/// answer yet — nothing listens, it is starting up or shutting down, the connection broke — for
/// at most `cfg.connect_wait_secs`, with a warning per try. Any other error (a bad password, a
/// missing role) is returned at once: waiting would not change it.
pub async fn pool_waiting(url: &str, cfg: &DatabaseConfig) -> Result<PgPool, DbError> {
    let deadline = std::time::Instant::now() + Duration::from_secs(cfg.connect_wait_secs);
    let mut delay = Duration::from_millis(200);
    let mut tries = 1u32;
    loop {
        match pool_for_config(url, cfg, true).await {
            Err(DbError::Connect { url: shown, cause })
                if is_connection_error(&cause) && std::time::Instant::now() < deadline =>
            {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                tracing::warn!(
                    url = %shown,
                    error = %cause,
                    tries,
                    retry_in_ms = delay.min(left).as_millis() as u64,
                    "the database does not answer yet; waiting for it (database.connect_wait_secs)"
                );
                tokio::time::sleep(delay.min(left)).await;
                delay = (delay * 2).min(Duration::from_secs(5));
                tries += 1;
            }
            other => return other,
        }
    }
}

/// True unless connecting to the server of `url` fails at the network level (nothing listens).
/// Any answer from a server — even "database does not exist" or an auth error — counts.
async fn answers(url: &str) -> bool {
    let Ok(opts) = PgConnectOptions::from_str(url) else {
        return true;
    };
    match tokio::time::timeout(Duration::from_secs(5), opts.connect()).await {
        Ok(Ok(c)) => {
            let _ = sqlx::Connection::close(c).await;
            true
        }
        Ok(Err(e)) => !is_unreachable(&e),
        Err(_) => false,
    }
}

fn is_unreachable(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Io(_)) || e.to_string().contains("Connection refused")
}

/// True for an error that says the connection, not the statement, failed: the socket broke
/// (`Io`, a cut protocol stream), the pool found no connection in time, or the server ended the
/// session (SQLSTATE class 08 "connection exception", 57P01–57P03: terminated by an administrator,
/// crash or shutdown, not accepting connections yet). Worth retrying the same statement on a new
/// connection; every other error is the statement's own.
pub fn is_connection_error(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(d) => d
            .code()
            .is_some_and(|c| c.starts_with("08") || matches!(&*c, "57P01" | "57P02" | "57P03")),
        _ => false,
    }
}

/// Connect options for `url` with agentd's defaults: no TLS over loopback unless the URL asks
/// for it, and the OS user when the URL names none (like psql).
pub fn connect_options(url: &str) -> Result<PgConnectOptions, DbError> {
    let mut opts = PgConnectOptions::from_str(url).map_err(|e| DbError::BadUrl {
        url: redact(url),
        reason: e.to_string(),
    })?;
    // Over loopback TLS protects nothing and costs a lot: sqlx's default (`prefer`) wraps every
    // statement in TLS records and a 50 KB batch insert stalled ~40 ms on Nagle/delayed-ACK
    // (`agentd bench enqueue`: 18k → 89k jobs/s). An explicit `sslmode` in the URL still wins.
    let loopback = matches!(opts.get_host(), "localhost" | "127.0.0.1" | "::1")
        || opts.get_host().starts_with('/');
    if loopback && !url.contains("sslmode=") {
        opts = opts.ssl_mode(sqlx::postgres::PgSslMode::Disable);
    }
    if !url.contains('@') && std::env::var_os("PGUSER").is_none() {
        // No user in the URL: connect as the OS user, like psql does.
        if let Ok(Some(u)) = nix::unistd::User::from_uid(nix::unistd::geteuid()) {
            opts = opts.username(&u.name);
        }
    }
    Ok(opts)
}

/// Opens a pool on `url`; when `create` is set and the database does not exist, creates it.
pub async fn pool_for(url: &str, max: u32, create: bool) -> Result<PgPool, DbError> {
    open_pool(connect_options(url)?, url, max, create).await
}

/// [`pool_for`] with the configured ceiling and session settings (`lock_timeout`,
/// `idle_in_transaction_session_timeout`, `statement_timeout`), sent as startup options: no extra round trip, and
/// every connection the pool ever opens has them.
pub async fn pool_for_config(
    url: &str,
    cfg: &DatabaseConfig,
    create: bool,
) -> Result<PgPool, DbError> {
    if cfg.transaction_pooling {
        return pooling::open(url, cfg).await;
    }
    let opts = connect_options(url)?.options(session_options(cfg));
    open_pool(opts, url, cfg.max_connections, create).await
}

/// The session settings of agentd's connections, as `(name, value)`.
pub fn session_options(cfg: &DatabaseConfig) -> [(&'static str, String); 3] {
    [
        ("lock_timeout", format!("{}ms", cfg.lock_timeout_ms)),
        (
            "idle_in_transaction_session_timeout",
            format!("{}ms", cfg.idle_in_transaction_timeout_ms),
        ),
        (
            "statement_timeout",
            format!("{}ms", cfg.statement_timeout_ms),
        ),
    ]
}

/// A pooled connection idle at least this long is pinged before it is handed out.
pub const PING_WHEN_IDLE_FOR: Duration = Duration::from_secs(1);

async fn open_pool(
    opts: PgConnectOptions,
    url: &str,
    max: u32,
    create: bool,
) -> Result<PgPool, DbError> {
    let build = |o: PgConnectOptions| {
        PgPoolOptions::new()
            .max_connections(max)
            .acquire_timeout(Duration::from_secs(10))
            // sqlx pings every checkout by default: one round trip more on every statement a
            // hot path runs (an agent step checks out twice). A connection returned moments ago
            // is as alive as one just pinged; only one idle for a while (a server restart, a
            // dropped network path) is tested, and a dead one is replaced as before.
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for >= PING_WHEN_IDLE_FOR {
                        sqlx::Connection::ping(conn).await?;
                    }
                    Ok(true)
                })
            })
            .connect_with(o)
    };
    match build(opts.clone()).await {
        Ok(p) => Ok(p),
        Err(sqlx::Error::Database(db)) if create && db.code().as_deref() == Some("3D000") => {
            let name = opts.get_database().unwrap_or("agentd").to_string();
            let mut admin = opts
                .clone()
                .database("postgres")
                .connect()
                .await
                .map_err(|e| DbError::Connect {
                    url: redact(url),
                    cause: e,
                })?;
            let sql = format!("CREATE DATABASE \"{}\"", name.replace('"', "\"\""));
            // The name is quoted above (double quotes doubled), so it cannot break out of the identifier.
            if let Err(e) = sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&mut admin)
                .await
            {
                // Another process may have created it meanwhile (42P04: duplicate_database).
                let dup =
                    matches!(&e, sqlx::Error::Database(d) if d.code().as_deref() == Some("42P04"));
                if !dup {
                    return Err(DbError::Sql(e));
                }
            }
            info!(database = %name, "created database");
            build(opts).await.map_err(|e| DbError::Connect {
                url: redact(url),
                cause: e,
            })
        }
        Err(e) => Err(DbError::Connect {
            url: redact(url),
            cause: e,
        }),
    }
}

pub use crate::config::redact;

/// A PostgreSQL cluster owned by agentd.
pub struct PrivateCluster {
    pub dir: PathBuf,
    pub port: u16,
    bin: PathBuf,
    /// Only the process that started the server stops it.
    started_here: bool,
}

impl PrivateCluster {
    /// Initialises (first time) and starts the cluster.
    pub fn start(cfg: &DatabaseConfig) -> Result<Self, DbError> {
        let bin = find_pg_bin().ok_or_else(|| {
            DbError::Private(
                "no PostgreSQL answers at the local default and no PostgreSQL binaries (initdb, pg_ctl) were found in PATH or /usr/lib/postgresql/*/bin. \
                 Install them (Debian/Ubuntu: `apt install postgresql`; macOS: `brew install postgresql`) or set DATABASE_URL."
                    .into(),
            )
        })?;
        let dir = if cfg.private_dir.is_empty() {
            data_home().join("agentd").join("postgres")
        } else {
            PathBuf::from(&cfg.private_dir)
        };
        let mut c = Self {
            dir,
            port: cfg.private_port,
            bin,
            started_here: false,
        };
        c.init()?;
        if !c.running() {
            c.start_server()?;
            c.started_here = true;
        }
        Ok(c)
    }

    fn start_server(&self) -> Result<(), DbError> {
        self.run_tool(
            "pg_ctl",
            &[
                "-D",
                &self.dir.display().to_string(),
                "-w",
                "-t",
                "60",
                "-l",
                &self.dir.join("server.log").display().to_string(),
                "-o",
                &format!(
                    "-p {} -k {} -c listen_addresses=127.0.0.1",
                    self.port,
                    self.dir.display()
                ),
                "start",
            ],
        )
    }

    /// Stops the server and starts it again. `immediate`: without a checkpoint, as a crash of
    /// the server would (recovery replays the WAL at start); else a fast shutdown. The chaos
    /// suite (`agentd bench chaos`) restarts its own cluster this way.
    pub fn restart(&self, immediate: bool) -> Result<(), DbError> {
        let mode = if immediate { "immediate" } else { "fast" };
        self.run_tool(
            "pg_ctl",
            &[
                "-D",
                &self.dir.display().to_string(),
                "-m",
                mode,
                "-w",
                "stop",
            ],
        )?;
        self.start_server()
    }

    /// The URL of the agentd database in this cluster.
    pub fn url(&self) -> String {
        format!("postgres://agentd@127.0.0.1:{}/agentd", self.port)
    }

    fn init(&self) -> Result<(), DbError> {
        if self.dir.join("PG_VERSION").exists() {
            return Ok(());
        }
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| DbError::Private(format!("cannot create {}: {e}", self.dir.display())))?;
        if is_root() {
            // initdb refuses to run as root; the cluster belongs to the postgres user.
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres", &self.dir.display().to_string()])
                .status();
            if !matches!(status, Ok(s) if s.success()) {
                return Err(DbError::Private(format!(
                    "running as root: cannot hand {} to the `postgres` user (initdb refuses root); run agentd as a normal user or set DATABASE_URL",
                    self.dir.display()
                )));
            }
        }
        self.run_tool(
            "initdb",
            &[
                "-D",
                &self.dir.display().to_string(),
                "-U",
                "agentd",
                "--auth=trust",
                "-E",
                "UTF8",
            ],
        )
    }

    fn running(&self) -> bool {
        self.tool("pg_ctl")
            .args(["-D", &self.dir.display().to_string(), "status"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    }

    fn tool(&self, name: &str) -> Command {
        let path = self.bin.join(name);
        if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    fn run_tool(&self, name: &str, args: &[&str]) -> Result<(), DbError> {
        let out = self
            .tool(name)
            .args(args)
            .output()
            .map_err(|e| DbError::Private(format!("cannot run {name}: {e}")))?;
        if !out.status.success() {
            return Err(DbError::Private(format!(
                "{name} failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            )));
        }
        Ok(())
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        if self.started_here {
            let _ = self
                .tool("pg_ctl")
                .args([
                    "-D",
                    &self.dir.display().to_string(),
                    "-m",
                    "fast",
                    "-w",
                    "stop",
                ])
                .output();
        }
    }
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn data_home() -> PathBuf {
    std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from(".agentd"))
}

/// The directory holding `initdb` and `pg_ctl`: PATH first, then the newest
/// `/usr/lib/postgresql/<version>/bin`.
pub fn find_pg_bin() -> Option<PathBuf> {
    if let Some(paths) = std::env::var_os("PATH") {
        for p in std::env::split_paths(&paths) {
            if p.join("initdb").is_file() && p.join("pg_ctl").is_file() {
                return Some(p);
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, b)| b)
}

/// Connections a worker needs: every handler slot (the job files' `queue.concurrency`, or the
/// `--concurrency` override) plus, per kind, its LISTEN connection and one for claims,
/// heartbeats and acks, plus one for maintenance (rescuer, reconciler, retention, cron) and one
/// for `/readyz`.
pub fn worker_connections(concurrency: &[(String, usize)]) -> (u64, String) {
    let slots: u64 = concurrency.iter().map(|(_, c)| *c as u64).sum();
    let need = slots + 2 * concurrency.len() as u64 + 2;
    let parts: Vec<String> = concurrency
        .iter()
        .map(|(k, c)| format!("{k} {c}"))
        .collect();
    let how = format!(
        "{} (queue.concurrency) + {} (LISTEN and bookkeeping, 2 per kind) + 2 (maintenance, /readyz) = {need}",
        parts.join(" + "),
        2 * concurrency.len()
    );
    (need, how)
}

/// Refuses a worker whose concurrency cannot fit `database.max_connections`: handlers would
/// wait for connections while heartbeats starve and leases expire.
pub fn check_worker_fits(
    max_connections: u32,
    concurrency: &[(String, usize)],
) -> Result<(), crate::config::Invalid> {
    let (need, how) = worker_connections(concurrency);
    if need > u64::from(max_connections) {
        return Err(crate::config::Invalid::new(
            "database.max_connections",
            format!(
                "database.max_connections ({max_connections}) cannot fit this worker: it needs {how}; raise database.max_connections to at least {need} or lower queue.concurrency in the job files (or --concurrency)"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod redact_tests {
    #[test]
    fn passwords_are_hidden_in_userinfo_and_query() {
        assert_eq!(
            super::redact("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(
            super::redact("postgres://h/db?user=u&password=secret&sslmode=require"),
            "postgres://h/db?user=u&password=***&sslmode=require"
        );
        assert_eq!(super::redact("postgres://h/db"), "postgres://h/db");
    }
}
