//! A compressed week (issue 30 item 5): 7 "days" of `--day-jobs` no-op jobs each (1,000,000;
//! 100,000 with `--quick`), enqueued through `enqueue_many` and drained by agentd's worker as
//! configured at c=32, while the service's own retention (`queue::maintenance::Retention`,
//! `retention.batch` and `retention.vacuum_dead_rows` as configured, a pass a second) deletes
//! finished jobs older than a day and vacuums the table when its dead rows pass the threshold
//! (`queue::vacuum`; `vacuum_dead_rows = 0` in a `--config` file leaves it to autovacuum). No
//! VACUUM by the bench itself.
//!
//! Time is a manual clock shared by the worker (it writes `finished_at`) and the retention: a
//! day is 10 slices of a tenth of its jobs, the clock moving 2.4 hours per slice, so retention
//! works through the day as it would in service. After each day: the table's and its indexes'
//! sizes, live and dead rows, vacuums (the unit's) and autovacuums so far, and the day's drain
//! rate. The target:
//! from day 3 on, sizes within 10 % of day 2's.

use super::drain::{KIND, Noop, enqueue_noops};
use super::runtime::spawn_worker_on;
use super::{Opts, Report, Row, Server, Target, num};
use agentd::app::App;
use agentd::clock::{ManualClock, SharedClock};
use agentd::queue::backoff::Backoff;
use agentd::queue::maintenance::Retention;
use agentd::queue::vacuum::JobsVacuum;
use agentd::queue::worker::KindRuntime;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const DB: &str = "agentd_bench_history";
const DAYS: u32 = 7;
const SLICES: u32 = 10;

/// One day's end.
#[derive(Debug, Clone, Copy)]
struct Day {
    table: i64,
    indexes: i64,
    rows: i64,
    dead: i64,
    vacuums: i64,
    autovacuums: i64,
    rate: f64,
}

async fn sample(pool: &sqlx::PgPool) -> anyhow::Result<(i64, i64, i64, i64, i64, i64)> {
    // The statistics collector flushes every 500 ms.
    tokio::time::sleep(Duration::from_millis(600)).await;
    Ok(sqlx::query_as(
        "SELECT pg_table_size('agentd_jobs'), pg_indexes_size('agentd_jobs'),
                (SELECT count(*) FROM agentd_jobs),
                n_dead_tup, vacuum_count, autovacuum_count
           FROM pg_stat_user_tables WHERE relname = 'agentd_jobs'",
    )
    .fetch_one(pool)
    .await?)
}

fn mib(b: i64) -> String {
    format!("{:.1} MiB", b as f64 / 1024.0 / 1024.0)
}

