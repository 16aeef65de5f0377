//! `agentd bench`: figures, not tests. Every part runs against its own database on the same
//! PostgreSQL server (dropped and re-created per run, set up with agentd's own migrations) and
//! prints its figures beside the baseline measured in the same process.
//!
//! Parts: queue drain (agentd's `Worker` vs apalis-postgres 1.0 with apalis's worker), enqueue,
//! idle pickup latency and delayed-job lateness, the pgbench reference ceiling with commits per
//! job, the agent loop (per-step overhead, auto-create end to end), approvals (expiry sweep,
//! nightly fan-out) and peak memory.

pub mod agent;
pub mod api;
pub mod approvals;
pub mod baseline;
pub mod chaos;
pub mod cost;
pub mod drain;
pub mod fairness;
pub mod held;
pub mod history;
pub mod hostile;
pub mod html;
mod memory;
pub mod peer;
pub mod queue;
pub mod redact;
pub mod runtime;
mod server;
pub use server::Server;

use agentd::app::App;
use serde::Serialize;
use sqlx::PgPool;

/// What to run and how big.
#[derive(Debug, Clone)]
pub struct Opts {
    /// Smaller sizes (a few minutes in release).
    pub quick: bool,
    /// A database on the server to connect to for administration (`postgres`).
    pub server_url: String,
    /// Backlogs of the drain benchmark.
    pub backlogs: Vec<u64>,
    /// Worker concurrencies of the drain benchmark.
    pub concurrency: Vec<usize>,
    /// Repetitions per drain configuration (the median is reported).
    pub reps: usize,
    /// Longest time one drain repetition may take; the rate is then measured over what it did.
    pub max_secs: Option<f64>,
    /// Skip the apalis-postgres baseline.
    pub no_apalis: bool,
    /// Also run the plain `FOR UPDATE SKIP LOCKED` + DELETE reference loop.
    pub plain: bool,
    /// Skip graphile-worker (run by default when Node ≥ 22 and its harness are installed).
    pub no_peers: bool,
    /// agentd's drain also runs with this prefetch (and claims at least this big); 0: not.
    pub prefetch: u32,
    /// `history`: jobs per day (None: the default size).
    pub day_jobs: Option<u64>,
}

impl Opts {
    /// Picks `full` or `quick`.
    pub fn size<T>(&self, full: T, quick: T) -> T {
        if self.quick { quick } else { full }
    }
}

/// A target from the issue.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    AtLeast(f64),
    AtMost(f64),
}

impl Target {
    fn met(&self, v: f64) -> bool {
        match self {
            Target::AtLeast(t) => v >= *t,
            Target::AtMost(t) => v <= *t,
        }
    }
    fn text(&self) -> String {
        match self {
            Target::AtLeast(t) => format!(">= {}", num(*t)),
            Target::AtMost(t) => format!("<= {}", num(*t)),
        }
    }
}

/// One line of the table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub section: String,
    pub metric: String,
    pub value: Option<f64>,
    pub unit: String,
    /// Baselines measured in the same run: (label, value in the same unit).
    pub baselines: Vec<(String, f64)>,
    pub target: Option<Target>,
    pub note: String,
}

impl Row {
    /// A figure.
    pub fn new(section: &str, metric: impl Into<String>, value: f64, unit: &str) -> Self {
        Self {
            section: section.into(),
            metric: metric.into(),
            value: Some(value),
            unit: unit.into(),
            baselines: Vec::new(),
            target: None,
            note: String::new(),
        }
    }
    /// A line without a figure (an error, a skipped part).
    pub fn text(section: &str, metric: impl Into<String>, note: impl Into<String>) -> Self {
        Self {
            value: None,
            unit: String::new(),
            note: note.into(),
            ..Self::new(section, metric, 0.0, "")
        }
    }
    pub fn baseline(mut self, label: impl Into<String>, v: f64) -> Self {
        self.baselines.push((label.into(), v));
        self
    }
    pub fn target(mut self, t: Target) -> Self {
        self.target = Some(t);
        self
    }
    pub fn note(mut self, n: impl Into<String>) -> Self {
        self.note = n.into();
        self
    }
    /// Whether the figure meets its target (None: no target or no figure).
    pub fn met(&self) -> Option<bool> {
        Some(self.target?.met(self.value?))
    }
}

