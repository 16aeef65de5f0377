//! Expiry with care: `approval.expiring` a configurable time before an approval expires (once
//! per approval), and expired approvals whose data did not change re-proposed once, on the org's
//! next working day (Monday–Friday in its time zone, at its nightly hour), when the org opted in
//! (`repropose_expired`). Re-proposals share the approval's chain, so the stale re-proposal cap
//! (`sweep.max_reproposals`) bounds them too.

use super::{ProposalOrigin, ToolEnv, propose, snapshot_hash};
use crate::kinds::approval_expiry::{Payload, Reproposal};
use crate::kinds::{ApprovalExpiry, JobKind};
use crate::queue::{self, NewJob};
use crate::store::approval_life::{self as store, Reproposals};
use crate::store::events::{self, EventType};
use crate::tools::ToolError;
use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Utc, Weekday};
use chrono_tz::Tz;
use sqlx::PgPool;
use uuid::Uuid;

/// Writes `approval.expiring` for pending approvals expiring within `notice` (in batches, each
/// batch's marks and events in one transaction). Returns how many.
pub async fn notify_expiring(
    pool: &PgPool,
    now: DateTime<Utc>,
    notice: Duration,
    batch: i64,
) -> sqlx::Result<u64> {
    let mut total = 0;
    loop {
        let mut tx = pool.begin().await?;
        let rows = store::mark_expiring(&mut tx, now, notice, batch).await?;
        events::emit_many(&mut tx, EventType::ApprovalExpiring, &rows, now).await?;
        tx.commit().await?;
        total += rows.len() as u64;
        if (rows.len() as i64) < batch {
            return Ok(total);
        }
    }
}

/// The first working day (Mon–Fri) after `day`.
pub fn next_working_day(day: NaiveDate) -> NaiveDate {
    let mut d = day.succ_opt().unwrap_or(day);
    while matches!(d.weekday(), Weekday::Sat | Weekday::Sun) {
        d = d.succ_opt().unwrap_or(d);
    }
    d
}

/// `hour` o'clock local time on `day` in `tz` (an hour skipped by DST → the first hour after).
pub fn local_hour(tz: Tz, day: NaiveDate, hour: u32) -> DateTime<Utc> {
    for h in hour..24 {
        if let Some(t) = day.and_hms_opt(h, 0, 0)
            && let Some(local) = tz.from_local_datetime(&t).earliest()
        {
            return local.with_timezone(&Utc);
        }
    }
    Utc.from_utc_datetime(&day.and_hms_opt(hour.min(23), 0, 0).unwrap_or_default())
}

/// When an approval that expired at `at` is re-proposed: the org's next working day after the
/// local date of `at`, at its nightly hour.
pub fn repropose_at(tz: Tz, nightly_hour: u32, at: DateTime<Utc>) -> DateTime<Utc> {
    let local_day = at.with_timezone(&tz).date_naive();
    local_hour(tz, next_working_day(local_day), nightly_hour)
}

/// The job that re-proposes approval `id` of `org_id`, keyed by it until the job is purged
/// (one re-proposal per approval, ever: [`ApprovalExpiry::unique`]).
pub fn reproposal_job(r: &Reproposals<'_>, which: Reproposal, org_id: Uuid, id: Uuid) -> NewJob {
    ApprovalExpiry::job(&Payload::reproposal(which, org_id, id))
        .priority(r.priority)
        .max_attempts(r.max_attempts)
}

/// Enqueues re-proposal jobs; returns how many were inserted (the rest were already there).
pub async fn enqueue_reproposal_jobs(pool: &PgPool, jobs: &[NewJob]) -> sqlx::Result<u64> {
    queue::enqueue_many(pool, jobs).await.map_err(|e| match e {
        queue::QueueError::Db(e) => e,
        other => sqlx::Error::Protocol(other.to_string()),
    })
}

/// Enqueues one delayed re-proposal job (unique per approval) for every approval that expired
/// since `r.since` in an org that opted in. Returns how many were inserted.
pub async fn enqueue_reproposals(pool: &PgPool, r: &Reproposals<'_>) -> sqlx::Result<u64> {
    let rows = store::expired_to_repropose(pool, r).await?;
    let jobs: Vec<NewJob> = rows
        .iter()
        .map(|row| {
            let tz: Tz = row.timezone.parse().unwrap_or(chrono_tz::UTC);
            let at = repropose_at(tz, row.nightly_hour.clamp(0, 23) as u32, row.decided_at);
            let mut j = reproposal_job(r, Reproposal::Expired, row.org_id, row.id);
            j.run_at = Some(at);
            j
        })
        .collect();
    enqueue_reproposal_jobs(pool, &jobs).await
}

/// What re-proposing an expired approval did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reproposed {
    /// A new pending approval with the same action.
    New(Uuid),
    /// The data changed since: not re-proposed (the agent would have to look again).
    Changed,
    /// Not expired, already re-proposed, or gone.
    Nothing,
    /// A person rejected the same action since: not re-proposed (why).
    Refused(String),
}

/// Re-proposes expired approval `id` unchanged (same action, fresh TTL, next chain depth) if
/// its data did not change; in one transaction with the expired row locked.
pub async fn repropose_expired(
    pool: &PgPool,
    env: &ToolEnv,
    id: Uuid,
    ttl: Duration,
    now: DateTime<Utc>,
) -> Result<Reproposed, ToolError> {
    let mut tx = pool.begin().await?;
    let Some(row) = store::lock_expired(&mut tx, id).await? else {
        return Ok(Reproposed::Nothing);
    };
    let Some(tool) = env.registry.get(&row.action.tool).cloned() else {
        return Ok(Reproposed::Changed);
    };
    let actor = "system:approval_expiry".to_string();
    let mut ctx = env.ctx(&mut tx, row.org_id, row.run_id, actor, now);
    let current = match tool.snapshot(&mut ctx, &row.action.args).await {
        Some(Ok(v)) => v,
        Some(Err(ToolError::Db(e))) => return Err(e.into()),
        _ => return Ok(Reproposed::Changed),
    };
    if snapshot_hash(&row.action.tool, &row.action.args, &current) != row.snapshot_hash {
        return Ok(Reproposed::Changed);
    }
    let origin = ProposalOrigin {
        call_id: None,
        suggestion_id: row.suggestion_id,
        ttl,
        repropose: row.repropose,
        chain: Some(row.chain.next()),
        rationale: row.rationale.as_deref(),
    };
    let new_id = match propose(&mut ctx, tool.as_ref(), &row.action.args, origin).await {
        Err(ToolError::Conflict(why)) => return Ok(Reproposed::Refused(why)),
        other => other?,
    };
    store::set_reproposed(&mut tx, row.id, new_id).await?;
    tx.commit().await?;
    Ok(Reproposed::New(new_id))
}
