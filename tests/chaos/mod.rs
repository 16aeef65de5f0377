//! The chaos suite (issue 30, item 4): 3 `agentd worker` processes and `agentd serve` on a mixed
//! workload — auto_create uploads through the API, nightly `proactive_suggestion` runs,
//! `approval_expiry` sweeps, `webhook_delivery` to a local receiver — against a PostgreSQL
//! cluster of the suite's own and an HTTP fake of the model server, while a driver injects
//! faults drawn from a seed: SIGKILL of a worker, `pg_terminate_backend` of random
//! connections, a crash restart of PostgreSQL, a model answer stalled past the lease, 429s,
//! 500s and streams cut mid-answer. Then faults stop, the queue drains, and the invariants
//! (`invariants.rs`) are checked in SQL and printed with their counts.
//!
//! One module for both users: `tests/it/chaos.rs` (the short run, about 50 faults, in CI) and
//! `agentd bench chaos` (`benches/agentd-bench`, 1,000 faults and more), which includes this
//! file by path. The seed fixes the faults, their order and the gaps between them; what the
//! processes are doing when a fault lands is up to the scheduler, so a replay repeats the
//! faults, not every interleaving.

#![allow(dead_code)]

pub mod invariants;
pub mod model;
pub mod procs;

use axum::body::Bytes;
use model::{Habit, ModelServer};
use procs::{Cluster, Proc};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgPool};
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uuid::Uuid;

/// The environment variable that replays a seed.
pub const SEED_ENV: &str = "AGENTD_CHAOS_SEED";
/// Where to copy the cluster's server log before it is removed (unset: not kept).
pub const PG_LOG_ENV: &str = "AGENTD_CHAOS_PG_LOG";
/// The seed of the short run in CI.
pub const DEFAULT_SEED: u64 = 30;
/// The workers' lease; a stalled answer takes longer than this.
const LEASE_SECS: u64 = 4;

/// What to run.
#[derive(Debug, Clone)]
pub struct Opts {
    pub seed: u64,
    pub faults: u32,
    /// Uploads spread over the fault phase.
    pub documents: u32,
    pub orgs: u32,
    pub workers: usize,
    /// Expired approvals added (with their sweep jobs) every 10 faults.
    pub approvals_per_batch: u32,
    /// The `agentd` binary the processes run.
    pub agentd_bin: PathBuf,
    /// Pause between two faults: drawn from this range (ms).
    pub gap_ms: (u64, u64),
    /// Longest wait for the queue to drain once faults stop.
    pub settle_secs: u64,
}

impl Opts {
    /// The short run of the test suite: about 50 faults.
    pub fn short(agentd_bin: PathBuf, seed: u64) -> Self {
        Self {
            seed,
            faults: 50,
            documents: 30,
            orgs: 3,
            workers: 3,
            approvals_per_batch: 10,
            agentd_bin,
            gap_ms: (100, 500),
            settle_secs: 240,
        }
    }

    /// `agentd bench chaos`'s default: 1,000 faults.
    pub fn long(agentd_bin: PathBuf, seed: u64) -> Self {
        Self {
            faults: 1000,
            documents: 600,
            orgs: 5,
            approvals_per_batch: 20,
            settle_secs: 900,
            ..Self::short(agentd_bin, seed)
        }
    }
}

/// The seed from `AGENTD_CHAOS_SEED`, else `default`.
pub fn seed_from_env(default: u64) -> u64 {
    std::env::var(SEED_ENV)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(default)
}

/// A fault the driver injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    WorkerKill,
    ConnTerminate,
    PgRestart,
    /// A worker killed, then PostgreSQL crash-restarted once its leases ran out: while the
    /// new worker process starts and the survivors' rescuer reclaims the dead one's jobs
    /// (DBOS #716, #804: workflows left PENDING by a restart during recovery).
    PgRestartInRecovery,
    ProviderStall,
    Provider429,
    Provider500,
    StreamCut,
}

