//! `agentd bench fairness` (issue 30, item 3): one noisy org enqueues 90 % of `--jobs`
//! auto_create jobs at once (offline provider); while its backlog drains, nine quiet orgs
//! enqueue the rest as a trickle (each one job every `--interval-ms`). Printed: each quiet
//! org's pickup (enqueue → claim) p50/p95 beside the same trickle with no noisy org (measured
//! first, same process, same server), and the noisy org's throughput.
//!
//! `--max-secs` bounds each phase — the quiet orgs alone, the noisy org's enqueue, its drain
//! beside the quiet trickle, each webhooks half — so a run always ends and prints what it
//! measured: how many jobs each side enqueued and how many of the noisy org's ran.
//!
//! Then the webhooks half: the nine quiet orgs each subscribe a receiver that answers at once
//! and write one event per `--interval-ms`; beside them one org whose receiver accepts the
//! connection and never answers (black-holed) writes as many events at once. Printed: the quiet
//! orgs' delivery time (the delivery job's creation → delivered) p50/p95 beside the same
//! trickle alone.

use super::{Server, bench_app};
use agentd::app::{App, WorkerArgs};
use agentd::queue::{NewJob, enqueue};
use agentd::store::{auto_create, documents, orgs};
use clap::Args;
use serde::Serialize;
use serde_json::json;
use sqlx::PgPool;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const DB: &str = "agentd_bench_fairness";
const DB_HOOKS: &str = "agentd_bench_fairness_hooks";
const QUIET_ORGS: usize = 9;
const TEXT: &str = include_str!("../../../../samples/invoice.txt");

/// Options of `agentd bench fairness`.
#[derive(Args, Debug, Clone)]
pub struct FairnessCmd {
    /// Jobs in all: the noisy org enqueues 90 % at once, nine quiet orgs the rest as a trickle.
    #[arg(long, default_value_t = 100_000)]
    pub jobs: usize,
    /// Each quiet org enqueues one job every this many milliseconds.
    #[arg(long, default_value_t = 100)]
    pub interval_ms: u64,
    /// Longest time each phase may take, seconds: the quiet orgs alone, the noisy org's
    /// enqueue, its drain beside the quiet orgs, each webhooks half. A phase that reaches it stops
    /// (enqueuing fewer jobs, or leaving jobs undrained) and the figures are of what it did.
    #[arg(long, default_value_t = 3600)]
    pub max_secs: u64,
    /// The PostgreSQL server; the bench creates and drops its own database there.
    #[arg(
        long,
        env = "AGENTD_BENCH_SERVER_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    pub server_url: String,
    /// Events the quiet orgs write in the webhooks half (one per org per `--interval-ms`; the
    /// black-holed org writes as many at once). 0: no webhooks half.
    #[arg(long, default_value_t = 270)]
    pub webhook_events: usize,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write the figures as one self-contained page (the quiet orgs' pickup and start,
    /// alone and beside the noisy org, as bar charts).
    #[arg(long)]
    pub html: Option<std::path::PathBuf>,
}

/// A quiet org's pickups in one phase, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Pickup {
    pub jobs: i64,
    pub p50_ms: f64,
    pub p95_ms: f64,
}

/// One phase: the quiet orgs' pickups (in org order), the noisy org's rate if it ran.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    pub quiet: Vec<Pickup>,
    pub quiet_all: Pickup,
    /// The quiet orgs' jobs from creation to the start of their agent run (the claim, then
    /// the worker's buffer and a free slot).
    pub quiet_start: Pickup,
    /// Jobs of the noisy org claimed while a quiet job waited (created, not yet claimed): p50
    /// and most. Fair claims keep it near one per ring of orgs.
    pub overtaken_p50: f64,
    pub overtaken_max: i64,
    /// The noisy org's jobs not yet claimed when the last quiet job was: the quiet figures are
    /// of a drain still under way when this is above 0.
    pub noisy_waiting_at_last_quiet: i64,
    /// The noisy org's jobs asked for and enqueued (fewer when the enqueue reached the cap),
    /// and how long the enqueue took.
    pub noisy_wanted: usize,
    pub noisy_jobs: usize,
    pub enqueue_secs: f64,
    /// The quiet orgs' jobs asked for and enqueued (the trickle stops at the cap).
    pub quiet_wanted: usize,
    pub quiet_enqueued: usize,
    pub noisy_done: i64,
    pub noisy_per_sec: Option<f64>,
    /// Until the noisy org's last job was done, or the end of the phase.
    pub secs: f64,
    /// The phase ended at `--max-secs` with jobs left.
    pub capped: bool,
}

