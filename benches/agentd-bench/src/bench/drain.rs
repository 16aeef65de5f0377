//! Queue drain: a backlog of no-op jobs, drained by agentd's worker (as configured, and with a
//! prefetch buffer) and, against the same server in the same run, by graphile-worker (a Node
//! child process, when Node ≥ 22 and the harness under `benches/peers` are installed) and by
//! apalis-postgres 1.0 storage with apalis's worker (its default config and a tuned one).
//! Optionally a plain `FOR UPDATE SKIP LOCKED` + DELETE loop. agentd's rows carry the per-job
//! cost breakdown (`cost.rs`).
//!
//! Each repetition starts from a vacuumed, analysed table holding exactly the backlog. Small
//! backlogs are re-inserted every repetition; large ones (> 100,000) are inserted once and topped
//! up, so the finished rows of earlier repetitions stay in the table as they would in service.
//! A repetition stops when the backlog is drained or after the per-repetition cap; the rate is
//! what it did over the time it took. Commits per job come from `pg_stat_database.xact_commit`
//! of the bench database before and after (the pool is closed first so backends flush stats).

use super::baseline::{self, DB_APALIS, DB_PLAIN};
use super::cost::{Cost, Probe};
use super::runtime::{LABEL, spawn_worker};
use super::{Opts, Report, Row, Server, Target, median};
use agentd::app::App;
use agentd::queue::backoff::Backoff;
use agentd::queue::worker::{JobContext, JobHandler, KindRuntime};
use agentd::queue::{JobError, NewJob, enqueue_many};
use apalis_core::backend::TaskSink;
use apalis_postgres::PostgresStorage;
use serde_json::json;
use sqlx::PgPool;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The no-op job kind.
pub const KIND: &str = "bench_noop";
const DB: &str = "agentd_bench";
/// The table that keeps its finished rows (`with_history`).
const DB_HISTORY: &str = "agentd_bench_kept";

/// What later parts reuse from the drain.
#[derive(Debug, Default)]
pub struct Context {
    /// agentd commits per job, by concurrency (first backlog).
    pub commits_per_job: Vec<(usize, f64)>,
    /// Peak RSS (MiB) right after agentd's drain at concurrency 32, current RSS, backlog.
    pub memory: Option<(f64, f64, u64)>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum System {
    /// agentd with the service's worker config, `prefetch` overridden when `Some`; succeeded
    /// jobs deleted (`delete_on_success`) when `true`.
    Agentd(Option<u32>, bool),
    Graphile,
    ApalisDefault,
    ApalisTuned,
    Plain,
}

impl System {
    fn label(self) -> &'static str {
        match self {
            System::Agentd(None, false) => "agentd",
            System::Agentd(None, true) => "agentd+delete",
            System::Agentd(Some(0), false) => "agentd-prefetch-0",
            System::Agentd(Some(_), false) => "agentd+prefetch",
            System::Agentd(Some(_), true) => "agentd+prefetch+delete",
            System::Graphile => "graphile-worker",
            System::ApalisDefault => "apalis",
            System::ApalisTuned => "apalis-tuned",
            System::Plain => "plain-skip-locked",
        }
    }
    fn db(self) -> &'static str {
        match self {
            System::Agentd(..) => DB,
            System::Graphile => "agentd_bench_graphile",
            System::ApalisDefault | System::ApalisTuned => DB_APALIS,
            System::Plain => DB_PLAIN,
        }
    }
}

pub(super) use super::baseline::wait_for;

/// One repetition.
pub(super) struct Rep {
    pub processed: u64,
    pub secs: f64,
    pub commits_per_job: f64,
    /// agentd only: mean jobs per claim statement and per ack statement.
    pub batches: Option<(f64, f64)>,
    /// agentd only: what one job cost.
    pub cost: Option<Cost>,
}

