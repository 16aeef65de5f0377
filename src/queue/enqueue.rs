//! Enqueue on any sqlx executor: a pool, a connection, or the caller's own transaction (the
//! upload service inserts its document and the job in one commit).
//!
//! Plain SQL for producers that are not Rust (the insert trigger sends the NOTIFY):
//! ```sql
//! INSERT INTO agentd_jobs (kind, payload, unique_key, max_attempts)
//! VALUES ('auto_create', '{"org_id":"…","document_id":"…"}', 'auto_create:…', 3)
//! ON CONFLICT DO NOTHING;
//! ```
//! A unique key binds while its job is waiting or running (a partial unique index): after the
//! job finished, the same key can be enqueued again unless the job asks
//! [`NewJob::unique_until_purged`].

use super::{NewJob, QueueError};
use sqlx::PgExecutor;

/// Inserts one job. `Ok(None)` when a job with the same unique key exists (skipped).
pub async fn enqueue<'e, E: PgExecutor<'e>>(
    exec: E,
    job: &NewJob,
) -> Result<Option<i64>, QueueError> {
    validate(job)?;
    let id: Option<i64> = sqlx::query_scalar(
        "INSERT INTO agentd_jobs (kind, payload, priority, run_at, max_attempts, unique_key)
         SELECT $1, $2, $3, COALESCE($4, now()), $5, $6
          WHERE NOT ($7 AND EXISTS (SELECT 1 FROM agentd_jobs WHERE unique_key = $6))
         ON CONFLICT (unique_key) WHERE state IN ('available', 'running') DO NOTHING
         RETURNING id",
    )
    .bind(&job.kind)
    .bind(&job.payload)
    .bind(job.priority)
    .bind(job.run_at)
    .bind(job.max_attempts)
    .bind(&job.unique_key)
    .bind(job.unique_until_purged)
    .fetch_optional(exec)
    .await?;
    Ok(id)
}

/// Inserts many jobs in one statement (one NOTIFY). Duplicate unique keys, in the table or
/// inside the batch, are skipped; returns the number inserted.
pub async fn enqueue_many<'e, E: PgExecutor<'e>>(
    exec: E,
    jobs: &[NewJob],
) -> Result<u64, QueueError> {
    if jobs.is_empty() {
        return Ok(0);
    }
    let mut kinds = Vec::with_capacity(jobs.len());
    let mut payloads = Vec::with_capacity(jobs.len());
    let mut priorities = Vec::with_capacity(jobs.len());
    let mut run_ats = Vec::with_capacity(jobs.len());
    let mut attempts = Vec::with_capacity(jobs.len());
    let mut keys = Vec::with_capacity(jobs.len());
    let mut once = Vec::with_capacity(jobs.len());
    for j in jobs {
        validate(j)?;
        kinds.push(j.kind.as_str());
        payloads.push(&j.payload);
        priorities.push(j.priority);
        run_ats.push(j.run_at);
        attempts.push(j.max_attempts);
        keys.push(j.unique_key.as_deref());
        once.push(j.unique_until_purged);
    }
    let done = sqlx::query(
        "INSERT INTO agentd_jobs (kind, payload, priority, run_at, max_attempts, unique_key)
         SELECT k, p, pr, COALESCE(r, now()), m, u
         FROM unnest($1::text[], $2::jsonb[], $3::int2[], $4::timestamptz[], $5::int4[], $6::text[],
                     $7::bool[])
              AS t(k, p, pr, r, m, u, o)
         WHERE NOT (o AND EXISTS (SELECT 1 FROM agentd_jobs j WHERE j.unique_key = t.u))
         ON CONFLICT (unique_key) WHERE state IN ('available', 'running') DO NOTHING",
    )
    .bind(&kinds)
    .bind(&payloads)
    .bind(&priorities)
    .bind(&run_ats)
    .bind(&attempts)
    .bind(&keys)
    .bind(&once)
    .execute(exec)
    .await?;
    Ok(done.rows_affected())
}

fn validate(job: &NewJob) -> Result<(), QueueError> {
    if job.kind.trim().is_empty() {
        return Err(QueueError::Invalid("job kind must not be empty".into()));
    }
    if job.max_attempts < 1 {
        return Err(QueueError::Invalid(format!(
            "max_attempts must be ≥ 1 (got {})",
            job.max_attempts
        )));
    }
    Ok(())
}