/// Everything measured in this run.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    /// Date, machine, server, command.
    pub header: Vec<(String, String)>,
    pub rows: Vec<Row>,
}

impl Report {
    pub fn push(&mut self, r: Row) {
        eprintln!("bench: {}", line(&r));
        self.rows.push(r);
    }

    /// The table.
    pub fn print(&self) {
        for (k, v) in &self.header {
            println!("{k:<10} {v}");
        }
        println!();
        let head = format!(
            "{:<10} {:<44} {:>16}  {:<50} {:<14} note",
            "section",
            "measurement",
            "agentd",
            "baseline (same run) → ratio agentd/baseline",
            "target"
        );
        println!("{head}");
        println!("{}", "-".repeat(head.len() + 10));
        for r in &self.rows {
            let value = r
                .value
                .map(|v| format!("{} {}", num(v), r.unit))
                .unwrap_or_else(|| "-".into());
            let base: Vec<String> = r
                .baselines
                .iter()
                .map(|(l, b)| match r.value {
                    Some(v) if *b > 0.0 => format!("{l} {} → ×{}", num(*b), ratio(v / b)),
                    _ => format!("{l} {}", num(*b)),
                })
                .collect();
            let target = match (r.target, r.met()) {
                (Some(t), Some(ok)) => format!("{} {}", t.text(), if ok { "ok" } else { "MISS" }),
                (Some(t), None) => t.text(),
                _ => String::new(),
            };
            println!(
                "{:<10} {:<44} {:>16}  {:<50} {:<14} {}",
                r.section,
                r.metric,
                value,
                base.join("; "),
                target,
                r.note
            );
        }
        let (met, missed) = self.targets();
        println!();
        println!("targets: {} met, {} missed", met, missed.len());
        for (factor, r) in missed {
            let t = r.target.map(|t| t.text()).unwrap_or_default();
            let v = r.value.map(num).unwrap_or_default();
            println!(
                "  MISS {} / {}: {v} {} vs {t} ({factor:.1}× short)",
                r.section, r.metric, r.unit
            );
        }
    }

    /// Rows meeting their target, and the misses with how far off they are, worst first.
    pub fn targets(&self) -> (usize, Vec<(f64, &Row)>) {
        let met = self.rows.iter().filter(|r| r.met() == Some(true)).count();
        let mut missed: Vec<(f64, &Row)> = self
            .rows
            .iter()
            .filter(|r| r.met() == Some(false))
            .filter_map(|r| {
                let v = r.value?;
                let factor = match r.target? {
                    Target::AtLeast(t) => t / v.max(f64::MIN_POSITIVE),
                    Target::AtMost(t) => v / t,
                };
                Some((factor, r))
            })
            .collect();
        missed.sort_by(|a, b| b.0.total_cmp(&a.0));
        (met, missed)
    }
}

fn line(r: &Row) -> String {
    let v = r
        .value
        .map(|v| format!("{} {}", num(v), r.unit))
        .unwrap_or_default();
    let b: Vec<String> = r
        .baselines
        .iter()
        .map(|(l, b)| format!("{l} {}", num(*b)))
        .collect();
    format!(
        "{} / {}: {v} {} {}",
        r.section,
        r.metric,
        b.join(", "),
        r.note
    )
}