/// Both phases.
#[derive(Debug, Clone, Serialize)]
pub struct FairnessReport {
    pub jobs: usize,
    pub interval_ms: u64,
    pub alone: Phase,
    pub with_noisy: Phase,
    pub webhooks: Option<HooksReport>,
}

/// One webhooks phase: the quiet orgs' deliveries (job created → delivered), the black-holed
/// org's deliveries and their attempts.
#[derive(Debug, Clone, Serialize)]
pub struct HookPhase {
    pub quiet: Pickup,
    /// Events the quiet orgs wrote (fewer than `--webhook-events` when the phase reached the
    /// cap first).
    pub quiet_sent: usize,
    pub blackholed_events: usize,
    /// Attempts of the black-holed org's deliveries that ended (timed out) during the phase.
    pub blackholed_attempts: i64,
    /// Whether its subscription's breaker opened (`failing`).
    pub breaker_open: bool,
    pub secs: f64,
    /// The phase ended at `--max-secs` with deliveries left.
    pub capped: bool,
}

/// Both webhooks phases.
#[derive(Debug, Clone, Serialize)]
pub struct HooksReport {
    pub events: usize,
    pub alone: HookPhase,
    pub with_blackhole: HookPhase,
}

/// Runs both phases and prints the figures.
pub async fn run(app: &App, cmd: FairnessCmd) -> anyhow::Result<()> {
    if !(10..=10_000_000).contains(&cmd.jobs) {
        return Err(crate::cli::bad("--jobs must be between 10 and 10,000,000"));
    }
    if !(1..=60_000).contains(&cmd.interval_ms) {
        return Err(crate::cli::bad(
            "--interval-ms must be between 1 and 60,000",
        ));
    }
    if !(1..=86_400).contains(&cmd.max_secs) {
        return Err(crate::cli::bad("--max-secs must be between 1 and 86,400"));
    }
    let server = Server::connect(&cmd.server_url).await?;
    let noisy = cmd.jobs * 9 / 10;
    let quiet = cmd.jobs - noisy;
    eprintln!("bench: fairness: quiet orgs alone ({quiet} jobs)");
    let alone = phase(&server, app, &cmd, 0, quiet).await;
    let alone = finish(&server, alone).await?;
    eprintln!("bench: fairness: with the noisy org ({noisy} + {quiet} jobs)");
    let with_noisy = phase(&server, app, &cmd, noisy, quiet).await;
    let with_noisy = finish(&server, with_noisy).await?;
    let webhooks = if cmd.webhook_events > 0 {
        let n = cmd.webhook_events;
        eprintln!("bench: fairness: webhooks, quiet orgs alone ({n} events)");
        let alone = hook_phase(&server, app, &cmd, false).await;
        let alone = finish_hooks(&server, alone).await?;
        eprintln!("bench: fairness: webhooks beside a black-holed receiver ({n} + {n} events)");
        let with_blackhole = hook_phase(&server, app, &cmd, true).await;
        let with_blackhole = finish_hooks(&server, with_blackhole).await?;
        Some(HooksReport {
            events: n,
            alone,
            with_blackhole,
        })
    } else {
        None
    };
    let report = FairnessReport {
        jobs: cmd.jobs,
        interval_ms: cmd.interval_ms,
        alone,
        with_noisy,
        webhooks,
    };
    if cmd.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print(&report);
    }
    if let Some(path) = &cmd.html {
        super::html::write(path, &super::html::fairness(&report))?;
    }
    Ok(())
}

