//! `approval_expiry`: the expiry sweep, or the re-proposal of one stale or expired approval
//! (handler: `jobs/approval_expiry.rs`).

use super::{JobKind, Unique};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The kind.
pub struct ApprovalExpiry;

/// The payload: the sweep (`{}`, a cron `{tick}`, or an org's `{org_id, approval_ids}`), or a
/// re-proposal (`{org_id, repropose}` or `{org_id, repropose_expired}`).
///
/// Every job made for one org names it (review D1): the org's reads find it by the index on
/// `payload->>'org_id'`, the fair claim puts it in the org's group, and pausing the org holds it.
/// Only the fleet's own sweep (cron, `agentd enqueue approval-expiry` without `--org`) has none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Payload {
    /// The org whose approvals the job sweeps or re-proposes; none for the fleet's sweep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub org_id: Option<Uuid>,
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
    /// The payload that re-proposes approval `id` of `org_id`.
    pub fn reproposal(which: Reproposal, org_id: Uuid, id: Uuid) -> Self {
        let org_id = Some(org_id);
        match which {
            Reproposal::Stale => Payload {
                org_id,
                repropose: Some(id),
                ..Payload::default()
            },
            Reproposal::Expired => Payload {
                org_id,
                repropose_expired: Some(id),
                ..Payload::default()
            },
        }
    }

    /// The sweep of these approvals of `org_id` (the API's `POST /v1/jobs`).
    pub fn org_sweep(org_id: Uuid, approval_ids: Vec<Uuid>) -> Self {
        Payload {
            org_id: Some(org_id),
            approval_ids: Some(approval_ids),
            ..Payload::default()
        }
    }
}

impl JobKind for ApprovalExpiry {
    const NAME: &'static str = "approval_expiry";
    type Payload = Payload;

    /// A re-proposal is keyed by its approval, held until the job is purged (one re-proposal
    /// per approval, ever); an org's sweep by its org while it waits or runs (one at a time per
    /// org: a key looping `POST /v1/jobs` gets `duplicate`, not a pile of sweeps, review D1);
    /// the fleet's sweep has no key.
    fn unique(p: &Payload) -> Option<Unique> {
        let (key, until_purged) = match (p.repropose, p.repropose_expired, p.org_id) {
            (Some(id), _, _) => (format!("repropose:{id}"), true),
            (None, Some(id), _) => (format!("repropose_expired:{id}"), true),
            (None, None, Some(org)) => (format!("approval_sweep:{org}"), false),
            (None, None, None) => return None,
        };
        Some(Unique { key, until_purged })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reproposal_is_keyed_once_per_approval_an_orgs_sweep_per_org_and_the_fleets_not_at_all() {
        let (org, id) = (Uuid::new_v4(), Uuid::new_v4());
        let job = ApprovalExpiry::job(&Payload::reproposal(Reproposal::Expired, org, id));
        assert_eq!(
            job.payload,
            serde_json::json!({"org_id": org, "repropose_expired": id})
        );
        assert_eq!(job.unique_key, Some(format!("repropose_expired:{id}")));
        assert!(job.unique_until_purged);
        let mine = ApprovalExpiry::job(&Payload::org_sweep(org, vec![id]));
        assert_eq!(
            mine.payload,
            serde_json::json!({"org_id": org, "approval_ids": [id]})
        );
        assert_eq!(mine.unique_key, Some(format!("approval_sweep:{org}")));
        assert!(!mine.unique_until_purged);
        let fleet = ApprovalExpiry::job(&Payload::default());
        assert_eq!(fleet.payload, serde_json::json!({}));
        assert_eq!(fleet.unique_key, None);
    }
}
