//! The operator's interface (and what the black-box tests drive). Exit codes: 0 ok, 1 runtime
//! failure, 2 bad input — the message names what was wrong.

mod approvals;
mod bench;
mod documents;
mod eval;
mod keys;
mod orgs;
mod runs;
mod serve;
mod suggestions;

/// Library access to what `agentd documents` does (tests and producers use it).
pub mod documents_api {
    pub use super::documents::{SAMPLES, add_document, document_report};
}

use crate::app::{App, WorkerArgs};
use crate::catalog::Catalog;
use crate::config::Config;
use crate::queue::{self, NewJob, store};
use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use tokio_util::sync::CancellationToken;

/// An error caused by the caller's input (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

pub(crate) fn bad(msg: impl Into<String>) -> anyhow::Error {
    BadInput(msg.into()).into()
}

#[derive(Parser, Debug)]
#[command(
    name = "agentd",
    version,
    about = "Durable job-queue worker with a headless LLM agent"
)]
pub struct Cli {
    /// Extra config file (TOML) layered over config/default.toml.
    #[arg(long, global = true, env = "AGENTD_CONFIG")]
    pub config: Option<PathBuf>,
    /// Log format: text or json (overrides log.format).
    #[arg(long, global = true)]
    pub log_format: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Apply database migrations.
    Migrate,
    /// Run workers, cron, rescuer, retention and /healthz /readyz /metrics until SIGINT/SIGTERM.
    Worker(WorkerCmd),
    /// Enqueue a job.
    #[command(subcommand)]
    Enqueue(EnqueueCmd),
    /// Inspect and manage jobs.
    #[command(subcommand)]
    Jobs(JobsCmd),
    /// Queue depth, oldest ready job, running, dead, recent failures.
    Status(JsonFlag),
    /// Upload documents, inspect and decide their proposals.
    #[command(subcommand)]
    Documents(documents::DocumentsCmd),
    /// Pending approvals: list, show, approve, reject.
    #[command(subcommand)]
    Approvals(approvals::ApprovalsCmd),
    /// Suggestions: list, dismiss (with a reason), shown.
    #[command(subcommand)]
    Suggestions(suggestions::SuggestionsCmd),
    /// Agent runs: list, show (transcript and audit).
    #[command(subcommand)]
    Runs(runs::RunsCmd),
    /// The main job on the embedded defaults: sample org and documents, workers until drained, a report.
    Demo(documents::DemoCmd),
    /// Throughput and latency measurements.
    Bench(bench::BenchCmd),
    /// Auto-create over labelled samples: status, rounds, tokens, field recall, value accuracy.
    Eval(eval::EvalCmd),
    /// The HTTP API (see README "HTTP API") plus /healthz /readyz /metrics.
    Serve(serve::ServeCmd),
    /// Organisations: create one with its first API key.
    #[command(subcommand)]
    Orgs(orgs::OrgsCmd),
    /// API keys: create, list, revoke.
    #[command(subcommand)]
    Keys(keys::KeysCmd),
}

#[derive(Args, Debug)]
pub struct JsonFlag {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct WorkerCmd {
    /// Comma-separated kinds to serve (default: all).
    #[arg(long, value_delimiter = ',')]
    pub kinds: Vec<String>,
    /// Concurrency per kind (default: queue.concurrency of each job file).
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Do not run the cron scheduler in this process.
    #[arg(long)]
    pub no_cron: bool,
}

#[derive(Subcommand, Debug)]
pub enum EnqueueCmd {
    /// Propose schema, prompt and extraction for a document.
    AutoCreate {
        #[arg(long)]
        org: String,
        #[arg(long)]
        document: String,
        /// Run again even if the document already has a proposal.
        #[arg(long)]
        force: bool,
    },
    /// Nightly suggestions for one org (unique per org and night).
    Proactive {
        #[arg(long)]
        org: String,
        /// The night, YYYY-MM-DD (default: today, UTC).
        #[arg(long)]
        night: Option<chrono::NaiveDate>,
    },
    /// Expire and re-validate pending approvals now.
    ApprovalExpiry {
        /// Only these approvals (default: all pending).
        #[arg(long, value_delimiter = ',')]
        approval_ids: Vec<uuid::Uuid>,
    },
    /// Any kind with a raw JSON payload (for producers and tests).
    Raw {
        #[arg(long)]
        kind: String,
        #[arg(long)]
        payload: String,
        #[arg(long)]
        unique_key: Option<String>,
        /// RFC 3339 time; default now.
        #[arg(long)]
        run_at: Option<chrono::DateTime<chrono::Utc>>,
        #[arg(long, default_value_t = 0)]
        priority: i16,
        #[arg(long)]
        max_attempts: Option<i32>,
    },
}

#[derive(Subcommand, Debug)]
pub enum JobsCmd {
    /// Jobs, newest first.
    List {
        #[arg(long)]
        kind: Option<String>,
        #[arg(long)]
        state: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
        #[arg(long)]
        json: bool,
    },
    /// One job.
    Show {
        id: i64,
        #[arg(long)]
        json: bool,
    },
    /// Put a dead or cancelled job back in the queue with a fresh attempt budget.
    Retry { id: i64 },
    /// Cancel an available or running job.
    Cancel { id: i64 },
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("agentd: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let input = e.downcast_ref::<BadInput>().is_some()
                || e.downcast_ref::<crate::config::ConfigError>().is_some()
                || e.downcast_ref::<crate::catalog::CatalogError>().is_some();
            eprintln!("agentd: {e:#}");
            ExitCode::from(if input { 2 } else { 1 })
        }
    }
}

