//! `approval_expiry`: the expiry sweep, or the re-proposal of one stale or expired approval
//! (handler: `jobs/approval_expiry.rs`).

use super::{JobKind, Unique};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The kind.
pub struct ApprovalExpiry;

/// The payload: the sweep (`{}`, a cron `{tick}`, or `{approval_ids}`), or a re-proposal
/// (`{repropose}` or `{repropose_expired}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Payload {
    /// Set by cron ticks; informational.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tick: Option<chrono::DateTime<chrono::Utc>>,
    /// Only these approvals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_ids: Option<Vec<Uuid>>,
    /// Re-propose this stale approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repropose: Option<Uuid>,
    /// Re-propose this expired approval unchanged, if its data did not change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repropose_expired: Option<Uuid>,
}

/// Which re-proposal a job makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reproposal {
    /// Of a stale approval (`{repropose}`).
    Stale,
    /// Of an expired approval, unchanged if its data did not change (`{repropose_expired}`).
    Expired,
}

impl Payload {
    /// The payload that re-proposes approval `id`.
    pub fn reproposal(which: Reproposal, id: Uuid) -> Self {
        match which {
            Reproposal::Stale => Payload {
                repropose: Some(id),
                ..Payload::default()
            },
            Reproposal::Expired => Payload {
                repropose_expired: Some(id),
                ..Payload::default()
            },
        }
    }
}

impl JobKind for ApprovalExpiry {
    const NAME: &'static str = "approval_expiry";
    type Payload = Payload;

    /// A re-proposal is keyed by its approval, held until the job is purged (one re-proposal
    /// per approval, ever); a sweep has no key.
    fn unique(p: &Payload) -> Option<Unique> {
        let key = match (p.repropose, p.repropose_expired) {
            (Some(id), _) => format!("repropose:{id}"),
            (None, Some(id)) => format!("repropose_expired:{id}"),
            (None, None) => return None,
        };
        Some(Unique {
            key,
            until_purged: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reproposal_is_keyed_once_per_approval_and_a_sweep_not_at_all() {
        let id = Uuid::new_v4();
        let job = ApprovalExpiry::job(&Payload::reproposal(Reproposal::Expired, id));
        assert_eq!(job.payload, serde_json::json!({"repropose_expired": id}));
        assert_eq!(job.unique_key, Some(format!("repropose_expired:{id}")));
        assert!(job.unique_until_purged);
        let sweep = ApprovalExpiry::job(&Payload::default());
        assert_eq!(sweep.payload, serde_json::json!({}));
        assert_eq!(sweep.unique_key, None);
    }
}
