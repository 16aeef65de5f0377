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

/// Points of a per-kind series ([`kind_series`]).
pub const SERIES_POINTS: i64 = 12;

/// One kind at one moment of [`kind_series`]: its depth at `at` and what finished in the
/// bucket that ends at `at`.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct KindPoint {
    /// The end of the bucket (inclusive), the moment the depth is read at.
    pub at: DateTime<Utc>,
    /// Jobs waiting to run at `at` (created, due, not started, not finished).
    pub ready: i64,
    /// Jobs whose last attempt had started and not finished at `at`.
    pub running: i64,
    /// Jobs dead at `at` (they died at or before it and are still dead).
    pub dead: i64,
    /// Jobs that succeeded in the bucket.
    pub succeeded: i64,
    /// Jobs that went dead in the bucket.
    pub failed: i64,
}

/// One kind's series over the window, oldest point first.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct KindSeries {
    pub kind: String,
    pub points: Vec<KindPoint>,
}

#[derive(sqlx::FromRow)]
struct KindCount {
    kind: String,
    idx: i64,
    ready: i64,
    running: i64,
    dead: i64,
    succeeded: i64,
    failed: i64,
}

/// The org's depth (ready, running, dead) and throughput (succeeded, failed) per kind over the
/// `window_secs` before `now`, in [`SERIES_POINTS`] buckets of `window_secs / SERIES_POINTS`,
/// oldest first (the last one ends at `now`); kinds with no job in the window and none ready,
/// running or dead in it are left out, kinds sorted by name.
///
/// Derived from the job rows alone (no sampler): a job is ready from its creation (a job still
/// waiting: from its `run_at`) until its last attempt started, running from then until it
/// finished (or now, while `running`), dead from its `finished_at` while its state is `dead`.
/// Earlier attempts of a retried job are not kept by the queue, so their running time counts
/// as ready; jobs the retention pass deleted are gone from the past too.
pub async fn kind_series<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    now: DateTime<Utc>,
    window_secs: i64,
) -> sqlx::Result<Vec<KindSeries>> {
    let width = window_secs / SERIES_POINTS;
    let rows: Vec<KindCount> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "WITH t AS (
            SELECT i::bigint AS idx, $2 - make_interval(secs => ({n} - 1 - i) * {width}) AS at
              FROM generate_series(0, {n} - 1) i),
         jobs AS (
            SELECT j.kind, j.state, j.created_at, j.run_at, j.started_at, j.finished_at
              FROM agentd_jobs j
             WHERE {JOB_OF_ORG} AND j.created_at <= $2
               AND (j.finished_at IS NULL OR j.finished_at > $2 - make_interval(secs => {window_secs})
                    OR j.state = 'dead'))
         SELECT jobs.kind, t.idx,
                count(*) FILTER (WHERE jobs.created_at <= t.at
                    AND (jobs.state <> 'available' OR jobs.run_at <= t.at)
                    AND (jobs.started_at IS NULL OR jobs.started_at > t.at OR jobs.state = 'available')
                    AND (jobs.finished_at IS NULL OR jobs.finished_at > t.at)) AS ready,
                count(*) FILTER (WHERE jobs.state <> 'available' AND jobs.started_at <= t.at
                    AND (jobs.finished_at > t.at OR (jobs.finished_at IS NULL AND jobs.state = 'running'))) AS running,
                count(*) FILTER (WHERE jobs.state = 'dead' AND jobs.finished_at <= t.at) AS dead,
                count(*) FILTER (WHERE jobs.state = 'succeeded' AND jobs.finished_at <= t.at
                    AND jobs.finished_at > t.at - make_interval(secs => {width})) AS succeeded,
                count(*) FILTER (WHERE jobs.state = 'dead' AND jobs.finished_at <= t.at
                    AND jobs.finished_at > t.at - make_interval(secs => {width})) AS failed
           FROM t CROSS JOIN jobs
          GROUP BY 1, 2",
        n = SERIES_POINTS
    )))
    .bind(org_id)
    .bind(now)
    .fetch_all(exec)
    .await?;
    let mut kinds: Vec<&str> = rows
        .iter()
        .filter(|r| r.ready + r.running + r.dead + r.succeeded + r.failed > 0)
        .map(|r| r.kind.as_str())
        .collect();
    kinds.sort_unstable();
    kinds.dedup();
    Ok(kinds
        .into_iter()
        .map(|kind| KindSeries {
            kind: kind.to_string(),
            points: (0..SERIES_POINTS)
                .map(|i| {
                    let hit = rows.iter().find(|r| r.kind == kind && r.idx == i);
                    KindPoint {
                        at: now - chrono::Duration::seconds((SERIES_POINTS - 1 - i) * width),
                        ready: hit.map_or(0, |r| r.ready),
                        running: hit.map_or(0, |r| r.running),
                        dead: hit.map_or(0, |r| r.dead),
                        succeeded: hit.map_or(0, |r| r.succeeded),
                        failed: hit.map_or(0, |r| r.failed),
                    }
                })
                .collect(),
        })
        .collect())
}

/// The org's model use on each of the `days` days (UTC) that end with `today`, oldest first
/// (a day without runs is all zeros), summed over the runs started on it as
/// [`super::runs::month_usage`] sums a month.
pub async fn daily_usage<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    today: chrono::NaiveDate,
    days: i64,
) -> sqlx::Result<Vec<(chrono::NaiveDate, super::runs::MonthUsage)>> {
    #[derive(sqlx::FromRow)]
    struct Day {
        day: chrono::NaiveDate,
        #[sqlx(flatten)]
        usage: super::runs::MonthUsage,
    }
    let first = today - chrono::Duration::days(days - 1);
    let rows: Vec<Day> = sqlx::query_as(
        "SELECT d.day::date AS day, count(r.id) AS runs,
                COALESCE(sum(r.input_tokens), 0)::bigint AS input_tokens,
                COALESCE(sum(r.output_tokens), 0)::bigint AS output_tokens,
                COALESCE(sum(r.cache_read_tokens), 0)::bigint AS cache_read_tokens,
                COALESCE(sum(r.cache_write_tokens), 0)::bigint AS cache_write_tokens,
                COALESCE(sum(r.cost_nano_usd), 0)::bigint AS cost_nano_usd,
                COALESCE(sum(r.unpriced_tokens), 0)::bigint AS unpriced_tokens,
                count(r.id) FILTER (WHERE r.cost_nano_usd IS NULL) AS unrecorded_runs
           FROM generate_series($2::date, $3::date, interval '1 day') d(day)
           LEFT JOIN agent_runs r ON r.org_id = $1
                AND r.started_at >= d.day::date::timestamp AT TIME ZONE 'UTC'
                AND r.started_at < (d.day::date + 1)::timestamp AT TIME ZONE 'UTC'
          GROUP BY d.day ORDER BY d.day",
    )
    .bind(org_id)
    .bind(first)
    .bind(today)
    .fetch_all(exec)
    .await?;
    Ok(rows.into_iter().map(|d| (d.day, d.usage)).collect())
}
