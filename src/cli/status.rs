//! `agentd status`: queue depth, oldest ready job, running, dead, recent failures, and each
//! live worker's provider breakers (from its row of `agentd_workers`: breakers live in each
//! worker's memory, and every worker writes them there each heartbeat).

use super::output::{print_json, print_list, print_section};
use crate::app::App;
use crate::store::status::{self as st, ApprovalStatus};
use anyhow::Context;
use chrono::{DateTime, Utc};
use serde_json::json;

pub(super) async fn run(app: &App, json_out: bool) -> anyhow::Result<()> {
    let now = app.clock.now();
    let glance = st::glance(&app.pool, None, now).await?;
    let budgets = st::budgets(&app.pool, now, 10).await?;
    let usage = st::month_use(&app.pool, now, 10).await?;
    let unimplemented = crate::jobs::unimplemented_kinds(app);
    let limits = crate::store::provider_limits::list(&app.pool).await?;
    let workers = crate::store::workers::live(&app.pool, now).await?;
    if json_out {
        let mut v = serde_json::to_value(&glance)?;
        v["provider"] = json!(app.provider.name());
        v["budgets"] = json!(budgets);
        v["usage"] = json!(usage.iter().map(usage_json).collect::<Vec<_>>());
        v["kinds_without_handler"] = json!(unimplemented);
        v["provider_limits"] = json!(limits);
        v["workers"] = json!(workers);
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
    println!("workers (provider breakers as of each one's last heartbeat):");
    print_list(&workers, false, Some("  (no live worker)"), None, |w| {
        worker_lines(w, now).join("\n")
    })?;
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
    print_section(
        "model use this month (runs started, tokens, cost at llm.prices):",
        &usage,
        |o| {
            let u = &o.usage;
            let cost = match u.cost() {
                Ok(c) => c.to_string(),
                Err(why) => format!(
                    "n/a ({why}; {} priced)",
                    crate::config::format_usd(u.cost_nano_usd)
                ),
            };
            format!(
                "  {:<24} {:>6} runs {:>12} tokens  {cost}",
                o.org_name,
                u.runs,
                u.input_tokens + u.output_tokens
            )
        },
    );
    if !unimplemented.is_empty() {
        println!(
            "NOT IMPLEMENTED (jobs of these kinds wait in the queue): {}",
            unimplemented.join(", ")
        );
    }
    Ok(())
}

/// One org's line of `usage` in `agentd status --json`, shaped like `GET /v1/usage`.
fn usage_json(o: &st::OrgMonthUse) -> serde_json::Value {
    let u = &o.usage;
    let (cost_usd, cost_note) = match u.cost() {
        Ok(c) => (Some(c.dollars()), None),
        Err(why) => (None, Some(why)),
    };
    json!({
        "org_id": o.org_id, "org_name": o.org_name, "runs": u.runs,
        "tokens": u.input_tokens + u.output_tokens,
        "input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
        "cache_read_tokens": u.cache_read_tokens, "cache_write_tokens": u.cache_write_tokens,
        "cost_usd": cost_usd, "cost_note": cost_note,
        "priced_cost_usd": crate::config::NanoUsd(u.cost_nano_usd).dollars(),
    })
}

/// A live worker and its breakers: a line for the worker, one per provider entry.
fn worker_lines(w: &crate::store::workers::Worker, now: DateTime<Utc>) -> Vec<String> {
    use crate::llm::chain::breaker::{Shown, Snapshot};
    let seen = (now - w.seen_at).num_milliseconds() as f64 / 1000.0;
    let mut lines = vec![format!(
        "  {} ({}) up since {}, seen {seen:.1}s ago",
        w.id,
        w.kinds.join(", "),
        w.started_at.format("%Y-%m-%d %H:%M:%S UTC")
    )];
    let at = |t: DateTime<Utc>| t.format("%Y-%m-%d %H:%M:%S UTC").to_string();
    match serde_json::from_value::<Vec<Snapshot>>(w.breakers.clone()) {
        Ok(breakers) if breakers.is_empty() => {
            lines.push("    (no provider entries with a breaker)".into());
        }
        Ok(breakers) => lines.extend(breakers.iter().map(|b| {
            let since = b.since.map_or("the worker's start".into(), at);
            let extra = match (b.state, b.until) {
                (Shown::Open, Some(until)) => format!(", probe from {}", at(until)),
                (Shown::Closed, _) if b.failures > 0 => {
                    format!(", {} failure(s) in a row", b.failures)
                }
                _ => String::new(),
            };
            format!(
                "    {:<20} {:<9} since {since}{extra}",
                b.provider,
                b.state.as_str()
            )
        })),
        Err(e) => lines.push(format!("    (breakers unreadable: {e})")),
    }
    lines
}
