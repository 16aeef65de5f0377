//! `agentd bench api`: `POST /v1/documents` over loopback HTTP from N concurrent clients
//! (default 32), auto-create off and on: requests/s and p50/p99 latency. Runs against the
//! configured database in a throwaway org that is deleted afterwards (with its jobs).

use agentd::api::Role;
use agentd::app::App;
use agentd::store::api_keys;
use clap::Args;
use serde::Serialize;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Options of `agentd bench api`.
#[derive(Args, Debug, Clone)]
pub struct ApiBenchCmd {
    /// Concurrent clients (each sends one request at a time).
    #[arg(long, default_value_t = 32)]
    pub clients: usize,
    /// Requests per configuration.
    #[arg(long, default_value_t = 4000)]
    pub requests: usize,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// One configuration's figures.
#[derive(Debug, Clone, Serialize)]
pub struct ApiBenchRow {
    pub auto_create: bool,
    pub clients: usize,
    pub requests: usize,
    pub errors: usize,
    pub requests_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// Runs the benchmark and prints its figures.
pub async fn run(app: &App, cmd: ApiBenchCmd) -> anyhow::Result<()> {
    if cmd.clients == 0 || cmd.requests == 0 {
        return Err(agentd::cli::BadInput("--clients and --requests must be ≥ 1".into()).into());
    }
    let name = format!("bench-api-{}", uuid::Uuid::new_v4().simple());
    let org = api_keys::create_org(&app.pool, &name)
        .await?
        .ok_or_else(|| anyhow::anyhow!("bench org {name} exists"))?;
    let result = measure(app, org, &cmd).await;
    let removed = api_keys::delete_org_with_jobs(&app.pool, org).await;
    let rows = result?;
    removed?;
    if cmd.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    let build = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    println!(
        "POST /v1/documents over loopback HTTP/1.1, {build} build, database pool of {}, no worker running",
        app.config.database.max_connections
    );
    println!(
        "{:<12} {:>8} {:>9} {:>7} {:>11} {:>9} {:>9} {:>9}",
        "auto_create", "clients", "requests", "errors", "requests/s", "p50 ms", "p99 ms", "max ms"
    );
    for r in &rows {
        println!(
            "{:<12} {:>8} {:>9} {:>7} {:>11.0} {:>9.2} {:>9.2} {:>9.2}",
            if r.auto_create { "on" } else { "off" },
            r.clients,
            r.requests,
            r.errors,
            r.requests_per_sec,
            r.p50_ms,
            r.p99_ms,
            r.max_ms
        );
    }
    Ok(())
}

async fn measure(
    app: &App,
    org: uuid::Uuid,
    cmd: &ApiBenchCmd,
) -> anyhow::Result<Vec<ApiBenchRow>> {
    let (_, key) = agentd::api::create_key(&app.pool, org, Role::Uploader, app.clock.now()).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let stop = CancellationToken::new();
    let server = tokio::spawn(agentd::api::serve(
        listener,
        None,
        app.clone(),
        stop.clone(),
    ));
    let text = agentd::documents::SAMPLES[0].1;
    let mut rows = Vec::new();
    for auto_create in [false, true] {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(cmd.clients)
            .build()?;
        let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let started = Instant::now();
        let tasks: Vec<_> = (0..cmd.clients)
            .map(|_| {
                let (client, key, base, next) =
                    (client.clone(), key.clone(), base.clone(), next.clone());
                let total = cmd.requests;
                tokio::spawn(async move {
                    let mut lat = Vec::new();
                    let mut errors = 0;
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if i >= total {
                            break;
                        }
                        let body = json!({"name": format!("bench-{i}.txt"), "text": text, "auto_create": auto_create});
                        let t = Instant::now();
                        let res = client
                            .post(format!("{base}/v1/documents"))
                            .bearer_auth(&key)
                            .json(&body)
                            .send()
                            .await;
                        let ok = match res {
                            Ok(r) => r.status() == 201 && r.bytes().await.is_ok(),
                            Err(_) => false,
                        };
                        lat.push(t.elapsed());
                        if !ok {
                            errors += 1;
                        }
                    }
                    (lat, errors)
                })
            })
            .collect();
        let mut lat: Vec<Duration> = Vec::new();
        let mut errors = 0;
        for t in tasks {
            let (l, e) = t.await?;
            lat.extend(l);
            errors += e;
        }
        let secs = started.elapsed().as_secs_f64();
        lat.sort();
        let pct = |p: f64| {
            let i = ((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1;
            lat[i].as_secs_f64() * 1000.0
        };
        rows.push(ApiBenchRow {
            auto_create,
            clients: cmd.clients,
            requests: lat.len(),
            errors,
            requests_per_sec: lat.len() as f64 / secs,
            p50_ms: pct(0.50),
            p99_ms: pct(0.99),
            max_ms: pct(1.0),
        });
    }
    stop.cancel();
    let _ = server.await;
    Ok(rows)
}
