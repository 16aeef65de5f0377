//! Wiring: the shared application context, and the worker process (workers, cron, rescuer,
//! retention, HTTP) with its shutdown.

use crate::agent::{Caps, Engine, Policy, RunSpec};
use crate::approvals::ToolEnv;
use crate::catalog::Catalog;
use crate::catalog::JobSpec;
use crate::clock::SharedClock;
use crate::config::Config;
use crate::llm::SharedProvider;
use crate::queue::backoff::Backoff;
use crate::queue::cron::{CronEntry, Scheduler};
use crate::queue::maintenance::{Rescuer, Retention};
use crate::queue::worker::{KindRuntime, WorkerOptions, WorkerReport, WorkerStats};
use crate::tools::Registry;
use sqlx::PgPool;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::info;

/// What every command and handler shares.
#[derive(Clone)]
pub struct App {
    pub pool: PgPool,
    pub clock: SharedClock,
    pub config: Arc<Config>,
    pub catalog: Arc<Catalog>,
    /// The LLM every run of this process uses (tests inject a scripted one).
    pub provider: SharedProvider,
    /// Every tool; built once.
    pub registry: Arc<Registry>,
}

/// Options of `agentd worker`.
#[derive(Debug, Clone, Default)]
pub struct WorkerArgs {
    /// Kinds to serve; empty: every kind with a handler.
    pub kinds: Vec<String>,
    /// Overrides every kind's `queue.concurrency`.
    pub concurrency: Option<usize>,
    /// Run the cron scheduler in this process.
    pub cron: bool,
    /// Claim only jobs whose payload names this org (`agentd eval`, so that an eval on a shared
    /// database leaves every other org's jobs alone); `None`: every job of the kinds.
    pub only_org: Option<uuid::Uuid>,
}

impl WorkerArgs {
    /// A worker for these kinds only, without cron: what the eval, the demo and the benchmarks
    /// run beside their own work.
    pub fn serving(kinds: &[&str], concurrency: Option<usize>) -> Self {
        WorkerArgs {
            kinds: kinds.iter().map(|k| k.to_string()).collect(),
            concurrency,
            cron: false,
            only_org: None,
        }
    }

    /// The same worker, claiming only the jobs of `org`.
    pub fn for_org(mut self, org: uuid::Uuid) -> Self {
        self.only_org = Some(org);
        self
    }
}

/// A running worker process; `stop` it or cancel its token.
pub struct RunningWorker {
    /// Counters of every worker in this process (one per kind under apalis).
    pub stats: Vec<Arc<WorkerStats>>,
    pub http_addr: Option<std::net::SocketAddr>,
    pub shutdown: CancellationToken,
    handle: tokio::task::JoinHandle<WorkerReport>,
}

impl RunningWorker {
    /// False while any worker of this process cannot reach the database.
    pub fn db_ok(&self) -> bool {
        self.stats.iter().all(|s| s.db_ok.load(Ordering::Relaxed))
    }

    /// Waits for the worker to finish (after its token is cancelled).
    pub async fn join(self) -> WorkerReport {
        self.handle.await.unwrap_or_default()
    }
}

/// Why workers could not start (both are the operator's to fix: exit code 2 in the CLI).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The kinds asked for, or their concurrency against the pool, do not fit.
    #[error("{0}")]
    Input(String),
    /// `http.addr` cannot be bound.
    #[error("http.addr {addr}: cannot listen: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
}

impl App {
    /// An App over `pool` with the config's provider and the built-in tools.
    pub fn new(pool: PgPool, clock: SharedClock, config: Config, catalog: Catalog) -> Self {
        let provider = Arc::new(crate::llm::chain::from_config(
            &config.llm,
            Some(&pool),
            clock.clone(),
        ));
        let registry = crate::tools::builtin_registry().strict_tools(config.llm.strict_tools);
        Self {
            pool,
            clock,
            config: Arc::new(config),
            catalog: Arc::new(catalog),
            provider,
            registry: Arc::new(registry),
        }
    }

    /// The job file of `kind` (the built-in kinds always have one).
    pub fn spec(&self, kind: &str) -> &JobSpec {
        self.catalog
            .get(kind)
            .expect("every built-in kind has a job file")
    }

    /// The model a kind uses: its job file's, else the service default.
    pub fn model_for(&self, spec: &JobSpec) -> String {
        if spec.agent.model.is_empty() {
            self.config.llm.model.clone()
        } else {
            spec.agent.model.clone()
        }
    }

    /// The model run_extraction asks: `llm.extraction_model`, else `llm.model`.
    pub fn extraction_model(&self) -> String {
        let m = &self.config.llm.extraction_model;
        if m.is_empty() {
            &self.config.llm.model
        } else {
            m
        }
        .clone()
    }