async fn finish(server: &Server, r: anyhow::Result<Phase>) -> anyhow::Result<Phase> {
    let dropped = server.drop_db(DB).await;
    let r = r?;
    dropped?;
    Ok(r)
}

async fn finish_hooks(server: &Server, r: anyhow::Result<HookPhase>) -> anyhow::Result<HookPhase> {
    let dropped = server.drop_db(DB_HOOKS).await;
    let r = r?;
    dropped?;
    Ok(r)
}

fn print(r: &FairnessReport) {
    let build = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let w = &r.with_noisy;
    println!(
        "auto_create, offline provider, {build} build: {} jobs, the noisy org {} at once, {QUIET_ORGS} quiet orgs {} as one job each per {} ms",
        r.jobs, w.noisy_wanted, w.quiet_wanted, r.interval_ms
    );
    println!(
        "enqueued: the noisy org {} of {} in {:.1} s{}; quiet orgs {} alone, {} beside it",
        w.noisy_jobs,
        w.noisy_wanted,
        w.enqueue_secs,
        if w.noisy_jobs < w.noisy_wanted {
            " (reached --max-secs)"
        } else {
            ""
        },
        r.alone.quiet_enqueued,
        w.quiet_enqueued
    );
    println!(
        "{:<10} {:>6} {:>14} {:>14} {:>14} {:>14} {:>12}",
        "quiet org",
        "jobs",
        "p50 ms noisy",
        "p50 ms alone",
        "p95 ms noisy",
        "p95 ms alone",
        "p95 ratio"
    );
    let rows = r
        .with_noisy
        .quiet
        .iter()
        .zip(&r.alone.quiet)
        .enumerate()
        .map(|(i, (n, a))| (format!("{}", i + 1), n, a))
        .chain(std::iter::once((
            "all".to_string(),
            &r.with_noisy.quiet_all,
            &r.alone.quiet_all,
        )));
    for (name, n, a) in rows {
        println!(
            "{:<10} {:>6} {:>14.1} {:>14.1} {:>14.1} {:>14.1} {:>12}",
            name,
            n.jobs,
            n.p50_ms,
            a.p50_ms,
            n.p95_ms,
            a.p95_ms,
            if a.p95_ms > 0.0 {
                format!("×{:.2}", n.p95_ms / a.p95_ms)
            } else {
                "-".into()
            }
        );
    }
    let (sn, sa) = (&r.with_noisy.quiet_start, &r.alone.quiet_start);
    println!(
        "{:<10} {:>6} {:>14.1} {:>14.1} {:>14.1} {:>14.1} {:>12}",
        "to start",
        sn.jobs,
        sn.p50_ms,
        sa.p50_ms,
        sn.p95_ms,
        sa.p95_ms,
        if sa.p95_ms > 0.0 {
            format!("×{:.2}", sn.p95_ms / sa.p95_ms)
        } else {
            "-".into()
        }
    );
    println!(
        "noisy org's jobs claimed while a quiet job waited to be claimed: p50 {}, most {}; still waiting when the last quiet job was claimed: {}",
        w.overtaken_p50, w.overtaken_max, w.noisy_waiting_at_last_quiet
    );
    let ratio = r.with_noisy.quiet_all.p95_ms / r.alone.quiet_all.p95_ms;
    println!(
        "quiet orgs' p95 pickup with the noisy org ×{ratio:.2} of alone (target ≤ ×2: {})",
        if ratio <= 2.0 { "met" } else { "MISSED" }
    );
    match w.noisy_per_sec {
        Some(rate) => println!(
            "noisy org: {} of {} jobs done in {:.1} s = {rate:.1} jobs/s{}",
            w.noisy_done,
            w.noisy_jobs,
            w.secs,
            if w.capped {
                " (the drain reached --max-secs)"
            } else {
                ""
            }
        ),
        None => println!("noisy org: none"),
    }
    if r.alone.capped {
        println!(
            "the quiet orgs alone reached --max-secs with jobs left ({} enqueued)",
            r.alone.quiet_enqueued
        );
    }
    if let Some(h) = &r.webhooks {
        let (n, a) = (&h.with_blackhole, &h.alone);
        println!(
            "webhooks: {QUIET_ORGS} quiet orgs {} events as one each per {} ms; beside them one org's {} events to a receiver that never answers",
            h.events, r.interval_ms, n.blackholed_events
        );
        println!(
            "{:<10} {:>6} {:>14} {:>14} {:>14} {:>14}",
            "deliveries", "jobs", "p50 ms", "p95 ms", "p50 ms alone", "p95 ms alone"
        );
        println!(
            "{:<10} {:>6} {:>14.1} {:>14.1} {:>14.1} {:>14.1}",
            "quiet", n.quiet.jobs, n.quiet.p50_ms, n.quiet.p95_ms, a.quiet.p50_ms, a.quiet.p95_ms
        );
        for (name, p) in [("alone", a), ("beside the black hole", n)] {
            if p.capped || p.quiet_sent < h.events {
                println!(
                    "webhooks {name}: reached --max-secs ({} of {} events written, {} delivered)",
                    p.quiet_sent, h.events, p.quiet.jobs
                );
            }
        }
        let over = n.quiet.p95_ms - a.quiet.p95_ms;
        println!(
            "quiet orgs' p95 delivery beside the black hole {over:+.0} ms of alone (target ≤ +1,000 ms: {}); the black-holed org: {} attempts timed out in {:.1} s, breaker {}",
            if over <= 1000.0 { "met" } else { "MISSED" },
            n.blackholed_attempts,
            n.secs,
            if n.breaker_open { "open" } else { "closed" }
        );
    }
}

