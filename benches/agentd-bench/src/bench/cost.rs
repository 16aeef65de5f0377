//! What one drained job costs: commits, WAL, row versions, index entries read, and the CPU of
//! agentd (this process) and of the PostgreSQL backends serving the bench database.
//!
//! Commits, row and index counters are per database (`pg_stat_database`, `pg_stat_user_tables`,
//! `pg_stat_user_indexes` of the drained table), read after the drain's pool is closed so every
//! backend has flushed its statistics. WAL (`pg_stat_wal`) is cluster-wide: other sessions on the
//! same server add to it. PostgreSQL CPU is `utime + stime` from `/proc/<pid>/stat` of the
//! backends connected to the bench database (the server must run on this machine; otherwise it
//! reads as not measured), sampled before the stop so their connections are still open.

use super::Server;
use sqlx::PgPool;
use std::collections::HashMap;

/// Cumulative counters at one instant.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    commits: i64,
    wal_bytes: f64,
    wal_records: i64,
    inserted: i64,
    updated: i64,
    hot_updated: i64,
    deleted: i64,
    index_read: i64,
}

/// Per-job costs of one drain (each figure divided by the jobs drained).
#[derive(Debug, Clone, Copy, Default)]
pub struct Cost {
    pub commits: f64,
    pub wal_bytes: f64,
    pub wal_records: f64,
    /// Row versions written: inserted + updated + deleted.
    pub rows: f64,
    /// Of the updates, those that were not HOT (each adds an entry to every matching index).
    pub non_hot: f64,
    pub deleted: f64,
    /// Index entries read (`idx_tup_read`, all indexes of the table).
    pub index_read: f64,
    /// Microseconds of CPU in this process (worker + bench driver).
    pub agentd_cpu_us: f64,
    /// Microseconds of CPU in the database backends of the bench database (NaN: not measured).
    pub pg_cpu_us: f64,
}

impl Cost {
    /// One line for the report's notes.
    pub fn line(&self) -> String {
        format!(
            "{:.3} commits, {:.0} B WAL ({:.2} records), {:.2} row versions ({:.2} non-HOT updates, {:.2} deletes), {:.2} index entries read, CPU agentd {:.1} µs + PostgreSQL {:.1} µs",
            self.commits,
            self.wal_bytes,
            self.wal_records,
            self.rows,
            self.non_hot,
            self.deleted,
            self.index_read,
            self.agentd_cpu_us,
            self.pg_cpu_us
        )
    }

    /// The median of each figure over repetitions.
    pub fn median(costs: &[Cost]) -> Cost {
        let m = |f: fn(&Cost) -> f64| super::median(&costs.iter().map(f).collect::<Vec<_>>());
        Cost {
            commits: m(|c| c.commits),
            wal_bytes: m(|c| c.wal_bytes),
            wal_records: m(|c| c.wal_records),
            rows: m(|c| c.rows),
            non_hot: m(|c| c.non_hot),
            deleted: m(|c| c.deleted),
            index_read: m(|c| c.index_read),
            agentd_cpu_us: m(|c| c.agentd_cpu_us),
            pg_cpu_us: m(|c| c.pg_cpu_us),
        }
    }
}

/// A measurement in progress: counters and CPU at the start.
pub struct Probe {
    db: String,
    table: String,
    start: Counters,
    self_ticks: u64,
    self_ticks_end: Option<u64>,
    pg_ticks: HashMap<i32, u64>,
    pg_delta: Option<u64>,
}

impl Probe {
    /// Reads the counters of `table` in database `db` before a drain.
    pub async fn start(server: &Server, db: &str, table: &str) -> anyhow::Result<Self> {
        let start = counters(server, db, table).await?;
        Ok(Self {
            db: db.into(),
            table: table.into(),
            start,
            self_ticks: self_ticks(),
            self_ticks_end: None,
            pg_ticks: backend_ticks(server, db).await,
            pg_delta: None,
        })
    }

