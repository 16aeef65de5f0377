//! `run_fork`: the live part of a forked run (issue 50, item 2; handler: `jobs/fork.rs`). The
//! fork's run row, its copied checkpoints and what the reviewer asked (`run_forks`) are written
//! with the job; the payload names the run only.

use super::{JobKind, Unique};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The kind.
pub struct RunFork;

/// The payload: `{org_id, run_id}` (the fork's run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Payload {
    pub org_id: Uuid,
    pub run_id: Uuid,
}

impl JobKind for RunFork {
    const NAME: &'static str = "run_fork";
    type Payload = Payload;

    /// One job per fork.
    fn unique(p: &Payload) -> Option<Unique> {
        Some(Unique {
            key: format!("{}:{}", Self::NAME, p.run_id),
            until_purged: false,
        })
    }
}