/// Documents of `org`, each with its auto_create job, in transactions of up to 500.
async fn upload(app: &App, org: Uuid, n: usize, tag: &str) -> anyhow::Result<()> {
    let mut i = 0;
    while i < n {
        let k = (n - i).min(500);
        upload_batch(app, org, i, k, tag).await?;
        i += k;
    }
    Ok(())
}

/// As [`upload`], but no further transaction is started at or after `deadline`: how many
/// documents were uploaded.
async fn upload_until(
    app: &App,
    org: Uuid,
    n: usize,
    tag: &str,
    deadline: Instant,
) -> anyhow::Result<usize> {
    let mut i = 0;
    while i < n && Instant::now() < deadline {
        let k = (n - i).min(500);
        upload_batch(app, org, i, k, tag).await?;
        i += k;
    }
    Ok(i)
}

/// Documents `first..first + n` of `org` (named `{tag}-{i}`), each with its auto_create job, in
/// one transaction.
async fn upload_batch(
    app: &App,
    org: Uuid,
    first: usize,
    n: usize,
    tag: &str,
) -> anyhow::Result<()> {
    let q = app.spec("auto_create").queue.clone();
    let now = app.clock.now();
    let mut tx = app.pool.begin().await?;
    for i in first..first + n {
        let id = documents::insert(
            &mut tx,
            org,
            &format!("{tag}-{i}"),
            Some(TEXT),
            &json!({}),
            now,
        )
        .await?;
        let job = NewJob::new("auto_create", json!({"org_id": org, "document_id": id}))
            .unique_key(format!("auto_create:{id}"))
            .priority(q.priority)
            .max_attempts(q.max_attempts);
        enqueue(&mut *tx, &job).await?;
        auto_create::set_status(
            &mut *tx,
            org,
            id,
            documents::AutoCreateStatus::Queued,
            None,
            None,
            now,
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

async fn done(pool: &PgPool, org: Uuid) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT count(*) FROM documents
          WHERE org_id = $1 AND auto_create_status IN ('proposed', 'failed', 'skipped')",
    )
    .bind(org)
    .fetch_one(pool)
    .await?)
}

