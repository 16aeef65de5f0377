//! The job catalog: one `jobs/<kind>.toml` per job kind (queue policy, schedule, agent caps,
//! tool policy, prompts), loaded and validated at start. A bad file is a startup error that
//! names the file, the key and what is wrong.

use crate::config::{Invalid, TimeUnit, at_least, duration_at_most};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;

/// The job kinds agentd knows, with the job files built into the binary.
pub const BUILTIN: [(&str, &str); 5] = [
    (
        "auto_create",
        include_str!("../../../jobs/auto_create.toml"),
    ),
    (
        "proactive_suggestion",
        include_str!("../../../jobs/proactive_suggestion.toml"),
    ),
    (
        "approval_expiry",
        include_str!("../../../jobs/approval_expiry.toml"),
    ),
    (
        "webhook_delivery",
        include_str!("../../../jobs/webhook_delivery.toml"),
    ),
    ("run_fork", include_str!("../../../jobs/run_fork.toml")),
];

/// Kinds whose jobs do not run the agent: their files have no `[agent]` section.
/// (`run_fork` runs the agent of its parent run's kind, with that kind's `[agent]`.)
pub const WITHOUT_AGENT: [&str; 2] = ["webhook_delivery", "run_fork"];

/// Kinds whose runs may wait for the decisions on their proposals (`agent.await_decisions`):
/// their handlers resume a waiting run. An auto_create run's document and a re-proposal's
/// chain have a life of their own around the run, which a wait would have to keep.
pub const AWAITS_DECISIONS: [&str; 1] = ["proactive_suggestion"];

/// A job file that cannot be used (`file` is the job file, e.g. `jobs/auto_create.toml`).
pub type CatalogError = crate::config::ConfigError;

/// What the policy does with a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyDecision {
    /// Execute at once (auto-approval).
    Auto,
    /// Store as a pending approval for a person.
    Propose,
    /// Refuse; the model is told so.
    Deny,
}

fn three() -> u32 {
    3
}

fn yes() -> bool {
    true
}

fn deny() -> PolicyDecision {
    PolicyDecision::Deny
}

/// Queue policy of one kind.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueuePolicy {
    /// Jobs of this kind run at once per worker process.
    pub concurrency: u32,
    /// Attempts before the job is `dead`.
    pub max_attempts: i32,
    /// First retry delay; doubles per attempt, with jitter.
    pub backoff_base_ms: u64,
    /// Upper bound of the retry delay.
    pub backoff_max_ms: u64,
    /// A job running longer fails (and is retried).
    pub timeout_secs: u64,
    /// Higher is claimed first.
    pub priority: i16,
    /// Delete a job when it succeeds instead of keeping it `succeeded` until retention (fewer
    /// writes per job; a succeeded job can then no longer be inspected, and its unique key is
    /// free at once even with `unique_until_purged`). Failures are kept either way.
    #[serde(default)]
    pub delete_on_success: bool,
    /// Jobs of this kind one org may have running at once across the fleet (absent: no cap).
    /// An operator sets another cap for one org with `agentd orgs set-limit`. The cap is checked
    /// by the claim (`queue::fair`): two claims racing may together pass it by their shares, so
    /// it bounds an org's share of the fleet, not a hard semaphore.
    #[serde(default)]
    pub max_running_per_org: Option<u32>,
    /// Slots of each worker's `concurrency` that one org's jobs may not fill while other orgs'
    /// jobs of the kind were claimed by that worker in the last minute: a job of another org
    /// arriving then starts at once instead of waiting for a slot to free. Alone, an org has
    /// every slot (0, the default: no such slots; less than `concurrency`).
    #[serde(default)]
    pub newcomer_slots: u32,
}

/// What a cron tick enqueues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FanOut {
    /// One job per active org and local date (`orgs.timezone`), due from the org's
    /// `nightly_hour`; unique per org and local date.
    Orgs,
}

