//! `agentd bench chaos` (issue 30, item 4): the chaos suite with 1,000 faults or more — the
//! driver and the invariants are `tests/chaos/`, shared with the short run of the test suite
//! (`tests/it/chaos.rs`) and included here by path. It starts a PostgreSQL cluster of its own,
//! `agentd serve` and 3 `agentd worker` processes (the `agentd` binary beside this one, or
//! `--agentd`), prints the faults by type, the jobs by kind and state, and every invariant with
//! its count; a violation prints the seed to replay and exits 1.

#[path = "../../../../tests/chaos/mod.rs"]
mod suite;

use clap::Args;
use std::path::PathBuf;

/// Options of `agentd bench chaos`.
#[derive(Args, Debug, Clone)]
pub struct ChaosCmd {
    /// Faults to inject.
    #[arg(long, default_value_t = 1000)]
    pub faults: u32,
    /// The seed of the fault plan (default: drawn, and printed).
    #[arg(long, env = "AGENTD_CHAOS_SEED")]
    pub seed: Option<u64>,
    /// Documents uploaded over the fault phase (default: 60 % of the faults).
    #[arg(long)]
    pub documents: Option<u32>,
    /// Organisations sharing the workload.
    #[arg(long, default_value_t = 5)]
    pub orgs: u32,
    /// Longest wait, seconds, for the queue to drain once the faults stop.
    #[arg(long, default_value_t = 900)]
    pub settle_secs: u64,
    /// The `agentd` binary the worker and API processes run (default: beside this one).
    #[arg(long)]
    pub agentd: Option<PathBuf>,
}

/// Runs the suite; an invariant violation is an error naming the seed.
pub async fn run(c: ChaosCmd) -> anyhow::Result<()> {
    if c.faults == 0 || c.orgs == 0 {
        return Err(crate::cli::bad("--faults and --orgs must be ≥ 1"));
    }
    let bin = match c.agentd {
        Some(p) => p,
        None => std::env::current_exe()?
            .parent()
            .map(|d| d.join("agentd"))
            .filter(|p| p.is_file())
            .ok_or_else(|| {
                crate::cli::bad(
                    "`agentd bench chaos` runs the `agentd` binary beside agentd-bench: build it \
                     (`cargo build --release -p agentd`) or name it with --agentd",
                )
            })?,
    };
    let seed = c.seed.unwrap_or_else(rand::random);
    let mut opts = suite::Opts::long(bin, seed);
    opts.faults = c.faults;
    opts.documents = c.documents.unwrap_or(c.faults * 3 / 5);
    opts.orgs = c.orgs;
    opts.settle_secs = c.settle_secs;
    let report = suite::run(&opts).await?;
    report.print();
    let v = report.violations();
    if v > 0 {
        anyhow::bail!(
            "{v} invariant violation(s); replay with {}={seed}",
            suite::SEED_ENV
        );
    }
    Ok(())
}
