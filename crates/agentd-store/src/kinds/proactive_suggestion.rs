//! `proactive_suggestion`: the nightly review of one org (handler: `jobs/proactive_suggestion.rs`).

use super::{JobKind, Unique};
use chrono::NaiveDate;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The kind.
pub struct ProactiveSuggestion;

/// The payload: `{org_id, night}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Payload {
    pub org_id: Uuid,
    pub night: NaiveDate,
}

impl JobKind for ProactiveSuggestion {
    const NAME: &'static str = "proactive_suggestion";
    type Payload = Payload;

    /// One job per org and night, however it is produced (`POST /v1/jobs`, `agentd enqueue
    /// proactive`, `agentd demo`; the cron fan-out writes the same key,
    /// `store/nightly.rs`), and the key stays taken after the job finished, until retention purges
    /// it: a night is reviewed once.
    fn unique(p: &Payload) -> Option<Unique> {
        Some(Unique {
            key: format!("{}:{}:{}", Self::NAME, p.org_id, p.night),
            until_purged: true,
        })
    }
}