/// A periodic schedule.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// Six-field cron expression (seconds first), UTC.
    pub cron: String,
    /// Absent: one job per tick.
    pub fan_out: Option<FanOut>,
    /// With a fan-out: each org's job runs this many seconds at most after the tick that made
    /// it due, at an offset of its own (a hash of the org id), so the orgs of a time zone do not
    /// all start in the same minute. 0 (the default): all at the tick.
    #[serde(default)]
    pub spread_secs: u32,
}

/// Approval expiry sweep settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepSpec {
    pub batch: u32,
    /// Batches judged at once, each on its own connection (and a core of the database).
    #[serde(default = "default_sweep_workers")]
    pub workers: u32,
    pub retention_days: u32,
    pub max_reproposals: u32,
    /// `approval.expiring` is written this many seconds before an approval expires.
    #[serde(default = "default_expiring_notice_secs")]
    pub expiring_notice_secs: u64,
}

fn default_sweep_workers() -> u32 {
    2
}

fn default_expiring_notice_secs() -> u64 {
    3600
}

/// Webhook delivery settings (`jobs/webhook_delivery.toml`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSpec {
    /// A delivery that has not answered after this long fails (and is retried).
    pub request_timeout_secs: u64,
    /// Most subscriptions per org.
    pub max_per_org: u32,
    /// Consecutive failed deliveries after which a subscription's breaker opens (its deliveries
    /// wait; see migration 0067).
    #[serde(default = "default_failures_to_open")]
    pub failures_to_open: u32,
    /// A receiver that does not accept the connection within this long fails the attempt
    /// (apart from `request_timeout_secs`, which bounds the whole request).
    #[serde(default = "default_connect_timeout_secs")]
    pub connect_timeout_secs: u64,
}

fn default_failures_to_open() -> u32 {
    5
}

fn default_connect_timeout_secs() -> u64 {
    2
}

/// Tool policy: per category, with per-tool overrides.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySpec {
    pub read: PolicyDecision,
    pub write: PolicyDecision,
    pub destructive: PolicyDecision,
    #[serde(default)]
    pub tools: BTreeMap<String, PolicyDecision>,
}

/// The agent section: caps, tools, policy, prompts.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSpec {
    /// Empty: the service's `llm.model`.
    pub model: String,
    pub max_rounds: u32,
    pub max_tool_calls: u32,
    pub max_tokens: u64,
    pub deadline_secs: u64,
    pub max_refinements: u32,
    pub cleanup_on_failure: bool,
    pub excerpt_chars: usize,
    pub approval_ttl_secs: u64,
    #[serde(default)]
    pub max_suggestions: Option<u32>,
    /// The nightly job runs the model only for an org whose overview (`org_overview`, computed
    /// in SQL) shows a signal or has suggestions left to write; the others cost no model call.
    #[serde(default)]
    pub only_with_signals: bool,
    /// A run about one document may read other documents' text (default false).
    #[serde(default)]
    pub read_other_documents: bool,
    /// A write outside the run's subject: `deny` (default) or `propose`.
    #[serde(default = "deny")]
    pub off_subject: PolicyDecision,
    /// Failed (paid-for) extraction answers allowed per run before run_extraction is capped.
    #[serde(default = "three")]
    pub max_failed_extractions: u32,
    /// Nudges when the model answers in prose before the kind's goal is met.
    #[serde(default = "default_max_nudges")]
    pub max_nudges: u32,
    /// Refused repeated identical calls before the run stops.
    #[serde(default = "default_max_repeats")]
    pub max_repeats: u32,
    /// Each round offers only the tools of the next unmet goal (small models).
    #[serde(default)]
    pub guided: bool,
    /// `create_schema` in a run about one document reuses the org's schema for the same kind of
    /// document (by field overlap; a new version when fields are missing) instead of adding one
    /// more schema (default true; `tools::schema_reuse`).
    #[serde(default = "yes")]
    pub reuse_schemas: bool,
    /// A run that would end while approvals it proposed are still pending waits for their
    /// decisions instead (status `waiting`, no job, slot or lease held) and is resumed with them
    /// by a job (issue 50; default false; the kinds of [`AWAITS_DECISIONS`] only).
    #[serde(default, deserialize_with = "await_decisions")]
    pub await_decisions: bool,
    pub tools: Vec<String>,
    pub system_prompt: String,
    pub first_message: String,
    pub policy: PolicySpec,
}

