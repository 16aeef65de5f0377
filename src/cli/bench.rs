//! `agentd bench …`: throughput and latency measurements. NOT IMPLEMENTED YET.

use crate::app::App;
use clap::Args;

/// Options of `agentd bench`.
#[derive(Args, Debug)]
pub struct BenchCmd {}

/// Runs the benchmarks.
pub async fn run(_app: &App, _cmd: BenchCmd) -> anyhow::Result<()> {
    Err(super::bad("agentd bench is not implemented yet"))
}
