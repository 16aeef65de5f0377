//! `agentd bench held-xact` (issue 47, item 4): a transaction held open for many minutes while
//! the queue runs at a steady rate. A session elsewhere on the server (a report, a forgotten
//! `BEGIN` in psql, a logical replication slot's snapshot) that keeps a snapshot pins the
//! xmin horizon: no vacuum can remove the row versions claims and acks leave behind, and SKIP
//! LOCKED claims walk past them (the anchors' users see a third of the throughput go).
//!
//! No-op jobs are enqueued at `--rate` jobs/s and drained by agentd's worker as configured
//! (c = `--concurrency`) on a private cluster with PostgreSQL's default settings (or
//! `--server-url`); autovacuum as configured there, no VACUUM by the bench. Three
//! phases: `--before-minutes` without a held transaction, `--hold-minutes` with a REPEATABLE
//! READ transaction that took its snapshot at the start, and `--after-minutes` once it commits.
//! Every `--sample-secs`: the jobs table's and its indexes' sizes, live and dead rows,
//! autovacuums so far, the jobs done, and the claim latency of the jobs started in the window
//! (p50/p95 of `started_at - run_at`: how long a due job waited to be claimed). Figures, not a
//! test.

use super::Server;
use super::drain::{KIND, Noop, enqueue_noops};
use super::runtime::spawn_worker;
use agentd::app::App;
use agentd::queue::backoff::Backoff;
use agentd::queue::worker::KindRuntime;
use clap::Args;
use sqlx::Connection;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const DB: &str = "agentd_bench_held";

/// Options of `agentd bench held-xact`.
#[derive(Args, Debug, Clone)]
pub struct HeldCmd {
    /// Minutes the transaction is held open.
    #[arg(long, default_value_t = 10)]
    pub hold_minutes: u64,
    /// Minutes before it opens (the baseline).
    #[arg(long, default_value_t = 2)]
    pub before_minutes: u64,
    /// Minutes after it commits.
    #[arg(long, default_value_t = 3)]
    pub after_minutes: u64,
    /// Jobs enqueued per second.
    #[arg(long, default_value_t = 500)]
    pub rate: u64,
    /// The worker's concurrency.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Seconds between two samples.
    #[arg(long, default_value_t = 30)]
    pub sample_secs: u64,
    /// A PostgreSQL server to run on (the bench creates and drops its own database there).
    /// Default: a private cluster of the bench's own with PostgreSQL's default settings
    /// (autovacuum on), removed at the end: a shared server's settings (autovacuum off on a CI
    /// machine) would say nothing about the defaults.
    #[arg(long)]
    pub server_url: Option<String>,
}

/// One sample.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    at_secs: f64,
    phase: &'static str,
    table: i64,
    indexes: i64,
    live: i64,
    dead: i64,
    autovacuums: i64,
    done_per_sec: f64,
    p50_ms: f64,
    p95_ms: f64,
}

fn mib(b: i64) -> f64 {
    b as f64 / 1024.0 / 1024.0
}

