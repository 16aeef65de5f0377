//! Enqueue throughput, idle pickup latency, delayed-job lateness, and the pgbench reference
//! ceiling with agentd's commits per job.

use super::{Opts, Report, Row, Server, Target, median, percentile};
use agentd::app::App;
use agentd::queue::backoff::Backoff;
use agentd::queue::worker::{JobContext, JobHandler, KindRuntime};
use agentd::queue::{self as q, JobError, NewJob, enqueue_many};
use apalis_core::backend::TaskSink;
use apalis_postgres::PostgresStorage;
use chrono::{DateTime, Utc};
use rand::Rng;
use serde_json::{Value, json};
use sqlx::PgPool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

const DB_ENQ: &str = "agentd_bench_enqueue";
const DB_ENQ_APALIS: &str = "agentd_bench_apalis_enqueue";
const DB_LAT: &str = "agentd_bench_latency";
const DB_PGBENCH: &str = "agentd_bench_pgbench";

fn job(i: u64) -> NewJob {
    NewJob::new("bench_enqueue", json!({ "n": i }))
}

/// `producers` tasks each inserting `per` jobs, `batch` per statement (1: `enqueue_committed`,
/// or `enqueue` with the NOTIFY in the insert's commit when `in_commit`). Jobs/s.
async fn agentd_enqueue(
    pool: &PgPool,
    producers: usize,
    per: u64,
    batch: u64,
    in_commit: bool,
) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..producers {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = 0;
            while i < per {
                if batch == 1 && in_commit {
                    q::enqueue(&pool, &job(i)).await?;
                    i += 1;
                } else if batch == 1 {
                    q::enqueue_committed(&pool, &job(i)).await?;
                    i += 1;
                } else {
                    let k = batch.min(per - i);
                    let jobs: Vec<NewJob> = (i..i + k).map(job).collect();
                    enqueue_many(&pool, &jobs).await?;
                    i += k;
                }
            }
            Ok::<_, agentd::queue::QueueError>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok((producers as u64 * per) as f64 / t0.elapsed().as_secs_f64())
}

/// apalis-postgres `push` (one task per statement) or `push_bulk` (`batch` per statement).
async fn apalis_enqueue(pool: &PgPool, n: u64, batch: u64) -> anyhow::Result<f64> {
    let mut storage = PostgresStorage::<u64>::new(pool);
    let err = |e| anyhow::anyhow!("apalis push: {e}");
    let t0 = Instant::now();
    let mut i = 0;
    while i < n {
        if batch == 1 {
            storage.push(i).await.map_err(err)?;
            i += 1;
        } else {
            let k = batch.min(n - i);
            storage.push_bulk((i..i + k).collect()).await.map_err(err)?;
            i += k;
        }
    }
    Ok(n as f64 / t0.elapsed().as_secs_f64())
}

/// The enqueue part.
pub async fn enqueue(server: &Server, opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    let pool = server.agentd_db(DB_ENQ, 10).await?;
    let single = opts.size(5_000, 2_000);
    let batched = opts.size(200_000, 50_000);
    let s1 = agentd_enqueue(&pool, 1, single, 1, false).await?;
    let s8 = agentd_enqueue(&pool, 8, single / 8, 1, false).await?;
    // The NOTIFY inside the insert's commit (plain `enqueue`, as before migration 0060).
    let c1 = agentd_enqueue(&pool, 1, single, 1, true).await?;
    let c8 = agentd_enqueue(&pool, 8, single / 8, 1, true).await?;
    let b1 = agentd_enqueue(&pool, 1, batched, 1_000, false).await?;
    let b4 = agentd_enqueue(&pool, 4, batched / 4, 1_000, false).await?;
    pool.close().await;
    server.drop_db(DB_ENQ).await?;
    let mut base = None;
    if !opts.no_apalis {
        let res = async {
            server.recreate(DB_ENQ_APALIS).await?;
            let pool = server.pool(DB_ENQ_APALIS, 4).await?;
            PostgresStorage::<()>::setup(&pool).await?;
            let one = apalis_enqueue(&pool, single, 1).await?;
            let bulk = apalis_enqueue(&pool, batched, 1_000).await?;
            pool.close().await;
            server.drop_db(DB_ENQ_APALIS).await?;
            anyhow::Ok((one, bulk))
        }
        .await;
        match res {
            Ok(b) => base = Some(b),
            Err(e) => report.push(Row::text(
                "enqueue",
                "apalis baseline",
                format!("failed: {e:#}"),
            )),
        }
    }
    let with = |r: Row, v: Option<f64>, label: &str| match v {
        Some(v) => r.baseline(label, v),
        None => r,
    };
    report.push(with(
        Row::new("enqueue", "single-row, 1 producer", s1, "jobs/s")
            .note(format!(
                "{single} jobs, one commit each (enqueue_committed: NOTIFY after the commit)"
            ))
            .baseline("NOTIFY in the commit", c1),
        base.map(|b| b.0),
        "apalis push",
    ));
    report.push(
        Row::new("enqueue", "single-row, 8 producers", s8, "jobs/s")
            .baseline("NOTIFY in the commit", c8)
            .note(format!("×{:.2} the 1-producer rate", s8 / s1)),
    );
    report.push(with(
        Row::new(
            "enqueue",
            "enqueue_many 1,000/stmt, 1 producer",
            b1,
            "jobs/s",
        )
        .target(Target::AtLeast(100_000.0))
        .note(format!("{batched} jobs")),
        base.map(|b| b.1),
        "apalis push_bulk",
    ));
    report.push(
        Row::new(
            "enqueue",
            "enqueue_many 1,000/stmt, 4 producers",
            b4,
            "jobs/s",
        )
        .target(Target::AtLeast(100_000.0)),
    );
    Ok(())
}

