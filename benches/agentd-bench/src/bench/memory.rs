//! Peak memory after a drain.

use super::drain::{Context, agentd_once, human};
use super::runtime::LABEL;
use super::{Opts, Report, Row, Server};
use agentd::app::App;

/// Peak RSS after a drain at concurrency 32 (reuses the drain's figure when it ran).
pub async fn memory(
    server: &Server,
    app: &App,
    opts: &Opts,
    report: &mut Report,
    ctx: &mut Context,
) -> anyhow::Result<()> {
    let backlog = opts.backlogs.first().copied().unwrap_or(20_000);
    let (peak, now, backlog) = match ctx.memory {
        Some(m) => m,
        None => {
            let cap = opts.max_secs.unwrap_or(30.0);
            let (n, secs, _) = agentd_once(server, app, 32, backlog, cap).await?;
            eprintln!("bench:   drained {n} jobs in {secs:.2}s at c=32");
            let (peak, now) = super::memory_mib();
            (peak, now, backlog)
        }
    };
    let metric = format!("peak RSS after a {} drain at c=32, {LABEL}", human(backlog));
    report.push(Row::new("memory", metric, peak, "MiB").note(format!(
        "VmHWM of the whole bench process (worker + bench); VmRSS now {now:.1} MiB"
    )));
    Ok(())
}
