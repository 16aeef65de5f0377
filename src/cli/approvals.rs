//! `agentd approvals list|show|approve|reject`: the person's side of pending approvals.
//! Deciding goes through [`crate::approvals::decide`] (one transaction: lock, TTL, snapshot
//! re-check, execute as `human:<who>`), so a second decision never runs the action twice.

use super::bad;
use super::output::{ListOpts, print_json, print_list};
use crate::app::App;
use crate::approvals::{self, DecideError, DecideOutcome, Decision};
use crate::store::approvals::{self as store, ApprovalRow, ApprovalStatus};
use crate::store::runs;
use clap::Subcommand;
use serde_json::{Value, json};
use uuid::Uuid;

/// Approval commands.
#[derive(Subcommand, Debug)]
pub enum ApprovalsCmd {
    /// Approvals, newest first (states: pending, executed, rejected, expired, stale, failed).
    List {
        /// Only this org (id or name).
        #[arg(long)]
        org: Option<String>,
        #[command(flatten)]
        opts: ListOpts,
    },
    /// One approval: action, snapshot and hash, times, state, decision, result and history.
    Show {
        id: Uuid,
        #[arg(long)]
        json: bool,
    },
    /// Approve: re-check the snapshot and, if nothing changed and the TTL holds, execute.
    Approve {
        id: Uuid,
        /// Who decides (recorded as `human:<who>` on the approval and its audit row).
        #[arg(long, value_name = "WHO")]
        by: String,
        /// Approve these arguments (a JSON object) instead of the proposed ones: validated
        /// against the tool's schema, kept on the approval's document, re-hashed, audited as
        /// `edited`.
        #[arg(long, value_name = "JSON")]
        args: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Run the expiry sweep now, in this process, with progress (what an `approval_expiry` job does).
    Sweep {
        /// Only these approvals (default: all pending).
        #[arg(long, value_delimiter = ',')]
        ids: Vec<Uuid>,
        #[arg(long)]
        json: bool,
    },
    /// Reject with a reason: nothing is executed.
    Reject {
        id: Uuid,
        /// Who decides (recorded as `human:<who>`).
        #[arg(long, value_name = "WHO")]
        by: String,
        /// Why (1–500 characters); kept on the approval and its audit row.
        #[arg(long)]
        reason: String,
        #[arg(long)]
        json: bool,
    },
}

/// Runs an approvals command.
pub async fn run(app: &App, cmd: ApprovalsCmd) -> anyhow::Result<()> {
    match cmd {
        ApprovalsCmd::Sweep { ids, json: as_json } => {
            let mut sweeper = crate::jobs::approval_expiry::ApprovalExpiry::sweeper(app);
            if !as_json {
                sweeper.progress =
                    Some(std::sync::Arc::new(|r: &crate::approvals::SweepReport| {
                        eprint!(
                            "\r  sweep: {} checked, {} expired, {} stale",
                            r.checked, r.expired, r.stale
                        );
                    }));
            }
            let only = (!ids.is_empty()).then_some(ids.as_slice());
            let report = sweeper.run_once(only).await?;
            if as_json {
                print_json(&report)?;
            } else {
                eprintln!();
                println!(
                    "sweep done: {} checked, {} expired, {} stale, {} re-proposal(s) enqueued, {} purged",
                    report.checked,
                    report.expired,
                    report.stale,
                    report.reproposals_enqueued,
                    report.purged
                );
            }
            Ok(())
        }
        ApprovalsCmd::List { org, opts } => list(app, org, opts).await,
        ApprovalsCmd::Show { id, json: as_json } => show(app, id, as_json).await,
        ApprovalsCmd::Approve {
            id,
            by,
            args,
            json: as_json,
        } => {
            let edited_args = match args {
                None => None,
                Some(a) => {
                    let v: Value = serde_json::from_str(&a)
                        .map_err(|e| bad(format!("--args is not valid JSON: {e}")))?;
                    if !v.is_object() {
                        return Err(bad("--args must be a JSON object"));
                    }
                    Some(v)
                }
            };
            let extra = approvals::DecisionExtra {
                reason: None,
                edited_args,
            };
            let by = checked_by(&by)?;
            decide(app, id, Decision::Approve { by }, extra, as_json).await
        }
        ApprovalsCmd::Reject {
            id,
            by,
            reason,
            json: as_json,
        } => {
            let by = checked_by(&by)?;
            let reason = reason.trim().to_string();
            if reason.is_empty() || reason.chars().count() > 500 {
                return Err(bad(
                    "--reason must say why the action is rejected (1–500 characters)",
                ));
            }
            let extra = approvals::DecisionExtra {
                reason: Some(reason),
                edited_args: None,
            };
            decide(app, id, Decision::Reject { by }, extra, as_json).await
        }
    }
}

fn checked_by(by: &str) -> anyhow::Result<String> {
    let by = by.trim();
    if by.is_empty() {
        return Err(bad(
            "--by must name who decides, e.g. --by alice (got an empty value)",
        ));
    }
    Ok(by.to_string())
}

async fn list(app: &App, org: Option<String>, opts: ListOpts) -> anyhow::Result<()> {
    let (status, limit) = opts.checked::<ApprovalStatus>()?;
    let org_id = super::output::org_id(app, org.as_deref()).await?;
    let rows = store::list(&app.pool, org_id, status, limit).await?;
    let header = format!(
        "{:<36}  {:<8}  {:<18} {:<19}  {:<19}  decided_by",
        "id", "status", "tool", "created", "expires"
    );
    print_list(
        &rows,
        opts.json,
        Some("(no approvals)"),
        Some(header),
        |r| {
            format!(
                "{}  {:<8}  {:<18} {}  {}  {}",
                r.id,
                r.status,
                r.action.tool,
                r.created_at.format("%Y-%m-%d %H:%M:%S"),
                r.expires_at.format("%Y-%m-%d %H:%M:%S"),
                r.decided_by.as_deref().unwrap_or("-")
            )
        },
    )
}

async fn show(app: &App, id: Uuid, as_json: bool) -> anyhow::Result<()> {
    let row = store::get(&app.pool, id)
        .await?
        .ok_or_else(|| bad(format!("no approval with id {id}")))?;
    let history = store::history(&app.pool, &row).await?;
    let kind = runs::kind_of(&app.pool, row.run_id).await?;
    if as_json {
        let mut v = report(&row);
        v["run_kind"] = json!(kind);
        v["history"] = serde_json::to_value(&history)?;
        print_json(&v)?;
        return Ok(());
    }
    println!("approval {} — {} (org {})", row.id, row.status, row.org_id);
    if let Some(sm) = &row.summary {
        println!("  summary:  {sm}");
    }
    println!(
        "  action:   {}({}){}",
        row.action.tool,
        row.action.args,
        if row.edited { " (edited)" } else { "" }
    );
    if let Some(r) = &row.rationale {
        println!("  why:      {r}");
    }
    match (row.run_id, &kind) {
        (Some(r), Some(k)) => println!(
            "  proposed: by run {r} ({k}), call {}",
            row.call_id.as_deref().unwrap_or("-")
        ),
        (Some(r), None) => println!("  proposed: by run {r}"),
        (None, _) => println!("  proposed: outside a run"),
    }
    println!("  created:  {}", row.created_at.to_rfc3339());
    println!("  expires:  {}", row.expires_at.to_rfc3339());
    println!("  hash:     {}", row.snapshot_hash);
    println!("  snapshot: {}", row.snapshot);
    if let (Some(by), Some(at)) = (&row.decided_by, row.decided_at) {
        println!("  decided:  {} by {by} at {}", row.status, at.to_rfc3339());
    }
    if let Some(r) = &row.result {
        println!("  result:   {r}");
    }
    println!(
        "  chain:    {} depth {} (re-propose when stale: {})",
        row.chain.id, row.chain.depth, row.repropose
    );
    println!("history:");
    for a in &history {
        println!("{}", super::output::audit_line(a));
    }
    if history.is_empty() {
        println!("  (no audit rows)");
    }
    Ok(())
}

/// The approval as data (what `show --json` prints, before the history).
fn report(r: &ApprovalRow) -> Value {
    let mut v = serde_json::to_value(approvals::view(r)).expect("an approval serializes");
    v["org_id"] = json!(r.org_id);
    v["repropose"] = json!(r.repropose);
    v["chain_id"] = json!(r.chain.id);
    v["chain_depth"] = json!(r.chain.depth);
    v
}

async fn decide(
    app: &App,
    id: Uuid,
    decision: Decision,
    extra: approvals::DecisionExtra,
    as_json: bool,
) -> anyhow::Result<()> {
    let row = store::get(&app.pool, id)
        .await?
        .ok_or_else(|| bad(format!("no approval with id {id}")))?;
    // The tools run with the settings (model, excerpt size) of the kind that proposed them.
    let kind = runs::kind_of(&app.pool, row.run_id).await?;
    let env = app.approval_tool_env(kind.as_deref());
    let out = match approvals::decide(&app.pool, &app.clock, &env, id, None, decision, extra).await
    {
        Ok(o) => o,
        Err(DecideError::InvalidEdit(m)) => return Err(bad(format!("--args: {m}"))),
        Err(e @ DecideError::OrgInactive(_)) => return Err(bad(e.to_string())),
        // Purged between the read above and the lock.
        Err(DecideError::NotFound(_)) => return Err(bad(format!("no approval with id {id}"))),
        Err(e) => return Err(e.into()),
    };
    if as_json {
        print_json(&out)?;
        return Ok(());
    }
    let after = store::get(&app.pool, id).await?.unwrap_or(row);
    print_outcome(&after, &out);
    Ok(())
}

fn print_outcome(row: &ApprovalRow, out: &DecideOutcome) {
    let id = out.approval_id;
    let by = row.decided_by.as_deref().unwrap_or("-");
    if !out.changed {
        let at = row.decided_at.map(|t| t.to_rfc3339()).unwrap_or_default();
        println!(
            "approval {id} was already {} (by {by} at {at}); nothing changed",
            out.status
        );
        return;
    }
    match out.status {
        ApprovalStatus::Executed => {
            println!(
                "approval {id}: executed {}({}) as {by}",
                row.action.tool, row.action.args
            );
            if let Some(r) = &out.result {
                println!("  result: {r}");
            }
        }
        ApprovalStatus::Rejected => println!(
            "approval {id}: rejected by {by} ({}); nothing executed",
            row.decision_reason.as_deref().unwrap_or("no reason")
        ),
        ApprovalStatus::Expired => println!(
            "approval {id}: expired (its TTL ended at {}); nothing executed",
            row.expires_at.to_rfc3339()
        ),
        ApprovalStatus::Stale => {
            println!(
                "approval {id}: stale — the data changed since it was proposed; nothing executed"
            );
            match &out.changes {
                Some(Value::Object(changes))
                    if changes.values().all(|c| c.get("before").is_some()) =>
                {
                    for (key, c) in changes {
                        println!("  {key}: {} → {}", c["before"], c["after"]);
                    }
                }
                Some(other) => println!("  changed: {other}"),
                None => {}
            }
        }
        ApprovalStatus::Failed => println!(
            "approval {id}: failed — {}; nothing was changed",
            out.result
                .as_ref()
                .and_then(|r| r["error"].as_str())
                .unwrap_or("the tool returned an error")
        ),
        ApprovalStatus::Pending => println!("approval {id}: pending"),
    }
}
