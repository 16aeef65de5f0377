//! Job kinds as types (issue 34, in the spirit of River's `JobArgs` and underway's
//! `Task::Input`): each kind is one type that owns its name, its payload, its unique key and how
//! a job of it is built from the job file's queue policy. Every producer (API, CLI, demo, eval,
//! uploads, re-proposals) builds its jobs through [`JobKind::job`], and every handler reads its
//! payload with [`JobKind::parse`]; a kind's name is written in its own module here and in the
//! catalog only (`tests/it/kind_names.rs` keeps it so). The handlers are in `jobs/<kind>.rs`.
//! The nightly fan-out (`store::nightly`) and the SQL producer (the webhook dispatcher trigger)
//! write the same payloads and keys.

pub mod approval_expiry;
pub mod auto_create;
pub mod proactive_suggestion;
pub mod run_fork;
pub mod webhook_delivery;

pub use approval_expiry::ApprovalExpiry;
pub use auto_create::AutoCreate;
pub use proactive_suggestion::ProactiveSuggestion;
pub use run_fork::RunFork;
pub use webhook_delivery::WebhookDelivery;

use crate::catalog::QueuePolicy;
use crate::queue::{JobError, NewJob};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The names of the kinds this build has types for.
pub const NAMES: [&str; 5] = [
    AutoCreate::NAME,
    ProactiveSuggestion::NAME,
    ApprovalExpiry::NAME,
    WebhookDelivery::NAME,
    RunFork::NAME,
];

/// A job's unique key and how long it binds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unique {
    pub key: String,
    /// Also while a finished job with the key is still stored ([`NewJob::unique_until_purged`]).
    pub until_purged: bool,
}

/// One job kind.
pub trait JobKind {
    /// The kind's name: `agentd_jobs.kind`, the job file `jobs/<NAME>.toml`.
    const NAME: &'static str;
    /// What a job of the kind carries.
    type Payload: Serialize + DeserializeOwned;

    /// The unique key of a job with `payload` (`None`: any number may wait at once).
    fn unique(payload: &Self::Payload) -> Option<Unique>;

    /// The job for `payload`: its kind, payload and unique key, with the default priority and
    /// attempts (producers apply the job file's with [`JobKind::queued`]).
    fn job(payload: &Self::Payload) -> NewJob {
        // checked: the payloads are structs of ids, dates and strings, which always serialize
        let value = serde_json::to_value(payload).expect("a job payload serializes");
        let job = NewJob::new(Self::NAME, value);
        match Self::unique(payload) {
            Some(Unique {
                key,
                until_purged: true,
            }) => job.unique_key(key).unique_until_purged(),
            Some(Unique { key, .. }) => job.unique_key(key),
            None => job,
        }
    }

    /// [`JobKind::job`] with the job file's priority and attempt limit (`q`).
    fn queued(payload: &Self::Payload, q: &QueuePolicy) -> NewJob {
        Self::job(payload)
            .priority(q.priority)
            .max_attempts(q.max_attempts)
    }

    /// Reads a job's payload; a malformed one is fatal and names what is wrong (the error, not
    /// the payload: it can be large and carry a producer's data into the job's error text,
    /// review #21).
    fn parse(payload: &Value) -> Result<Self::Payload, JobError> {
        serde_json::from_value(payload.clone())
            .map_err(|e| JobError::fatal(format_args!("malformed {} payload: {e}", Self::NAME)))
    }
}

/// The job that resumes a run waiting for the decisions on its proposals
/// (`agent.await_decisions`): `job` is what the kind's handler built before the run started (the
/// kind's own payload, the job file's priority and attempts: [`JobKind::queued`]); it is keyed
/// when the run begins to wait at step `seq`, `<kind>:resume:<run>:<seq>`, held until purged, so
/// each wait is resumed once. The trigger of migration 0107 inserts it as stored.
pub fn resume_keyed(job: &NewJob, run: uuid::Uuid, seq: i32) -> NewJob {
    job.clone()
        .unique_key(format!("{}:resume:{run}:{seq}", job.kind))
        .unique_until_purged()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_type_has_a_builtin_job_file_and_every_job_file_a_type() {
        let mut typed = NAMES.to_vec();
        typed.sort_unstable();
        let mut files: Vec<&str> = crate::catalog::BUILTIN.iter().map(|(k, _)| *k).collect();
        files.sort_unstable();
        assert_eq!(typed, files);
    }

    #[test]
    fn a_malformed_payload_is_fatal_and_names_the_kind_not_the_payload() {
        let bad = serde_json::json!({"org_id": "secret-ish", "night": "2026-11-27"});
        let e = ProactiveSuggestion::parse(&bad).expect_err("not a uuid");
        assert!(!e.is_retryable());
        let text = e.to_string();
        assert!(
            text.starts_with("malformed proactive_suggestion payload: "),
            "{text}"
        );
        assert!(!text.contains("2026-11-27"), "{text}");
    }
}