/// The history part.
pub async fn run(
    server: &Server,
    app: &App,
    opts: &Opts,
    report: &mut Report,
) -> anyhow::Result<()> {
    let day_jobs = opts.day_jobs.unwrap_or(opts.size(1_000_000, 100_000));
    let c = opts.concurrency.last().copied().unwrap_or(32);
    let pool = server.agentd_db(DB, 4).await?;
    let worker_pool = server.pool(DB, app.config.database.max_connections).await?;
    // Ahead of the database's clock, so the jobs just enqueued (`run_at` = now()) are due.
    let start = chrono::Utc::now() + chrono::Duration::hours(1);
    let clock = ManualClock::new(start);
    let shared: SharedClock = clock.clone();
    let stop = CancellationToken::new();
    let retention = Retention {
        pool: server.pool(DB, 2).await?,
        clock: shared.clone(),
        keep: chrono::Duration::hours(24),
        batch: app.config.retention.batch,
        interval: Duration::from_secs(1),
        vacuum: JobsVacuum::new(app.config.retention.vacuum_dead_rows),
    };
    let retention = tokio::spawn(retention.run(stop.clone()));
    let kind = KindRuntime {
        kind: KIND.into(),
        handler: Arc::new(Noop),
        concurrency: c,
        timeout: Duration::from_secs(60),
        backoff: Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(60),
        },
        delete_on_success: false,
        max_running_per_org: None,
        newcomer_slots: 0,
    };
    let (stats, worker_stop, worker) =
        spawn_worker_on(worker_pool.clone(), app, kind, shared, |_| {});
    let per_slice = day_jobs / u64::from(SLICES);
    let mut done = 0u64;
    let mut days: Vec<Day> = Vec::new();
    for day in 0..DAYS {
        let mut drain_secs = 0.0;
        for slice in 0..SLICES {
            let minutes = i64::from(day * 24 * 60 + slice * 144);
            clock.set(start + chrono::Duration::minutes(minutes));
            enqueue_noops(&pool, per_slice).await?;
            done += per_slice;
            let t0 = Instant::now();
            while stats.succeeded.load(Ordering::Relaxed) < done {
                if t0.elapsed() > Duration::from_secs(600) {
                    anyhow::bail!(
                        "history: day {} slice {slice} did not drain in 600 s",
                        day + 1
                    );
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            drain_secs += t0.elapsed().as_secs_f64();
        }
        let (table, indexes, rows, dead, vacuums, autovacuums) = sample(&pool).await?;
        let d = Day {
            table,
            indexes,
            rows,
            dead,
            vacuums,
            autovacuums,
            rate: (per_slice * u64::from(SLICES)) as f64 / drain_secs,
        };
        eprintln!(
            "bench:   day {}: table {}, indexes {}, {} rows, {} dead, {} vacuums, {} autovacuums, drained at {:.0} jobs/s",
            day + 1,
            mib(d.table),
            mib(d.indexes),
            d.rows,
            d.dead,
            d.vacuums,
            d.autovacuums,
            d.rate
        );
        days.push(d);
    }
    worker_stop.cancel();
    let _ = worker.await;
    stop.cancel();
    let _ = retention.await;
    worker_pool.close().await;
    pool.close().await;

    let label = format!(
        "{} jobs/day at c={c}, finished jobs kept 24 h, vacuum_dead_rows {}",
        super::drain::human(day_jobs),
        app.config.retention.vacuum_dead_rows
    );
    for (i, d) in days.iter().enumerate() {
        report.push(
            Row::new(
                "history",
                format!("day {}: table + indexes", i + 1),
                (d.table + d.indexes) as f64 / 1024.0 / 1024.0,
                "MiB",
            )
            .note(format!(
                "table {}, indexes {}; {} rows ({} dead), {} vacuums and {} autovacuums so far; drained at {} jobs/s",
                mib(d.table),
                mib(d.indexes),
                d.rows,
                d.dead,
                d.vacuums,
                d.autovacuums,
                num(d.rate)
            )),
        );
    }
    if let Some(base) = days.get(1) {
        let later = days.get(2..).unwrap_or_default();
        let spread = |f: fn(&Day) -> i64| {
            later
                .iter()
                .map(|d| (f(d) as f64 / f(base).max(1) as f64 - 1.0).abs() * 100.0)
                .fold(0.0, f64::max)
        };
        for (what, f) in [
            ("table", (|d: &Day| d.table) as fn(&Day) -> i64),
            ("indexes", |d: &Day| d.indexes),
        ] {
            report.push(
                Row::new(
                    "history",
                    format!("{what} size, days 3–{DAYS} vs day 2, largest change"),
                    spread(f),
                    "%",
                )
                .target(Target::AtMost(10.0))
                .note(label.clone()),
            );
        }
    }
    if let (Some(first), Some(last)) = (days.first(), days.last()) {
        report.push(
            Row::new(
                "history",
                format!("drain on day {DAYS}, beside a day of finished jobs"),
                last.rate,
                "jobs/s",
            )
            .baseline("day 1 (no history)", first.rate)
            .note(label),
        );
    }
    Ok(())
}
