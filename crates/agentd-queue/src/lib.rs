//! The Postgres job queue: enqueue (on any executor, so producers enqueue inside their own
//! transaction), batched claim with `FOR UPDATE SKIP LOCKED`, leases with heartbeat, attempt
//! fencing, retries with backoff written to the database, dead jobs, unique keys, cron ticks,
//! lease rescue and retention.
//!
//! **Crate.** `agentd-queue` (layer 12 of ARCHITECTURE.md § Layers) may use only `agentd-base`;
//! it names no domain table (`tests/it/module_graph.rs`).

// The modules of the crates below, under the names they had when they were one crate, so a
// path reads `crate::store::…` wherever it is used. Only crates below this one can be named
// here: Cargo has no edge upward.
use agentd_base::{catalog, clock, config, db, telemetry};

pub mod apalis;
pub mod backoff;
pub mod cron;
pub mod enqueue;
pub mod fair;
pub mod lease;
pub mod maintenance;
pub mod pause;
pub mod rescue;
pub mod state;
pub mod store;
pub mod vacuum;
pub mod worker;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

pub use enqueue::{enqueue, enqueue_committed, enqueue_many};
pub use state::JobState;

/// The NOTIFY channel the insert trigger signals on (once per statement).
pub const NOTIFY_CHANNEL: &str = "agentd_jobs";

/// A job to insert.
#[derive(Debug, Clone, Serialize)]
pub struct NewJob {
    /// Which handler runs it, e.g. `auto_create`.
    pub kind: String,
    /// The handler's input; validated by the handler (a malformed payload makes the job `dead`).
    pub payload: Value,
    /// Higher is claimed first.
    pub priority: i16,
    /// Not before this instant; `None` means now.
    pub run_at: Option<DateTime<Utc>>,
    /// Attempts before `dead`.
    pub max_attempts: i32,
    /// A second job with the same key is skipped (`ON CONFLICT DO NOTHING`) while the first is
    /// waiting or running; once it finished (succeeded, dead, cancelled) the key is free again.
    pub unique_key: Option<String>,
    /// Also skip when a finished job with the same key is still stored (until retention purges
    /// it): for keys that name work to do once, e.g. a cron tick or a re-proposal.
    pub unique_until_purged: bool,
    /// The W3C trace context the job's run continues (`crate::telemetry::propagation`).
    pub traceparent: Option<String>,
}

impl NewJob {
    /// A job of `kind` with `payload`, default priority and five attempts.
    pub fn new(kind: impl Into<String>, payload: Value) -> Self {
        Self {
            kind: kind.into(),
            payload,
            priority: 0,
            run_at: None,
            max_attempts: 5,
            unique_key: None,
            unique_until_purged: false,
            traceparent: None,
        }
    }

    /// Sets the unique key.
    pub fn unique_key(mut self, key: impl Into<String>) -> Self {
        self.unique_key = Some(key.into());
        self
    }

    /// Makes the unique key skip the job also when a finished job with the key is still stored.
    pub fn unique_until_purged(mut self) -> Self {
        self.unique_until_purged = true;
        self
    }

    /// Sets the earliest run time.
    pub fn run_at(mut self, at: DateTime<Utc>) -> Self {
        self.run_at = Some(at);
        self
    }

    /// Sets the trace context the job continues (a `traceparent` value).
    pub fn traceparent(mut self, traceparent: Option<String>) -> Self {
        self.traceparent = traceparent;
        self
    }

    /// Sets the priority.
    pub fn priority(mut self, p: i16) -> Self {
        self.priority = p;
        self
    }

    /// Sets the attempt limit.
    pub fn max_attempts(mut self, n: i32) -> Self {
        self.max_attempts = n;
        self
    }
}

/// A job as stored (`Job` in the OpenAPI document).
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
#[schema(as = Job)]
pub struct JobRow {
    pub id: i64,
    pub kind: String,
    #[schema(value_type = Object)]
    pub payload: Value,
    pub state: JobState,
    pub priority: i16,
    pub run_at: DateTime<Utc>,
    pub attempt: i32,
    pub released: i32,
    pub max_attempts: i32,
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// The worker holding it (`host:pid:…`): operators only; the API leaves it out (review L8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locked_by: Option<String>,
    pub unique_key: Option<String>,
    /// The last error; on the API `<class>: <short message>` (review L8), in full for operators.
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// A claimed job: what a handler gets.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ClaimedJob {
    pub id: i64,
    pub kind: String,
    pub payload: Value,
    /// The fencing token: acks and failures carry it; a stale attempt changes nothing.
    pub attempt: i32,
    /// Attempts that count against `max_attempts` (claims minus graceful releases).
    pub counted_attempts: i32,
    pub max_attempts: i32,
    /// The producer's trace context (migration 0071), parsed only when traces are exported.
    pub traceparent: Option<String>,
}

/// Why a handler did not succeed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum JobError {
    /// Worth another attempt (provider down, database blip).
    #[error("{0}")]
    Retryable(String),
    /// Worth another attempt, but not before this time (later than the kind's backoff would
    /// say, never earlier): a webhook whose breaker is open until then.
    #[error("{0}")]
    RetryAt(String, chrono::DateTime<chrono::Utc>),
    /// Will never succeed (malformed payload, missing subject): `dead` at once.
    #[error("{0}")]
    Fatal(String),
}

/// A database error is worth another attempt: `?` on a query in a handler says so.
impl From<sqlx::Error> for JobError {
    fn from(e: sqlx::Error) -> Self {
        JobError::Retryable(format!("database error: {e}"))
    }
}

impl JobError {
    /// Worth another attempt: `.map_err(JobError::retryable)`.
    pub fn retryable(e: impl std::fmt::Display) -> Self {
        JobError::Retryable(e.to_string())
    }

    /// Will never succeed (`dead` at once): `.map_err(JobError::fatal)`.
    pub fn fatal(e: impl std::fmt::Display) -> Self {
        JobError::Fatal(e.to_string())
    }

    /// What the job names is gone (`None`): fatal, saying `why` — no retry brings it back.
    pub fn when_gone<T>(found: Option<T>, why: impl FnOnce() -> String) -> Result<T, JobError> {
        found.ok_or_else(|| JobError::Fatal(why()))
    }

    /// True if the job should be retried (while attempts remain).
    pub fn is_retryable(&self) -> bool {
        matches!(self, JobError::Retryable(_) | JobError::RetryAt(..))
    }

    /// The earliest time of the next attempt the handler asked for, if any.
    pub fn not_before(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        match self {
            JobError::RetryAt(_, at) => Some(*at),
            _ => None,
        }
    }
}

/// Errors of the queue itself (database).
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
    #[error("{0}")]
    Invalid(String),
}
