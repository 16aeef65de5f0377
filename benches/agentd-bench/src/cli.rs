//! `agentd-bench …` (also run as `agentd bench …`): throughput and latency figures against
//! baselines measured in the same run (see `crate::bench`). Not tests: they print figures and
//! ratios.
//!
//! `agentd bench all` runs every part and prints one table; each part also runs alone.

use crate::bench::{self, Opts, Part};
use agentd::app::App;
use clap::{Args, Subcommand};

/// An error caused by the caller's input (exit code 2, like `agentd`).
pub(crate) fn bad(msg: impl Into<String>) -> anyhow::Error {
    agentd::cli::BadInput(msg.into()).into()
}

/// Options of `agentd bench`.
#[derive(Args, Debug)]
pub struct BenchCmd {
    #[command(subcommand)]
    pub part: BenchPart,
}

/// Which measurements to run.
#[derive(Subcommand, Debug)]
pub enum BenchPart {
    /// Everything below, one table.
    All(BenchOpts),
    /// Queue drain of no-op jobs: agentd's worker vs apalis-postgres 1.0 (default and tuned).
    Drain(BenchOpts),
    /// Enqueue throughput: single-row and batched (`enqueue_many`).
    Enqueue(BenchOpts),
    /// Idle pickup latency (enqueue → handler start) and delayed-job lateness.
    Latency(BenchOpts),
    /// Reference ceiling: `pgbench -N -c 8 -j 2 -T 10`, with agentd's commits per job.
    Pgbench(BenchOpts),
    /// Agent loop: per-step overhead; auto-create runs per second with the offline provider.
    Agent(BenchOpts),
    /// Approvals expiry sweep and nightly fan-out.
    Approvals(BenchOpts),
    /// Peak RSS after a drain at concurrency 32.
    Memory(BenchOpts),
    /// HTTP API: POST /v1/documents with 32 concurrent clients, auto-create off and on.
    Api(crate::bench::api::ApiBenchCmd),
    /// Redaction of personal data: µs per KB, detector precision and recall.
    Redact(BenchOpts),
    /// Hostile input: a model answer with 10,000 text tool calls (CPU, audit rows) and a
    /// 64 MB response body (refused at the cap; peak RSS growth).
    Hostile(BenchOpts),
    /// Events written per second, and delivered per second to a local webhook receiver.
    Events(crate::events::EventsBenchCmd),
    /// Fair claims: quiet orgs' pickup beside a noisy org's backlog, against the same orgs alone.
    Fairness(crate::bench::fairness::FairnessCmd),
    /// Chaos: 3 workers and the API under ≥ 1,000 seeded faults (worker SIGKILL,
    /// pg_terminate_backend, PostgreSQL crash restarts, model stalls, 429/500, cut streams),
    /// then the invariants with their counts.
    Chaos(crate::bench::chaos::ChaosCmd),
    /// A transaction held open for minutes while jobs flow at a steady rate: table size, dead
    /// rows and claim latency before, during and after (not in `all`).
    HeldXact(crate::bench::held::HeldCmd),
    /// A compressed week: 7 days of `--day-jobs` jobs drained with retention running; table and
    /// index sizes per day (not in `all`).
    History(BenchOpts),
}

