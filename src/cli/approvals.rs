//! `agentd approvals list|show|approve|reject`. NOT IMPLEMENTED YET.

use crate::app::App;
use clap::Subcommand;

/// Approval commands.
#[derive(Subcommand, Debug)]
pub enum ApprovalsCmd {
    /// List approvals.
    List,
}

/// Runs an approvals command.
pub async fn run(_app: &App, _cmd: ApprovalsCmd) -> anyhow::Result<()> {
    Err(super::bad("agentd approvals is not implemented yet"))
}
