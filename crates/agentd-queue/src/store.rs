//! The queue's SQL. "Now" is always a parameter (from the Clock); every write that finishes an
//! attempt is fenced by `(id, attempt, state = 'running')`, so a stale attempt changes nothing.
//! Lease times (claim, heartbeat, rescue) take an optional "now": `None` is the database's
//! `now()` ([`crate::clock::Clock::lease_now`], review #11).

use super::{ClaimedJob, JobRow, QueueError};
use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use sqlx::{PgExecutor, PgPool};

pub use super::rescue::{RescueBackoff, RescueReport, rescue_expired, rescue_expired_with};

/// Claims up to `limit` ready jobs of the given kinds, highest priority first; the slots are
/// shared among the orgs that have ready jobs (round robin, [`super::fair`]), each org's jobs
/// oldest `run_at` first. Each job gets a lease until `now + lease` and a new attempt number
/// (`now`: `None` is the database's clock, [`lease_now`]).
pub async fn claim(
    pool: &PgPool,
    kinds: &[String],
    limit: u32,
    worker_id: &str,
    now: impl Into<Option<DateTime<Utc>>>,
    lease: Duration,
) -> Result<Vec<ClaimedJob>, QueueError> {
    claim_scoped(pool, kinds, None, None, limit, worker_id, now, lease).await
}

/// [`claim`], and with `only_org` only the jobs whose payload names that org (`org_id`): what
/// `agentd eval` claims, so it never takes another org's job from a shared database.
///
/// One kind and no org (every claim loop): the fair claim ([`super::fair::claim`]), which also
/// keeps each org under `max_running_per_org` running jobs of the kind. Otherwise
/// one walk of the claim index in `priority DESC, run_at, id` order, across orgs (several
/// kinds) or within the one org. The `ctid = ANY(ARRAY(SELECT ctid … FOR UPDATE SKIP LOCKED))`
/// form keeps the plan an index scan on the partial claim index even under a generic plan
/// (the join form scans the table), and updates the locked versions by address (see
/// [`super::fair`]).
#[expect(
    clippy::too_many_arguments,
    reason = "the claim's scope (kinds, org, worker, batch, lease, fairness) is each a separate choice of the caller"
)]
pub async fn claim_scoped(
    pool: &PgPool,
    kinds: &[String],
    only_org: Option<uuid::Uuid>,
    max_running_per_org: Option<u32>,
    limit: u32,
    worker_id: &str,
    now: impl Into<Option<DateTime<Utc>>>,
    lease: Duration,
) -> Result<Vec<ClaimedJob>, QueueError> {
    let now: Option<DateTime<Utc>> = now.into();
    // One kind (every claim loop): `kind = $1` lets the planner walk the partial claim index in
    // order (0.65 ms at a 20k backlog). `kind = ANY($1)` made it scan and sort every ready row
    // (17–20 ms, growing with the backlog: the 1M-backlog collapse measured by `agentd bench`).
    let single = kinds.len() == 1;
    if single && only_org.is_none() {
        let cap = max_running_per_org;
        return super::fair::claim(pool, &kinds[0], cap, limit, worker_id, now, lease).await;
    }
    let kind_filter = if single {
        "kind = $1"
    } else {
        "kind = ANY($1)"
    };
    // The org as the claim index holds it (migration 0070): with one kind, a walk of the kind's
    // part of the index that yields only this org's entries, still in claim order.
    let org_filter = if only_org.is_some() {
        format!(" AND {} = $6", super::fair::ORG_KEY)
    } else {
        String::new()
    };
    // An org that paused the job's kind (migration 0075): its jobs are walked past.
    let paused = super::pause::paused_org("agentd_jobs.kind", super::fair::ORG_KEY);
    let now_sql = lease_now("$4");
    let sql = format!(
        "UPDATE agentd_jobs
            SET state = 'running', attempt = attempt + 1, locked_by = $3,
                lease_expires_at = {now_sql} + $5 * interval '1 millisecond', started_at = {now_sql}
          WHERE ctid = ANY(ARRAY(
                SELECT ctid FROM agentd_jobs
                 WHERE state = 'available' AND {kind_filter} AND run_at <= {now_sql}{org_filter}
                   AND NOT {paused}
                 ORDER BY priority DESC, run_at, id
                 LIMIT $2
                 FOR UPDATE SKIP LOCKED))
      RETURNING id, kind, payload, attempt, attempt - released AS counted_attempts, max_attempts,
                traceparent"
    );
    let q = sqlx::query_as::<_, ClaimedJob>(sqlx::AssertSqlSafe(sql));
    let q = if single {
        q.bind(&kinds[0])
    } else {
        q.bind(kinds)
    };
    let q = q
        .bind(i64::from(limit))
        .bind(worker_id)
        .bind(now)
        .bind(lease.num_milliseconds() as f64);
    let q = match only_org {
        Some(org) => q.bind(org.to_string()),
        None => q,
    };
    fetch_claimed(pool, q).await
}

