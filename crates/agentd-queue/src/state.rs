//! A job's state (`agentd_jobs.state`), as an enum: stored as the text the table's CHECK lists
//! (migration 0001), the same strings on the wire. SQL statements keep their literals; Rust code
//! that reads, compares or writes a state uses this type.

use serde::{Deserialize, Serialize};

/// Where a job is in its life: `available` (waiting, perhaps until `run_at`) → `running` (an
/// attempt holds the lease) → `succeeded`, `dead` (failed for good) or `cancelled`; a failed
/// attempt with attempts left goes back to `available`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
#[sqlx(type_name = "text", rename_all = "lowercase")]
pub enum JobState {
    Available,
    Running,
    Succeeded,
    Dead,
    Cancelled,
}

impl JobState {
    /// Every state, in the order of a job's life.
    pub const ALL: [JobState; 5] = [
        JobState::Available,
        JobState::Running,
        JobState::Succeeded,
        JobState::Dead,
        JobState::Cancelled,
    ];

    /// The stored (and wire) value.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Available => "available",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Dead => "dead",
            JobState::Cancelled => "cancelled",
        }
    }

    /// True once the job will not run again by itself (succeeded, dead or cancelled).
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Dead | JobState::Cancelled
        )
    }

    /// The values, comma-separated (for messages).
    pub fn names() -> String {
        Self::ALL.map(JobState::as_str).join(", ")
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad`: widths and alignment (`{:<10}`) apply as to the text.
        f.pad(self.as_str())
    }
}

/// A state name that is not a job state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be one of {names} (got {0:?})", names = JobState::names())]
pub struct UnknownJobState(pub String);

impl std::str::FromStr for JobState {
    type Err = UnknownJobState;

    fn from_str(s: &str) -> Result<Self, UnknownJobState> {
        JobState::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| UnknownJobState(s.to_string()))
    }
}

/// Comparing with the stored string (tests and benchmarks that read states as text).
impl PartialEq<&str> for JobState {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trips_and_unknown_names_the_values() {
        for s in JobState::ALL {
            assert_eq!(s.as_str().parse::<JobState>(), Ok(s));
            assert_eq!(
                serde_json::to_value(s).ok(),
                Some(serde_json::Value::String(s.as_str().into()))
            );
        }
        let e = "failed".parse::<JobState>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "must be one of available, running, succeeded, dead, cancelled (got \"failed\")"
        );
        assert_eq!(format!("{:<10}|", JobState::Dead), "dead      |");
    }
}
