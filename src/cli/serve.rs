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

/// A statement of a request never outlives the request (review D1): with no
/// `database.statement_timeout_ms` set, the API's sessions get the request timeout.
pub(super) fn bound_statements(config: &mut crate::config::Config) {
    if config.database.statement_timeout_ms == 0 {
        config.database.statement_timeout_ms = config.api.request_timeout_secs.saturating_mul(1000);
    }
}

/// Runs the API server.
pub async fn run(app: &App, cmd: ServeCmd) -> anyhow::Result<()> {
    check_org_keys(app).await?;
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
    eprintln!(
        "agentd serve: listening on http://{local} (API under /v1, OpenAPI at /v1/openapi.json)"
    );
    serve_until(app, listener, ops, stop).await
}

/// The org keys stored in the database can be read with the configured encryption key (exit 2
/// when not: the operator's to fix; 1 when the database does not answer).
pub(super) async fn check_org_keys(app: &App) -> anyhow::Result<()> {
    let cipher = crate::llm::org_keys::Cipher::from_config(&app.config.llm);
    crate::llm::org_keys::check_startup(&app.pool, cipher.as_deref())
        .await
        .map_err(|e| match e {
            e @ crate::llm::org_keys::StartupCheckError::Database(_) => anyhow::Error::new(e),
            e => bad(e),
        })
}

/// Serves the API (and the console) on `listener` until `stop` is cancelled; open requests end
/// first.
pub(super) async fn serve_until(
    app: &App,
    listener: tokio::net::TcpListener,
    ops: Option<tokio::net::TcpListener>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let local = listener.local_addr()?;
    tracing::info!(addr = %local, "serving the API on /v1, and /healthz /readyz");
    crate::api::serve(listener, ops, app.clone(), stop).await?;
    Ok(())
}