/// Pickup (the job's creation → its last claim) of the orgs' succeeded auto_create jobs.
async fn pickup(pool: &PgPool, orgs: &[Uuid]) -> anyhow::Result<Pickup> {
    let keys: Vec<String> = orgs.iter().map(|o| o.to_string()).collect();
    let (jobs, p50, p95): (i64, Option<f64>, Option<f64>) = sqlx::query_as(
        "SELECT count(*),
                percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::float8,
                percentile_cont(0.95) WITHIN GROUP (ORDER BY ms)::float8
           FROM (SELECT extract(epoch FROM started_at - created_at) * 1000 AS ms
                   FROM agentd_jobs
                  WHERE kind = 'auto_create' AND started_at IS NOT NULL
                    AND payload->>'org_id' = ANY($1)) p",
    )
    .bind(&keys)
    .fetch_one(pool)
    .await?;
    Ok(Pickup {
        jobs,
        p50_ms: p50.unwrap_or(f64::NAN),
        p95_ms: p95.unwrap_or(f64::NAN),
    })
}

/// The quiet orgs' jobs from creation to their agent run's start.
async fn started(pool: &PgPool, orgs: &[Uuid]) -> anyhow::Result<Pickup> {
    let keys: Vec<String> = orgs.iter().map(|o| o.to_string()).collect();
    let (jobs, p50, p95): (i64, Option<f64>, Option<f64>) = sqlx::query_as(
        "SELECT count(*),
                percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::float8,
                percentile_cont(0.95) WITHIN GROUP (ORDER BY ms)::float8
           FROM (SELECT extract(epoch FROM r.started_at - j.created_at) * 1000 AS ms
                   FROM agentd_jobs j JOIN agent_runs r ON r.job_id = j.id
                  WHERE j.kind = 'auto_create' AND j.payload->>'org_id' = ANY($1)) p",
    )
    .bind(&keys)
    .fetch_one(pool)
    .await?;
    Ok(Pickup {
        jobs,
        p50_ms: p50.unwrap_or(f64::NAN),
        p95_ms: p95.unwrap_or(f64::NAN),
    })
}

/// How many of the noisy org's jobs were claimed while each quiet job waited to be claimed:
/// (p50, most).
async fn overtaken(pool: &PgPool, noisy: Uuid, quiet: &[Uuid]) -> anyhow::Result<(f64, i64)> {
    let mut claims: Vec<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM started_at)::float8 FROM agentd_jobs
          WHERE kind = 'auto_create' AND started_at IS NOT NULL AND payload->>'org_id' = $1",
    )
    .bind(noisy.to_string())
    .fetch_all(pool)
    .await?;
    claims.sort_by(f64::total_cmp);
    let keys: Vec<String> = quiet.iter().map(|o| o.to_string()).collect();
    let waits: Vec<(f64, f64)> = sqlx::query_as(
        "SELECT extract(epoch FROM created_at)::float8, extract(epoch FROM started_at)::float8
           FROM agentd_jobs
          WHERE kind = 'auto_create' AND started_at IS NOT NULL AND payload->>'org_id' = ANY($1)",
    )
    .bind(&keys)
    .fetch_all(pool)
    .await?;
    let mut n: Vec<i64> = waits
        .iter()
        .map(|(created, claimed)| {
            let before = |t: f64| claims.partition_point(|c| *c <= t);
            before(*claimed).saturating_sub(before(*created)) as i64
        })
        .collect();
    n.sort_unstable();
    let p50 = n.get(n.len() / 2).copied().unwrap_or(0) as f64;
    Ok((p50, n.last().copied().unwrap_or(0)))
}

/// The jobs of `noisy` not claimed when the last job of `quiet` was (0 when none of `quiet`
/// was claimed).
async fn waiting_at_last(pool: &PgPool, noisy: Uuid, quiet: &[Uuid]) -> anyhow::Result<i64> {
    let keys: Vec<String> = quiet.iter().map(|o| o.to_string()).collect();
    Ok(sqlx::query_scalar(
        "WITH last AS (SELECT max(started_at) AS at FROM agentd_jobs
                        WHERE kind = 'auto_create' AND payload->>'org_id' = ANY($2))
         SELECT count(*) FROM agentd_jobs, last
          WHERE kind = 'auto_create' AND payload->>'org_id' = $1
            AND last.at IS NOT NULL AND (started_at IS NULL OR started_at > last.at)",
    )
    .bind(noisy.to_string())
    .bind(&keys)
    .fetch_one(pool)
    .await?)
}

