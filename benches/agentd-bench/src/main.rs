//! `agentd-bench`: agentd's benchmarks (docs/benchmarks.md). A workspace member of its own so
//! the shipped `agentd` binary carries no benchmark code; `agentd bench …` runs this binary with
//! the same arguments. Exit codes as `agentd`'s: 0 ok, 1 runtime failure, 2 bad input.

mod bench;
mod cli;
/// `agentd bench events`: written against the library's paths (`crate::app`, `crate::store`,
/// re-exported below), compiled only here.
mod events;

// What `events` (written inside the library) names as `crate::…`.
use agentd::webhooks::{delivery, verify};
use agentd::{app, clock, kinds, store};

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "agentd-bench",
    version,
    about = "agentd's benchmarks: figures and ratios against baselines measured in the same run"
)]
struct Args {
    /// Extra config file (TOML) layered over config/default.toml.
    #[arg(long, global = true, env = "AGENTD_CONFIG")]
    config: Option<PathBuf>,
    /// Log format: text or json (overrides log.format).
    #[arg(long, global = true)]
    log_format: Option<String>,
    #[command(subcommand)]
    part: cli::BenchPart,
}

fn main() -> ExitCode {
    agentd::cli::block_on_exit("agentd-bench", run(Args::parse()))
}

/// Configuration, the configured database (migrated), then the chosen part.
async fn run(args: Args) -> anyhow::Result<()> {
    let (config, catalog) =
        agentd::cli::load_from(args.config.as_deref(), args.log_format.as_deref())?;
    agentd::cli::init_tracing(config.log.format.as_str(), "warn,sqlx=warn");
    let db = agentd::db::connect(&config.database).await?;
    agentd::db::migrate(&db.pool).await?;
    let app = app::App::new(db.pool.clone(), clock::system(), config, catalog);
    let result = cli::run(&app, cli::BenchCmd { part: args.part }).await;
    agentd::db::pooling::close(&app.pool, std::time::Duration::from_secs(5)).await;
    drop(db);
    result
}