impl Default for AgentSpec {
    /// The agent of a kind that runs none: no tools, nothing to say.
    fn default() -> Self {
        Self {
            model: String::new(),
            max_rounds: 1,
            max_tool_calls: 1,
            max_tokens: 1,
            deadline_secs: 1,
            max_refinements: 0,
            cleanup_on_failure: false,
            excerpt_chars: 100,
            approval_ttl_secs: 1,
            max_suggestions: None,
            only_with_signals: false,
            read_other_documents: false,
            off_subject: PolicyDecision::Deny,
            max_failed_extractions: three(),
            max_nudges: default_max_nudges(),
            max_repeats: default_max_repeats(),
            guided: false,
            reuse_schemas: false,
            await_decisions: false,
            tools: Vec::new(),
            system_prompt: String::new(),
            first_message: String::new(),
            policy: PolicySpec {
                read: PolicyDecision::Deny,
                write: PolicyDecision::Deny,
                destructive: PolicyDecision::Deny,
                tools: BTreeMap::new(),
            },
        }
    }
}

/// `agent.await_decisions`, a boolean: a bad value's error names the key (a type error of the
/// job file names only its line).
fn await_decisions<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    bool::deserialize(d).map_err(|e| {
        serde::de::Error::custom(format!("agent.await_decisions must be true or false: {e}"))
    })
}

fn default_max_nudges() -> u32 {
    2
}

fn default_max_repeats() -> u32 {
    3
}

/// One job kind, as loaded from its file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    pub kind: String,
    pub queue: QueuePolicy,
    #[serde(default)]
    pub schedule: Option<ScheduleSpec>,
    #[serde(default)]
    pub sweep: Option<SweepSpec>,
    #[serde(default)]
    pub webhook: Option<WebhookSpec>,
    /// Absent (an agent that offers no tools) for the kinds in [`WITHOUT_AGENT`].
    #[serde(default)]
    pub agent: AgentSpec,
}

impl JobSpec {
    /// The parsed cron schedule, if the kind has one (validated at load).
    pub fn cron(&self) -> Option<cron::Schedule> {
        self.schedule
            .as_ref()
            .map(|s| cron::Schedule::from_str(&s.cron).expect("validated at load")) // checked: `parse` refuses a job file whose cron does not parse
    }
}

/// Every job kind, keyed by kind.
#[derive(Debug, Clone)]
pub struct Catalog {
    pub kinds: BTreeMap<String, JobSpec>,
}

impl Catalog {
    /// The job files built into the binary.
    pub fn builtin(known_tools: &[&str]) -> Result<Self, CatalogError> {
        let mut kinds = BTreeMap::new();
        for (kind, text) in BUILTIN {
            let spec = parse(&format!("jobs/{kind}.toml"), kind, text, known_tools)?;
            kinds.insert(kind.to_string(), spec);
        }
        Ok(Self { kinds })
    }

    /// Reads `<dir>/<kind>.toml` for every kind; a missing, unknown or invalid file is an error.
    pub fn load_dir(dir: &Path, known_tools: &[&str]) -> Result<Self, CatalogError> {
        let entries = std::fs::read_dir(dir).map_err(|e| {
            CatalogError::new(
                dir.display().to_string(),
                format!("cannot read the job directory: {e}"),
            )
        })?;
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some("toml") {
                continue;
            }
            let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            if !BUILTIN.iter().any(|(k, _)| *k == stem) {
                return Err(CatalogError::new(
                    path.display().to_string(),
                    format!(
                        "unknown job kind `{stem}` (known: {})",
                        BUILTIN.map(|(k, _)| k).join(", ")
                    ),
                ));
            }
        }
        let mut kinds = BTreeMap::new();
        for (kind, _) in BUILTIN {
            let path = dir.join(format!("{kind}.toml"));
            let file = path.display().to_string();
            let text = std::fs::read_to_string(&path)
                .map_err(|e| CatalogError::new(&file, format!("cannot read: {e}")))?;
            kinds.insert(kind.to_string(), parse(&file, kind, &text, known_tools)?);
        }
        Ok(Self { kinds })
    }

    /// The spec of `kind`.
    pub fn get(&self, kind: &str) -> Option<&JobSpec> {
        self.kinds.get(kind)
    }
}

