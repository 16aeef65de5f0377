//! `agentd jobs`: list, show, retry and cancel jobs.

use super::bad;
use super::output::changed_or;
use super::output::{print_json, print_list};
use crate::app::App;
use crate::queue::{JobState, store};
use clap::Subcommand;

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

pub(super) async fn run(app: &App, cmd: JobsCmd) -> anyhow::Result<()> {
    match cmd {
        JobsCmd::List {
            kind,
            state,
            limit,
            json,
        } => {
            let state = state
                .map(|s| s.parse::<JobState>())
                .transpose()
                .map_err(|e| bad(format!("--state {e}")))?;
            let rows = store::list(&app.pool, kind.as_deref(), state, limit).await?;
            let header = format!(
                "{:>8}  {:<22} {:<10} {:>7}  {:<25} last_error",
                "id", "kind", "state", "attempt", "run_at"
            );
            print_list(&rows, json, None, Some(header), |r| {
                let error: String = r
                    .last_error
                    .iter()
                    .flat_map(|e| e.chars())
                    .take(80)
                    .collect();
                format!(
                    "{:>8}  {:<22} {:<10} {:>3}/{:<3}  {:<25} {error}",
                    r.id,
                    r.kind,
                    r.state,
                    r.attempt - r.released,
                    r.max_attempts,
                    r.run_at.format("%Y-%m-%d %H:%M:%S%.3f"),
                )
            })?;
        }
        JobsCmd::Show { id, json } => {
            let row = store::get(&app.pool, id)
                .await?
                .ok_or_else(|| bad(format!("no job with id {id}")))?;
            if json {
                print_json(&row)?;
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
        JobsCmd::Retry { id } => changed_or(
            store::retry(&app.pool, id, app.clock.now())
                .await?
                .is_some(),
            format!("job {id} is available again"),
            format!("job {id} cannot be retried: it does not exist or is running or succeeded"),
        )?,
        JobsCmd::Cancel { id } => changed_or(
            crate::jobs::cancel::cancel(&mut *app.pool.acquire().await?, id, app.clock.now())
                .await?,
            format!("job {id} cancelled"),
            format!("job {id} cannot be cancelled: it does not exist or already finished"),
        )?,
    }
    Ok(())
}
