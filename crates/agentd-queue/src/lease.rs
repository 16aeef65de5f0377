//! When a worker must give up an attempt because its lease may have expired.
//!
//! The database owns the lease (`lease_expires_at`); the worker only knows when it last sent a
//! claim or heartbeat that extended it. While heartbeats fail (database unreachable, pool
//! starved, a blocked statement), the worker cannot tell whether the rescuer already handed the
//! job to someone else, so once the lease may have run out before the next heartbeat could renew
//! it, the attempt is cancelled: its provider calls and tools stop, and its outcome is dropped.

use std::time::{Duration, Instant};

/// True when the lease renewed by a claim or heartbeat sent at `renewed_at` may expire before
/// the next heartbeat could renew it: that one starts up to one `heartbeat` interval from now
/// and may take another interval to answer (it is bounded by [`bounded`]).
pub fn may_have_expired(
    renewed_at: Instant,
    lease: Duration,
    heartbeat: Duration,
    now: Instant,
) -> bool {
    now + heartbeat.saturating_mul(2) >= renewed_at + lease
}

/// Runs one heartbeat write, bounded by the heartbeat interval: a statement stuck behind a lock
/// or a pool with no free connection counts as a failed heartbeat instead of a silent wait.
pub async fn bounded<T>(
    heartbeat: Duration,
    write: impl std::future::Future<Output = Result<T, super::QueueError>>,
) -> Result<T, super::QueueError> {
    match tokio::time::timeout(heartbeat, write).await {
        Ok(r) => r,
        Err(_) => Err(super::QueueError::Invalid(format!(
            "heartbeat did not complete within {} ms",
            heartbeat.as_millis()
        ))),
    }
}

/// After a failed heartbeat: cancels and removes from `held` every attempt whose lease may have
/// expired, so its outcome is dropped (the rescuer decides what happens to the job).
pub(crate) fn give_up_expired(
    held: &mut std::collections::HashMap<i64, crate::apalis::Held>,
    lease: Duration,
    heartbeat: Duration,
) {
    let now = Instant::now();
    held.retain(|id, h| {
        if !may_have_expired(h.renewed_at, lease, heartbeat, now) {
            return true;
        }
        tracing::warn!(
            job.id = id,
            attempt = h.attempt,
            "lease may have expired (heartbeats failing); stopping this attempt"
        );
        metrics::counter!("agentd_leases_abandoned_total").increment(1);
        h.cancel.cancel();
        false
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gives_up_two_heartbeats_before_the_lease_ends() {
        let t0 = Instant::now();
        let (lease, hb) = (Duration::from_secs(30), Duration::from_secs(10));
        assert!(!may_have_expired(t0, lease, hb, t0));
        assert!(!may_have_expired(
            t0,
            lease,
            hb,
            t0 + Duration::from_secs(9)
        ));
        assert!(may_have_expired(
            t0,
            lease,
            hb,
            t0 + Duration::from_secs(10)
        ));
    }
}
