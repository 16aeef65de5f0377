//! What the commands print, written once: pretty JSON for `--json`, a list with its header and
//! its empty marker, and the org an `--org` names.

use super::bad;
use crate::app::App;
use crate::store::states::State;
use serde::Serialize;
use uuid::Uuid;

/// `--status`, `--limit` and `--json` of a list of rows that have states.
#[derive(clap::Args, Debug)]
pub struct ListOpts {
    /// Only this state (see the command's description).
    #[arg(long)]
    pub status: Option<String>,
    /// At most this many (1–1000).
    #[arg(long, default_value_t = 50)]
    pub limit: i64,
    #[arg(long)]
    pub json: bool,
}

impl ListOpts {
    /// The state filter as an `S` and the limit, checked (exit 2 naming the option).
    pub(super) fn checked<S: State>(&self) -> anyhow::Result<(Option<S>, i64)> {
        let status = self.status.as_deref().map(str::parse::<S>).transpose();
        let status = status.map_err(|e| bad(format!("--status {e}")))?;
        let limit = self.limit;
        if !(1..=1000).contains(&limit) {
            return Err(bad(format!(
                "--limit must be between 1 and 1000 (got {limit})"
            )));
        }
        Ok((status, limit))
    }
}

/// `v` as pretty JSON on stdout.
pub(super) fn print_json(v: &impl Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// A list: with `--json` the rows as pretty JSON; else `empty` when there are none (if given),
/// otherwise `header` (if any) and one line per row.
pub(super) fn print_list<T: Serialize>(
    rows: &[T],
    as_json: bool,
    empty: Option<&str>,
    header: Option<String>,
    line: impl Fn(&T) -> String,
) -> anyhow::Result<()> {
    if as_json {
        return print_json(&rows);
    }
    match empty {
        Some(empty) if rows.is_empty() => println!("{empty}"),
        _ => {
            if let Some(h) = header {
                println!("{h}");
            }
            rows.iter().for_each(|r| println!("{}", line(r)));
        }
    }
    Ok(())
}

/// A titled section of `status`, left out when it has no rows.
pub(super) fn print_section<T>(title: &str, rows: &[T], line: impl Fn(&T) -> String) {
    if !rows.is_empty() {
        println!("{title}");
        rows.iter().for_each(|r| println!("{}", line(r)));
    }
}

/// The id of the org `--org` names (id or name), if it was given.
pub(super) async fn org_id(app: &App, org: Option<&str>) -> anyhow::Result<Option<Uuid>> {
    let Some(o) = org else { return Ok(None) };
    let found = crate::store::orgs::find(&app.pool, o).await?;
    let org = found.ok_or_else(|| bad(format!("--org: no org with id or name {o:?}")))?;
    Ok(Some(org.id))
}

/// The end of a command that changes one thing: `done` printed when it `changed` it, else an
/// error (exit 1) saying why it could not.
pub(super) fn changed_or(
    changed: bool,
    done: impl std::fmt::Display,
    refused: impl std::fmt::Display,
) -> anyhow::Result<()> {
    if changed {
        println!("{done}");
        Ok(())
    } else {
        Err(bad(refused))
    }
}

/// One audit row as `runs show` and `approvals show` print it: id, time, who, what, the
/// decision, the call, how long it took, and `ERROR` when it failed.
pub(super) fn audit_line(a: &crate::store::runs::AuditRow) -> String {
    format!(
        "  #{} {} {} {:<22} {:<10} {:<14} {} {}ms{}",
        a.id,
        a.created_at.format("%Y-%m-%d %H:%M:%S%.3f"),
        a.actor,
        a.tool,
        a.category,
        a.decision,
        a.call_id.as_deref().unwrap_or("-"),
        a.duration_ms,
        if a.is_error { " ERROR" } else { "" }
    )
}