impl Fault {
    /// Relative weights of the draw.
    const WEIGHTS: [(Fault, u32); 8] = [
        (Fault::WorkerKill, 24),
        (Fault::ConnTerminate, 24),
        (Fault::PgRestart, 4),
        (Fault::PgRestartInRecovery, 3),
        (Fault::ProviderStall, 12),
        (Fault::Provider429, 12),
        (Fault::Provider500, 12),
        (Fault::StreamCut, 12),
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::WorkerKill => "worker_sigkill",
            Fault::ConnTerminate => "pg_terminate_backend",
            Fault::PgRestart => "postgres_crash_restart",
            Fault::PgRestartInRecovery => "postgres_restart_during_recovery",
            Fault::ProviderStall => "provider_stall_past_lease",
            Fault::Provider429 => "provider_429",
            Fault::Provider500 => "provider_500",
            Fault::StreamCut => "provider_stream_cut",
        }
    }

    fn draw(rng: &mut StdRng) -> Fault {
        let total: u32 = Self::WEIGHTS.iter().map(|(_, w)| w).sum();
        let mut x = rng.random_range(0..total);
        for (f, w) in Self::WEIGHTS {
            if x < w {
                return f;
            }
            x -= w;
        }
        Fault::WorkerKill
    }
}

/// What a run did and found.
#[derive(Debug, Default)]
pub struct Report {
    pub seed: u64,
    pub faults: BTreeMap<&'static str, u32>,
    pub total_faults: u32,
    /// (kind, state, jobs).
    pub jobs: Vec<(String, String, i64)>,
    /// Dead jobs by kind and reason (dead is terminal, so allowed; the reasons are worth a look).
    pub dead: Vec<(String, String, i64)>,
    /// Jobs that took more than one attempt (a fault ended an attempt; the next resumed).
    pub retried: i64,
    pub checks: Vec<invariants::Check>,
    pub uploads: u64,
    pub upload_retries: u64,
    pub upload_refused: u64,
    pub deliveries_received: u64,
    /// Processes that exited on their own (a worker whose database was gone) and were started
    /// again.
    pub respawned: u64,
    /// How each of those ended and its last lines.
    pub exits: Vec<String>,
    /// Driver statements that failed because of its own faults (skipped work).
    pub driver_db_errors: u64,
    pub model_requests: u64,
    pub model_answered: u64,
    pub model_faulted: u64,
    pub drained: bool,
    pub fault_secs: f64,
    pub settle_secs: f64,
    pub total_secs: f64,
}

impl Report {
    /// Violations over every invariant.
    pub fn violations(&self) -> usize {
        self.checks.iter().map(|c| c.violations).sum()
    }

    /// Prints the figures and every invariant with its count.
    pub fn print(&self) {
        println!(
            "chaos: seed {} (replay: {SEED_ENV}={})",
            self.seed, self.seed
        );
        let kinds: Vec<String> = self
            .faults
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        println!("faults: {} ({})", self.total_faults, kinds.join(", "));
        println!(
            "model server: {} requests, {} answered, {} faulted; uploads: {} accepted, {} retried, {} refused; webhook deliveries received: {}",
            self.model_requests,
            self.model_answered,
            self.model_faulted,
            self.uploads,
            self.upload_retries,
            self.upload_refused,
            self.deliveries_received
        );
        println!(
            "processes restarted after exiting on their own: {}; driver statements lost to its own faults: {}",
            self.respawned, self.driver_db_errors
        );
        let total: i64 = self.jobs.iter().map(|j| j.2).sum();
        println!(
            "jobs: {total} ({} took more than one attempt)",
            self.retried
        );
        for (kind, state, n) in &self.jobs {
            println!("  {kind:<22} {state:<10} {n}");
        }
        for (kind, reason, n) in &self.dead {
            println!("  dead {kind}: {n} × {reason}");
        }
        println!("invariants:");
        for c in &self.checks {
            println!(
                "  {} {:<28} checked {:>7}  violations {:>4}  {}",
                if c.violations == 0 { "ok  " } else { "FAIL" },
                c.name,
                c.checked,
                c.violations,
                c.what
            );
            for e in &c.examples {
                println!("         {e}");
            }
        }
        println!(
            "seconds: faults {:.1}, settle {:.1}{}, total {:.1}",
            self.fault_secs,
            self.settle_secs,
            if self.drained { "" } else { " (not drained)" },
            self.total_secs
        );
        let v = self.violations();
        if v > 0 {
            println!(
                "chaos: {v} invariant violation(s) with seed {}: replay with {SEED_ENV}={}",
                self.seed, self.seed
            );
        } else {
            println!("chaos: 0 invariant violations");
        }
    }
}

