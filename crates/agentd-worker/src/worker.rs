//! The worker process: the queue runtimes of the kinds this build handles (`jobs::handlers`),
//! cron, the maintenance units (rescuer, retention, transcript and history retention, the
//! reconciler), the HTTP endpoints and its row in the registry of live workers (its provider
//! breakers every heartbeat, for `agentd status`: [`Registration`]), started from an [`App`]
//! (`App::start_worker`). It sits above `jobs` and `http`, so `app` (what handlers are given)
//! depends on neither.

use crate::app::{App, RunningWorker, StartError, WorkerArgs};
use crate::queue::backoff::Backoff;
use crate::queue::cron::Scheduler;
use crate::queue::maintenance::{Rescuer, Retention};
use crate::queue::worker::{KindRuntime, WorkerOptions, WorkerReport, WorkerStats};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::info;

impl App {
    /// The queue runtimes for `args.kinds` (validated against the catalog).
    pub fn runtimes(&self, args: &WorkerArgs) -> Result<Vec<KindRuntime>, String> {
        let handlers = crate::jobs::handlers(self);
        let kinds: Vec<String> = if args.kinds.is_empty() {
            handlers.keys().cloned().collect()
        } else {
            args.kinds.clone()
        };
        let mut out = Vec::new();
        for kind in kinds {
            let spec = self.catalog.get(&kind).ok_or_else(|| {
                format!(
                    "--kinds: unknown job kind `{kind}` (known: {})",
                    self.catalog
                        .kinds
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?;
            let handler = handlers
                .get(&kind)
                .cloned()
                .ok_or_else(|| format!("--kinds: `{kind}` has no handler in this build"))?;
            out.push(KindRuntime {
                kind: kind.clone(),
                handler,
                concurrency: args.concurrency.unwrap_or(spec.queue.concurrency as usize),
                timeout: Duration::from_secs(spec.queue.timeout_secs),
                backoff: Backoff {
                    base: Duration::from_millis(spec.queue.backoff_base_ms),
                    max: Duration::from_millis(spec.queue.backoff_max_ms),
                },
                delete_on_success: spec.queue.delete_on_success,
                max_running_per_org: spec.queue.max_running_per_org,
                newcomer_slots: spec.queue.newcomer_slots as usize,
            });
        }
        Ok(out)
    }

    /// Starts workers, cron, rescuer, retention and the HTTP endpoints.
    pub async fn start_worker(
        &self,
        args: WorkerArgs,
        shutdown: CancellationToken,
    ) -> Result<RunningWorker, StartError> {
        let runtimes = self.runtimes(&args).map_err(StartError::Input)?;
        let cipher = crate::llm::org_keys::Cipher::from_config(&self.config.llm);
        crate::llm::org_keys::check_startup(&self.pool, cipher.as_deref())
            .await
            .map_err(|e| match e {
                crate::llm::org_keys::StartupCheckError::Database(_) => StartError::Database(e),
                e => StartError::Input(e.to_string()),
            })?;
        let cfg = &self.config;
        crate::db::check_worker_fits(
            cfg.database.max_connections,
            &runtimes
                .iter()
                .map(|k| (k.kind.clone(), k.concurrency))
                .collect::<Vec<_>>(),
        )
        .map_err(|e| StartError::Input(e.to_string()))?;
        let opts = WorkerOptions::from_config(&cfg.worker);
        let registration = Registration::new(self, &opts, &runtimes);
        // The first beat before any job is claimed: status shows the worker at once.
        registration.beat().await;
        // apalis 1.0 is the one runtime: one apalis worker per kind over our backend.
        let workers: Vec<_> = runtimes
            .into_iter()
            .map(|k| {
                crate::queue::apalis::build_scoped_worker(
                    self.pool.clone(),
                    self.clock.clone(),
                    &opts,
                    k,
                    args.only_org,
                )
            })
            .collect();
        let stats: Vec<Arc<WorkerStats>> = workers.iter().map(|w| w.stats()).collect();
        let run: RunAll = Box::new(move |t: CancellationToken| {
            Box::pin(async move {
                let runs = workers.into_iter().map(|w| w.run(t.clone()));
                let reports = futures::future::join_all(runs).await;
                reports
                    .into_iter()
                    .fold(WorkerReport::default(), |a, r| WorkerReport {
                        succeeded: a.succeeded + r.succeeded,
                        failed: a.failed + r.failed,
                        released: a.released + r.released,
                    })
            })
        });
        let background = CancellationToken::new();
        let running = Arc::new(AtomicBool::new(true));
        let mut http_addr = None;
        if !cfg.http.addr.is_empty() {
            let listener = ops_listener(&cfg.http.addr).await?;
            http_addr = listener.local_addr().ok();
            let state = crate::http::HealthState {
                pool: self.pool.clone(),
                workers_running: running.clone(),
                metrics: crate::http::metrics_handle(),
                kinds: self.catalog.kinds.keys().cloned().collect(),
            };
            tokio::spawn(crate::http::serve(listener, state, background.clone()));
            if let Some(addr) = http_addr {
                info!(%addr, "serving /healthz /readyz /metrics");
            }
        }
        if args.cron {
            let s = Scheduler::new(self.pool.clone(), self.clock.clone(), self.cron_entries());
            tokio::spawn(s.run(background.clone()));
        }
        // The fleet's maintenance acts on every org's rows: not a worker scoped to one org
        // (`agentd eval` on a shared database; review D17).
        if args.only_org.is_none() {
            let rescuer = Rescuer {
                pool: self.pool.clone(),
                clock: self.clock.clone(),
                interval: Duration::from_secs(cfg.worker.rescue_interval_secs),
                batch: 1000,
                backoff: crate::queue::store::RescueBackoff::from_catalog(&self.catalog),
            };
            tokio::spawn(rescuer.run(background.clone()));
            let retention = Retention {
                pool: self.pool.clone(),
                clock: self.clock.clone(),
                keep: chrono::Duration::hours(cfg.retention.finished_after_hours as i64),
                batch: cfg.retention.batch,
                interval: Duration::from_secs(cfg.retention.interval_secs),
                vacuum: crate::queue::vacuum::JobsVacuum::new(cfg.retention.vacuum_dead_rows),
            };
            tokio::spawn(retention.run(background.clone()));
            let transcripts = crate::pii::retention::TranscriptRetention {
                pool: self.pool.clone(),
                clock: self.clock.clone(),
                keep: chrono::Duration::days(cfg.retention.transcripts_after_days as i64),
                batch: 100,
                interval: Duration::from_secs(cfg.retention.interval_secs),
            };
            tokio::spawn(transcripts.run(background.clone()));
            let history = crate::store::history::HistoryRetention::from_config(
                self.pool.clone(),
                self.clock.clone(),
                &cfg.retention,
            );
            tokio::spawn(history.run(background.clone()));
            tokio::spawn(crate::jobs::reconcile::Reconciler::for_app(self).run(background.clone()));
        }
        let registered = tokio::spawn(registration.run(background.clone()));
        let token = shutdown.clone();
        let handle = tokio::spawn(async move {
            let report = run(token).await;
            running.store(false, Ordering::Relaxed);
            background.cancel();
            // Its row is gone when the worker's join returns.
            let _ = registered.await;
            report
        });
        Ok(RunningWorker {
            stats,
            http_addr,
            shutdown,
            handle,
        })
    }
}

/// This process's row of `agentd_workers` (`store::workers`): written at start and every
/// `worker.heartbeat_secs` with the provider chain's breakers, live for `worker.lease_secs`
/// after each beat (as a job's lease), deleted when the worker stops. A beat that fails is
/// logged and the next one tries again: the registry is for status, never in a job's way.
struct Registration {
    pool: sqlx::PgPool,
    clock: crate::clock::SharedClock,
    provider: crate::llm::SharedProvider,
    row: crate::store::workers::Worker,
    interval: Duration,
    lease: chrono::Duration,
}

impl Registration {
    fn new(app: &App, opts: &WorkerOptions, runtimes: &[KindRuntime]) -> Self {
        let now = app.clock.now();
        let host = opts
            .worker_id
            .split(':')
            .next()
            .unwrap_or_default()
            .to_string();
        Self {
            pool: app.pool.clone(),
            clock: app.clock.clone(),
            provider: app.provider.clone(),
            row: crate::store::workers::Worker {
                id: opts.worker_id.clone(),
                host,
                pid: i32::try_from(std::process::id()).unwrap_or(i32::MAX),
                kinds: runtimes.iter().map(|k| k.kind.clone()).collect(),
                started_at: now,
                seen_at: now,
                expires_at: now,
                breakers: serde_json::Value::Array(Vec::new()),
            },
            interval: opts.heartbeat,
            lease: chrono::Duration::from_std(opts.lease).unwrap_or(chrono::Duration::seconds(30)),
        }
    }

    /// Writes the row with the breakers as they are now.
    async fn beat(&self) {
        let now = self.clock.now();
        let breakers = serde_json::to_value(self.provider.breakers(now))
            .unwrap_or_else(|_| serde_json::Value::Array(Vec::new()));
        let row = crate::store::workers::Worker {
            seen_at: now,
            expires_at: now + self.lease,
            breakers,
            ..self.row.clone()
        };
        if let Err(e) = crate::store::workers::beat(&self.pool, &row).await {
            tracing::warn!(error = %e, "could not write this worker's row of agentd_workers");
        }
    }

    /// Beats until `stop`, then deletes the row.
    async fn run(self, stop: CancellationToken) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => self.beat().await,
            }
        }
        if let Err(e) = crate::store::workers::gone(&self.pool, &self.row.id).await {
            tracing::warn!(error = %e, "could not remove this worker's row of agentd_workers");
        }
    }
}