/// One phase on a fresh database: `noisy` jobs of one org at once (at most `--max-secs` of
/// enqueuing), then the quiet trickle of `quiet` jobs over nine orgs while a worker (the job
/// file's concurrency) drains, until everything is done or `--max-secs` has passed.
async fn phase(
    server: &Server,
    app: &App,
    cmd: &FairnessCmd,
    noisy: usize,
    quiet: usize,
) -> anyhow::Result<Phase> {
    let pool = server
        .agentd_db(DB, app.config.database.max_connections)
        .await?;
    let bapp = bench_app(app, pool.clone());
    let noisy_org = orgs::ensure(&pool, "bench-noisy").await?.id;
    let mut quiet_orgs = Vec::with_capacity(QUIET_ORGS);
    for i in 0..QUIET_ORGS {
        quiet_orgs.push(orgs::ensure(&pool, &format!("bench-quiet-{i}")).await?.id);
    }
    let cap = Duration::from_secs(cmd.max_secs);
    let enqueue_started = Instant::now();
    let noisy_wanted = noisy;
    let noisy = upload_until(&bapp, noisy_org, noisy, "noisy", enqueue_started + cap).await?;
    let enqueue_secs = enqueue_started.elapsed().as_secs_f64();
    if noisy < noisy_wanted {
        eprintln!(
            "bench: fairness: the enqueue reached --max-secs: {noisy} of {noisy_wanted} noisy jobs in {enqueue_secs:.1} s"
        );
    }
    let stop = CancellationToken::new();
    let worker = bapp
        .start_worker(WorkerArgs::serving(&["auto_create"], None), stop.clone())
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    let t0 = Instant::now();
    let deadline = t0 + cap;
    let result = async {
        // The trickle: every interval, one job from each quiet org that has some left.
        let per_org: Vec<usize> = (0..QUIET_ORGS)
            .map(|i| quiet / QUIET_ORGS + usize::from(i < quiet % QUIET_ORGS))
            .collect();
        let rounds = per_org.iter().copied().max().unwrap_or(0);
        let mut tick = tokio::time::interval(Duration::from_millis(cmd.interval_ms));
        let mut quiet_enqueued = 0;
        for r in 0..rounds {
            tick.tick().await;
            if Instant::now() >= deadline {
                break;
            }
            for (org, n) in quiet_orgs.iter().zip(&per_org) {
                if r < *n {
                    upload(&bapp, *org, 1, &format!("quiet-{r}")).await?;
                    quiet_enqueued += 1;
                }
            }
        }
        // Until every quiet document and the noisy backlog are done (or the cap).
        let mut noisy_done;
        let mut noisy_secs = None;
        let capped = loop {
            noisy_done = done(&pool, noisy_org).await?;
            if noisy_secs.is_none() && noisy_done as usize >= noisy {
                noisy_secs = Some(t0.elapsed().as_secs_f64());
            }
            let mut quiet_done = 0;
            for o in &quiet_orgs {
                quiet_done += done(&pool, *o).await?;
            }
            if quiet_done as usize >= quiet_enqueued && noisy_secs.is_some() {
                break false;
            }
            if Instant::now() >= deadline {
                break true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let noisy_secs = noisy_secs.unwrap_or_else(|| t0.elapsed().as_secs_f64());
        let mut per = Vec::with_capacity(QUIET_ORGS);
        for o in &quiet_orgs {
            per.push(pickup(&pool, std::slice::from_ref(o)).await?);
        }
        let (overtaken_p50, overtaken_max) = overtaken(&pool, noisy_org, &quiet_orgs).await?;
        let noisy_waiting_at_last_quiet = waiting_at_last(&pool, noisy_org, &quiet_orgs).await?;
        Ok::<_, anyhow::Error>(Phase {
            quiet: per,
            quiet_all: pickup(&pool, &quiet_orgs).await?,
            quiet_start: started(&pool, &quiet_orgs).await?,
            overtaken_p50,
            overtaken_max,
            noisy_waiting_at_last_quiet,
            noisy_wanted,
            noisy_jobs: noisy,
            enqueue_secs,
            quiet_wanted: quiet,
            quiet_enqueued,
            noisy_done,
            noisy_per_sec: (noisy > 0).then(|| noisy_done as f64 / noisy_secs.max(1e-9)),
            secs: noisy_secs,
            capped,
        })
    }
    .await;
    stop.cancel();
    worker.join().await;
    pool.close().await;
    if let Ok(p) = &result {
        eprintln!(
            "bench: fairness: phase done in {:.1} s{}: quiet {} of {} enqueued, p50 {:.1} ms, p95 {:.1} ms; noisy {} of {} done",
            t0.elapsed().as_secs_f64(),
            if p.capped {
                " (reached --max-secs)"
            } else {
                ""
            },
            p.quiet_enqueued,
            p.quiet_wanted,
            p.quiet_all.p50_ms,
            p.quiet_all.p95_ms,
            p.noisy_done,
            p.noisy_jobs
        );
    }
    result
}

/// A receiver on 127.0.0.1 that answers every POST at once (200), and one that accepts
/// connections and never answers; their URLs.
async fn receivers(stop: CancellationToken) -> anyhow::Result<(String, String)> {
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(|| async { axum::http::StatusCode::OK }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let ok = format!("http://{}/hook", listener.local_addr()?);
    let s = stop.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { s.cancelled().await })
            .await;
    });
    let hole = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let black = format!("http://{}/hook", hole.local_addr()?);
    tokio::spawn(async move {
        // Accepted connections are held, never read nor answered, until the bench stops.
        let mut held = Vec::new();
        loop {
            tokio::select! {
                c = hole.accept() => match c {
                    Ok((sock, _)) => held.push(sock),
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                },
                _ = stop.cancelled() => return,
            }
        }
    });
    Ok((ok, black))
}

