//! `agentd jobs`: list, show, retry and cancel jobs.

use super::bad;
use super::output::changed_or;
use super::output::{print_json, print_list};
use crate::app::App;
use crate::queue::{JobState, store};
use crate::store::api_reads::{self, JobFilter};
use chrono::{DateTime, Utc};
use clap::Subcommand;

/// An RFC 3339 time option (exit 2 naming `option` otherwise).
fn time(option: &str, raw: Option<&str>) -> anyhow::Result<Option<DateTime<Utc>>> {
    raw.map(|t| {
        DateTime::parse_from_rfc3339(t)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| {
                bad(format!(
                    "{option} must be an RFC 3339 time such as 2026-12-03T09:30:00Z ({e}; got {t:?})"
                ))
            })
    })
    .transpose()
}

#[derive(Subcommand, Debug)]
pub enum JobsCmd {
    /// Jobs, newest first (by creation): the filters of `GET /v1/jobs`, each optional.
    List {
        /// Only the jobs of this org (id or name; default: every org's and the service's).
        #[arg(long)]
        org: Option<String>,
        #[arg(long)]
        kind: Option<String>,
        /// available, running, succeeded, dead or cancelled.
        #[arg(long)]
        state: Option<String>,
        /// Only jobs created at or after this time (RFC 3339, e.g. 2026-12-03T09:00:00Z).
        #[arg(long)]
        created_after: Option<String>,
        /// Only jobs created before this time (RFC 3339).
        #[arg(long)]
        created_before: Option<String>,
        /// Only the jobs of this document (its id).
        #[arg(long)]
        document: Option<String>,
        /// At most this many (1–1000).
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
            org,
            kind,
            state,
            created_after,
            created_before,
            document,
            limit,
            json,
        } => {
            if let Some(k) = &kind
                && !crate::kinds::NAMES.contains(&k.as_str())
            {
                let known = crate::kinds::NAMES.join(", ");
                return Err(bad(format!("--kind must be one of {known} (got {k:?})")));
            }
            let state = state
                .map(|s| s.parse::<JobState>())
                .transpose()
                .map_err(|e| bad(format!("--state {e}")))?;
            let document = document
                .map(|d| {
                    d.parse::<uuid::Uuid>()
                        .map_err(|_| bad(format!("--document must be a document id (got {d:?})")))
                })
                .transpose()?;
            if !(1..=1000).contains(&limit) {
                return Err(bad(format!(
                    "--limit must be between 1 and 1000 (got {limit})"
                )));
            }
            let filter = JobFilter {
                kind,
                state,
                created_after: time("--created-after", created_after.as_deref())?,
                created_before: time("--created-before", created_before.as_deref())?,
                document,
            };
            let org = super::output::org_id(app, org.as_deref()).await?;
            let rows = api_reads::jobs_page(&app.pool, org, &filter, None, limit).await?;
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