/// Reports when the handler starts: (payload, monotonic instant, wall clock).
struct Probe {
    tx: mpsc::UnboundedSender<(Value, Instant, DateTime<Utc>)>,
}

#[async_trait::async_trait]
impl JobHandler for Probe {
    async fn handle(&self, job: JobContext) -> Result<(), JobError> {
        let _ = self.tx.send((job.job.payload, Instant::now(), Utc::now()));
        Ok(())
    }
}

/// The latency part: an idle worker (concurrency 8, the service's worker config).
pub async fn latency(
    server: &Server,
    app: &App,
    opts: &Opts,
    report: &mut Report,
) -> anyhow::Result<()> {
    let pool = server
        .agentd_db(DB_LAT, app.config.database.max_connections)
        .await?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let kind = KindRuntime {
        kind: "bench_latency".into(),
        handler: Arc::new(Probe { tx }),
        concurrency: 8,
        timeout: Duration::from_secs(60),
        backoff: Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(60),
        },
        delete_on_success: false,
        max_running_per_org: None,
        newcomer_slots: 0,
    };
    let (_stats, stop, handle) = super::runtime::spawn_worker(pool.clone(), app, kind, |_| {});
    tokio::time::sleep(Duration::from_millis(500)).await;

    let samples = opts.size(500, 300);
    let mut lat = Vec::with_capacity(samples);
    // Baseline in the same run: every third sample through `enqueue` (NOTIFY in the commit).
    let mut lat_in_commit = Vec::new();
    for i in 0..samples + samples / 2 {
        let in_commit = i % 3 == 2;
        let idle = rand::rng().random_range(5..20);
        tokio::time::sleep(Duration::from_millis(idle)).await;
        let t0 = Instant::now();
        let job = NewJob::new("bench_latency", json!({ "i": i }));
        if in_commit {
            q::enqueue(&pool, &job).await?;
        } else {
            q::enqueue_committed(&pool, &job).await?;
        }
        let (_, started, _) = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .map_err(|_| anyhow::anyhow!("sample {i}: no pickup within 5s"))?
            .ok_or_else(|| anyhow::anyhow!("worker stopped"))?;
        let ms = started.duration_since(t0).as_secs_f64() * 1000.0;
        if in_commit {
            lat_in_commit.push(ms);
        } else {
            lat.push(ms);
        }
    }
    report.push(
        Row::new(
            "latency",
            "idle pickup p50 (enqueue → handler)",
            median(&lat),
            "ms",
        )
        .baseline("NOTIFY in the commit", median(&lat_in_commit))
        .target(Target::AtMost(5.0))
        .note(format!(
            "{samples} samples, 5–20 ms idle between; enqueue_committed; c=8, {}",
            super::runtime::LABEL
        )),
    );
    report.push(
        Row::new("latency", "idle pickup p99", percentile(&lat, 99.0), "ms")
            .baseline("NOTIFY in the commit", percentile(&lat_in_commit, 99.0))
            .target(Target::AtMost(15.0)),
    );

    let delayed = opts.size(100, 40);
    let first = Utc::now() + chrono::Duration::milliseconds(1_000);
    let jobs: Vec<NewJob> = (0..delayed)
        .map(|i| {
            let at = first + chrono::Duration::milliseconds(41 * i as i64);
            NewJob::new("bench_latency", json!({ "run_at": at })).run_at(at)
        })
        .collect();
    enqueue_many(&pool, &jobs).await?;
    let mut late = Vec::new();
    let deadline = Duration::from_millis(1_000 + 41 * delayed as u64) + Duration::from_secs(5);
    let until = Instant::now() + deadline;
    while late.len() < delayed {
        let left = until.saturating_duration_since(Instant::now());
        let Ok(Some((payload, _, wall))) = tokio::time::timeout(left, rx.recv()).await else {
            break;
        };
        let at: DateTime<Utc> = serde_json::from_value(payload["run_at"].clone())?;
        late.push((wall - at).num_microseconds().unwrap_or(0) as f64 / 1000.0);
    }
    stop.cancel();
    let _ = handle.await;
    pool.close().await;
    server.drop_db(DB_LAT).await?;
    let missing = delayed - late.len();
    report.push(
        Row::new(
            "latency",
            "delayed job lateness after run_at p50",
            median(&late),
            "ms",
        )
        .note(format!(
            "{} delayed jobs, 41 ms apart{}",
            delayed,
            if missing > 0 {
                format!("; {missing} never ran")
            } else {
                String::new()
            }
        )),
    );
    report.push(Row::new(
        "latency",
        "delayed job lateness p99",
        percentile(&late, 99.0),
        "ms",
    ));
    report.push(Row::new(
        "latency",
        "delayed job lateness max",
        percentile(&late, 100.0),
        "ms",
    ));
    Ok(())
}