/// Loads config and job files (exit 2 on a bad one), sets up logging.
pub fn load(cli: &Cli) -> anyhow::Result<(Config, Catalog)> {
    let mut config = Config::load(cli.config.as_deref())?;
    if let Some(f) = &cli.log_format {
        if !["text", "json"].contains(&f.as_str()) {
            return Err(bad(format!(
                "--log-format must be text or json (got {f:?})"
            )));
        }
        config.log.format = f.clone();
    }
    let tools = crate::known_tool_names();
    let catalog = match config.jobs_dir() {
        Some(dir) => Catalog::load_dir(&dir, &tools)?,
        None => Catalog::builtin(&tools)?,
    };
    Ok((config, catalog))
}

/// Installs the tracing subscriber (text or JSON lines, to stderr).
pub fn init_tracing(format: &str, default_filter: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("AGENTD_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if format == "json" {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
}

async fn connect(config: &Config) -> anyhow::Result<crate::db::Database> {
    let db = crate::db::connect(&config.database).await?;
    Ok(db)
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let (config, catalog) = load(&cli)?;
    // The worker logs its work; one-shot commands only warnings, so their output stays readable.
    let default_filter = if matches!(cli.command, Command::Worker(_) | Command::Serve(_)) {
        "info,sqlx=warn"
    } else {
        "warn,sqlx=warn"
    };
    init_tracing(&config.log.format, default_filter);
    let db = connect(&config).await?;
    if !matches!(cli.command, Command::Migrate) {
        crate::db::migrate(&db.pool).await?;
    }
    let app = App::new(db.pool.clone(), crate::clock::system(), config, catalog);
    let result = dispatch(&app, cli.command).await;
    app.pool.close().await;
    drop(db);
    result
}

async fn dispatch(app: &App, command: Command) -> anyhow::Result<()> {
    match command {
        Command::Migrate => {
            crate::db::migrate(&app.pool).await?;
            println!("migrations applied");
            Ok(())
        }
        Command::Worker(w) => worker(app, w).await,
        Command::Enqueue(e) => enqueue(app, e).await,
        Command::Jobs(j) => jobs(app, j).await,
        Command::Status(f) => status(app, f.json).await,
        Command::Documents(c) => documents::run(app, c).await,
        Command::Approvals(c) => approvals::run(app, c).await,
        Command::Runs(c) => runs::run(app, c).await,
        Command::Suggestions(c) => suggestions::run(app, c).await,
        Command::Demo(c) => documents::demo(app, c).await,
        Command::Bench(c) => bench::run(app, c).await,
        Command::Eval(c) => eval::run(app, c).await,
        Command::Serve(c) => serve::run(app, c).await,
        Command::Orgs(c) => orgs::run(app, c).await,
        Command::Keys(c) => keys::run(app, c).await,
    }
}

async fn worker(app: &App, w: WorkerCmd) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    crate::app::cancel_on_signals(shutdown.clone());
    let running = app
        .start_worker(
            WorkerArgs {
                kinds: w.kinds,
                concurrency: w.concurrency,
                cron: !w.no_cron,
            },
            shutdown,
        )
        .await
        .map_err(bad)?;
    let report = running.join().await;
    tracing::info!(
        succeeded = report.succeeded,
        failed = report.failed,
        released = report.released,
        "worker stopped"
    );
    Ok(())
}

