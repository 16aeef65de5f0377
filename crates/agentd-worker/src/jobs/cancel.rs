//! Cancelling a job (`agentd jobs cancel`, `POST /v1/jobs/{id}/cancel`): the queue ends the job
//! ([`crate::queue::store::cancel`], which knows only its own table), and in the same
//! transaction this ends what the job drove: its run, if still running, becomes `cancelled`, and
//! the document of an auto_create job becomes `failed` with the reason (a refine's goes back to
//! the status it had, `proposed` or `accepted`, with its proposal) unless another of its
//! auto_create jobs is waiting or running. What a cancel misses (a run or document ended later
//! by a crash, say), the reconciler ([`super::reconcile`]) ends.

use crate::kinds::{AutoCreate, JobKind};
use crate::queue::{QueueError, store as queue_store};
use crate::store::{auto_create, runs};
use chrono::{DateTime, Utc};
use sqlx::{Acquire, PgConnection};

/// Cancels job `id` (waiting or running) with its run and document; `false` when the job does
/// not exist or already finished (then nothing changes). On `conn` inside its transaction, if
/// it has one (a savepoint), else in a transaction of its own.
pub async fn cancel(
    conn: &mut PgConnection,
    id: i64,
    now: DateTime<Utc>,
) -> Result<bool, QueueError> {
    let mut tx = conn.begin().await?;
    let Some(job) = queue_store::cancel(&mut *tx, id, now).await? else {
        return Ok(false);
    };
    runs::cancel_for_job(&mut *tx, job.id, now).await?;
    // A malformed auto_create payload names no document to end.
    if job.kind == AutoCreate::NAME
        && let Ok(p) = AutoCreate::parse(&job.payload)
    {
        auto_create::fail_cancelled(&mut *tx, p.org_id, p.document_id, job.id, now).await?;
    }
    tx.commit().await?;
    Ok(true)
}