/// "Now" for lease times in SQL, from the parameter `param` (an optional `timestamptz`): the
/// database's `now()` when it is `NULL` (review #11; [`crate::clock::Clock::lease_now`]).
pub(super) fn lease_now(param: &str) -> String {
    format!("COALESCE({param}::timestamptz, now())")
}

/// Runs a claim statement. Through a pooler a statement outside a transaction commits when its
/// connection returns to the pool, after this call returned; the jobs' first statements (on
/// other connections) must see the claim, so it commits here (db/pooling.rs).
pub(super) async fn fetch_claimed<'q, T>(
    pool: &PgPool,
    q: sqlx::query::QueryAs<'q, sqlx::Postgres, T, sqlx::postgres::PgArguments>,
) -> Result<Vec<T>, QueueError>
where
    T: Send + Unpin + for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>,
{
    if crate::db::pooling::is_pooled(pool) {
        let mut tx = pool.begin().await?;
        let jobs = q.fetch_all(&mut *tx).await?;
        tx.commit().await?;
        return Ok(jobs);
    }
    Ok(q.fetch_all(pool).await?)
}

/// A statement on the jobs whose attempt in `done` still runs them, written twice: `uniform`
/// for one attempt for all (`$2` a number), `mixed` for an attempt per job (`$2` a parallel
/// array). Primary-key lookups either way: the join form (`FROM unnest(...)`) got a nested loop
/// over every running row when statistics said "one running row" (0.4–1.2 s per ack under load,
/// measured by `agentd bench`). A batch's jobs are nearly always on the same attempt (the
/// first); the parallel array's `array_position` walks the ids for every row (O(batch²) per
/// statement, ~4 % of the server's CPU in a 200k drain), so it is kept for mixed batches.
struct OnHeldAttempts {
    /// One attempt for all the jobs: `$2` a number.
    uniform: &'static str,
    /// An attempt per job: `$2` an array parallel to the ids.
    mixed: &'static str,
}

/// Runs one of `sql` (see [`OnHeldAttempts`]) on the attempts in `done`, with `now` as `$3`
/// when given; returns the ids whose attempt still held.
async fn on_held(
    pool: &PgPool,
    OnHeldAttempts { uniform, mixed }: OnHeldAttempts,
    done: &[(i64, i32)],
    now: Option<DateTime<Utc>>,
) -> Result<Vec<i64>, QueueError> {
    let Some(&(_, first)) = done.first() else {
        return Ok(Vec::new());
    };
    let (ids, attempts): (Vec<i64>, Vec<i32>) = done.iter().copied().unzip();
    let q = if attempts.iter().all(|&a| a == first) {
        sqlx::query_scalar(uniform).bind(ids).bind(first)
    } else {
        sqlx::query_scalar(mixed).bind(ids).bind(attempts)
    };
    let q = match now {
        Some(now) => q.bind(now),
        None => q,
    };
    Ok(q.fetch_all(pool).await?)
}

/// Marks attempts succeeded in one statement; returns the ids whose ack counted (stale
/// attempts are left out).
pub async fn complete_many(
    pool: &PgPool,
    done: &[(i64, i32)],
    now: DateTime<Utc>,
) -> Result<Vec<i64>, QueueError> {
    let complete = OnHeldAttempts {
        uniform: include_str!("sql/jobs_complete.sql"),
        mixed: include_str!("sql/jobs_complete_mixed.sql"),
    };
    on_held(pool, complete, done, Some(now)).await
}

/// Deletes succeeded attempts in one statement (kinds with `delete_on_success`); returns the
/// ids whose ack counted (stale attempts are left out and keep their row).
pub async fn delete_succeeded(pool: &PgPool, done: &[(i64, i32)]) -> Result<Vec<i64>, QueueError> {
    let delete = OnHeldAttempts {
        uniform: include_str!("sql/jobs_delete_succeeded.sql"),
        mixed: include_str!("sql/jobs_delete_succeeded_mixed.sql"),
    };
    on_held(pool, delete, done, None).await
}

/// What happened to a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum FailOutcome {
    /// Back to `available` at the given time.
    Retry,
    /// No attempts left, or a fatal error.
    Dead,
    /// The attempt was stale (lease lost, job cancelled): nothing changed.
    Stale,
}

