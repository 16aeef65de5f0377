//! `agentd dev [--addr] [--no-samples]`: everything a person needs to try agentd, in one
//! process on the embedded defaults (the database `connect` finds, a private cluster when
//! nothing answers on 5432; the configured provider, offline unless a key is set):
//!
//! - the HTTP API and the console (`serve`'s server) on `--addr`, 127.0.0.1:8080 by default (a
//!   port of the system's choosing, said in a log line, when the default is taken);
//! - a worker for every kind, with cron (`worker`'s start), under the same cancellation token;
//! - the org `dev`, created on the first start; each start makes it a fresh admin key (only hashes
//!   are stored, so an earlier key cannot be shown again), printed once on stdout;
//! - the samples uploaded with auto-create once: not when the org has documents already.
//!
//! Then it prints the console URL, the key and a `curl` upload line. SIGINT or SIGTERM stops
//! the server and drains the worker; the caller stops the private cluster.

use super::bad;
use super::worker::WorkerCmd;
use crate::api::{Role, create_key};
use crate::app::App;
use crate::documents::{SAMPLES, add_document};
use crate::store::documents::DocumentFilter;
use crate::store::{api_keys, orgs};
use clap::Args;
use std::net::SocketAddr;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Options of `agentd dev`.
#[derive(Args, Debug)]
pub struct DevCmd {
    /// Where the API and the console listen, host:port (the default falls back to a free port
    /// when taken; an address given here does not).
    #[arg(long, default_value = DEFAULT_ADDR)]
    pub addr: String,
    /// Do not upload the sample documents on the first start.
    #[arg(long)]
    pub no_samples: bool,
}

const DEFAULT_ADDR: &str = "127.0.0.1:8080";
/// The org `agentd dev` works in.
const ORG: &str = "dev";
/// The API's pool beside the worker's: one person's requests.
const API_CONNECTIONS: u32 = 10;

/// Runs `agentd dev` on `app` (the worker's pool) until SIGINT/SIGTERM.
pub async fn run(app: &App, db: &crate::db::Database, cmd: DevCmd) -> anyhow::Result<()> {
    let listener = listen(&cmd.addr).await?;
    let local = listener.local_addr()?;
    let (org, created) = dev_org(app).await?;
    let (_, key) = create_key(&app.pool, org, Role::Admin, app.clock.now()).await?;
    let samples = if cmd.no_samples {
        "not uploaded (--no-samples)".to_string()
    } else {
        upload_samples(app, org).await?
    };
    // The API on a pool of its own with serve's statement bound, the worker on the caller's.
    let api = api_app(app, db).await?;
    super::serve::check_org_keys(&api).await?;
    let stop = CancellationToken::new();
    crate::app::cancel_on_signals(stop.clone());
    let all = WorkerCmd {
        kinds: Vec::new(),
        concurrency: None,
        no_cron: false,
    };
    let worker = super::worker::start(app, all, stop.clone()).await?;
    let server = {
        let (api, stop) = (api.clone(), stop.clone());
        tokio::spawn(async move {
            let served = super::serve::serve_until(&api, listener, None, stop.clone()).await;
            // The server ended on its own (an error): the worker stops too.
            stop.cancel();
            served
        })
    };
    print_ready(app, db, local, &key, created, &samples);
    let served = server.await;
    super::worker::stopped(worker).await;
    crate::db::pooling::close(&api.pool, std::time::Duration::from_secs(5)).await;
    eprintln!(
        "agentd dev: stopped the server and the worker{}",
        if db.private.is_some() {
            "; stopping the private PostgreSQL cluster"
        } else {
            ""
        }
    );
    served.map_err(|e| anyhow::anyhow!("the API server failed: {e}"))?
}

/// The listener on `addr`; the default address, when taken, falls back to a port the system
/// picks on the same interface (said in a log line), as the worker's ops endpoint does.
async fn listen(addr: &str) -> anyhow::Result<tokio::net::TcpListener> {
    let at: SocketAddr = addr.parse().map_err(|_| {
        bad(format!(
            "--addr must be host:port, e.g. {DEFAULT_ADDR} (got {addr:?})"
        ))
    })?;
    match tokio::net::TcpListener::bind(at).await {
        Ok(l) => Ok(l),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && addr == DEFAULT_ADDR => {
            let mut any = at;
            any.set_port(0);
            let l = tokio::net::TcpListener::bind(any)
                .await
                .map_err(|e| bad(format!("--addr {any}: cannot listen: {e}")))?;
            tracing::warn!(
                default = DEFAULT_ADDR,
                at = %l.local_addr()?,
                "the default address is in use: serving the API and the console on a port of \
                 the system's choosing; set --addr for a fixed one"
            );
            Ok(l)
        }
        Err(e) => Err(bad(format!("--addr {at}: cannot listen: {e}"))),
    }
}