/// A sample at the end of the window that began at `from` (`prev` jobs done then).
async fn take(
    pool: &sqlx::PgPool,
    done: u64,
    t0: Instant,
    (from, prev): (chrono::DateTime<chrono::Utc>, u64),
    phase: &'static str,
) -> anyhow::Result<(Sample, chrono::DateTime<chrono::Utc>)> {
    let now = chrono::Utc::now();
    // The statistics collector flushes every 500 ms.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (table, indexes, live, dead, autovacuums): (i64, i64, i64, i64, i64) = sqlx::query_as(
        "SELECT pg_table_size('agentd_jobs'), pg_indexes_size('agentd_jobs'),
                n_live_tup, n_dead_tup, autovacuum_count
           FROM pg_stat_user_tables WHERE relname = 'agentd_jobs'",
    )
    .fetch_one(pool)
    .await?;
    let (p50, p95): (Option<f64>, Option<f64>) = sqlx::query_as(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY w),
                percentile_cont(0.95) WITHIN GROUP (ORDER BY w)
           FROM (SELECT extract(epoch FROM started_at - run_at)::float8 * 1000 AS w
                   FROM agentd_jobs WHERE started_at >= $1 AND started_at < $2) s",
    )
    .bind(from)
    .bind(now)
    .fetch_one(pool)
    .await?;
    let secs = (now - from).num_milliseconds().max(1) as f64 / 1000.0;
    Ok((
        Sample {
            at_secs: t0.elapsed().as_secs_f64(),
            phase,
            table,
            indexes,
            live,
            dead,
            autovacuums,
            done_per_sec: done.saturating_sub(prev) as f64 / secs,
            p50_ms: p50.unwrap_or(f64::NAN),
            p95_ms: p95.unwrap_or(f64::NAN),
        },
        now,
    ))
}

