//! `agentd serve [--addr] [--ops-addr]`: the HTTP API (plus `/healthz`, `/readyz`) over the same
//! database as the workers, until SIGINT/SIGTERM; `/metrics` on the operator's address only.

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
    /// The operator's listener for `/metrics` and the detailed `/readyz`, host:port; none by
    /// default. Never the public address: metrics name kinds, endpoints and queue depths.
    #[arg(long, env = "AGENTD_SERVE_OPS_ADDR")]
    pub ops_addr: Option<String>,
}

/// Runs the API server.
pub async fn run(app: &App, cmd: ServeCmd) -> anyhow::Result<()> {
    let cipher = crate::llm::org_keys::Cipher::from_config(&app.config.llm);
    crate::llm::org_keys::check_startup(&app.pool, cipher.as_deref())
        .await
        .map_err(|e| match e {
            e @ crate::llm::org_keys::StartupCheckError::Database(_) => anyhow::Error::new(e),
            e => bad(e),
        })?;
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
    let ops = match cmd.ops_addr.as_deref().filter(|a| !a.is_empty()) {
        None => None,
        Some(a) => {
            let at: std::net::SocketAddr = a.parse().map_err(|_| {
                bad(format!(
                    "--ops-addr must be host:port, e.g. 127.0.0.1:9188 (got {a:?})"
                ))
            })?;
            if at == addr {
                return Err(bad(
                    "--ops-addr must differ from --addr: /metrics is for operators, not the public port",
                ));
            }
            let l = tokio::net::TcpListener::bind(at)
                .await
                .map_err(|e| bad(format!("--ops-addr {at}: cannot listen: {e}")))?;
            eprintln!(
                "agentd serve: /metrics and /readyz for operators on http://{}",
                l.local_addr()?
            );
            Some(l)
        }
    };
    let stop = CancellationToken::new();
    crate::app::cancel_on_signals(stop.clone());
    tracing::info!(addr = %local, "serving the API on /v1, and /healthz /readyz");
    eprintln!(
        "agentd serve: listening on http://{local} (API under /v1, OpenAPI at /v1/openapi.json)"
    );
    crate::api::serve(listener, ops, app.clone(), stop).await?;
    Ok(())
}
