//! No-op drain measurements of the apalis and native runtimes (used by `agentd bench`).

#[allow(unused_imports)]
use super::*;

/// The kind [`drain_benchmark`] enqueues and drains.
pub const BENCH_KIND: &str = "bench_apalis_noop";

pub(super) struct Noop;

#[async_trait::async_trait]
impl JobHandler for Noop {
    async fn handle(&self, _job: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Which runtime [`drain`] measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainRuntime {
    /// apalis's worker over [`AgentdBackend`] ([`build_worker`]).
    Apalis,
    /// The native [`Worker`].
    Native,
}

/// No-op drain with the apalis runtime: enqueues `n` jobs of [`BENCH_KIND`] into `pool`'s
/// `agentd_jobs`, starts the worker at `concurrency` and returns jobs/s from start until the
/// `n`-th ack is written. The table should hold no other ready jobs of that kind.
pub async fn drain_benchmark(pool: &PgPool, n: u64, concurrency: usize) -> anyhow::Result<f64> {
    drain(pool, n, concurrency, DrainRuntime::Apalis).await
}

/// [`drain_benchmark`] with the native [`Worker`], measured the same way.
pub async fn drain_benchmark_native(
    pool: &PgPool,
    n: u64,
    concurrency: usize,
) -> anyhow::Result<f64> {
    drain(pool, n, concurrency, DrainRuntime::Native).await
}

/// The drain both benchmark entry points share: same backlog, options and clock.
pub async fn drain(
    pool: &PgPool,
    n: u64,
    concurrency: usize,
    runtime: DrainRuntime,
) -> anyhow::Result<f64> {
    let mut left = n;
    while left > 0 {
        let k = left.min(5_000);
        let jobs: Vec<NewJob> = (0..k)
            .map(|i| NewJob::new(BENCH_KIND, serde_json::json!({ "n": i })))
            .collect();
        crate::queue::enqueue_many(pool, &jobs).await?;
        left -= k;
    }
    sqlx::raw_sql("VACUUM ANALYZE agentd_jobs")
        .execute(pool)
        .await?;
    let opts = WorkerOptions {
        worker_id: format!("bench-{runtime:?}:{}", uuid::Uuid::new_v4().simple()),
        claim_batch: 64,
        poll_interval: Duration::from_millis(1000),
        lease: Duration::from_secs(30),
        heartbeat: Duration::from_secs(10),
        shutdown_grace: Duration::from_secs(20),
    };
    let kind = KindRuntime {
        kind: BENCH_KIND.into(),
        handler: Arc::new(Noop),
        concurrency,
        timeout: Duration::from_secs(60),
        backoff: Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(60),
        },
    };
    let clock = crate::clock::system();
    let stop = CancellationToken::new();
    let t0 = Instant::now();
    let (stats, handle) = match runtime {
        DrainRuntime::Apalis => {
            let w = build_worker(pool.clone(), clock, &opts, kind);
            let stats = w.stats();
            (stats, tokio::spawn(w.run(stop.clone())))
        }
        DrainRuntime::Native => {
            let w = Worker::new(pool.clone(), clock, opts, vec![kind]);
            let stats = w.stats();
            (stats, tokio::spawn(w.run(stop.clone())))
        }
    };
    let cap = Duration::from_secs(600);
    while stats.succeeded.load(Ordering::Relaxed) < n && t0.elapsed() < cap {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let secs = t0.elapsed().as_secs_f64();
    let done = stats.succeeded.load(Ordering::Relaxed);
    stop.cancel();
    let _ = handle.await;
    anyhow::ensure!(
        done >= n,
        "{runtime:?} drained only {done} of {n} jobs in {secs:.1}s"
    );
    Ok(done as f64 / secs)
}