/// Runs the three phases and prints a row per sample and the summary.
pub async fn run(app: &App, c: HeldCmd) -> anyhow::Result<()> {
    if !(1..=100_000).contains(&c.rate) {
        return Err(crate::cli::bad("--rate must be between 1 and 100,000"));
    }
    if !(1..=1024).contains(&c.concurrency) {
        return Err(crate::cli::bad("--concurrency must be between 1 and 1,024"));
    }
    if c.hold_minutes == 0 || c.hold_minutes > 24 * 60 || c.before_minutes > 24 * 60 {
        return Err(crate::cli::bad(
            "--hold-minutes must be 1–1440 and --before-minutes at most 1440",
        ));
    }
    if !(1..=3600).contains(&c.sample_secs) {
        return Err(crate::cli::bad("--sample-secs must be between 1 and 3,600"));
    }
    // A private cluster with the defaults unless a server is named; kept until the end.
    let (private, url) = match &c.server_url {
        Some(u) => (None, u.clone()),
        None => {
            let root = std::env::temp_dir().join(format!("agentd-held-{}", std::process::id()));
            let mut cfg = agentd::config::Config::defaults().database;
            cfg.private_dir = root.join("pg").display().to_string();
            cfg.private_port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            let cluster = tokio::task::spawn_blocking(move || {
                agentd::db::PrivateCluster::start(&cfg).map(|c| (c, root))
            })
            .await??;
            let url = format!("postgres://agentd@127.0.0.1:{}/postgres", cluster.0.port);
            (Some(cluster), url)
        }
    };
    let server = Server::connect(&url).await?;
    let settings: String = sqlx::query_scalar(
        "SELECT string_agg(name || ' ' || setting, ', ' ORDER BY name) FROM pg_settings
          WHERE name IN ('autovacuum', 'autovacuum_naptime', 'autovacuum_vacuum_scale_factor',
                         'autovacuum_vacuum_threshold', 'server_version')",
    )
    .fetch_one(server.admin())
    .await?;
    let pool = server.agentd_db(DB, 4).await?;
    let worker_pool = server.pool(DB, app.config.database.max_connections).await?;
    let app = super::bench_app(app, worker_pool.clone());
    let kind = KindRuntime {
        kind: KIND.into(),
        handler: Arc::new(Noop),
        concurrency: c.concurrency,
        timeout: Duration::from_secs(60),
        backoff: Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(60),
        },
        delete_on_success: false,
        max_running_per_org: None,
        newcomer_slots: 0,
    };
    let (stats, stop_worker, worker) = spawn_worker(worker_pool.clone(), &app, kind, |_| {});

    // The producer: a tenth of the rate every 100 ms.
    let stop = CancellationToken::new();
    let producer = {
        let (pool, stop, per_tick) = (pool.clone(), stop.clone(), (c.rate / 10).max(1));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            while !stop.is_cancelled() {
                tick.tick().await;
                if let Err(e) = enqueue_noops(&pool, per_tick).await {
                    eprintln!("bench held-xact: enqueue failed: {e:#}");
                }
            }
        })
    };

    let t0 = Instant::now();
    let started_at = chrono::Utc::now();
    let mut samples: Vec<Sample> = Vec::new();
    let mut last_done = 0u64;
    let mut window_start = chrono::Utc::now();
    println!(
        "held-xact: {} jobs/s at c={}, {} min before, {} min held, {} min after; {} ({settings})",
        c.rate,
        c.concurrency,
        c.before_minutes,
        c.hold_minutes,
        c.after_minutes,
        if private.is_some() {
            "a private cluster"
        } else {
            "the server named"
        }
    );
    println!(
        "{:>7} {:<8} {:>9} {:>9} {:>10} {:>10} {:>5} {:>9} {:>9} {:>9}",
        "t (s)",
        "phase",
        "table MiB",
        "index MiB",
        "live",
        "dead",
        "avac",
        "done/s",
        "claim p50",
        "p95 ms"
    );
    let print = |s: &Sample| {
        println!(
            "{:>7.0} {:<8} {:>9.1} {:>9.1} {:>10} {:>10} {:>5} {:>9.0} {:>9.1} {:>9.1}",
            s.at_secs,
            s.phase,
            mib(s.table),
            mib(s.indexes),
            s.live,
            s.dead,
            s.autovacuums,
            s.done_per_sec,
            s.p50_ms,
            s.p95_ms
        )
    };
    let mut held: Option<sqlx::PgConnection> = None;
    for (phase, minutes) in [
        ("before", c.before_minutes),
        ("held", c.hold_minutes),
        ("after", c.after_minutes),
    ] {
        match phase {
            "held" => {
                let mut conn =
                    sqlx::PgConnection::connect_with(&server.opts.clone().database(DB)).await?;
                sqlx::raw_sql(
                    "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM agentd_jobs;",
                )
                .execute(&mut conn)
                .await?;
                held = Some(conn);
            }
            "after" => {
                if let Some(mut conn) = held.take() {
                    sqlx::raw_sql("COMMIT").execute(&mut conn).await?;
                    conn.close().await?;
                }
            }
            _ => {}
        }
        let end = Instant::now() + Duration::from_secs(minutes * 60);
        while Instant::now() < end {
            tokio::time::sleep(
                Duration::from_secs(c.sample_secs)
                    .min(end.saturating_duration_since(Instant::now())),
            )
            .await;
            let done = stats.succeeded.load(Ordering::Relaxed);
            let (s, at) = take(&pool, done, t0, (window_start, last_done), phase).await?;
            last_done = done;
            window_start = at;
            print(&s);
            samples.push(s);
        }
    }
    stop.cancel();
    let _ = producer.await;
    stop_worker.cancel();
    let _ = worker.await;
    let last_of = |phase: &str| samples.iter().rev().find(|s| s.phase == phase).copied();
    let worst_p95 = |phase: &str| {
        samples
            .iter()
            .filter(|s| s.phase == phase && s.p95_ms.is_finite())
            .map(|s| s.p95_ms)
            .fold(f64::NAN, f64::max)
    };
    println!("held-xact summary (since {started_at}):");
    for phase in ["before", "held", "after"] {
        if let Some(s) = last_of(phase) {
            println!(
                "  end of {phase:<6}: table {:.1} MiB + indexes {:.1} MiB, {} live / {} dead rows, {:.0} jobs/s, claim p95 {:.1} ms (worst sample {:.1} ms)",
                mib(s.table),
                mib(s.indexes),
                s.live,
                s.dead,
                s.done_per_sec,
                s.p95_ms,
                worst_p95(phase)
            );
        }
    }
    pool.close().await;
    worker_pool.close().await;
    drop(server);
    if let Some((cluster, root)) = private {
        drop(cluster);
        let _ = std::fs::remove_dir_all(root);
    }
    Ok(())
}
