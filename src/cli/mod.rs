//! The operator's interface (and what the black-box tests drive). Exit codes: 0 ok, 1 runtime
//! failure, 2 bad input — the message names what was wrong.

mod approvals;
mod bench;
mod demo;
mod dev;
mod documents;
mod enqueue;
mod eval;
mod jobs;
mod keys;
mod orgs;
mod output;
mod report;
mod runs;
mod serve;
mod status;
mod suggestions;
mod worker;

use crate::app::App;
use crate::catalog::Catalog;
use crate::config::Config;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// An error caused by the caller's input (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

pub(crate) fn bad(msg: impl std::fmt::Display) -> anyhow::Error {
    BadInput(msg.to_string()).into()
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
    Worker(worker::WorkerCmd),
    /// Enqueue a job.
    #[command(subcommand)]
    Enqueue(enqueue::EnqueueCmd),
    /// Inspect and manage jobs.
    #[command(subcommand)]
    Jobs(jobs::JobsCmd),
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
    Demo(demo::DemoCmd),
    /// Throughput and latency measurements: runs the `agentd-bench` binary (a workspace member,
    /// `cargo build -p agentd-bench`) with these arguments; `agentd bench --help` lists its parts.
    #[command(disable_help_flag = true)]
    Bench(bench::BenchArgs),
    /// Auto-create over labelled samples: status, rounds, tokens, field recall, value accuracy.
    Eval(eval::EvalCmd),
    /// The HTTP API (see docs/http-api.md) plus /healthz /readyz /metrics.
    Serve(serve::ServeCmd),
    /// serve, the console and a worker in one process on the embedded defaults, with a dev org,
    /// a fresh admin key and the samples; prints the console URL, the key and a curl upload line.
    Dev(dev::DevCmd),
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

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Bench(args) = &cli.command {
        return bench::exec(&cli, args);
    }
    block_on_exit("agentd", run(cli))
}

/// Runs `work` on a new multi-threaded runtime and maps its result to the exit code (0 ok, 2 bad
/// input, config or job files, 1 anything else), printing the error as `<name>: …`. `agentd-bench`
/// exits the same way.
#[doc(hidden)]
pub fn block_on_exit(
    name: &str,
    work: impl std::future::Future<Output = anyhow::Result<()>>,
) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{name}: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(work) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A bad job file is a ConfigError too (`catalog::CatalogError`).
            let input = e.downcast_ref::<BadInput>().is_some()
                || e.downcast_ref::<crate::config::ConfigError>().is_some();
            eprintln!("{name}: {e:#}");
            ExitCode::from(if input { 2 } else { 1 })
        }
    }
}

/// Loads config and job files (exit 2 on a bad one), sets up logging.
pub fn load(cli: &Cli) -> anyhow::Result<(Config, Catalog)> {
    load_from(cli.config.as_deref(), cli.log_format.as_deref())
}

/// [`load`] from the two global options (`--config`, `--log-format`); `agentd-bench` takes the same.
#[doc(hidden)]
pub fn load_from(
    config_file: Option<&std::path::Path>,
    log_format: Option<&str>,
) -> anyhow::Result<(Config, Catalog)> {
    let mut config = Config::load(config_file)?;
    if let Some(f) = log_format {
        if !["text", "json"].contains(&f) {
            return Err(bad(format!(
                "--log-format must be text or json (got {f:?})"
            )));
        }
        config.log.format = crate::config::LogFormat::try_from(f.to_string()).map_err(bad)?;
    }
    let tools = crate::known_tool_names();
    let catalog = match config.jobs_dir() {
        Some(dir) => Catalog::load_dir(&dir, &tools)?,
        None => Catalog::builtin(&tools)?,
    };
    Ok((config, catalog))
}

/// Installs the tracing subscriber (text or JSON lines, to stderr), without trace export.
pub fn init_tracing(format: &str, default_filter: &str) {
    // checked: without an exporter nothing can fail
    let _ = crate::telemetry::install(format, default_filter, None);
}

