//! `agentd bench events`: events written per second (one event per transaction, 8 writers)
//! without and with a webhook subscription (the dispatcher trigger's cost), and deliveries per
//! second to a local receiver through `webhook_delivery` jobs, against the same receiver driven
//! by plain signed POSTs at the same concurrency (the baseline, measured in the same run).
//! Figures, not a test: nothing here asserts a speed.

use crate::app::{App, WorkerArgs};
use crate::kinds::{self, JobKind};
use crate::store::events::{self, EventType, NewEvent};
use clap::Args;
use serde_json::json;
use sqlx::PgPool;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Options of `agentd bench events`.
#[derive(Args, Debug, Clone)]
pub struct EventsBenchCmd {
    /// Events per phase.
    #[arg(long, default_value_t = 5000)]
    pub events: u64,
    /// Concurrent writers (one event per transaction each).
    #[arg(long, default_value_t = 8)]
    pub writers: usize,
    /// Delivery concurrency (worker `--concurrency` and the baseline's parallel POSTs).
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// The PostgreSQL server; the bench creates and drops `agentd_bench_events` there.
    #[arg(
        long,
        env = "AGENTD_BENCH_SERVER_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    pub server_url: String,
}

/// What the receiver saw.
#[derive(Default)]
struct Seen {
    /// Signature verified (HMAC over the timestamp and raw body, within the replay window).
    verified: AtomicU64,
    /// Refused (401): no header, a bad signature, or outside the window.
    refused: AtomicU64,
    /// Distinct `Agentd-Event-Id`s among the verified ones.
    ids: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// A receiver on 127.0.0.1 that does what docs/events.md asks of one: verifies each signature with
/// [`super::verify`] (401 when it fails), then dedupes by event id and answers 200.
async fn receiver(stop: CancellationToken) -> anyhow::Result<(String, Arc<Seen>)> {
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let s = s.clone();
                async move {
                    let header = |k: &str| headers.get(k).and_then(|v| v.to_str().ok());
                    let now = chrono::Utc::now().timestamp();
                    let ok = header("agentd-signature")
                        .is_some_and(|sig| super::verify(SECRET, sig, &body, now).is_ok());
                    if !ok {
                        s.refused.fetch_add(1, Ordering::Relaxed);
                        return axum::http::StatusCode::UNAUTHORIZED;
                    }
                    s.verified.fetch_add(1, Ordering::Relaxed);
                    if let Some(id) = header("agentd-event-id") {
                        s.ids.lock().expect("ids").insert(id.to_string());
                    }
                    axum::http::StatusCode::OK
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
    });
    Ok((url, seen))
}

/// The subscription's secret.
const SECRET: &str = "bench-secret-0123456789";