/// `n` events of `org` (each makes one delivery job per matching subscription), in one
/// transaction.
async fn events(pool: &PgPool, org: Uuid, n: usize) -> anyhow::Result<()> {
    use agentd::store::events::{EventType, NewEvent, emit};
    let payload = json!({"bench": true});
    let mut tx = pool.begin().await?;
    for _ in 0..n {
        emit(
            &mut tx,
            &NewEvent {
                org_id: org,
                kind: EventType::RunFailed,
                subject_id: Some(Uuid::now_v7()),
                occurred_at: chrono::Utc::now(),
                payload: &payload,
                dedupe_key: None,
            },
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Delivery time (the job's creation → delivered) of the orgs' delivered webhook jobs.
async fn delivered(pool: &PgPool, orgs: &[Uuid]) -> anyhow::Result<Pickup> {
    let keys: Vec<String> = orgs.iter().map(|o| o.to_string()).collect();
    let (jobs, p50, p95): (i64, Option<f64>, Option<f64>) = sqlx::query_as(
        "SELECT count(*),
                percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::float8,
                percentile_cont(0.95) WITHIN GROUP (ORDER BY ms)::float8
           FROM (SELECT extract(epoch FROM finished_at - created_at) * 1000 AS ms
                   FROM agentd_jobs
                  WHERE kind = 'webhook_delivery' AND state = 'succeeded'
                    AND payload->>'org_id' = ANY($1)) p",
    )
    .bind(&keys)
    .fetch_one(pool)
    .await?;
    Ok(Pickup {
        jobs,
        p50_ms: p50.unwrap_or(f64::NAN),
        p95_ms: p95.unwrap_or(f64::NAN),
    })
}

/// One webhooks phase on a fresh database: with `blackholed`, one org subscribes a receiver
/// that never answers and writes `--webhook-events` events at once; the quiet orgs' trickle of
/// as many events, while a worker (the job file's concurrency and caps) delivers.
async fn hook_phase(
    server: &Server,
    app: &App,
    cmd: &FairnessCmd,
    blackholed: bool,
) -> anyhow::Result<HookPhase> {
    let pool = server
        .agentd_db(DB_HOOKS, app.config.database.max_connections)
        .await?;
    let mut bapp = bench_app(app, pool.clone());
    let mut cfg = (*bapp.config).clone();
    // The receivers are on 127.0.0.1: allowed explicitly (the SSRF guard refuses it otherwise).
    cfg.webhooks.allow_private_networks = true;
    bapp.config = std::sync::Arc::new(cfg);
    let stop = CancellationToken::new();
    let (ok_url, black_url) = receivers(stop.clone()).await?;
    let spec = bapp.spec("webhook_delivery");
    let subscribe = |org: Uuid, url: String| {
        let pool = pool.clone();
        let (max_attempts, priority) = (spec.queue.max_attempts, spec.queue.priority);
        async move {
            agentd::store::webhooks::insert(
                &pool,
                &agentd::store::webhooks::NewWebhook {
                    org_id: org,
                    url: &url,
                    events: &["run.failed".to_string()],
                    secret: "bench-secret-0123456789",
                    max_attempts,
                    priority,
                    now: chrono::Utc::now(),
                },
            )
            .await
        }
    };
    let mut quiet_orgs = Vec::with_capacity(QUIET_ORGS);
    for i in 0..QUIET_ORGS {
        let org = orgs::ensure(&pool, &format!("bench-hooks-quiet-{i}"))
            .await?
            .id;
        subscribe(org, ok_url.clone()).await?;
        quiet_orgs.push(org);
    }
    let black_org = orgs::ensure(&pool, "bench-hooks-blackholed").await?.id;
    let n = cmd.webhook_events;
    if blackholed {
        subscribe(black_org, black_url.clone()).await?;
        events(&pool, black_org, n).await?;
    }
    let worker = bapp
        .start_worker(
            WorkerArgs::serving(&["webhook_delivery"], None),
            stop.clone(),
        )
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(cmd.max_secs);
    let result = async {
        let rounds = n.div_ceil(QUIET_ORGS);
        let mut tick = tokio::time::interval(Duration::from_millis(cmd.interval_ms));
        let mut sent = 0;
        for _ in 0..rounds {
            tick.tick().await;
            if Instant::now() >= deadline {
                break;
            }
            for org in &quiet_orgs {
                if sent < n {
                    events(&pool, *org, 1).await?;
                    sent += 1;
                }
            }
        }
        let capped = loop {
            let d = delivered(&pool, &quiet_orgs).await?;
            if d.jobs as usize >= sent {
                break false;
            }
            if Instant::now() >= deadline {
                break true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let secs = t0.elapsed().as_secs_f64();
        let attempts: i64 = sqlx::query_scalar(
            "SELECT coalesce(sum(attempt - CASE WHEN state = 'running' THEN 1 ELSE 0 END), 0)::int8
               FROM agentd_jobs WHERE kind = 'webhook_delivery' AND payload->>'org_id' = $1",
        )
        .bind(black_org.to_string())
        .fetch_one(&pool)
        .await?;
        let failing: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM agentd_webhooks WHERE org_id = $1 AND failing_since IS NOT NULL",
        )
        .bind(black_org)
        .fetch_one(&pool)
        .await
        .unwrap_or(0);
        Ok::<_, anyhow::Error>(HookPhase {
            quiet: delivered(&pool, &quiet_orgs).await?,
            quiet_sent: sent,
            blackholed_events: if blackholed { n } else { 0 },
            blackholed_attempts: attempts,
            breaker_open: failing > 0,
            secs,
            capped,
        })
    }
    .await;
    stop.cancel();
    worker.join().await;
    pool.close().await;
    result
}