/// Says at start which provider entries, model and endpoints the process will call (no key,
/// only whether one is set), and warns when it runs on the offline heuristic only: a key that
/// was meant to be there and is not shows at once, not in the proposals.
pub fn log_providers(llm: &crate::config::LlmConfig) {
    use crate::config::ProviderKind;
    let endpoints = llm.endpoints();
    for (name, kind, endpoint, key) in &endpoints {
        if *kind == ProviderKind::Offline {
            continue;
        }
        tracing::info!(
            provider = %name,
            kind = kind.as_str(),
            model = %llm.model,
            endpoint = %endpoint,
            api_key = if *key { "set" } else { "not set" },
            "model provider"
        );
        if !*key && *kind == ProviderKind::Anthropic {
            tracing::warn!(provider = %name, "no API key for {name}: set ANTHROPIC_API_KEY or llm.api_key");
        }
    }
    let anthropic_unused = endpoints.iter().all(|e| e.1 != ProviderKind::Anthropic)
        && crate::config::env_var("ANTHROPIC_API_KEY").is_some();
    if anthropic_unused && llm.providers.is_empty() {
        tracing::warn!(
            "ANTHROPIC_API_KEY is set but unused: llm.provider is {} (set \
             AGENTD_LLM__PROVIDER=anthropic to use it)",
            llm.provider.as_str()
        );
    }
    if endpoints.iter().all(|e| e.1 == ProviderKind::Offline) {
        tracing::warn!(
            "no model provider is configured: runs use the OFFLINE HEURISTIC (no model is \
             called). Set OPENAI_API_KEY, ANTHROPIC_API_KEY, or OPENAI_BASE_URL for a local \
             OpenAI-compatible server (llama.cpp, vLLM, Ollama)"
        );
    }
}

async fn connect(config: &Config) -> anyhow::Result<crate::db::Database> {
    let db = crate::db::connect(&config.database).await?;
    Ok(db)
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let (config, catalog) = load(&cli)?;
    // The worker logs its work; one-shot commands only warnings, so their output stays readable.
    let default_filter = if matches!(
        cli.command,
        Command::Worker(_) | Command::Serve(_) | Command::Dev(_)
    ) {
        "info,sqlx=warn"
    } else {
        "warn,sqlx=warn"
    };
    let telemetry = crate::telemetry::install(
        config.log.format.as_str(),
        default_filter,
        Some(&config.otel),
    )?;
    let result = run_with(config, catalog, cli.command).await;
    // Whatever the outcome, the spans of this run reach the collector.
    telemetry.shutdown().await;
    result
}

async fn run_with(mut config: Config, catalog: Catalog, command: Command) -> anyhow::Result<()> {
    if matches!(command, Command::Serve(_)) {
        serve::bound_statements(&mut config);
    }
    if matches!(
        command,
        Command::Worker(_) | Command::Serve(_) | Command::Dev(_)
    ) {
        log_providers(&config.llm);
    }
    let db = connect(&config).await?;
    if !matches!(command, Command::Migrate) {
        crate::db::migrate(&db.pool).await?;
    }
    let app = App::new(db.pool.clone(), crate::clock::system(), config, catalog);
    let result = match command {
        // dev opens a second pool for its API on the same database.
        Command::Dev(c) => dev::run(&app, &db, c).await,
        command => dispatch(&app, command).await,
    };
    crate::db::pooling::close(&app.pool, std::time::Duration::from_secs(5)).await;
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
        Command::Worker(w) => worker::run(app, w).await,
        Command::Enqueue(e) => enqueue::run(app, e).await,
        Command::Jobs(j) => jobs::run(app, j).await,
        Command::Status(f) => status::run(app, f.json).await,
        Command::Documents(c) => documents::run(app, c).await,
        Command::Approvals(c) => approvals::run(app, c).await,
        Command::Runs(c) => runs::run(app, c).await,
        Command::Suggestions(c) => suggestions::run(app, c).await,
        Command::Demo(c) => demo::run(app, c).await,
        // bench: handled in `main` before any configuration or database work; dev: in
        // `run_with`, which holds the database.
        Command::Bench(_) | Command::Dev(_) => Ok(()),
        Command::Eval(c) => eval::run(app, c).await,
        Command::Serve(c) => serve::run(app, c).await,
        Command::Orgs(c) => orgs::run(app, c).await,
        Command::Keys(c) => keys::run(app, c).await,
    }
}