/// Records a failed attempt: `dead` if `fatal` or out of attempts, else `available` again at
/// `retry_at` (the backoff is written to the database).
pub async fn fail(
    pool: &PgPool,
    id: i64,
    attempt: i32,
    error: &str,
    fatal: bool,
    retry_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<FailOutcome, QueueError> {
    let state: Option<super::JobState> = sqlx::query_scalar(
        "UPDATE agentd_jobs
            SET state = CASE WHEN $4 OR attempt - released >= max_attempts THEN 'dead' ELSE 'available' END,
                run_at = CASE WHEN $4 OR attempt - released >= max_attempts THEN run_at ELSE $5 END,
                finished_at = CASE WHEN $4 OR attempt - released >= max_attempts THEN $6 ELSE NULL END,
                last_error = $3, lease_expires_at = NULL, locked_by = NULL
          WHERE id = $1 AND attempt = $2 AND state = 'running'
      RETURNING state",
    )
    .bind(id)
    .bind(attempt)
    .bind(job_error_text(error, 4000))
    .bind(fatal)
    .bind(retry_at)
    .bind(now)
    .fetch_optional(pool)
    .await?;
    Ok(match state {
        Some(super::JobState::Dead) => FailOutcome::Dead,
        Some(_) => FailOutcome::Retry,
        None => FailOutcome::Stale,
    })
}

/// Extends the leases of running attempts; returns the ids still held (the others were
/// rescued or cancelled and must stop).
pub async fn heartbeat(
    pool: &PgPool,
    held: &[(i64, i32)],
    now: impl Into<Option<DateTime<Utc>>>,
    lease: Duration,
) -> Result<Vec<i64>, QueueError> {
    let now: Option<DateTime<Utc>> = now.into();
    if held.is_empty() {
        return Ok(Vec::new());
    }
    let (ids, attempts): (Vec<i64>, Vec<i32>) = held.iter().copied().unzip();
    let kept = sqlx::query_scalar(
        "UPDATE agentd_jobs j
            SET lease_expires_at = COALESCE($3::timestamptz, now()) + $4 * interval '1 millisecond'
          WHERE j.id = ANY($1::int8[]) AND j.state = 'running'
            AND j.attempt = ($2::int4[])[array_position($1::int8[], j.id)]
      RETURNING j.id",
    )
    .bind(&ids)
    .bind(&attempts)
    .bind(now)
    .bind(lease.num_milliseconds() as f64)
    .fetch_all(pool)
    .await?;
    Ok(kept)
}

/// Gives attempts back without counting them (graceful shutdown): `available` at once.
pub async fn release(
    pool: &PgPool,
    held: &[(i64, i32)],
    now: impl Into<Option<DateTime<Utc>>>,
) -> Result<u64, QueueError> {
    let now: Option<DateTime<Utc>> = now.into();
    if held.is_empty() {
        return Ok(0);
    }
    let (ids, attempts): (Vec<i64>, Vec<i32>) = held.iter().copied().unzip();
    let done = sqlx::query(
        "UPDATE agentd_jobs j
            SET state = 'available', run_at = COALESCE($3::timestamptz, now()),
                released = released + 1,
                lease_expires_at = NULL, locked_by = NULL,
                last_error = 'released by a worker shutting down'
          WHERE j.id = ANY($1::int8[]) AND j.state = 'running'
            AND j.attempt = ($2::int4[])[array_position($1::int8[], j.id)]",
    )
    .bind(&ids)
    .bind(&attempts)
    .bind(now)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// Deletes up to `limit` finished jobs (succeeded, dead, cancelled) finished before `cutoff`.
pub async fn purge_finished(
    pool: &PgPool,
    cutoff: DateTime<Utc>,
    limit: u32,
) -> Result<u64, QueueError> {
    let done = sqlx::query(
        "DELETE FROM agentd_jobs WHERE id = ANY(ARRAY(
            SELECT id FROM agentd_jobs
             WHERE state IN ('succeeded', 'dead', 'cancelled') AND finished_at < $1
             LIMIT $2))",
    )
    .bind(cutoff)
    .bind(i64::from(limit))
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// Puts a `dead` or `cancelled` job back to `available` now, with a fresh attempt budget.
/// Refused (`Invalid`) when another job with the same unique key is waiting or running.
pub async fn retry<'e, E: PgExecutor<'e>>(
    exec: E,
    id: i64,
    now: DateTime<Utc>,
) -> Result<Option<String>, QueueError> {
    let state = sqlx::query_scalar(
        "UPDATE agentd_jobs
            SET state = 'available', run_at = $2, released = attempt, finished_at = NULL
          WHERE id = $1 AND state IN ('dead', 'cancelled', 'available')
      RETURNING state",
    )
    .bind(id)
    .bind(now)
    .fetch_optional(exec)
    .await
    .map_err(|e| match e {
        sqlx::Error::Database(d) if d.is_unique_violation() => QueueError::Invalid(format!(
            "job {id} cannot be retried: another job with its unique key is waiting or running"
        )),
        e => QueueError::Db(e),
    })?;
    Ok(state)
}

/// A job [`cancel`] ended: what its caller needs to end what the job drove (its run, its
/// document: `jobs::cancel`), since the queue knows only its own table.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Cancelled {
    pub id: i64,
    pub kind: String,
    pub payload: serde_json::Value,
}

