//! The job catalog: one `jobs/<kind>.toml` per job kind (queue policy, schedule, agent caps,
//! tool policy, prompts), loaded and validated at start. A bad file is a startup error that
//! names the file, the key and what is wrong.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;

/// The job kinds agentd knows, with the job files built into the binary.
pub const BUILTIN: [(&str, &str); 3] = [
    ("auto_create", include_str!("../jobs/auto_create.toml")),
    (
        "proactive_suggestion",
        include_str!("../jobs/proactive_suggestion.toml"),
    ),
    (
        "approval_expiry",
        include_str!("../jobs/approval_expiry.toml"),
    ),
];

/// A job file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct CatalogError {
    /// The job file, e.g. `jobs/auto_create.toml`.
    pub file: String,
    /// The key and what is wrong with it.
    pub message: String,
}

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
}

/// What a cron tick enqueues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FanOut {
    /// One job per active org, unique per org and tick date.
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
}

/// Approval expiry sweep settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepSpec {
    pub batch: u32,
    pub retention_days: u32,
    pub max_reproposals: u32,
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
    pub tools: Vec<String>,
    pub system_prompt: String,
    pub first_message: String,
    pub policy: PolicySpec,
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
    pub agent: AgentSpec,
}

impl JobSpec {
    /// The parsed cron schedule, if the kind has one (validated at load).
    pub fn cron(&self) -> Option<cron::Schedule> {
        self.schedule
            .as_ref()
            .map(|s| cron::Schedule::from_str(&s.cron).expect("validated at load"))
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
        let entries = std::fs::read_dir(dir).map_err(|e| CatalogError {
            file: dir.display().to_string(),
            message: format!("cannot read the job directory: {e}"),
        })?;
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some("toml") {
                continue;
            }
            let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            if !BUILTIN.iter().any(|(k, _)| *k == stem) {
                return Err(CatalogError {
                    file: path.display().to_string(),
                    message: format!(
                        "unknown job kind `{stem}` (known: auto_create, proactive_suggestion, approval_expiry)"
                    ),
                });
            }
        }
        let mut kinds = BTreeMap::new();
        for (kind, _) in BUILTIN {
            let path = dir.join(format!("{kind}.toml"));
            let file = path.display().to_string();
            let text = std::fs::read_to_string(&path).map_err(|e| CatalogError {
                file: file.clone(),
                message: format!("cannot read: {e}"),
            })?;
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
    let err = |message: String| CatalogError {
        file: file.to_string(),
        message,
    };
    let spec: JobSpec = toml::from_str(text).map_err(|e| {
        let line = e
            .span()
            .map(|s| format!(" (line {})", text[..s.start].lines().count().max(1)))
            .unwrap_or_default();
        err(format!("{}{line}", e.message().trim()))
    })?;
    if spec.kind != kind {
        return Err(err(format!(
            "kind must be {kind:?} to match the file name (got {:?})",
            spec.kind
        )));
    }
    validate(&spec, known_tools).map_err(err)?;
    Ok(spec)
}

fn validate(spec: &JobSpec, known_tools: &[&str]) -> Result<(), String> {
    fn at_least(key: &str, v: u64, min: u64) -> Result<(), String> {
        if v < min {
            return Err(format!("{key} must be ≥ {min} (got {v})"));
        }
        Ok(())
    }
    let q = &spec.queue;
    at_least("queue.concurrency", q.concurrency.into(), 1)?;
    at_least("queue.max_attempts", q.max_attempts.max(0) as u64, 1)?;
    at_least("queue.backoff_base_ms", q.backoff_base_ms, 1)?;
    at_least("queue.timeout_secs", q.timeout_secs, 1)?;
    if q.backoff_max_ms < q.backoff_base_ms {
        return Err(format!(
            "queue.backoff_max_ms must be ≥ queue.backoff_base_ms ({} < {})",
            q.backoff_max_ms, q.backoff_base_ms
        ));
    }
    if let Some(s) = &spec.schedule
        && let Err(e) = cron::Schedule::from_str(&s.cron)
    {
        return Err(format!(
            "schedule.cron is not a valid cron expression ({:?}: {e}); use six fields, seconds first, e.g. \"0 */5 * * * *\"",
            s.cron
        ));
    }
    if let Some(s) = &spec.sweep {
        at_least("sweep.batch", s.batch.into(), 1)?;
    }
    let a = &spec.agent;
    {
        use crate::config::{TimeUnit, duration_at_most};
        duration_at_most("queue.backoff_base_ms", q.backoff_base_ms, TimeUnit::Millis)?;
        duration_at_most("queue.backoff_max_ms", q.backoff_max_ms, TimeUnit::Millis)?;
        duration_at_most("queue.timeout_secs", q.timeout_secs, TimeUnit::Secs)?;
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
    if a.first_message.trim().is_empty() {
        return Err("agent.first_message must not be empty".into());
    }
    for t in a.tools.iter().chain(a.policy.tools.keys()) {
        if !known_tools.is_empty() && !known_tools.contains(&t.as_str()) {
            return Err(format!(
                "agent.tools: unknown tool `{t}` (known: {})",
                known_tools.join(", ")
            ));
        }
    }
    Ok(())
}
