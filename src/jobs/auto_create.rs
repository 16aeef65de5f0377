//! `auto_create`: after an upload, the agent proposes a schema, a prompt and an extraction for
//! one document. Skipped (with a reason) when the document has no text; a no-op when it already
//! has a proposal unless the payload says `force`. On success the document is `proposed` with
//! refs to the artifacts and the run; on failure `failed` with the error, and the run's orphan
//! proposed artifacts are removed when the job file says so (`cleanup_on_failure`). A run that
//! hits a cap but left a complete proposal (schema, prompt, extraction) still counts as proposed.

use super::{parse_payload, render};
use crate::app::App;
use crate::queue::JobError;
use crate::queue::worker::{JobContext, JobHandler};
use crate::store::auto_create as store;
use crate::store::documents::AutoCreateStatus;
use crate::store::runs::{self, RunStatus};
use serde::Deserialize;
use tracing::info;
use uuid::Uuid;

/// The payload: `{org_id, document_id, force?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Payload {
    pub org_id: Uuid,
    pub document_id: Uuid,
    #[serde(default)]
    pub force: bool,
}

/// The handler.
pub struct AutoCreate {
    pub app: App,
}

#[async_trait::async_trait]
impl JobHandler for AutoCreate {
    async fn handle(&self, job: JobContext) -> Result<(), JobError> {
        let p: Payload = parse_payload("auto_create", &job.job.payload)?;
        let app = &self.app;
        let now = app.clock.now();
        let mut tx = app.pool.begin().await?;
        let state = store::lock_state(&mut tx, p.org_id, p.document_id).await?;
        let (doc, org) = (p.document_id, p.org_id);
        let state =
            JobError::when_gone(state, || format!("document {doc} not found in org {org}"))?;
        let org_on = crate::store::org_settings::get(&mut *tx, p.org_id)
            .await?
            .is_none_or(|o| o.auto_create);
        // An offboarded org spends no tokens, whoever enqueued the job (review #25).
        let org_active = crate::store::orgs::find(&mut *tx, &p.org_id.to_string())
            .await?
            .is_some_and(|o| o.active);
        let skip = if !org_active {
            Some(("the organisation is inactive", "the org is inactive"))
        } else if !org_on && !p.force {
            Some((
                "auto-create is off for this organisation (orgs set auto_create=true)",
                "auto-create is off for the org",
            ))
        } else if !state.has_text {
            Some((
                "the document has no text to read",
                "the document has no text",
            ))
        } else {
            None
        };
        if let Some((reason, why)) = skip {
            let (org, doc) = (p.org_id, p.document_id);
            store::set_status(&mut *tx, org, doc, "skipped", None, Some(reason), now).await?;
            tx.commit().await?;
            info!(document_id = %doc, "skipped: {why}");
            return Ok(());
        }
        let resuming = runs::run_for_job(&mut *tx, job.job.id).await?.is_some();
        if matches!(
            state.auto_create_status,
            AutoCreateStatus::Proposed | AutoCreateStatus::Accepted
        ) && !p.force
            && !resuming
        {
            info!(document_id = %p.document_id, status = %state.auto_create_status, "already has a proposal; nothing to do (enqueue with --force to redo)");
            return Ok(());
        }
        // At most one run per document (a unique index on running runs backs this up).
        if let Some((run, other)) =
            crate::queue::reconcile::other_active_run(&mut *tx, p.org_id, p.document_id, job.job.id)
                .await?
        {
            return Err(JobError::fatal(format_args!(
                "refused: document {} already has a run in progress (run {run} of job {other}); enqueue again once it ended",
                p.document_id
            )));
        }
        store::set_status(
            &mut *tx,
            p.org_id,
            p.document_id,
            "running",
            None,
            None,
            now,
        )
        .await?;
        tx.commit().await?;

        let spec = app.spec("auto_create");
        let first = render(
            &spec.agent.first_message,
            &[("document_id", p.document_id.to_string())],
        );
        let mut run_spec = app.run_spec(
            spec,
            p.org_id,
            p.document_id.to_string(),
            Some(job.job.id),
            first,
        );
        run_spec.document_id = Some(p.document_id);
        let outcome = match super::run_loop(app, spec, &run_spec, &job).await {
            Ok(o) => o,
            Err(super::LoopError {
                error,
                failed_run: Some((run_id, reason)),
            }) => {
                self.fail(&job, &p, Some(run_id), &reason).await?;
                return Err(error);
            }
            Err(super::LoopError { error: e, .. }) => {
                if !e.is_retryable() {
                    self.fail(&job, &p, None, &e.to_string()).await?;
                }
                return Err(e);
            }
        };
        let mut tx = app.pool.begin().await?;
        if !fenced(&mut tx, &job).await? {
            return Err(stale(&job));
        }
        let arts = store::artifacts(&mut *tx, p.org_id, outcome.run_id, p.document_id).await?;
        if matches!(outcome.status, RunStatus::Succeeded | RunStatus::Capped) && arts.complete() {
            store::set_proposed(
                &mut tx,
                p.org_id,
                p.document_id,
                outcome.run_id,
                &arts,
                app.clock.now(),
            )
            .await?;
            tx.commit().await?;
            info!(document_id = %p.document_id, run_id = %outcome.run_id, status = %outcome.status, "proposal ready");
            return Ok(());
        }
        drop(tx);
        let missing = arts.missing();
        let reason = format!(
            "run {} ended {} ({}) without a complete proposal: missing {}",
            outcome.run_id,
            outcome.status,
            outcome.stop_reason.as_deref().unwrap_or("-"),
            missing.join(", ")
        );
        self.fail(&job, &p, Some(outcome.run_id), &reason).await?;
        Err(JobError::fatal(reason))
    }
}

impl AutoCreate {
    /// Records the failure (document `failed`, the run's orphans removed), fenced by the attempt:
    /// a stale worker changes nothing.
    async fn fail(
        &self,
        job: &JobContext,
        p: &Payload,
        run_id: Option<Uuid>,
        reason: &str,
    ) -> Result<(), JobError> {
        let mut tx = self.app.pool.begin().await?;
        if !fenced(&mut tx, job).await? {
            return Err(stale(job));
        }
        if let Some(run) = run_id
            && self.app.spec("auto_create").agent.cleanup_on_failure
        {
            let n = store::remove_proposed(&mut tx, p.org_id, run).await?;
            info!(run_id = %run, removed = n, "removed the failed run's proposed artifacts");
        }
        store::set_status(
            &mut *tx,
            p.org_id,
            p.document_id,
            "failed",
            run_id,
            Some(reason),
            self.app.clock.now(),
        )
        .await?;
        tx.commit().await.map_err(JobError::from)
    }
}

/// True if this attempt still owns the job (locks the job row until `tx` ends).
async fn fenced(tx: &mut sqlx::PgConnection, job: &JobContext) -> Result<bool, JobError> {
    Ok(crate::queue::store::holds_attempt(tx, job.job.id, job.job.attempt).await?)
}

/// The error of an attempt fenced out of its terminal writes (its outcome is dropped anyway).
fn stale(job: &JobContext) -> JobError {
    tracing::warn!(
        job.id = job.job.id,
        attempt = job.job.attempt,
        "stale attempt: another worker owns the job; terminal writes skipped"
    );
    JobError::retryable(format_args!(
        "attempt {} of job {} no longer owns the job (lease lost); nothing recorded",
        job.job.attempt, job.job.id
    ))
}