    /// Samples CPU at the end of the drain (call before the worker's connections close).
    pub async fn cpu_end(&mut self, server: &Server) {
        self.self_ticks_end = Some(self_ticks());
        let now = backend_ticks(server, &self.db).await;
        if now.is_empty() && self.pg_ticks.is_empty() {
            return;
        }
        let delta = now
            .iter()
            .map(|(pid, t)| t.saturating_sub(self.pg_ticks.get(pid).copied().unwrap_or(0)))
            .sum();
        self.pg_delta = Some(delta);
    }

    /// The per-job costs of `jobs` drained jobs (call after the drain's pool is closed).
    pub async fn finish(self, server: &Server, jobs: u64) -> anyhow::Result<Cost> {
        // Backends flush their statistics when they exit; give them a moment.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let end = counters(server, &self.db, &self.table).await?;
        let n = jobs.max(1) as f64;
        let tick_us = 1_000_000.0 / clock_ticks_per_sec();
        let d = |a: i64, b: i64| (b - a) as f64 / n;
        let self_end = self.self_ticks_end.unwrap_or_else(self_ticks);
        Ok(Cost {
            commits: d(self.start.commits, end.commits),
            wal_bytes: (end.wal_bytes - self.start.wal_bytes) / n,
            wal_records: d(self.start.wal_records, end.wal_records),
            rows: d(
                self.start.inserted + self.start.updated + self.start.deleted,
                end.inserted + end.updated + end.deleted,
            ),
            non_hot: d(
                self.start.updated - self.start.hot_updated,
                end.updated - end.hot_updated,
            ),
            deleted: d(self.start.deleted, end.deleted),
            index_read: d(self.start.index_read, end.index_read),
            agentd_cpu_us: self_end.saturating_sub(self.self_ticks) as f64 * tick_us / n,
            pg_cpu_us: self
                .pg_delta
                .map(|t| t as f64 * tick_us / n)
                .unwrap_or(f64::NAN),
        })
    }
}

async fn counters(server: &Server, db: &str, table: &str) -> anyhow::Result<Counters> {
    let commits = server.xact_commit(db).await?;
    let pool: PgPool = server.pool(db, 1).await?;
    let (wal_bytes, wal_records): (f64, i64) =
        sqlx::query_as("SELECT wal_bytes::float8, wal_records FROM pg_stat_wal")
            .fetch_one(&pool)
            .await?;
    let (schema, name) = table.split_once('.').unwrap_or(("public", table));
    let row: Option<(i64, i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT t.n_tup_ins, t.n_tup_upd, t.n_tup_hot_upd, t.n_tup_del,
                COALESCE((SELECT sum(i.idx_tup_read) FROM pg_stat_user_indexes i
                           WHERE i.relid = t.relid), 0)::int8
           FROM pg_stat_user_tables t WHERE t.schemaname = $1 AND t.relname = $2",
    )
    .bind(schema)
    .bind(name)
    .fetch_optional(&pool)
    .await?;
    pool.close().await;
    let (inserted, updated, hot_updated, deleted, index_read) = row.unwrap_or_default();
    Ok(Counters {
        commits,
        wal_bytes,
        wal_records,
        inserted,
        updated,
        hot_updated,
        deleted,
        index_read,
    })
}

/// utime + stime of a process, in clock ticks.
fn proc_ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

fn self_ticks() -> u64 {
    proc_ticks("self").unwrap_or(0)
}

fn clock_ticks_per_sec() -> f64 {
    // USER_HZ is 100 on every Linux this runs on (sysconf is not reachable without unsafe).
    100.0
}

/// CPU ticks of every backend connected to `db` (empty when they are not on this machine).
async fn backend_ticks(server: &Server, db: &str) -> HashMap<i32, u64> {
    let pids: Vec<i32> = sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
    )
    .bind(db)
    .fetch_all(server.admin())
    .await
    .unwrap_or_default();
    pids.into_iter()
        .filter_map(|p| Some((p, proc_ticks(&p.to_string())?)))
        .collect()
}
