//! Org-scoped reads behind the console's API routes: the queue view (throughput and failures
//! per 5-minute bucket over the last hour), retrying a dead job, and retrying or cancelling
//! dead jobs in bulk ([`on_dead`]) (the run list is an
//! [`super::api_reads::page`] of runs). Every query takes the org and
//! "now"; which jobs belong to an org is [`super::api_reads::JOB_OF_ORG`].

use super::api_reads::JOB_OF_ORG;
use crate::queue::JobState;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgExecutor;
use uuid::Uuid;

/// Width of a throughput bucket.
pub const BUCKET_SECS: i64 = 300;
/// Buckets in the queue view (one hour).
pub const BUCKETS: i64 = 12;

/// Jobs of the org that finished in one bucket.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct Bucket {
    /// Start of the bucket (inclusive); its end is `start + 5 min` (exclusive).
    pub start: DateTime<Utc>,
    pub succeeded: i64,
    /// Jobs that became `dead` in the bucket.
    pub failed: i64,
    pub cancelled: i64,
}

#[derive(sqlx::FromRow)]
struct BucketCount {
    idx: i64,
    succeeded: i64,
    failed: i64,
    cancelled: i64,
}

/// Finished jobs of the org per 5-minute bucket over the hour before `now`, oldest first
/// (always [`BUCKETS`] buckets; the last one ends at `now`).
pub async fn throughput<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    now: DateTime<Utc>,
) -> sqlx::Result<Vec<Bucket>> {
    let rows: Vec<BucketCount> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT floor(EXTRACT(EPOCH FROM ($2 - j.finished_at)) / {BUCKET_SECS})::bigint AS idx,
                count(*) FILTER (WHERE j.state = 'succeeded') AS succeeded,
                count(*) FILTER (WHERE j.state = 'dead') AS failed,
                count(*) FILTER (WHERE j.state = 'cancelled') AS cancelled
           FROM agentd_jobs j
          WHERE j.state IN ('succeeded', 'dead', 'cancelled')
            AND j.finished_at > $2 - make_interval(secs => {span}) AND j.finished_at <= $2
            AND {JOB_OF_ORG}
          GROUP BY 1",
        span = BUCKET_SECS * BUCKETS
    )))
    .bind(org_id)
    .bind(now)
    .fetch_all(exec)
    .await?;
    Ok((0..BUCKETS)
        .map(|i| {
            // Bucket i (oldest first) covers ages in [(BUCKETS-1-i)*w, (BUCKETS-i)*w).
            let age_idx = BUCKETS - 1 - i;
            let hit = rows.iter().find(|r| r.idx == age_idx);
            Bucket {
                start: now - chrono::Duration::seconds((age_idx + 1) * BUCKET_SECS),
                succeeded: hit.map_or(0, |r| r.succeeded),
                failed: hit.map_or(0, |r| r.failed),
                cancelled: hit.map_or(0, |r| r.cancelled),
            }
        })
        .collect())
}

/// Outcome of [`retry_dead`].
#[derive(Debug, PartialEq, Eq)]
pub enum Retry {
    /// The dead job is `available` again, now, with a fresh attempt budget.
    Done,
    /// Another job with the same unique key is waiting or running.
    UniqueKeyBusy,
    /// The org's job exists but is not dead (its state).
    NotDead(JobState),
    /// No such job in this org.
    NotFound,
}

/// Puts the org's `dead` job back to `available` at `now` (what `agentd jobs retry` does, but
/// only from `dead` and only for the org's jobs), in one statement.
pub async fn retry_dead(
    conn: &mut sqlx::PgConnection,
    org_id: Uuid,
    id: i64,
    now: DateTime<Utc>,
) -> sqlx::Result<Retry> {
    let done: sqlx::Result<Option<i64>> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "UPDATE agentd_jobs j
            SET state = 'available', run_at = $3, released = j.attempt, finished_at = NULL
          WHERE j.id = $2 AND j.state = 'dead' AND {JOB_OF_ORG}
      RETURNING j.id"
    )))
    .bind(org_id)
    .bind(id)
    .bind(now)
    .fetch_optional(&mut *conn)
    .await;
    match done {
        Ok(Some(_)) => Ok(Retry::Done),
        Err(sqlx::Error::Database(d)) if d.is_unique_violation() => Ok(Retry::UniqueKeyBusy),
        Err(e) => Err(e),
        Ok(None) => Ok(super::api_reads::job(&mut *conn, org_id, id)
            .await?
            .map_or(Retry::NotFound, |j| Retry::NotDead(j.state))),
    }
}

/// What to do with the org's dead jobs in bulk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadAction {
    /// Back to `available` now with a fresh attempt budget (one per unique key, and none whose
    /// key a waiting or running job holds: those stay dead and are named as skipped).
    Retry,
    /// `cancelled`: no longer dead, never run again.
    Cancel,
}

/// What a bulk action on dead jobs did.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct DeadBatch {
    /// The jobs changed, by id.
    pub ids: Vec<i64>,
    /// Dead jobs picked but left dead: another job holds their unique key (retry only).
    pub skipped: Vec<i64>,
    /// True when `limit` jobs were picked: more dead jobs may match.
    pub more: bool,
}

/// Retries or cancels up to `limit` of the org's dead jobs, oldest id first, of `kind` and/or
/// among `ids`, in one statement (rows another transaction holds are skipped).
pub async fn on_dead(
    conn: &mut sqlx::PgConnection,
    org_id: Uuid,
    action: DeadAction,
    kind: Option<&str>,
    ids: Option<&[i64]>,
    limit: i64,
    now: DateTime<Utc>,
) -> sqlx::Result<DeadBatch> {
    let (keep, set) = match action {
        DeadAction::Retry => (
            "DISTINCT ON (coalesce(p.unique_key, p.id::text)) p.id FROM pick p
              WHERE p.unique_key IS NULL
                 OR NOT EXISTS (SELECT 1 FROM agentd_jobs a WHERE a.unique_key = p.unique_key
                                   AND a.state IN ('available', 'running'))
              ORDER BY coalesce(p.unique_key, p.id::text), p.id DESC",
            "state = 'available', run_at = $5, released = attempt, finished_at = NULL",
        ),
        DeadAction::Cancel => (
            "p.id FROM pick p",
            "state = 'cancelled', finished_at = coalesce(finished_at, $5)",
        ),
    };
    let rows: Vec<(i64, bool)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "WITH pick AS MATERIALIZED (
            SELECT j.id, j.unique_key FROM agentd_jobs j
             WHERE j.state = 'dead' AND {JOB_OF_ORG}
               AND ($2::text IS NULL OR j.kind = $2) AND ($3::int8[] IS NULL OR j.id = ANY($3))
             ORDER BY j.id LIMIT $4 FOR UPDATE SKIP LOCKED),
         keep AS (SELECT {keep}),
         done AS (UPDATE agentd_jobs SET {set} WHERE id IN (SELECT id FROM keep) RETURNING id)
         SELECT p.id, EXISTS (SELECT 1 FROM done d WHERE d.id = p.id) FROM pick p ORDER BY p.id"
    )))
    .bind(org_id)
    .bind(kind)
    .bind(ids)
    .bind(limit)
    .bind(now)
    .fetch_all(conn)
    .await?;
    let more = rows.len() as i64 >= limit;
    let (done, skipped): (Vec<_>, Vec<_>) = rows.into_iter().partition(|(_, d)| *d);
    Ok(DeadBatch {
        ids: done.into_iter().map(|(id, _)| id).collect(),
        skipped: skipped.into_iter().map(|(id, _)| id).collect(),
        more,
    })
}