/// A number for people: thousands separated, decimals only for small values.
pub fn num(v: f64) -> String {
    if v.abs() >= 1000.0 {
        let s = format!("{:.0}", v.abs());
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        if v < 0.0 { format!("-{out}") } else { out }
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A ratio with two significant digits below 1 (×0.0030, ×0.41) and two decimals above.
fn ratio(r: f64) -> String {
    if r >= 1.0 || r == 0.0 {
        format!("{r:.2}")
    } else {
        let digits = (1 - r.log10().floor() as i32).max(2) as usize;
        format!("{r:.digits$}")
    }
}

/// The median (of a non-empty slice).
pub fn median(xs: &[f64]) -> f64 {
    percentile(xs, 50.0)
}

/// The `p`th percentile by nearest rank.
pub fn percentile(xs: &[f64], p: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// Peak and current resident set size of this process, in MiB (`VmHWM`, `VmRSS`).
pub fn memory_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
            .unwrap_or(f64::NAN)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// `app` re-pointed at `pool`, with the offline provider and no HTTP server.
pub fn bench_app(app: &App, pool: PgPool) -> App {
    let mut config = (*app.config).clone();
    config.http.addr = String::new();
    App {
        pool,
        config: std::sync::Arc::new(config),
        provider: std::sync::Arc::new(agentd::llm::offline::OfflineProvider::default()),
        ..app.clone()
    }
}

/// Which parts to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Drain,
    Enqueue,
    Latency,
    Pgbench,
    Agent,
    Approvals,
    Memory,
    Redact,
    Hostile,
    History,
}

/// Runs `parts` in order into one report (a failing part becomes an error line).
pub async fn run(app: &App, opts: &Opts, parts: &[Part]) -> anyhow::Result<Report> {
    let server = Server::connect(&opts.server_url).await?;
    let mut report = Report {
        header: describe(&server).await,
        rows: Vec::new(),
    };
    let mut ctx = drain::Context::default();
    for part in parts {
        let started = std::time::Instant::now();
        eprintln!("bench: --- {part:?} ---");
        let res = match part {
            Part::Drain => drain::run(&server, app, opts, &mut report, &mut ctx).await,
            Part::Memory => memory::memory(&server, app, opts, &mut report, &mut ctx).await,
            Part::Enqueue => queue::enqueue(&server, opts, &mut report).await,
            Part::Latency => queue::latency(&server, app, opts, &mut report).await,
            Part::Pgbench => queue::pgbench(&server, app, &mut report, &ctx).await,
            Part::Agent => agent::run(&server, app, opts, &mut report).await,
            Part::Redact => {
                redact::run(opts.quick, &mut report);
                Ok(())
            }
            Part::Approvals => approvals::run(&server, app, opts, &mut report).await,
            Part::Hostile => hostile::run(&server, app, &mut report).await,
            Part::History => history::run(&server, app, opts, &mut report).await,
        };
        if let Err(e) = res {
            report.push(Row::text(
                &format!("{part:?}").to_lowercase(),
                "FAILED",
                format!("{e:#}"),
            ));
        }
        eprintln!(
            "bench: {part:?} took {:.1}s",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(report)
}

/// Date, machine, PostgreSQL server and command line, for the table's header.
async fn describe(server: &Server) -> Vec<(String, String)> {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default();
    let mem_gib = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map(|kb| kb / 1024.0 / 1024.0)
        .unwrap_or(f64::NAN);
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let pg: String = sqlx::query_scalar("SELECT current_setting('server_version') || ', shared_buffers ' || current_setting('shared_buffers') || ', synchronous_commit ' || current_setting('synchronous_commit')")
        .fetch_one(server.admin())
        .await
        .unwrap_or_default();
    let build = if cfg!(debug_assertions) {
        "debug build"
    } else {
        "release build"
    };
    vec![
        (
            "date".into(),
            chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string(),
        ),
        (
            "machine".into(),
            format!(
                "{cores} cores ({cpu}), {mem_gib:.0} GiB RAM, Linux {}",
                read("/proc/sys/kernel/osrelease").trim()
            ),
        ),
        (
            "postgres".into(),
            format!(
                "{pg} at {}:{}",
                server.opts.get_host(),
                server.opts.get_port()
            ),
        ),
        (
            "command".into(),
            format!(
                "{} ({build})",
                std::env::args().collect::<Vec<_>>().join(" ")
            ),
        ),
    ]
}