/// Options shared by every part.
#[derive(Args, Debug, Clone)]
pub struct BenchOpts {
    /// Smaller sizes: 20k backlog only, fewer samples.
    #[arg(long)]
    pub quick: bool,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write the figures as one self-contained page: a bar chart per section and unit,
    /// agentd beside each baseline of the same run, and every row.
    #[arg(long)]
    pub html: Option<std::path::PathBuf>,
    /// The PostgreSQL server (any database on it); the bench creates and drops its own
    /// `agentd_bench*` databases there.
    #[arg(
        long,
        env = "AGENTD_BENCH_SERVER_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    pub server_url: String,
    /// Drain backlogs, comma-separated (default 20000,200000; with --quick 20000).
    #[arg(long, value_delimiter = ',')]
    pub backlog: Vec<u64>,
    /// Drain worker concurrencies, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    pub concurrency: Vec<usize>,
    /// Repetitions per drain configuration; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Cap on one drain repetition, seconds (default 20; 10 for backlogs over 100,000).
    #[arg(long)]
    pub max_secs: Option<f64>,
    /// Skip the apalis-postgres baseline.
    #[arg(long)]
    pub no_apalis: bool,
    /// Also drain with a plain `FOR UPDATE SKIP LOCKED` + DELETE loop (reference).
    #[arg(long)]
    pub plain: bool,
    /// Skip graphile-worker (run by default when Node ≥ 22 and benches/peers are installed).
    #[arg(long)]
    pub no_peers: bool,
    /// agentd's drain also runs with this fixed prefetch buffer (and claims of at least this
    /// many jobs); 0: not (it always runs as configured, with prefetch 0, and with delete on
    /// success).
    #[arg(long, default_value_t = 0)]
    pub prefetch: u32,
    /// `history`: jobs per day (default 1,000,000; with --quick 100,000).
    #[arg(long)]
    pub day_jobs: Option<u64>,
}

/// Runs the benchmarks.
pub async fn run(app: &App, cmd: BenchCmd) -> anyhow::Result<()> {
    use Part::*;
    let (o, parts): (BenchOpts, Vec<Part>) = match cmd.part {
        BenchPart::Api(c) => return crate::bench::api::run(app, c).await,
        BenchPart::Events(c) => return crate::events::run(app, c).await,
        BenchPart::Fairness(c) => return crate::bench::fairness::run(app, c).await,
        BenchPart::Chaos(c) => return crate::bench::chaos::run(c).await,
        BenchPart::HeldXact(c) => return crate::bench::held::run(app, c).await,
        BenchPart::All(o) => (
            o,
            vec![
                Drain, Memory, Pgbench, Enqueue, Latency, Agent, Approvals, Redact, Hostile,
            ],
        ),
        BenchPart::Drain(o) => (o, vec![Drain]),
        BenchPart::Enqueue(o) => (o, vec![Enqueue]),
        BenchPart::Latency(o) => (o, vec![Latency]),
        BenchPart::Pgbench(o) => (o, vec![Pgbench]),
        BenchPart::Agent(o) => (o, vec![Agent]),
        BenchPart::Redact(o) => (o, vec![Redact]),
        BenchPart::Approvals(o) => (o, vec![Approvals]),
        BenchPart::Memory(o) => (o, vec![Memory]),
        BenchPart::Hostile(o) => (o, vec![Hostile]),
        BenchPart::History(o) => (o, vec![History]),
    };
    if o.reps == 0 {
        return Err(bad("--reps must be ≥ 1"));
    }
    if o.concurrency.is_empty() || o.concurrency.contains(&0) {
        return Err(bad("--concurrency must list numbers ≥ 1"));
    }
    if o.backlog.contains(&0) {
        return Err(bad("--backlog must list numbers ≥ 1"));
    }
    if o.max_secs.is_some_and(|s| s.is_nan() || s <= 0.0) {
        return Err(bad("--max-secs must be > 0"));
    }
    let backlogs = if !o.backlog.is_empty() {
        o.backlog.clone()
    } else if o.quick {
        vec![20_000]
    } else {
        vec![20_000, 200_000]
    };
    let opts = Opts {
        quick: o.quick,
        server_url: o.server_url.clone(),
        backlogs,
        concurrency: o.concurrency.clone(),
        reps: o.reps,
        max_secs: o.max_secs,
        no_apalis: o.no_apalis,
        plain: o.plain,
        no_peers: o.no_peers,
        prefetch: o.prefetch,
        day_jobs: o.day_jobs.filter(|&n| n > 0),
    };
    let report = bench::run(app, &opts, &parts).await?;
    if o.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        report.print();
    }
    if let Some(path) = &o.html {
        let title = format!(
            "agentd bench {}",
            parts
                .iter()
                .map(|p| format!("{p:?}").to_lowercase())
                .collect::<Vec<_>>()
                .join(", ")
        );
        crate::bench::html::write(path, &crate::bench::html::report(&report, &title))?;
    }
    Ok(())
}
