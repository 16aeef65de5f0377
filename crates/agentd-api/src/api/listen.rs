//! The connections of `agentd serve`: accepted here and served by hyper's HTTP/1 connection
//! with a timer, so a connection whose request head does not arrive in time is closed
//! (`api.header_read_timeout_secs`, review S5). `axum::serve` sets no timer: a client trickling
//! its headers a byte at a time held its connection (and a task) for as long as it liked.
//! Everything else is `axum::serve`'s behaviour: on `stop` the listener closes, connections
//! finish the request they are in and close, and the call returns when all have.

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Serves `router` on `listener` until `stop`, closing connections whose request head takes
/// longer than `header_read_timeout` to arrive.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    header_read_timeout: Duration,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    let graceful = GracefulShutdown::new();
    loop {
        let (stream, peer) = tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait, as axum::serve does.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        // The peer's address for the handlers (`auth.rs` counts refused tokens per source).
        let service = TowerToHyperService::new(tower::ServiceExt::map_request(
            router.clone(),
            move |mut req: axum::extract::Request<hyper::body::Incoming>| {
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                req
            },
        ));
        let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}