/// Median rate and commits per job of one configuration.
#[derive(Debug, Clone, Copy)]
struct Figure {
    rate: f64,
    commits: f64,
    drained_all: bool,
    batches: Option<(f64, f64)>,
    cost: Option<Cost>,
}

pub(super) fn human(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

/// The drain part.
pub async fn run(
    server: &Server,
    app: &App,
    opts: &Opts,
    report: &mut Report,
    ctx: &mut Context,
) -> anyhow::Result<()> {
    for (bi, &backlog) in opts.backlogs.iter().enumerate() {
        let cap = opts
            .max_secs
            .unwrap_or(if backlog > 100_000 { 10.0 } else { 20.0 });
        // As configured (`prefetch = "auto"`), then the same with prefetch 0 (the default
        // before: claims bounded by free slots) for the before/after of the per-job cost, then
        // with delete on success; `--prefetch N` adds a fixed buffer.
        let mut systems = vec![
            System::Agentd(None, false),
            System::Agentd(Some(0), false),
            System::Agentd(None, true),
        ];
        if opts.prefetch > 0 {
            systems.push(System::Agentd(Some(opts.prefetch), false));
        }
        // graphile-worker runs one repetition after each of agentd's as configured (below), so
        // whatever drifts during the run (checkpoints, the WAL, the page cache) weighs on both.
        let mut peer = false;
        if !opts.no_peers {
            match super::peer::locate() {
                Ok(_) => peer = true,
                Err(e) => {
                    eprintln!("bench: graphile-worker skipped: {e}");
                    report.push(Row::text(
                        "drain",
                        "graphile-worker",
                        format!("skipped: {e}"),
                    ));
                }
            }
        }
        if !opts.no_apalis {
            systems.extend([System::ApalisDefault, System::ApalisTuned]);
        }
        if opts.plain {
            systems.push(System::Plain);
        }
        let mut figures: Vec<(System, Vec<Option<Figure>>)> = Vec::new();
        let mut apalis_error = None;
        for sys in systems {
            let with_peer = peer && sys == System::Agentd(None, false);
            let res = drain_system(
                server,
                app,
                opts,
                sys,
                backlog,
                cap,
                ctx,
                bi == 0,
                with_peer,
            )
            .await;
            match res {
                Ok((f, peer_figures)) => {
                    figures.push((sys, f));
                    match peer_figures {
                        Some(Ok(g)) => figures.push((System::Graphile, g)),
                        Some(Err(msg)) => {
                            eprintln!("bench: {msg}");
                            report.push(Row::text("drain", "graphile-worker baseline", msg));
                        }
                        None => {}
                    }
                }
                Err(e) if !matches!(sys, System::Agentd(..)) => {
                    let msg = format!("{} failed: {e:#}", sys.label());
                    eprintln!("bench: {msg}");
                    report.push(Row::text(
                        "drain",
                        format!("{} baseline", sys.label()),
                        msg.clone(),
                    ));
                    // graphile-worker is a peer, not the apalis baseline: no fallback for it.
                    if sys != System::Graphile {
                        apalis_error.get_or_insert(msg);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        // apalis could not be measured: fall back to the plain loop, labelled as such.
        if apalis_error.is_some() && !opts.plain {
            let (f, _) = drain_system(
                server,
                app,
                opts,
                System::Plain,
                backlog,
                cap,
                ctx,
                false,
                false,
            )
            .await?;
            figures.push((System::Plain, f));
        }
        let baselines: Vec<_> = figures
            .iter()
            .filter(|(s, _)| !matches!(s, System::Agentd(..)))
            .collect();
        for (sys, agentd) in figures
            .iter()
            .filter(|(s, _)| matches!(s, System::Agentd(..)))
        {
            let System::Agentd(prefetch, delete) = *sys else {
                continue;
            };
            for (ci, &c) in opts.concurrency.iter().enumerate() {
                let Some(a) = agentd[ci] else { continue };
                let mut tuning = match prefetch {
                    Some(0) => ", prefetch 0 (the default before)".to_string(),
                    Some(p) => format!(", prefetch {p}, claim_batch {}", p.max(64)),
                    None => format!(
                        ", prefetch {:?} as configured",
                        app.config.worker.prefetch()
                    ),
                };
                if delete {
                    tuning.push_str(", delete on success");
                }
                let metric = format!("{} backlog, c={c}, {LABEL}{tuning}", human(backlog));
                let mut row = Row::new("drain", metric, a.rate, "jobs/s");
                for (sys, fs) in &baselines {
                    if let Some(f) = fs[ci] {
                        row = row.baseline(sys.label(), f.rate);
                    }
                }
                // Issue 18: as configured, ahead of graphile-worker in the same run at c=32
                // (without it in this run, the earlier fixed targets).
                if c >= 32 && prefetch.is_none() {
                    let peer = baselines
                        .iter()
                        .find(|(s, _)| *s == System::Graphile)
                        .and_then(|(_, fs)| fs[ci]);
                    let t = match peer {
                        Some(g) => g.rate,
                        None if backlog <= 20_000 => 15_000.0,
                        None => 10_000.0,
                    };
                    row = row.target(Target::AtLeast(t));
                }
                let mut note = format!("median of {}; {:.2} commits/job", opts.reps, a.commits);
                if let Some((claim, ack)) = a.batches {
                    note.push_str(&format!(" (claims of {claim:.1} jobs, acks of {ack:.1})"));
                }
                if !a.drained_all {
                    note.push_str(&format!("; cap {cap:.0}s/rep"));
                }
                if let Some(apalis) = figures.iter().find(|(s, _)| *s == System::ApalisDefault)
                    && let Some(f) = apalis.1[ci]
                {
                    note.push_str(&format!("; apalis {:.2} commits/job", f.commits));
                }
                report.push(row.note(note));
                if let Some(cost) = a.cost {
                    report.push(Row::text(
                        "drain",
                        format!("  per job: {} backlog, c={c}{tuning}", human(backlog)),
                        cost.line(),
                    ));
                }
            }
        }
        if bi + 1 == opts.backlogs.len() {
            with_history(server, app, opts, backlog, cap, report).await?;
        }
    }
    Ok(())
}

/// What keeping finished rows costs: agentd as configured at the last concurrency, its
/// repetitions on one table that keeps every finished job, so the k-th drains its backlog beside
/// (k-1) × backlog finished rows. Each is paired with a repetition on a fresh table run just
/// before it (the machine drifts; a ratio of neighbours is what history costs). The figures above
/// start every repetition on a table holding just the backlog, as graphile-worker's do (it
/// deletes finished jobs, and its harness recreates its database).
async fn with_history(
    server: &Server,
    app: &App,
    opts: &Opts,
    backlog: u64,
    cap: f64,
    report: &mut Report,
) -> anyhow::Result<()> {
    let Some(&c) = opts.concurrency.last() else {
        return Ok(());
    };
    let fresh_pool = server.agentd_db(DB, 4).await?;
    let pool = server.agentd_db(DB_HISTORY, 4).await?;
    let mut pairs = Vec::new();
    for k in 0..opts.reps {
        prepare(&fresh_pool, System::Agentd(None, false), backlog, true).await?;
        let rep = agentd_rep(server, app, DB, None, false, c, backlog, cap).await?;
        let fresh = rep.processed as f64 / rep.secs;
        prepare(&pool, System::Agentd(None, false), backlog, k == 0).await?;
        let rep = agentd_rep(server, app, DB_HISTORY, None, false, c, backlog, cap).await?;
        let rate = rep.processed as f64 / rep.secs;
        eprintln!(
            "bench:   agentd {} c={c} beside {} finished rows: {rate:.0} jobs/s (fresh table just before: {fresh:.0})",
            human(backlog),
            human(k as u64 * backlog)
        );
        pairs.push((fresh, rate));
    }
    fresh_pool.close().await;
    pool.close().await;
    server.drop_db(DB_HISTORY).await?;
    let kept = (opts.reps as u64 - 1) * backlog;
    let each: Vec<String> = pairs
        .iter()
        .enumerate()
        .map(|(k, (f, h))| {
            format!(
                "{}: {h:.0} vs {f:.0} (×{:.2})",
                human(k as u64 * backlog),
                h / f
            )
        })
        .collect();
    let (fresh, last) = pairs.last().copied().unwrap_or((f64::NAN, f64::NAN));
    report.push(
        Row::new(
            "drain",
            format!(
                "{} backlog, c={c}, as configured, beside {} finished rows kept",
                human(backlog),
                human(kept)
            ),
            last,
            "jobs/s",
        )
        .baseline("fresh table, the repetition before", fresh)
        .note(format!(
            "one table for {} repetitions, finished rows kept; beside k finished rows vs a fresh table just before: {}",
            opts.reps,
            each.join(", ")
        )),
    );
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn drain_system(
    server: &Server,
    app: &App,
    opts: &Opts,
    sys: System,
    backlog: u64,
    cap: f64,
    ctx: &mut Context,
    first_backlog: bool,
    with_peer: bool,
) -> anyhow::Result<(Vec<Option<Figure>>, Option<PeerFigures>)> {
    let db = sys.db();
    let pool = match sys {
        System::Agentd(..) => server.agentd_db(db, 4).await?,
        System::Graphile => unreachable!("graphile-worker runs beside agentd's repetitions"),
        System::ApalisDefault | System::ApalisTuned => {
            server.recreate(db).await?;
            let pool = server.pool(db, 4).await?;
            PostgresStorage::<()>::setup(&pool).await?;
            pool
        }
        System::Plain => {
            server.recreate(db).await?;
            let pool = server.pool(db, 4).await?;
            sqlx::raw_sql(
                "CREATE TABLE bench_plain (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    payload jsonb NOT NULL, run_at timestamptz NOT NULL DEFAULT now())",
            )
            .execute(&pool)
            .await?;
            pool
        }
    };
    let mut out = Vec::new();
    let mut peer_out = Vec::new();
    let mut peer_error = None;
    for &c in &opts.concurrency {
        let mut reps = Vec::new();
        let mut peer_reps = Vec::new();
        for _ in 0..opts.reps {
            // Every repetition starts on a table holding just the backlog (see `with_history`).
            prepare(&pool, sys, backlog, true).await?;
            let rep = match sys {
                System::Agentd(p, d) => agentd_rep(server, app, DB, p, d, c, backlog, cap).await?,
                System::Graphile => unreachable!("graphile-worker runs in its own harness"),
                System::ApalisDefault | System::ApalisTuned => {
                    baseline::apalis_rep(server, sys == System::ApalisTuned, c, backlog, cap)
                        .await?
                }
                System::Plain => baseline::plain_rep(server, c, backlog, cap).await?,
            };
            eprintln!(
                "bench:   {} {} c={c}: {} jobs in {:.2}s = {:.0} jobs/s, {:.2} commits/job, batches {:?}",
                sys.label(),
                human(backlog),
                rep.processed,
                rep.secs,
                rep.processed as f64 / rep.secs,
                rep.commits_per_job,
                rep.batches
            );
            reps.push(rep);
            if with_peer && peer_error.is_none() {
                match super::peer::graphile(&super::peer::server_of(opts), backlog, c, 1, cap).await
                {
                    Ok((rate, secs)) => {
                        eprintln!(
                            "bench:   graphile-worker {} c={c}: {rate:.0} jobs/s ({secs:.2}s)",
                            human(backlog)
                        );
                        peer_reps.push((rate, secs));
                    }
                    Err(e) => peer_error = Some(format!("graphile-worker failed: {e:#}")),
                }
            }
        }
        let rates: Vec<f64> = reps.iter().map(|r| r.processed as f64 / r.secs).collect();
        let commits: Vec<f64> = reps.iter().map(|r| r.commits_per_job).collect();
        let f = Figure {
            rate: median(&rates),
            commits: median(&commits),
            drained_all: reps.iter().all(|r| r.processed >= backlog),
            batches: reps.iter().filter_map(|r| r.batches).next_back(),
            cost: {
                let costs: Vec<Cost> = reps.iter().filter_map(|r| r.cost).collect();
                (!costs.is_empty()).then(|| Cost::median(&costs))
            },
        };
        if sys == System::Agentd(None, false) && first_backlog {
            ctx.commits_per_job.push((c, f.commits));
            if c == 32 {
                let (peak, now) = super::memory_mib();
                ctx.memory = Some((peak, now, backlog));
            }
        }
        out.push(Some(f));
        peer_out.push((!peer_reps.is_empty()).then(|| peer_figure(&peer_reps, backlog)));
    }
    pool.close().await;
    let peer = with_peer.then_some(match peer_error {
        Some(msg) => Err(msg),
        None => Ok(peer_out),
    });
    Ok((out, peer))
}

/// graphile-worker's figures per concurrency, or why it could not run.
type PeerFigures = Result<Vec<Option<Figure>>, String>;

/// The median of graphile-worker's repetitions (jobs/s, seconds).
fn peer_figure(reps: &[(f64, f64)], backlog: u64) -> Figure {
    let rates: Vec<f64> = reps.iter().map(|r| r.0).collect();
    Figure {
        rate: median(&rates),
        commits: f64::NAN,
        drained_all: reps
            .iter()
            .all(|(rate, secs)| rate * secs + 0.5 >= backlog as f64),
        batches: None,
        cost: None,
    }
}

/// Leaves exactly `backlog` ready jobs (re-inserted when `fresh`, else topped up), vacuumed.
async fn prepare(pool: &PgPool, sys: System, backlog: u64, fresh: bool) -> anyhow::Result<()> {
    let (table, ready) = match sys {
        System::Agentd(..) => ("agentd_jobs", "state = 'available'"),
        System::Graphile => unreachable!("graphile-worker prepares its own database"),
        System::ApalisDefault | System::ApalisTuned => ("apalis.jobs", "status = 'Pending'"),
        System::Plain => ("bench_plain", "true"),
    };
    if fresh {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("TRUNCATE {table}")))
            .execute(pool)
            .await?;
    }
    let have: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM {table} WHERE {ready}"
    )))
    .fetch_one(pool)
    .await?;
    let missing = backlog.saturating_sub(have as u64);
    let t0 = Instant::now();
    fill(pool, sys, missing).await?;
    if missing > 100_000 {
        eprintln!(
            "bench:   inserted {missing} {} jobs in {:.1}s",
            sys.label(),
            t0.elapsed().as_secs_f64()
        );
    }
    // Then a CHECKPOINT (as graphile-worker's harness does): the dirty pages of the fill and of
    // the repetition before are written before the clock starts, not during the drain.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("VACUUM ANALYZE {table}")))
        .execute(pool)
        .await?;
    sqlx::raw_sql("CHECKPOINT").execute(pool).await?;
    if matches!(sys, System::ApalisDefault | System::ApalisTuned) {
        // apalis stores run_at in whole seconds and fetches `run_at < now()`.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    Ok(())
}

/// Inserts `n` no-op jobs through each system's own batched enqueue, 5,000 per statement.
async fn fill(pool: &PgPool, sys: System, n: u64) -> anyhow::Result<()> {
    let mut left = n;
    let mut apalis = PostgresStorage::<u64>::new(pool);
    while left > 0 {
        let k = left.min(5_000);
        match sys {
            System::Graphile => unreachable!("graphile-worker fills its own database"),
            System::Agentd(..) => {
                let jobs: Vec<NewJob> = (0..k)
                    .map(|i| NewJob::new(KIND, json!({ "n": i })))
                    .collect();
                enqueue_many(pool, &jobs).await?;
            }
            System::ApalisDefault | System::ApalisTuned => {
                apalis
                    .push_bulk((0..k).collect())
                    .await
                    .map_err(|e| anyhow::anyhow!("apalis push_bulk: {e}"))?;
            }
            System::Plain => {
                sqlx::query("INSERT INTO bench_plain (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, $1) g")
                    .bind(k as i64)
                    .execute(pool)
                    .await?;
            }
        }
        left -= k;
    }
    Ok(())
}

/// Enqueues `n` no-op jobs through `enqueue_many`, 5,000 per statement.
pub(super) async fn enqueue_noops(pool: &PgPool, n: u64) -> anyhow::Result<()> {
    fill(pool, System::Agentd(None, false), n).await
}

pub(super) struct Noop;

#[async_trait::async_trait]
impl JobHandler for Noop {
    async fn handle(&self, _job: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// agentd's worker over `DB` at concurrency `c`, with the service's worker config (`prefetch`
/// overriding its prefetch, with claims of at least that many jobs; `delete`: succeeded jobs
/// are deleted).
#[allow(clippy::too_many_arguments)]
async fn agentd_rep(
    server: &Server,
    app: &App,
    db: &str,
    prefetch: Option<u32>,
    delete: bool,
    c: usize,
    target: u64,
    cap: f64,
) -> anyhow::Result<Rep> {
    let pool = server.pool(db, app.config.database.max_connections).await?;
    let mut probe = Probe::start(server, db, "agentd_jobs").await?;
    let kind = KindRuntime {
        kind: KIND.into(),
        handler: Arc::new(Noop),
        concurrency: c,
        timeout: Duration::from_secs(60),
        backoff: Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(60),
        },
        delete_on_success: delete,
        max_running_per_org: None,
        newcomer_slots: 0,
    };
    let started = chrono::Utc::now();
    let (stats, stop, handle) = spawn_worker(pool.clone(), app, kind, |o| {
        if let Some(p) = prefetch {
            o.prefetch = agentd::queue::worker::Prefetch::Fixed(p);
            o.claim_batch = o.claim_batch.max(p);
        }
    });
    let (processed, secs) = wait_for(|| stats.succeeded.load(Ordering::Relaxed), target, cap).await;
    probe.cpu_end(server).await;
    stop.cancel();
    let _ = handle.await;
    let total = stats.succeeded.load(Ordering::Relaxed);
    pool.close().await;
    let cost = probe.finish(server, total).await?;
    // Every row of one claim shares its started_at, every row of one ack its finished_at.
    // (Deleted rows leave nothing to count.)
    let pool = server.pool(db, 1).await?;
    let (jobs, claims, acks): (i64, i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT started_at), count(DISTINCT finished_at)
           FROM agentd_jobs WHERE state = 'succeeded' AND started_at >= $1",
    )
    .bind(started)
    .fetch_one(&pool)
    .await?;
    pool.close().await;
    let per = |n: i64| jobs as f64 / n.max(1) as f64;
    Ok(Rep {
        processed,
        secs,
        commits_per_job: cost.commits,
        batches: (!delete).then(|| (per(claims), per(acks))),
        cost: Some(cost),
    })
}

/// One agentd drain of a fresh `backlog` at concurrency `c`: (jobs, seconds, commits per job).
pub async fn agentd_once(
    server: &Server,
    app: &App,
    c: usize,
    backlog: u64,
    cap: f64,
) -> anyhow::Result<(u64, f64, f64)> {
    let pool = server.agentd_db(DB, 4).await?;
    prepare(&pool, System::Agentd(None, false), backlog, true).await?;
    pool.close().await;
    let rep = agentd_rep(server, app, DB, None, false, c, backlog, cap).await?;
    Ok((rep.processed, rep.secs, rep.commits_per_job))
}