/// Parses and validates one job file.
pub fn parse(
    file: &str,
    kind: &str,
    text: &str,
    known_tools: &[&str],
) -> Result<JobSpec, CatalogError> {
    let err = |e: Invalid| CatalogError::invalid(file, e);
    // A generic table cannot hold every value the typed spec accepts (an integer past i64::MAX
    // that a bound check reports below): then look for the section header itself.
    let has_agent = match toml::from_str::<toml::Table>(text) {
        Ok(t) => t.contains_key("agent"),
        Err(_) => text.lines().any(|l| l.trim_start().starts_with("[agent")),
    };
    if has_agent && WITHOUT_AGENT.contains(&kind) {
        return Err(err(Invalid::new(
            "agent",
            format!("agent: kind {kind} runs no agent; remove the [agent] section"),
        )));
    }
    let spec: JobSpec = toml::from_str(text).map_err(|e| {
        let line = e
            .span()
            .and_then(|s| text.get(..s.start))
            .map(|before| format!(" (line {})", before.lines().count().max(1)))
            .unwrap_or_default();
        CatalogError::new(file, format!("{}{line}", e.message().trim()))
    })?;
    if spec.kind != kind {
        return Err(err(Invalid::new(
            "kind",
            format!(
                "kind must be {kind:?} to match the file name (got {:?})",
                spec.kind
            ),
        )));
    }
    if WITHOUT_AGENT.contains(&kind) {
        validate_queue(&spec).map_err(err)?;
        if kind == "webhook_delivery" {
            let w = spec.webhook.as_ref().ok_or_else(|| {
                err(Invalid::new(
                    "webhook",
                    "webhook: missing section [webhook]",
                ))
            })?;
            if w.request_timeout_secs == 0 || w.request_timeout_secs >= spec.queue.timeout_secs {
                return Err(err(Invalid::new(
                    "webhook.request_timeout_secs",
                    format!(
                        "webhook.request_timeout_secs must be ≥ 1 and below queue.timeout_secs ({}) (got {})",
                        spec.queue.timeout_secs, w.request_timeout_secs
                    ),
                )));
            }
            at_least("webhook.max_per_org", w.max_per_org.into(), 1).map_err(err)?;
            at_least("webhook.failures_to_open", w.failures_to_open.into(), 1).map_err(err)?;
            at_least("webhook.connect_timeout_secs", w.connect_timeout_secs, 1).map_err(err)?;
        }
        return Ok(spec);
    }
    if !has_agent {
        return Err(err(Invalid::new("agent", "agent: missing section [agent]")));
    }
    if spec.webhook.is_some() {
        return Err(err(Invalid::new(
            "webhook",
            format!("webhook: only webhook_delivery takes a [webhook] section (this is {kind})"),
        )));
    }
    validate(&spec, known_tools).map_err(err)?;
    Ok(spec)
}

