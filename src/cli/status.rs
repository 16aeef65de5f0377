//! `agentd status`: queue depth, oldest ready job, running, dead, recent failures.

use super::output::{print_json, print_list, print_section};
use crate::app::App;
use crate::store::status::{self as st, ApprovalStatus};
use anyhow::Context;
use serde_json::json;

pub(super) async fn run(app: &App, json_out: bool) -> anyhow::Result<()> {
    let now = app.clock.now();
    let glance = st::glance(&app.pool, None, now).await?;
    let budgets = st::budgets(&app.pool, now, 10).await?;
    let unimplemented = crate::jobs::unimplemented_kinds(app);
    let limits = crate::store::provider_limits::list(&app.pool).await?;
    if json_out {
        let mut v = serde_json::to_value(&glance)?;
        v["provider"] = json!(app.provider.name());
        v["budgets"] = json!(budgets);
        v["kinds_without_handler"] = json!(unimplemented);
        v["provider_limits"] = json!(limits);
        return print_json(&v).context("status JSON");
    }
    let st::Glance {
        jobs: counts,
        ready: ages,
        running,
        recent_dead: dead,
        runs_last_hour: runs,
        approvals,
        paused,
    } = glance;
    println!("provider: {}", app.provider.name());
    crate::llm::limits::status_lines(&limits)
        .iter()
        .for_each(|l| println!("{l}"));
    println!("jobs by kind and state:");
    print_list(&counts, false, Some("  (no jobs)"), None, |c| {
        format!("  {:<22} {:<10} {:>8}", c.kind, c.state, c.count)
    })?;
    println!("ready now:");
    print_list(&ages, false, Some("  (nothing waiting)"), None, |a| {
        let oldest = a.oldest_ready_secs.unwrap_or(0.0);
        format!(
            "  {:<22} {:>8} ready, oldest waiting {oldest:.1}s",
            a.kind, a.ready
        )
    })?;
    print_section(
        "paused kinds (claims stop; running jobs finish):",
        &paused,
        |p| format!("  {:<22} org {} since {}", p.kind, p.org_id, p.paused_at),
    );
    print_section("running:", &running, |r| {
        format!(
            "  job {:<8} {:<22} attempt {} on {} for {:.1}s, lease {:.1}s left",
            r.id,
            r.kind,
            r.attempt,
            r.locked_by.as_deref().unwrap_or("?"),
            r.running_secs,
            r.lease_left_secs
        )
    });
    print_section("recent dead jobs (agentd jobs retry ID):", &dead, |f| {
        format!(
            "  job {} {} attempt {}: {}",
            f.id,
            f.kind,
            f.attempt - f.released,
            f.last_error.as_deref().unwrap_or_default()
        )
    });
    println!("runs in the last hour:");
    print_list(&runs, false, Some("  (none)"), None, |r| {
        let stop = r.stop_reason.as_deref().unwrap_or("-");
        format!(
            "  {:<22} {:<10} {stop:<16} {:>6}",
            r.kind, r.status, r.count
        )
    })?;
    println!("approvals:");
    print_list(&approvals, false, Some("  (none)"), None, |a| {
        let soon = if a.status == ApprovalStatus::Pending {
            format!(" ({} expiring within the hour)", a.expiring_soon)
        } else {
            String::new()
        };
        format!("  {:<10} {:>6}{soon}", a.status, a.count)
    })?;
    print_section("token budgets this month:", &budgets, |b| {
        format!(
            "  {:<24} {:>10} / {:<10} ({:.0}%)",
            b.org_name,
            b.tokens_used,
            b.monthly_limit,
            100.0 * b.tokens_used as f64 / b.monthly_limit.max(1) as f64
        )
    });
    if !unimplemented.is_empty() {
        println!(
            "NOT IMPLEMENTED (jobs of these kinds wait in the queue): {}",
            unimplemented.join(", ")
        );
    }
    Ok(())
}