fn pgbench_bin() -> std::path::PathBuf {
    let on_path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("pgbench"))
                .find(|b| b.is_file())
        })
        .unwrap_or_default();
    on_path
        .or_else(|| agentd::db::find_pg_bin().map(|d| d.join("pgbench")))
        .unwrap_or_else(|| "pgbench".into())
}

async fn pgbench_cmd(server: &Server, args: &[&str]) -> anyhow::Result<String> {
    let o = &server.opts;
    let port = o.get_port().to_string();
    let out = tokio::process::Command::new(pgbench_bin())
        .args(["-h", o.get_host(), "-p", &port, "-U", o.get_username()])
        .args(args)
        .arg(DB_PGBENCH)
        .output()
        .await
        .map_err(|e| anyhow::anyhow!("cannot run pgbench: {e}"))?;
    if !out.status.success() {
        anyhow::bail!(
            "pgbench {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The reference ceiling: `pgbench -i` then `pgbench -N -c 8 -j 2 -T 10`, with agentd's
/// commits per job (from the drain when it ran, else one 20k drain at c=32).
pub async fn pgbench(
    server: &Server,
    app: &App,
    report: &mut Report,
    ctx: &super::drain::Context,
) -> anyhow::Result<()> {
    server.recreate(DB_PGBENCH).await?;
    pgbench_cmd(server, &["-i", "-q"]).await?;
    let out = pgbench_cmd(server, &["-N", "-c", "8", "-j", "2", "-T", "10"]).await?;
    server.drop_db(DB_PGBENCH).await?;
    let tps = out
        .lines()
        .find_map(|l| l.strip_prefix("tps = "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or_else(|| anyhow::anyhow!("no `tps = ` line in pgbench output:\n{out}"))?;
    report.push(
        Row::new(
            "ceiling",
            "pgbench -N -c 8 -j 2 -T 10 (scale 1)",
            tps,
            "tps",
        )
        .note("same cluster; each transaction is 5 statements, one commit"),
    );
    let mut commits = ctx.commits_per_job.clone();
    if commits.is_empty() {
        let (_, _, c) = super::drain::agentd_once(server, app, 32, 20_000, 30.0).await?;
        commits.push((32, c));
    }
    for (c, per_job) in commits {
        report.push(
            Row::new(
                "ceiling",
                format!("agentd commits per job, c={c}"),
                per_job,
                "commits",
            )
            .note(format!(
                "pgbench TPS / commits per job = {} jobs/s",
                super::num(tps / per_job)
            )),
        );
    }
    Ok(())
}