/// The dev org's id, and whether this start created it.
async fn dev_org(app: &App) -> anyhow::Result<(Uuid, bool)> {
    if let Some(id) = api_keys::create_org(&app.pool, ORG).await? {
        return Ok((id, true));
    }
    let row = orgs::find(&app.pool, ORG)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the org {ORG:?} exists and cannot be read"))?;
    Ok((row.id, false))
}

/// Uploads the samples with auto-create unless the org has a document already; says which.
async fn upload_samples(app: &App, org: Uuid) -> anyhow::Result<String> {
    let mut conn = app.pool.acquire().await?;
    let first = DocumentFilter {
        limit: 1,
        ..DocumentFilter::default()
    };
    let has_documents = !crate::store::documents::list(&mut conn, org, &first)
        .await?
        .is_empty();
    drop(conn);
    if has_documents {
        return Ok("not uploaded again (the org has documents)".to_string());
    }
    for (name, text) in SAMPLES {
        add_document(app, org, name, text, true).await?;
    }
    Ok(format!(
        "{} uploaded with auto-create ({})",
        SAMPLES.len(),
        SAMPLES.map(|(n, _)| n).join(", ")
    ))
}

/// `app` over a second pool on the same database, with `serve`'s statement timeout.
async fn api_app(app: &App, db: &crate::db::Database) -> anyhow::Result<App> {
    let mut config = (*app.config).clone();
    super::serve::bound_statements(&mut config);
    config.database.max_connections = config.database.max_connections.min(API_CONNECTIONS);
    let url = match &db.private {
        Some(cluster) => cluster.url(),
        None => database_url(&config.database),
    };
    let pool = crate::db::pool_for_config(&url, &config.database, false).await?;
    let mut api = app.clone();
    api.pool = pool;
    api.config = std::sync::Arc::new(config);
    Ok(api)
}

/// The URL `db::connect` used when it started no cluster: `database.url`, else `DATABASE_URL`,
/// else the local default.
fn database_url(cfg: &crate::config::DatabaseConfig) -> String {
    if !cfg.url.is_empty() {
        return cfg.url.clone();
    }
    std::env::var("DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| cfg.local_url.clone())
}

/// What a person needs, on stdout (the logs are on stderr).
fn print_ready(
    app: &App,
    db: &crate::db::Database,
    at: SocketAddr,
    key: &str,
    created: bool,
    samples: &str,
) {
    let base = format!("http://{at}");
    let provider = app.provider.name();
    let offline = if provider == "offline" {
        " (a deterministic heuristic, not an LLM: set OPENAI_API_KEY or ANTHROPIC_API_KEY)"
    } else {
        ""
    };
    let key_note = if created {
        format!("admin of the new org {ORG}")
    } else {
        format!(
            "admin of org {ORG}, new at this start; earlier keys stay valid until revoked, \
             see agentd keys list --org {ORG}"
        )
    };
    let cluster = if db.private.is_some() {
        " (a private PostgreSQL cluster: it stops with agentd dev)"
    } else {
        ""
    };
    println!("agentd dev is running");
    println!("  console   {base}/");
    println!("  API       {base}/v1 (OpenAPI at {base}/v1/openapi.json)");
    println!("  key       {key}");
    println!("            ({key_note}; shown only now: only its hash is stored)");
    println!("  samples   {samples}");
    println!("  provider  {provider}{offline}");
    println!("  database  {}{cluster}", db.display_url);
    println!("upload a document (then open the console, or GET {base}/v1/documents/ID):");
    println!("  {}", curl_upload(&base, key));
    println!("Ctrl-C stops the server, the worker and everything agentd dev started.");
}

/// A `curl` line that uploads a small invoice with auto-create, as `POST /v1/documents` takes it.
fn curl_upload(base: &str, key: &str) -> String {
    format!(
        "curl -s -X POST {base}/v1/documents -H 'Authorization: Bearer {key}' \
         -H 'Content-Type: application/json' \
         -d '{{\"name\": \"invoice.txt\", \"text\": \"Invoice Number: INV-42\\nTotal: 120.00\", \
         \"auto_create\": true}}'"
    )
}