async fn enqueue(app: &App, e: EnqueueCmd) -> anyhow::Result<()> {
    let spec = |kind: &str| app.catalog.get(kind).expect("builtin kind").queue.clone();
    let job = match e {
        EnqueueCmd::AutoCreate {
            org,
            document,
            force,
        } => {
            let q = spec("auto_create");
            let document_id = uuid::Uuid::parse_str(&document).map_err(|_| {
                bad(format!(
                    "--document must be a document id (UUID), got {document:?}"
                ))
            })?;
            let org_id = uuid::Uuid::parse_str(&org)
                .map_err(|_| bad(format!("--org must be an org id (UUID), got {org:?}")))?;
            let key = if force {
                format!("auto_create:{document_id}:{}", uuid::Uuid::new_v4())
            } else {
                format!("auto_create:{document_id}")
            };
            NewJob::new(
                "auto_create",
                json!({"org_id": org_id, "document_id": document_id, "force": force}),
            )
            .unique_key(key)
            .priority(q.priority)
            .max_attempts(q.max_attempts)
        }
        EnqueueCmd::Proactive { org, night } => {
            let q = spec("proactive_suggestion");
            let org_id = uuid::Uuid::parse_str(&org)
                .map_err(|_| bad(format!("--org must be an org id (UUID), got {org:?}")))?;
            let night = night.unwrap_or_else(|| app.clock.now().date_naive());
            NewJob::new(
                "proactive_suggestion",
                json!({"org_id": org_id, "night": night}),
            )
            .unique_key(format!("proactive_suggestion:{org_id}:{night}"))
            .unique_until_purged()
            .priority(q.priority)
            .max_attempts(q.max_attempts)
        }
        EnqueueCmd::ApprovalExpiry { approval_ids } => {
            let q = spec("approval_expiry");
            let payload = if approval_ids.is_empty() {
                json!({})
            } else {
                json!({"approval_ids": approval_ids})
            };
            NewJob::new("approval_expiry", payload)
                .priority(q.priority)
                .max_attempts(q.max_attempts)
        }
        EnqueueCmd::Raw {
            kind,
            payload,
            unique_key,
            run_at,
            priority,
            max_attempts,
        } => {
            if app.catalog.get(&kind).is_none() {
                return Err(bad(format!(
                    "--kind: unknown job kind `{kind}` (known: {}); no worker of this build would ever run it",
                    app.catalog
                        .kinds
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            let payload: serde_json::Value = serde_json::from_str(&payload)
                .map_err(|e| bad(format!("--payload is not valid JSON: {e}")))?;
            let mut job = NewJob::new(kind, payload).priority(priority);
            job.unique_key = unique_key;
            job.run_at = run_at;
            if let Some(m) = max_attempts {
                job = job.max_attempts(m);
            }
            job
        }
    };
    match queue::enqueue(&app.pool, &job).await {
        Ok(Some(id)) => println!("enqueued {} job {id}", job.kind),
        Ok(None) => println!(
            "skipped: a {} job with unique key {:?} already exists",
            job.kind,
            job.unique_key.unwrap_or_default()
        ),
        Err(queue::QueueError::Invalid(m)) => return Err(bad(m)),
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

async fn jobs(app: &App, cmd: JobsCmd) -> anyhow::Result<()> {
    match cmd {
        JobsCmd::List {
            kind,
            state,
            limit,
            json,
        } => {
            if let Some(s) = &state
                && !["available", "running", "succeeded", "dead", "cancelled"].contains(&s.as_str())
            {
                return Err(bad(format!(
                    "--state must be one of available, running, succeeded, dead, cancelled (got {s:?})"
                )));
            }
            let rows = store::list(&app.pool, kind.as_deref(), state.as_deref(), limit).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                println!(
                    "{:>8}  {:<22} {:<10} {:>7}  {:<25} last_error",
                    "id", "kind", "state", "attempt", "run_at"
                );
                for r in rows {
                    println!(
                        "{:>8}  {:<22} {:<10} {:>3}/{:<3}  {:<25} {}",
                        r.id,
                        r.kind,
                        r.state,
                        r.attempt - r.released,
                        r.max_attempts,
                        r.run_at.format("%Y-%m-%d %H:%M:%S%.3f"),
                        r.last_error
                            .unwrap_or_default()
                            .chars()
                            .take(80)
                            .collect::<String>()
                    );
                }
            }
        }
        JobsCmd::Show { id, json } => {
            let row = store::get(&app.pool, id)
                .await?
                .ok_or_else(|| bad(format!("no job with id {id}")))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&row)?);
            } else {
                println!("job {} ({}) — {}", row.id, row.kind, row.state);
                println!("  payload:      {}", row.payload);
                println!(
                    "  attempt:      {} counted of {} (fencing token {}, {} released)",
                    row.attempt - row.released,
                    row.max_attempts,
                    row.attempt,
                    row.released
                );
                println!("  priority:     {}   run_at: {}", row.priority, row.run_at);
                println!(
                    "  unique_key:   {}",
                    row.unique_key.as_deref().unwrap_or("-")
                );
                println!(
                    "  locked_by:    {}   lease until: {}",
                    row.locked_by.as_deref().unwrap_or("-"),
                    row.lease_expires_at
                        .map(|t| t.to_string())
                        .unwrap_or_else(|| "-".into())
                );
                println!(
                    "  created/started/finished: {} / {} / {}",
                    row.created_at,
                    row.started_at
                        .map(|t| t.to_string())
                        .unwrap_or_else(|| "-".into()),
                    row.finished_at
                        .map(|t| t.to_string())
                        .unwrap_or_else(|| "-".into())
                );
                println!(
                    "  last_error:   {}",
                    row.last_error.as_deref().unwrap_or("-")
                );
            }
        }
        JobsCmd::Retry { id } => match store::retry(&app.pool, id, app.clock.now()).await? {
            Some(_) => println!("job {id} is available again"),
            None => {
                return Err(bad(format!(
                    "job {id} cannot be retried: it does not exist or is running or succeeded"
                )));
            }
        },
        JobsCmd::Cancel { id } => {
            if store::cancel(&app.pool, id, app.clock.now()).await? {
                println!("job {id} cancelled");
            } else {
                return Err(bad(format!(
                    "job {id} cannot be cancelled: it does not exist or already finished"
                )));
            }
        }
    }
    Ok(())
}

async fn status(app: &App, json_out: bool) -> anyhow::Result<()> {
    use crate::store::status as st;
    let now = app.clock.now();
    let counts = store::counts(&app.pool).await?;
    let ages = store::ready_ages(&app.pool, now).await?;
    let running = st::running_jobs(&app.pool, now, 20).await?;
    let dead = store::list(&app.pool, None, Some("dead"), 5).await?;
    let runs = st::runs_since(&app.pool, now - chrono::Duration::hours(1)).await?;
    let approvals = st::approvals(&app.pool, now + chrono::Duration::hours(1)).await?;
    let budgets = st::budgets(&app.pool, now, 10).await?;
    let unimplemented = crate::jobs::unimplemented_kinds(app);
    if json_out {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "provider": app.provider.name(),
                "jobs": counts, "ready": ages, "running": running, "recent_dead": dead,
                "runs_last_hour": runs, "approvals": approvals, "budgets": budgets,
                "kinds_without_handler": unimplemented,
            }))
            .context("status JSON")?
        );
        return Ok(());
    }
    println!("provider: {}", app.provider.name());
    println!("jobs by kind and state:");
    for c in &counts {
        println!("  {:<22} {:<10} {:>8}", c.kind, c.state, c.count);
    }
    if counts.is_empty() {
        println!("  (no jobs)");
    }
    println!("ready now:");
    if ages.is_empty() {
        println!("  (nothing waiting)");
    }
    for a in &ages {
        println!(
            "  {:<22} {:>8} ready, oldest waiting {:.1}s",
            a.kind,
            a.ready,
            a.oldest_ready_secs.unwrap_or(0.0)
        );
    }
    if !running.is_empty() {
        println!("running:");
        for r in &running {
            println!(
                "  job {:<8} {:<22} attempt {} on {} for {:.1}s, lease {:.1}s left",
                r.id,
                r.kind,
                r.attempt,
                r.locked_by.as_deref().unwrap_or("?"),
                r.running_secs,
                r.lease_left_secs
            );
        }
    }
    if !dead.is_empty() {
        println!("recent dead jobs (agentd jobs retry ID):");
        for f in dead {
            println!(
                "  job {} {} attempt {}: {}",
                f.id,
                f.kind,
                f.attempt - f.released,
                f.last_error.unwrap_or_default()
            );
        }
    }
    println!("runs in the last hour:");
    if runs.is_empty() {
        println!("  (none)");
    }
    for r in &runs {
        println!(
            "  {:<22} {:<10} {:<16} {:>6}",
            r.kind,
            r.status,
            r.stop_reason.as_deref().unwrap_or("-"),
            r.count
        );
    }
    println!("approvals:");
    if approvals.is_empty() {
        println!("  (none)");
    }
    for a in &approvals {
        let soon = if a.status == "pending" {
            format!(" ({} expiring within the hour)", a.expiring_soon)
        } else {
            String::new()
        };
        println!("  {:<10} {:>6}{soon}", a.status, a.count);
    }
    if !budgets.is_empty() {
        println!("token budgets this month:");
        for b in &budgets {
            println!(
                "  {:<24} {:>10} / {:<10} ({:.0}%)",
                b.org_name,
                b.tokens_used,
                b.monthly_limit,
                100.0 * b.tokens_used as f64 / b.monthly_limit.max(1) as f64
            );
        }
    }
    if !unimplemented.is_empty() {
        println!(
            "NOT IMPLEMENTED (jobs of these kinds wait in the queue): {}",
            unimplemented.join(", ")
        );
    }
    Ok(())
}
