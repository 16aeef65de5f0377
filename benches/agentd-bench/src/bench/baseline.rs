//! The drain baselines: apalis-postgres 1.0 storage driven by apalis's worker, and a plain
//! `FOR UPDATE SKIP LOCKED` + DELETE loop.

use super::Server;
use super::drain::Rep;
use apalis::prelude::{WorkerBuilder, WorkerBuilderExt, WorkerContext};
use apalis_postgres::{Config as ApalisConfig, PostgresStorage};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

pub const DB_APALIS: &str = "agentd_bench_apalis";
pub const DB_PLAIN: &str = "agentd_bench_plain";
/// The tuned apalis config: bigger fetches, no separate lock round trip.
pub const APALIS_TUNED_BATCH: usize = 200;

static APALIS_DONE: AtomicU64 = AtomicU64::new(0);

async fn apalis_noop(_n: u64) -> Result<(), apalis_core::error::BoxDynError> {
    APALIS_DONE.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// apalis-postgres storage with apalis's worker at concurrency `c`. Default: the storage as
/// `PostgresStorage::new(&pool)` makes it. Tuned: bigger fetch batches, no per-task lock update.
/// Jobs count when the handler returns (their ack may still be in flight: favours apalis).
pub(super) async fn apalis_rep(
    server: &Server,
    tuned: bool,
    c: usize,
    target: u64,
    cap: f64,
) -> anyhow::Result<Rep> {
    let pool = server.pool(DB_APALIS, 10).await?;
    let before = server.xact_commit(DB_APALIS).await?;
    APALIS_DONE.store(0, Ordering::Relaxed);
    let wctx = WorkerContext::new(&format!("bench-{}", uuid::Uuid::new_v4().simple()));
    let mut backend = PostgresStorage::<u64>::new(&pool);
    if tuned {
        let cfg = ApalisConfig::default()
            .queue(std::any::type_name::<u64>())
            .batch_size(APALIS_TUNED_BATCH)
            .lock_tasks(false);
        backend = backend.with_config(cfg);
    }
    let worker = WorkerBuilder::new(&wctx)
        .backend(backend)
        .concurrency(c)
        .build(apalis_noop);
    let handle = tokio::spawn(worker.run());
    let (processed, secs) = wait_for(|| APALIS_DONE.load(Ordering::Relaxed), target, cap).await;
    let _ = wctx.stop();
    match tokio::time::timeout(Duration::from_secs(30), handle).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => eprintln!("bench:   apalis worker ended with an error: {e}"),
        Ok(Err(e)) => eprintln!("bench:   apalis worker task failed: {e}"),
        Err(_) => eprintln!("bench:   apalis worker did not stop within 30s"),
    }
    let total = APALIS_DONE.load(Ordering::Relaxed);
    pool.close().await;
    let commits_per_job = commits_since(server, DB_APALIS, before, total).await?;
    Ok(Rep {
        processed,
        secs,
        commits_per_job,
        batches: None,
        cost: None,
    })
}

/// The bare minimum: `c` tasks each deleting one row per statement with SKIP LOCKED.
pub(super) async fn plain_rep(
    server: &Server,
    c: usize,
    target: u64,
    cap: f64,
) -> anyhow::Result<Rep> {
    let pool = server.pool(DB_PLAIN, c as u32 + 1).await?;
    let before = server.xact_commit(DB_PLAIN).await?;
    let done = Arc::new(AtomicU64::new(0));
    let stop = CancellationToken::new();
    let mut tasks = Vec::new();
    for _ in 0..c {
        let (pool, done, stop) = (pool.clone(), done.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.is_cancelled() {
                let row: Option<(i64, serde_json::Value)> = sqlx::query_as(
                    "DELETE FROM bench_plain WHERE id = (SELECT id FROM bench_plain ORDER BY id
                        LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id, payload",
                )
                .fetch_optional(&pool)
                .await
                .unwrap_or(None);
                match row {
                    Some(_) => done.fetch_add(1, Ordering::Relaxed),
                    None => break,
                };
            }
        }));
    }
    let (processed, secs) = wait_for(|| done.load(Ordering::Relaxed), target, cap).await;
    stop.cancel();
    for t in tasks {
        let _ = t.await;
    }
    let total = done.load(Ordering::Relaxed);
    pool.close().await;
    let commits_per_job = commits_since(server, DB_PLAIN, before, total).await?;
    Ok(Rep {
        processed,
        secs,
        commits_per_job,
        batches: None,
        cost: None,
    })
}

/// Polls `count` until it reaches `target` or `cap` seconds pass: (count, seconds).
pub(super) async fn wait_for(count: impl Fn() -> u64, target: u64, cap: f64) -> (u64, f64) {
    let t0 = Instant::now();
    loop {
        let n = count();
        let secs = t0.elapsed().as_secs_f64();
        if n >= target || secs >= cap {
            return (n, secs);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Commits per job: closes nothing itself; call after the system's pool is closed.
pub(super) async fn commits_since(
    server: &Server,
    db: &str,
    before: i64,
    jobs: u64,
) -> anyhow::Result<f64> {
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = server.xact_commit(db).await?;
    Ok((after - before) as f64 / jobs.max(1) as f64)
}
