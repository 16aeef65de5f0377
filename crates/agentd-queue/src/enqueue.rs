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
use sqlx::{PgExecutor, PgPool};

/// Runs `sql` (`sql/enqueue_one*.sql`) for `job`.
async fn insert_one<'e, E: PgExecutor<'e>>(
    exec: E,
    sql: &'static str,
    job: &NewJob,
) -> Result<Option<i64>, QueueError> {
    validate(job)?;
    let id: Option<i64> = sqlx::query_scalar(sql)
        .bind(&job.kind)
        .bind(&job.payload)
        .bind(job.priority)
        .bind(job.run_at)
        .bind(job.max_attempts)
        .bind(&job.unique_key)
        .bind(job.unique_until_purged)
        .bind(&job.traceparent)
        .fetch_optional(exec)
        .await?;
    Ok(id)
}

/// Inserts one job. `Ok(None)` when a job with the same unique key exists (skipped). The insert
/// trigger sends the NOTIFY at commit; a producer on a pool should prefer [`enqueue_committed`].
pub async fn enqueue<'e, E: PgExecutor<'e>>(
    exec: E,
    job: &NewJob,
) -> Result<Option<i64>, QueueError> {
    insert_one(exec, include_str!("sql/enqueue_one.sql"), job).await
}

/// [`enqueue`] in a transaction of its own, with the wake-up NOTIFY sent after the commit
/// (migration 0060): a NOTIFY inside a writing transaction holds PostgreSQL's cluster-wide
/// notify lock through the commit's WAL flush, so concurrent single-row producers would commit
/// one at a time. The job is committed when this returns; if only the NOTIFY failed, idle
/// workers find it at their next poll.
pub async fn enqueue_committed(pool: &PgPool, job: &NewJob) -> Result<Option<i64>, QueueError> {
    if crate::db::pooling::is_pooled(pool) {
        // Through a pooler a statement outside a transaction commits only when its connection
        // returns (db/pooling.rs): commit here, and let the trigger notify at that commit.
        let mut tx = pool.begin().await?;
        let id = enqueue(&mut *tx, job).await?;
        tx.commit().await?;
        return Ok(id);
    }
    let mut conn = pool.acquire().await?;
    let sql = include_str!("sql/enqueue_one_notify_after_commit.sql");
    let id = insert_one(&mut *conn, sql, job).await?;
    if id.is_some() {
        let notified = sqlx::query("SELECT pg_notify($1, '')")
            .bind(super::NOTIFY_CHANNEL)
            .execute(&mut *conn)
            .await;
        if let Err(e) = notified {
            tracing::warn!(error = %e, "job committed; its NOTIFY failed (workers poll for it)");
        }
    }
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
    let mut traces = Vec::with_capacity(jobs.len());
    for j in jobs {
        validate(j)?;
        kinds.push(j.kind.as_str());
        payloads.push(&j.payload);
        priorities.push(j.priority);
        run_ats.push(j.run_at);
        attempts.push(j.max_attempts);
        keys.push(j.unique_key.as_deref());
        once.push(j.unique_until_purged);
        traces.push(j.traceparent.as_deref());
    }
    let done = sqlx::query(
        "INSERT INTO agentd_jobs (kind, payload, priority, run_at, max_attempts, unique_key, traceparent)
         SELECT k, p, pr, COALESCE(r, now()), m, u, tp
         FROM unnest($1::text[], $2::jsonb[], $3::int2[], $4::timestamptz[], $5::int4[], $6::text[],
                     $7::bool[], $8::text[])
              AS t(k, p, pr, r, m, u, o, tp)
         WHERE NOT (o AND EXISTS (SELECT 1 FROM agentd_jobs j WHERE j.unique_key = t.u))
         ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state IN ('available', 'running') DO NOTHING",
    )
    .bind(&kinds)
    .bind(&payloads)
    .bind(&priorities)
    .bind(&run_ats)
    .bind(&attempts)
    .bind(&keys)
    .bind(&once)
    .bind(&traces)
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