/// The `[queue]` and `[schedule]` sections.
fn validate_queue(spec: &JobSpec) -> Result<(), Invalid> {
    let q = &spec.queue;
    at_least("queue.concurrency", q.concurrency.into(), 1)?;
    at_least("queue.max_attempts", q.max_attempts.max(0) as u64, 1)?;
    at_least("queue.backoff_base_ms", q.backoff_base_ms, 1)?;
    at_least("queue.timeout_secs", q.timeout_secs, 1)?;
    if let Some(cap) = q.max_running_per_org {
        at_least("queue.max_running_per_org", cap.into(), 1)?;
    }
    if q.newcomer_slots > 0 && q.newcomer_slots >= q.concurrency {
        return Err(Invalid::new(
            "queue.newcomer_slots",
            format!(
                "queue.newcomer_slots must be less than queue.concurrency ({} ≥ {})",
                q.newcomer_slots, q.concurrency
            ),
        ));
    }
    if q.backoff_max_ms < q.backoff_base_ms {
        return Err(Invalid::new(
            "queue.backoff_max_ms",
            format!(
                "queue.backoff_max_ms must be ≥ queue.backoff_base_ms ({} < {})",
                q.backoff_max_ms, q.backoff_base_ms
            ),
        ));
    }
    if let Some(s) = &spec.schedule
        && let Err(e) = cron::Schedule::from_str(&s.cron)
    {
        return Err(Invalid::new(
            "schedule.cron",
            format!(
                "schedule.cron is not a valid cron expression ({:?}: {e}); use six fields, seconds first, e.g. \"0 */5 * * * *\"",
                s.cron
            ),
        ));
    }
    if let Some(s) = &spec.schedule
        && s.spread_secs > 86_400
    {
        return Err(Invalid::new(
            "schedule.spread_secs",
            format!(
                "schedule.spread_secs must be at most 86400 (a day), not {}",
                s.spread_secs
            ),
        ));
    }
    duration_at_most("queue.backoff_base_ms", q.backoff_base_ms, TimeUnit::Millis)?;
    duration_at_most("queue.backoff_max_ms", q.backoff_max_ms, TimeUnit::Millis)?;
    duration_at_most("queue.timeout_secs", q.timeout_secs, TimeUnit::Secs)?;
    Ok(())
}

fn validate(spec: &JobSpec, known_tools: &[&str]) -> Result<(), Invalid> {
    validate_queue(spec)?;
    if let Some(s) = &spec.sweep {
        at_least("sweep.batch", s.batch.into(), 1)?;
        at_least("sweep.workers", s.workers.into(), 1)?;
    }
    let a = &spec.agent;
    {
        duration_at_most("agent.deadline_secs", a.deadline_secs, TimeUnit::Secs)?;
        duration_at_most(
            "agent.approval_ttl_secs",
            a.approval_ttl_secs,
            TimeUnit::Secs,
        )?;
        if let Some(s) = &spec.sweep {
            duration_at_most(
                "sweep.retention_days",
                s.retention_days.into(),
                TimeUnit::Days,
            )?;
        }
    }
    at_least("agent.max_rounds", a.max_rounds.into(), 1)?;
    at_least("agent.max_tool_calls", a.max_tool_calls.into(), 1)?;
    at_least("agent.max_tokens", a.max_tokens, 1)?;
    at_least("agent.deadline_secs", a.deadline_secs, 1)?;
    at_least("agent.excerpt_chars", a.excerpt_chars as u64, 100)?;
    at_least("agent.approval_ttl_secs", a.approval_ttl_secs, 1)?;
    if a.await_decisions && !AWAITS_DECISIONS.contains(&spec.kind.as_str()) {
        return Err(Invalid::new(
            "agent.await_decisions",
            format!(
                "agent.await_decisions is supported by {} only (this is {}); remove it or set it to false",
                AWAITS_DECISIONS.join(", "),
                spec.kind
            ),
        ));
    }
    if a.first_message.trim().is_empty() {
        return Err(Invalid::new(
            "agent.first_message",
            "agent.first_message must not be empty",
        ));
    }
    for t in a.tools.iter().chain(a.policy.tools.keys()) {
        if !known_tools.is_empty() && !known_tools.contains(&t.as_str()) {
            return Err(Invalid::new(
                "agent.tools",
                format!(
                    "agent.tools: unknown tool `{t}` (known: {})",
                    known_tools.join(", ")
                ),
            ));
        }
    }
    Ok(())
}