/// The webhook receiver: counts the events it was sent (by event id).
struct Receiver {
    url: String,
    seen: Arc<Mutex<HashSet<String>>>,
    total: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start() -> anyhow::Result<Self> {
        let seen: Arc<Mutex<HashSet<String>>> = Arc::default();
        let total = Arc::new(AtomicU64::new(0));
        let (s, t) = (seen.clone(), total.clone());
        let app = axum::Router::new().fallback(move |body: Bytes| {
            let (s, t) = (s.clone(), t.clone());
            async move {
                t.fetch_add(1, Ordering::Relaxed);
                if let Ok(v) = serde_json::from_slice::<Value>(&body) {
                    let id = match &v["id"] {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    s.lock().unwrap_or_else(|p| p.into_inner()).insert(id);
                }
                "ok"
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            url: format!("http://{addr}/hook"),
            seen,
            total,
            task,
        })
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The processes the driver keeps running.
struct Fleet {
    bin: PathBuf,
    env: Vec<(String, String)>,
    workers: Vec<Proc>,
    api: Proc,
    api_base: Arc<Mutex<String>>,
    respawned: u64,
    exits: Vec<String>,
    spawned: u64,
}

impl Fleet {
    async fn start(bin: PathBuf, env: Vec<(String, String)>, n: usize) -> anyhow::Result<Self> {
        let (api, base) = {
            let (b, e) = (bin.clone(), env.clone());
            tokio::task::spawn_blocking(move || Proc::serve(&b, &e)).await??
        };
        let mut workers = Vec::new();
        for _ in 0..n {
            workers.push(Proc::spawn(&bin, &["worker"], &env)?);
        }
        Ok(Self {
            bin,
            env,
            workers,
            api,
            api_base: Arc::new(Mutex::new(base)),
            respawned: 0,
            exits: Vec::new(),
            spawned: n as u64 + 1,
        })
    }

    fn kill_worker(&mut self, i: usize) -> anyhow::Result<()> {
        if let Some(w) = self.workers.get_mut(i) {
            w.kill();
            *w = Proc::spawn(&self.bin, &["worker"], &self.env)?;
            self.spawned += 1;
        }
        Ok(())
    }

    /// Starts again what exited on its own.
    async fn keep_alive(&mut self) -> anyhow::Result<()> {
        for w in self.workers.iter_mut() {
            if w.exited() {
                self.exits.push(format!("worker {}", w.exit_reason()));
                *w = Proc::spawn(&self.bin, &["worker"], &self.env)?;
                self.respawned += 1;
                self.spawned += 1;
            }
        }
        if self.api.exited() {
            self.exits.push(format!("serve {}", self.api.exit_reason()));
            let (b, e) = (self.bin.clone(), self.env.clone());
            let (api, base) = tokio::task::spawn_blocking(move || Proc::serve(&b, &e)).await??;
            self.api = api;
            *self.api_base.lock().unwrap_or_else(|p| p.into_inner()) = base;
            self.respawned += 1;
            self.spawned += 1;
        }
        Ok(())
    }

    fn stop(&mut self) {
        for w in self.workers.iter_mut() {
            w.kill();
        }
        self.api.kill();
    }
}

/// Upload counters.
#[derive(Default)]
struct UploadStats {
    accepted: AtomicU64,
    retries: AtomicU64,
    refused: AtomicU64,
}

/// Uploads `n` documents through the API, each retried under its Idempotency-Key until the
/// API answers it (faults make it fail meanwhile).
async fn upload(
    http: &reqwest::Client,
    base: &Arc<Mutex<String>>,
    keys: &[String],
    first: u32,
    n: u32,
    stats: &UploadStats,
) {
    for i in first..first + n {
        let key = &keys[i as usize % keys.len()];
        let (sample, text) =
            agentd::documents::SAMPLES[i as usize % agentd::documents::SAMPLES.len()];
        let name = format!("chaos-{i}-{sample}");
        let started = Instant::now();
        loop {
            let url = format!(
                "{}/v1/documents",
                base.lock().unwrap_or_else(|p| p.into_inner())
            );
            let r = http
                .post(url)
                .bearer_auth(key)
                .header("Idempotency-Key", &name)
                .json(&json!({"name": name, "text": text, "auto_create": true}))
                .send()
                .await;
            match r {
                Ok(r) if r.status().is_success() => {
                    stats.accepted.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Ok(r)
                    if r.status().is_client_error()
                        && r.status() != reqwest::StatusCode::TOO_MANY_REQUESTS
                        && r.status() != reqwest::StatusCode::CONFLICT =>
                {
                    stats.refused.fetch_add(1, Ordering::Relaxed);
                    eprintln!(
                        "chaos: upload {name} refused: {} {}",
                        r.status(),
                        r.text().await.unwrap_or_default()
                    );
                    break;
                }
                _ if started.elapsed() > Duration::from_secs(180) => {
                    stats.refused.fetch_add(1, Ordering::Relaxed);
                    eprintln!("chaos: upload {name} gave up after 180 s of retries");
                    break;
                }
                _ => {
                    stats.retries.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            }
        }
    }
}

/// The job files the fleet runs: the built-in ones with more attempts, so that a job hit by
/// many faults is resumed rather than `dead` (dead is terminal and allowed; resumes are what
/// the invariants test).
fn write_jobs_dir(dir: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (kind, text) in agentd::catalog::BUILTIN {
        let text: Vec<String> = text
            .lines()
            .map(|l| {
                if l.trim_start().starts_with("max_attempts =") {
                    "max_attempts = 25".to_string()
                } else {
                    l.to_string()
                }
            })
            .collect();
        std::fs::write(dir.join(format!("{kind}.toml")), text.join("\n") + "\n")?;
    }
    Ok(())
}

/// Runs the suite: set-up, faults, settle, invariants.
pub async fn run(opts: &Opts) -> anyhow::Result<Report> {
    let t0 = Instant::now();
    let seed = opts.seed;
    println!(
        "chaos: seed {seed} ({SEED_ENV}={seed} replays it): {} faults, {} workers + API, {} uploads over {} orgs",
        opts.faults, opts.workers, opts.documents, opts.orgs
    );
    let mut rng = StdRng::seed_from_u64(seed);
    let cluster = Arc::new(tokio::task::spawn_blocking(move || Cluster::start(seed)).await??);
    {
        let mut admin = sqlx::PgConnection::connect(&cluster.url("postgres")).await?;
        for s in [
            "ALTER SYSTEM SET max_connections = 300",
            // The suite's cluster holds nothing worth an fsync: its crashes are process crashes.
            "ALTER SYSTEM SET fsync = off",
            // Lock waits and deadlocks name their statements in the server log.
            "ALTER SYSTEM SET log_lock_waits = on",
            "CREATE DATABASE chaos",
        ] {
            sqlx::query(s).execute(&mut admin).await?;
        }
        admin.close().await?;
        let c = cluster.clone();
        tokio::task::spawn_blocking(move || c.restart()).await??;
    }
    let url = cluster.url("chaos");
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(10))
        .connect(&url)
        .await?;
    agentd::db::migrate(&pool).await?;
    let admin = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(10))
        .connect(&cluster.url("postgres"))
        .await?;

    // Orgs, their budgets (charges are counted against them) and API keys.
    let now = chrono::Utc::now();
    let mut orgs = Vec::new();
    let mut keys = Vec::new();
    for i in 0..opts.orgs {
        let org = agentd::store::orgs::ensure(&pool, &format!("chaos-{i}"))
            .await?
            .id;
        agentd::store::runs::set_budget(&pool, org, 1 << 40, now).await?;
        let (_, key) =
            agentd::api::auth::create_key(&pool, org, agentd::api::auth::Role::Admin, now).await?;
        // A tag makes untagged documents a signal of the nightly review (else it runs no model).
        let mut conn = pool.acquire().await?;
        agentd::store::tags::create(&mut conn, org, "reviewed", "#336699", None, now).await?;
        drop(conn);
        orgs.push(org);
        keys.push(key);
    }

    let model = ModelServer::start().await?;
    let receiver = Receiver::start().await?;
    let work =
        std::env::temp_dir().join(format!("agentd-chaos-{}-{seed}-work", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    write_jobs_dir(&work.join("jobs"))?;
    let env: Vec<(String, String)> = [
        ("DATABASE_URL", url.as_str()),
        ("AGENTD_HTTP__ADDR", ""),
        (
            "AGENTD_WORKER__JOBS_DIR",
            &work.join("jobs").display().to_string(),
        ),
        ("AGENTD_WORKER__LEASE_SECS", &LEASE_SECS.to_string()),
        ("AGENTD_WORKER__HEARTBEAT_SECS", "1"),
        ("AGENTD_WORKER__RESCUE_INTERVAL_SECS", "1"),
        ("AGENTD_WORKER__POLL_INTERVAL_MS", "200"),
        ("AGENTD_WORKER__SHUTDOWN_GRACE_SECS", "2"),
        ("AGENTD_LLM__PROVIDER", "openai"),
        ("AGENTD_LLM__BASE_URL", &model.base_url),
        ("AGENTD_LLM__API_KEY", "chaos-not-a-secret"),
        ("AGENTD_LLM__STREAM", "true"),
        ("AGENTD_LLM__MAX_RETRIES", "1"),
        ("AGENTD_LLM__REQUEST_TIMEOUT_SECS", "30"),
        ("AGENTD_LLM__CONSTRAINED_CALLS", "false"),
        ("AGENTD_WEBHOOKS__ALLOW_PRIVATE_NETWORKS", "true"),
        // With AGENTD_CHAOS_LOG_DIR (procs.rs) the children's warnings are kept too.
        (
            "AGENTD_LOG",
            if std::env::var_os("AGENTD_CHAOS_LOG_DIR").is_some() {
                "warn"
            } else {
                "error"
            },
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let mut fleet = Fleet::start(opts.agentd_bin.clone(), env, opts.workers).await?;

    // Every org subscribes the receiver to every event type, through the API.
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let every: Vec<&str> = agentd::store::events::EventType::ALL
        .iter()
        .map(|t| t.as_str())
        .collect();
    for key in &keys {
        let base = fleet
            .api_base
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let r = http
            .post(format!("{base}/v1/webhooks"))
            .bearer_auth(key)
            .json(&json!({"url": receiver.url, "events": every, "secret": "chaos-secret-0123456789abcdef"}))
            .send()
            .await?;
        anyhow::ensure!(
            r.status().is_success(),
            "webhook subscription: {} {}",
            r.status(),
            r.text().await.unwrap_or_default()
        );
    }
    // One document per org first: the expired approvals name it.
    let stats = Arc::new(UploadStats::default());
    upload(&http, &fleet.api_base, &keys, 0, opts.orgs, &stats).await;
    let seed_docs: Vec<(Uuid, Uuid)> =
        sqlx::query_as("SELECT org_id, id FROM documents ORDER BY name")
            .fetch_all(&pool)
            .await?;

    // The uploader: takes counts from the driver, uploads them in order.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(u32, u32)>();
    let uploader = {
        let (http, base, keys, stats) = (
            http.clone(),
            fleet.api_base.clone(),
            keys.clone(),
            stats.clone(),
        );
        tokio::spawn(async move {
            while let Some((first, n)) = rx.recv().await {
                upload(&http, &base, &keys, first, n, &stats).await;
            }
        })
    };

    // ---- faults ----
    let t_faults = Instant::now();
    let mut report = Report {
        seed,
        ..Report::default()
    };
    let mut sent = opts.orgs;
    let today = now.date_naive();
    let mut nights = 0u32;
    let mut first_round: Vec<Fault> = Fault::WEIGHTS.iter().map(|(f, _)| *f).collect();
    first_round.shuffle(&mut rng);
    for i in 0..opts.faults {
        let gap = rng.random_range(opts.gap_ms.0..=opts.gap_ms.1);
        tokio::time::sleep(Duration::from_millis(gap)).await;
        // The workload, spread over the phase.
        let due = opts.orgs + opts.documents * (i + 1) / opts.faults.max(1);
        if due > sent {
            let _ = tx.send((sent, due - sent));
            sent = due;
        }
        if i % 10 == 0 && !seed_docs.is_empty() {
            let (org, doc) = seed_docs[(i as usize / 10) % seed_docs.len()];
            if add_expired_approvals(&pool, org, doc, opts.approvals_per_batch)
                .await
                .is_err()
            {
                report.driver_db_errors += 1;
            }
            let night = today - chrono::Duration::days(i64::from(nights));
            nights += 1;
            for org in &orgs {
                let job = {
                    use agentd::kinds::{JobKind, ProactiveSuggestion, proactive_suggestion};
                    ProactiveSuggestion::job(&proactive_suggestion::Payload {
                        org_id: *org,
                        night,
                    })
                    .max_attempts(25)
                };
                if agentd::queue::enqueue_committed(&pool, &job).await.is_err() {
                    report.driver_db_errors += 1;
                }
            }
        }
        // Every kind once first (in a seeded order), then drawn by weight.
        let fault = match first_round.get(i as usize) {
            Some(f) => *f,
            None => Fault::draw(&mut rng),
        };
        match fault {
            Fault::WorkerKill => {
                let w = rng.random_range(0..fleet.workers.len());
                fleet.kill_worker(w)?;
            }
            Fault::ConnTerminate => {
                let k = rng.random_range(1..=3usize);
                let pick = rng.random::<u64>();
                if terminate_some(&admin, k, pick).await.is_err() {
                    report.driver_db_errors += 1;
                }
            }
            Fault::PgRestart => {
                let c = cluster.clone();
                tokio::task::spawn_blocking(move || c.crash_restart()).await??;
            }
            Fault::PgRestartInRecovery => {
                let w = rng.random_range(0..fleet.workers.len());
                fleet.kill_worker(w)?;
                // Past the dead worker's leases: the rescuer (every second) is reclaiming them
                // and the new process is starting when the server goes down.
                tokio::time::sleep(Duration::from_millis(LEASE_SECS * 1000 + 300)).await;
                let c = cluster.clone();
                tokio::task::spawn_blocking(move || c.crash_restart()).await??;
            }
            Fault::ProviderStall => model.arm(Habit::Stall(Duration::from_secs(LEASE_SECS + 2))),
            Fault::Provider429 => model.arm(Habit::RateLimited),
            Fault::Provider500 => model.arm(Habit::ServerError),
            Fault::StreamCut => model.arm(Habit::CutStream),
        }
        *report.faults.entry(fault.name()).or_default() += 1;
        report.total_faults += 1;
        fleet.keep_alive().await?;
    }
    report.fault_secs = t_faults.elapsed().as_secs_f64();

    // ---- settle: no more faults; every due job is run ----
    let t_settle = Instant::now();
    model.disarm();
    drop(tx);
    let _ = uploader.await;
    let deadline = Instant::now() + Duration::from_secs(opts.settle_secs);
    loop {
        fleet.keep_alive().await?;
        // Retries wait out their backoff in the database: bring them forward (the suite's own
        // database; nothing else is changed).
        let _ = sqlx::query(
            "UPDATE agentd_jobs SET run_at = now() WHERE state = 'available' AND run_at > now()",
        )
        .execute(&pool)
        .await;
        let left: Result<i64, _> = sqlx::query_scalar(
            "SELECT count(*) FROM agentd_jobs WHERE state IN ('available', 'running')",
        )
        .fetch_one(&pool)
        .await;
        if left.as_ref().is_ok_and(|n| *n == 0) {
            report.drained = true;
            break;
        }
        if Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    report.settle_secs = t_settle.elapsed().as_secs_f64();
    fleet.keep_alive().await?;
    fleet.stop();
    report.respawned = fleet.respawned;
    report.exits = fleet.exits.clone();

    // ---- invariants ----
    report.retried = sqlx::query_scalar("SELECT count(*) FROM agentd_jobs WHERE attempt > 1")
        .fetch_one(&pool)
        .await?;
    report.jobs = sqlx::query_as(
        "SELECT kind, state, count(*) FROM agentd_jobs GROUP BY kind, state ORDER BY kind, state",
    )
    .fetch_all(&pool)
    .await?;
    let received = receiver
        .seen
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    report.checks = invariants::check(&pool, &received).await?;
    let due: Vec<String> = sqlx::query_scalar(
        "SELECT 'job ' || id || ' ' || kind || ' ' || state || ' due since ' || run_at
           FROM agentd_jobs WHERE state IN ('available', 'running') AND run_at <= now() ORDER BY id",
    )
    .fetch_all(&pool)
    .await?;
    // A worker or the API that finds its database gone waits for it (database.connect_wait_secs,
    // reconnecting pools); none exits by itself.
    report.checks.push(invariants::Check {
        name: "no_process_exited",
        what: "no worker or API process exited on its own (a lost database is waited for)",
        checked: fleet.spawned as i64,
        violations: report.exits.len(),
        examples: report.exits.iter().take(5).cloned().collect(),
    });
    report.checks.push(invariants::Check {
        name: "queue_drained",
        what: "once faults stop, every due job runs within the settle time",
        checked: report.jobs.iter().map(|j| j.2).sum(),
        violations: due.len(),
        examples: due.into_iter().take(5).collect(),
    });
    // Every checkpointed answer is one the model server sent whole: none invented or stored
    // twice (answers cut or lost to a fault are asked again, and are not charged).
    let s = model.served();
    let sent = s.answered.load(Ordering::Relaxed);
    let checkpointed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM agent_steps WHERE kind IN ('llm_response', 'tool_model')",
    )
    .fetch_one(&pool)
    .await?;
    let over = (checkpointed - sent as i64).max(0) as usize;
    report.checks.push(invariants::Check {
        name: "answers_from_the_server",
        what: "checkpointed answers <= whole answers the model server sent",
        checked: checkpointed,
        violations: over,
        examples: if over > 0 {
            vec![format!("{checkpointed} checkpointed, {sent} sent")]
        } else {
            Vec::new()
        },
    });
    report.uploads = stats.accepted.load(Ordering::Relaxed);
    report.upload_retries = stats.retries.load(Ordering::Relaxed);
    report.upload_refused = stats.refused.load(Ordering::Relaxed);
    report.deliveries_received = receiver.total.load(Ordering::Relaxed);
    report.model_requests = s.requests.load(Ordering::Relaxed);
    report.model_answered = s.answered.load(Ordering::Relaxed);
    report.model_faulted = s.stalled.load(Ordering::Relaxed)
        + s.rate_limited.load(Ordering::Relaxed)
        + s.server_errors.load(Ordering::Relaxed)
        + s.cut.load(Ordering::Relaxed);
    report.dead = sqlx::query_as(
        "SELECT kind, left(COALESCE(last_error, ''), 160) AS reason, count(*) FROM agentd_jobs
          WHERE state = 'dead' GROUP BY 1, 2 ORDER BY 3 DESC LIMIT 10",
    )
    .fetch_all(&pool)
    .await?;
    pool.close().await;
    admin.close().await;
    drop(fleet);
    if let Ok(to) = std::env::var(PG_LOG_ENV) {
        // The cluster's server log, kept for a look at what failed (deadlocks name their
        // statements there).
        let _ = std::fs::copy(cluster.server_log(), &to);
    }
    let _ = std::fs::remove_dir_all(&work);
    drop(cluster);
    report.total_secs = t0.elapsed().as_secs_f64();
    Ok(report)
}

/// `n` expired approvals of `org` on `doc` and the org's sweep of them, built by its kind as
/// `POST /v1/jobs` builds it (org id and per-org key, review D1; a batch whose sweep finds the
/// org's previous one still waiting is left to the next).
async fn add_expired_approvals(pool: &PgPool, org: Uuid, doc: Uuid, n: u32) -> anyhow::Result<()> {
    use agentd::kinds::{ApprovalExpiry, JobKind, approval_expiry::Payload};
    let mut tx = pool.begin().await?;
    let ids: Vec<Uuid> = sqlx::query_scalar(
        "INSERT INTO pending_approvals (id, org_id, tool, args, snapshot, snapshot_hash, created_at, expires_at, chain_id)
         SELECT gen_random_uuid(), $1, 'update_document',
                jsonb_build_object('document_id', $2::uuid, 'metadata', jsonb_build_object('n', g)),
                '{}'::jsonb, 'not-the-hash', now() - interval '5 hours', now() - interval '1 hour',
                gen_random_uuid()
           FROM generate_series(1, $3) g
         RETURNING id",
    )
    .bind(org)
    .bind(doc)
    .bind(n as i32)
    .fetch_all(&mut *tx)
    .await?;
    let job = ApprovalExpiry::job(&Payload::org_sweep(org, ids)).max_attempts(25);
    agentd::queue::enqueue(&mut *tx, &job).await?;
    tx.commit().await?;
    Ok(())
}

/// `pg_terminate_backend` of `k` of the agentd connections, picked by `pick`.
async fn terminate_some(admin: &PgPool, k: usize, pick: u64) -> sqlx::Result<()> {
    let mut pids: Vec<i32> = sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE datname = 'chaos' AND pid <> pg_backend_pid()
            AND backend_type = 'client backend' ORDER BY pid",
    )
    .fetch_all(admin)
    .await?;
    pids.shuffle(&mut StdRng::seed_from_u64(pick));
    for pid in pids.into_iter().take(k) {
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .execute(admin)
            .await?;
    }
    Ok(())
}