    /// Tool environment for a kind.
    pub fn tool_env(&self, spec: &JobSpec) -> ToolEnv {
        ToolEnv {
            registry: self.registry.clone(),
            provider: self.provider.clone(),
            model: self.extraction_model(),
            excerpt_chars: spec.agent.excerpt_chars,
            subject_policy: crate::tools::scope::SubjectPolicy::from_agent(&spec.agent),
            max_failed_extractions: spec.agent.max_failed_extractions,
            pii: crate::pii::PiiSettings::from_config(&self.config.pii),
            org_key_cipher: crate::llm::org_keys::Cipher::from_config(&self.config.llm),
        }
    }

    /// Tool environment for deciding an approval: the settings (model, excerpt size) of the
    /// kind whose run proposed it, else `proactive_suggestion`'s (no run, or a kind no longer in
    /// the catalog).
    pub fn approval_tool_env(&self, run_kind: Option<&str>) -> ToolEnv {
        let spec = run_kind
            .and_then(|k| self.catalog.get(k))
            .unwrap_or_else(|| self.spec("proactive_suggestion"));
        self.tool_env(spec)
    }

    /// The tool loop for a kind.
    pub fn engine(&self, spec: &JobSpec) -> Engine {
        Engine {
            pool: self.pool.clone(),
            clock: self.clock.clone(),
            env: self.tool_env(spec),
            pii: crate::pii::PiiSettings::from_config(&self.config.pii),
            vault: None,
        }
    }

    /// A run spec with the kind's caps, policy and prompts; the caller fills in the subject.
    pub fn run_spec(
        &self,
        spec: &JobSpec,
        org_id: uuid::Uuid,
        subject: String,
        job_id: Option<i64>,
        first_message: String,
    ) -> RunSpec {
        let a = &spec.agent;
        RunSpec {
            kind: spec.kind.clone(),
            org_id,
            subject,
            job_id,
            model: self.model_for(spec),
            system_prompt: a.system_prompt.clone(),
            first_message,
            policy: Policy::from_spec(&a.tools, &a.policy),
            caps: Caps {
                max_rounds: a.max_rounds,
                max_tool_calls: a.max_tool_calls,
                max_tokens: a.max_tokens,
                deadline: Duration::from_secs(a.deadline_secs),
                max_refinements: a.max_refinements,
            },
            approval_ttl: chrono::Duration::seconds(a.approval_ttl_secs as i64),
            document_id: None,
            night: None,
            max_suggestions: a.max_suggestions,
            chain: None,
            repropose: None,
            settings: crate::agent::LoopSettings::for_job(&self.config.llm, a),
            start: Default::default(),
            decisions: None,
        }
    }

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

    /// The cron entries of every kind with a schedule.
    pub fn cron_entries(&self) -> Vec<CronEntry> {
        self.catalog
            .kinds
            .values()
            .filter_map(|spec| {
                Some(CronEntry {
                    kind: spec.kind.clone(),
                    schedule: spec.cron()?,
                    fan_out: spec.schedule.as_ref()?.fan_out,
                    spread_secs: spec.schedule.as_ref()?.spread_secs,
                    priority: spec.queue.priority,
                    max_attempts: spec.queue.max_attempts,
                })
            })
            .collect()
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
            .map_err(StartError::Input)?;
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
            let listener = tokio::net::TcpListener::bind(&cfg.http.addr)
                .await
                .map_err(|source| StartError::Listen {
                    addr: cfg.http.addr.clone(),
                    source,
                })?;
            http_addr = listener.local_addr().ok();
            let state = crate::http::HealthState {
                pool: self.pool.clone(),
                workers_running: running.clone(),
                metrics: crate::http::metrics_handle(),
                kinds: self.catalog.kinds.keys().cloned().collect(),
            };
            tokio::spawn(crate::http::serve(listener, state, background.clone()));
            info!(addr = ?http_addr, "serving /healthz /readyz /metrics");
        }
        if args.cron {
            let s = Scheduler::new(self.pool.clone(), self.clock.clone(), self.cron_entries());
            tokio::spawn(s.run(background.clone()));
        }
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
        let history = crate::pii::history::HistoryRetention::from_config(
            self.pool.clone(),
            self.clock.clone(),
            &cfg.retention,
        );
        tokio::spawn(history.run(background.clone()));
        tokio::spawn(crate::queue::reconcile::Reconciler::for_app(self).run(background.clone()));
        crate::jobs::start_background(self, background.clone());
        let token = shutdown.clone();
        let handle = tokio::spawn(async move {
            let report = run(token).await;
            running.store(false, Ordering::Relaxed);
            background.cancel();
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

/// Runs every worker of the process until the token is cancelled.
type RunAll = Box<
    dyn FnOnce(
            CancellationToken,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = WorkerReport> + Send>>
        + Send,
>;

/// Cancels `token` on SIGINT or SIGTERM.
pub fn cancel_on_signals(token: CancellationToken) {
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => info!("SIGINT: shutting down"),
            _ = term.recv() => info!("SIGTERM: shutting down"),
        }
        token.cancel();
    });
}
