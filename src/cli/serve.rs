//! `agentd serve [--addr]`: the HTTP API (plus `/healthz`, `/readyz`, `/metrics`) over the same
//! database as the workers, until SIGINT/SIGTERM.

use super::bad;
use crate::app::App;
use clap::Args;
use tokio_util::sync::CancellationToken;

/// Options of `agentd serve`.
#[derive(Args, Debug)]
pub struct ServeCmd {
    /// Where to listen, host:port.
    #[arg(long, default_value = "127.0.0.1:8080", env = "AGENTD_SERVE_ADDR")]
    pub addr: String,
}

/// Runs the API server.
pub async fn run(app: &App, cmd: ServeCmd) -> anyhow::Result<()> {
    let addr: std::net::SocketAddr = cmd.addr.parse().map_err(|_| {
        bad(format!(
            "--addr must be host:port, e.g. 127.0.0.1:8080 (got {:?})",
            cmd.addr
        ))
    })?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| bad(format!("--addr {addr}: cannot listen: {e}")))?;
    let local = listener.local_addr()?;
    let stop = CancellationToken::new();
    crate::app::cancel_on_signals(stop.clone());
    tracing::info!(addr = %local, "serving the API on /v1, and /healthz /readyz /metrics");
    eprintln!(
        "agentd serve: listening on http://{local} (API under /v1, OpenAPI at /v1/openapi.json)"
    );
    crate::api::serve(listener, app.clone(), stop).await?;
    Ok(())
}