/// Cancels an `available` or `running` job. A running attempt is fenced out: its ack is ignored.
/// `None` when the job does not exist or already finished.
pub async fn cancel<'e, E: PgExecutor<'e>>(
    exec: E,
    id: i64,
    now: DateTime<Utc>,
) -> Result<Option<Cancelled>, QueueError> {
    Ok(sqlx::query_as::<_, Cancelled>(
        "UPDATE agentd_jobs
            SET state = 'cancelled', finished_at = $2, lease_expires_at = NULL, locked_by = NULL
          WHERE id = $1 AND state IN ('available', 'running')
      RETURNING id, kind, payload",
    )
    .bind(id)
    .bind(now)
    .fetch_optional(exec)
    .await?)
}

/// One job by id.
pub async fn get<'e, E: PgExecutor<'e>>(exec: E, id: i64) -> Result<Option<JobRow>, QueueError> {
    Ok(
        sqlx::query_as::<_, JobRow>("SELECT * FROM agentd_jobs WHERE id = $1")
            .bind(id)
            .fetch_optional(exec)
            .await?,
    )
}

/// Jobs, newest first, optionally filtered by kind and state.
pub async fn list(
    pool: &PgPool,
    kind: Option<&str>,
    state: Option<super::JobState>,
    limit: i64,
) -> Result<Vec<JobRow>, QueueError> {
    Ok(sqlx::query_as::<_, JobRow>(
        "SELECT * FROM agentd_jobs
          WHERE ($1::text IS NULL OR kind = $1) AND ($2::text IS NULL OR state = $2)
          ORDER BY id DESC LIMIT $3",
    )
    .bind(kind)
    .bind(state)
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

/// The earliest future `run_at` among available jobs of `kinds` (when to wake for delayed jobs).
pub async fn next_run_at(
    pool: &PgPool,
    kinds: &[String],
    now: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>, QueueError> {
    Ok(sqlx::query_scalar(
        "SELECT min(run_at) FROM agentd_jobs WHERE state = 'available' AND kind = ANY($1) AND run_at > $2",
    )
    .bind(kinds)
    .bind(now)
    .fetch_one(pool)
    .await?)
}

/// A job's error as PostgreSQL `text` can hold it: NUL characters (a provider's message may
/// carry them) become U+FFFD, and the text is cut to at most `max` bytes on a character
/// boundary. Without this a NUL made the failure unrecordable and the job waited for the
/// rescuer (review #20).
fn job_error_text(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max));
    for c in s.chars().map(|c| if c == '\0' { '\u{FFFD}' } else { c }) {
        if out.len() + c.len_utf8() > max {
            break;
        }
        out.push(c);
    }
    out
}

/// Fencing for a handler's terminal domain writes: true if `attempt` still owns job `id`
/// (running, same attempt). Locks the job row `FOR SHARE` until the caller's transaction ends,
/// so a rescue or cancel cannot slip in between this check and the caller's commit.
pub async fn holds_attempt(
    conn: &mut sqlx::PgConnection,
    id: i64,
    attempt: i32,
) -> sqlx::Result<bool> {
    let held: Option<i32> = sqlx::query_scalar(
        "SELECT 1 FROM agentd_jobs WHERE id = $1 AND attempt = $2 AND state = 'running' FOR SHARE",
    )
    .bind(id)
    .bind(attempt)
    .fetch_optional(conn)
    .await?;
    Ok(held.is_some())
}

#[cfg(test)]
mod error_text_tests {
    use super::job_error_text;

    #[test]
    fn nul_is_replaced_and_the_cut_keeps_whole_characters() {
        assert_eq!(job_error_text("a\0b", 100), "a\u{FFFD}b");
        assert_eq!(job_error_text("ééé", 5), "éé");
        assert_eq!(job_error_text("", 5), "");
        assert!(job_error_text(&"x\0".repeat(10_000), 4000).len() <= 4000);
    }
}
