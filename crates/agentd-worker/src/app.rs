//! Wiring: the shared application context job handlers, commands and the API are given, and
//! the worker process's options and handle (`crate::worker` starts it: workers, cron, rescuer,
//! retention, HTTP).

use crate::agent::{Caps, Engine, Policy, RunSpec};
use crate::approvals::ToolEnv;
use crate::catalog::Catalog;
use crate::catalog::JobSpec;
use crate::clock::SharedClock;
use crate::config::Config;
use crate::llm::SharedProvider;
use crate::queue::cron::CronEntry;
use crate::queue::worker::{WorkerReport, WorkerStats};
use crate::tools::Registry;
use sqlx::PgPool;
use std::sync::Arc;
use std::sync::atomic::Ordering;
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
    /// Such a worker runs none of the fleet's maintenance (the rescuer, job and transcript
    /// retention, the history purge, the reconciler), which acts on every org's rows (review
    /// D17).
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

    /// The same worker, claiming only the jobs of `org`, and running none of the fleet's
    /// maintenance: an eval on a shared database rescues, purges and reconciles nobody's rows
    /// (review D17).
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
    pub(crate) handle: tokio::task::JoinHandle<WorkerReport>,
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
    /// The database did not answer the start-up checks (after retries): exit 1, not 2.
    #[error("database: {0}")]
    Database(#[source] crate::llm::org_keys::StartupCheckError),
    /// `http.addr` cannot be bound (an address set on purpose that is in use, one not on this
    /// host, a port that needs privileges).
    #[error(
        "http.addr {addr}: cannot listen: {source} (set http.addr, AGENTD_HTTP__ADDR, to a free host:port, or to \"\" for no health and metrics listener)"
    )]
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
            prices: std::sync::Arc::new(self.config.llm.prices.clone()),
        }
    }

    /// Tool environment for deciding an approval: the settings (model, excerpt size) of the
    /// kind whose run proposed it, else `proactive_suggestion`'s (no run, or a kind no longer in
    /// the catalog).
    pub fn approval_tool_env(&self, run_kind: Option<&str>) -> ToolEnv {
        let spec = run_kind
            .and_then(|k| self.catalog.get(k))
            .unwrap_or_else(|| {
                self.spec(<crate::kinds::ProactiveSuggestion as crate::kinds::JobKind>::NAME)
            });
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
            resume_job: None,
        }
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
                    fan_out: spec.schedule.as_ref().and_then(|s| {
                        Some(crate::store::nightly::fan_out(s.fan_out?, s.spread_secs))
                    }),
                    priority: spec.queue.priority,
                    max_attempts: spec.queue.max_attempts,
                })
            })
            .collect()
    }
}

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