/// Writes `n` events with `writers` tasks, one per transaction; returns events/s.
async fn write(pool: &PgPool, org: Uuid, n: u64, writers: usize) -> anyhow::Result<f64> {
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|_| {
            let (pool, next) = (pool.clone(), next.clone());
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < n {
                    let mut tx = pool.begin().await?;
                    let payload = json!({"bench": true});
                    events::emit(
                        &mut tx,
                        &NewEvent {
                            org_id: org,
                            kind: EventType::RunFailed,
                            subject_id: Some(Uuid::now_v7()),
                            occurred_at: chrono::Utc::now(),
                            payload: &payload,
                            dedupe_key: None,
                        },
                    )
                    .await?;
                    tx.commit().await?;
                }
                Ok::<(), sqlx::Error>(())
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

async fn count(pool: &PgPool, sql: &'static str) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(sql).fetch_one(pool).await?)
}

/// Runs the bench and prints its figures.
pub async fn run(app: &App, c: EventsBenchCmd) -> anyhow::Result<()> {
    if c.events == 0 || c.writers == 0 || c.concurrency == 0 {
        return Err(crate::cli::bad(
            "--events, --writers and --concurrency must be ≥ 1",
        ));
    }
    let server = crate::bench::Server::connect(&c.server_url).await?;
    let db = "agentd_bench_events";
    let max = (c.writers + c.concurrency + 8) as u32;
    let pool = server.agentd_db(db, max).await?;
    let stop = CancellationToken::new();
    let (url, seen) = receiver(stop.clone()).await?;
    let org = crate::store::orgs::ensure(&pool, "bench").await?.id;

    // 1. Writes with no subscription, then with one (each write also enqueues a delivery).
    let plain = write(&pool, org, c.events, c.writers).await?;
    let mut catalog = (*app.catalog).clone();
    if let Some(s) = catalog.kinds.get_mut(kinds::WebhookDelivery::NAME) {
        s.queue.backoff_base_ms = 10;
        s.queue.backoff_max_ms = 1000;
    }
    let bapp = App {
        pool: pool.clone(),
        clock: crate::clock::system(),
        catalog: Arc::new(catalog),
        config: Arc::new({
            let mut cfg = (*app.config).clone();
            cfg.http.addr = String::new();
            cfg.database.max_connections = max;
            // The receiver is on 127.0.0.1: allowed explicitly (the SSRF guard's default refuses it).
            cfg.webhooks.allow_private_networks = true;
            cfg
        }),
        ..app.clone()
    };
    let spec = bapp.spec(kinds::WebhookDelivery::NAME);
    crate::store::webhooks::insert(
        &pool,
        &crate::store::webhooks::NewWebhook {
            org_id: org,
            url: &url,
            events: &["run.failed".to_string()],
            secret: SECRET,
            max_attempts: spec.queue.max_attempts,
            priority: spec.queue.priority,
            now: chrono::Utc::now(),
        },
    )
    .await?;
    let subscribed = write(&pool, org, c.events, c.writers).await?;
    let queued = count(
        &pool,
        "SELECT count(*) FROM agentd_jobs WHERE kind = 'webhook_delivery'",
    )
    .await?;

    // 2. Deliveries through the queue: a worker drains the backlog of delivery jobs.
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let args = WorkerArgs::serving(&[kinds::WebhookDelivery::NAME], Some(c.concurrency));
    let worker = bapp
        .start_worker(args, shutdown.clone())
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    // Done when no delivery job waits or runs (works with `delete_on_success` too).
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let left = count(
            &pool,
            "SELECT count(*) FROM agentd_jobs WHERE kind = 'webhook_delivery' AND state NOT IN ('succeeded', 'dead', 'cancelled')",
        )
        .await?;
        if left == 0 {
            break;
        }
        if Instant::now() > deadline {
            return Err(anyhow::anyhow!(
                "{left} deliveries still not done after 600 s"
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let delivered_secs = started.elapsed().as_secs_f64();
    shutdown.cancel();
    worker.join().await;
    let dead = count(
        &pool,
        "SELECT count(*) FROM agentd_jobs WHERE kind = 'webhook_delivery' AND state = 'dead'",
    )
    .await?;
    let verified = seen.verified.load(Ordering::Relaxed);
    let refused = seen.refused.load(Ordering::Relaxed);
    let distinct = seen.ids.lock().expect("ids").len();
    let via_queue = verified as f64 / delivered_secs;

    // 3. Baseline: the same number of signed POSTs straight to the receiver.
    let sender = super::delivery::Sender::new(Duration::from_secs(10), true);
    let sample = events::list_after(&pool, org, 0, &[], 1).await?;
    let event = sample
        .first()
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("no event to send"))?;
    let next = Arc::new(AtomicU64::new(0));
    let n = queued as u64;
    let started = Instant::now();
    let tasks: Vec<_> = (0..c.concurrency)
        .map(|_| {
            let (sender, next, url, event) =
                (sender.clone(), next.clone(), url.clone(), event.clone());
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < n {
                    let now = chrono::Utc::now().timestamp();
                    let _ = sender.send(&url, SECRET, &event, 1, now).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await?;
    }
    let direct = n as f64 / started.elapsed().as_secs_f64();
    stop.cancel();
    pool.close().await;
    server.drop_db(db).await?;

    let direct_verified = seen.verified.load(Ordering::Relaxed) - verified;
    println!(
        "agentd bench events ({} events per phase, {} writers, delivery concurrency {})",
        c.events, c.writers, c.concurrency
    );
    println!("  events written/s, no subscription        {plain:>10.0}");
    println!(
        "  events written/s, one subscription       {subscribed:>10.0}   ({:.2}× of no subscription: the trigger enqueues a delivery job per event)",
        subscribed / plain
    );
    println!(
        "  events delivered/s via webhook_delivery  {via_queue:>10.0}   ({verified} signed deliveries verified by the receiver, {distinct} distinct event ids of {queued} jobs, {refused} refused, {dead} dead, {delivered_secs:.2} s)"
    );
    println!(
        "  signed POSTs/s, direct (baseline)        {direct:>10.0}   (queue delivery = {:.2}× of direct; {direct_verified} of {n} verified)",
        via_queue / direct
    );
    Ok(())
}