/// Runs every worker of the process until the token is cancelled.
type RunAll = Box<
    dyn FnOnce(
            CancellationToken,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = WorkerReport> + Send>>
        + Send,
>;

/// The listener of the worker's `/healthz /readyz /metrics` at `addr` (`http.addr`). When the
/// built-in default address is taken — another worker on this host — it listens on a port the
/// system picks on the same interface instead and says where (a second `agentd worker` with the
/// defaults runs; a supervisor or scraper that needs a fixed port sets `http.addr` per worker).
/// An address set on purpose that is taken stays an error naming the key.
async fn ops_listener(addr: &str) -> Result<tokio::net::TcpListener, StartError> {
    let listen = |source| StartError::Listen {
        addr: addr.to_string(),
        source,
    };
    match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => Ok(l),
        Err(e)
            if e.kind() == std::io::ErrorKind::AddrInUse
                && addr == crate::config::Config::defaults().http.addr =>
        {
            let any_port = match addr.parse::<std::net::SocketAddr>() {
                Ok(mut a) => {
                    a.set_port(0);
                    a
                }
                Err(_) => return Err(listen(e)),
            };
            let l = tokio::net::TcpListener::bind(any_port)
                .await
                .map_err(listen)?;
            if let Ok(at) = l.local_addr() {
                tracing::warn!(
                    default = addr,
                    %at,
                    "the default http.addr is in use (another worker on this host?): serving \
                     /healthz /readyz /metrics on a port of the system's choosing; set http.addr \
                     (AGENTD_HTTP__ADDR) per worker for a fixed one"
                );
            }
            Ok(l)
        }
        Err(e) => Err(listen(e)),
    }
}
