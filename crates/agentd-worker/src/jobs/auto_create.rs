//! `auto_create`: after an upload, the agent proposes a schema, a prompt and an extraction for
//! one document. Skipped (with a reason) when the document has no text; a no-op when it already
//! has a proposal unless the payload says `force`. On success the document is `proposed` with
//! refs to the artifacts and the run; on failure `failed` with the error, and the run's orphan
//! proposed artifacts are removed when the job file says so (`cleanup_on_failure`). A run that
//! hits a cap but left a complete proposal (schema, prompt, extraction) still counts as proposed.
//! A job may name a schema, a prompt and tags to start from (`jobs/start.rs`), or carry a
//! reviewer's `refine` (`jobs/refine.rs`): the run starts from the document's proposal and a
//! failed refine leaves the document with that proposal, the error and the status it had when
//! the refine was asked (`proposed` or `accepted`, kept in `refine_requests`).

use super::refine;
use super::render;
use super::start::{self, StartIds};
use crate::app::App;
use crate::kinds::{AutoCreate as Kind, JobKind};
use crate::queue::JobError;
use crate::queue::worker::{JobContext, JobHandler};
use crate::store::auto_create as store;
use crate::store::auto_create::StartFrom;
use crate::store::decisions::DecisionScope;
use crate::store::documents::AutoCreateStatus;
use crate::store::runs::{self, RunStatus};
use tracing::info;
use uuid::Uuid;

pub use crate::kinds::auto_create::Payload;

/// The job of a new document of `org_id` (an upload), starting from `ids`, under the
/// document's unique key, with the job file's priority and attempts (`q`).
pub fn upload_job(
    org_id: Uuid,
    document_id: Uuid,
    ids: &StartIds,
    q: &crate::catalog::QueuePolicy,
) -> crate::queue::NewJob {
    Kind::queued(&Payload::new(org_id, document_id, false, ids), q)
}

/// Added to the job file's system prompt for a refine run.
const REFINE_NOTE: &str = "\nThis run refines an existing proposal at a reviewer's request: \
    write new versions of its schema and prompt (update_schema, update_prompt) and a new \
    extraction; never create new ones.";

/// The handler.
pub struct AutoCreate {
    pub app: App,
}

#[async_trait::async_trait]
impl JobHandler for AutoCreate {
    async fn handle(&self, job: JobContext) -> Result<(), JobError> {
        let p = Kind::parse(&job.job.payload)?;
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
        } else if !org_on && !p.force && p.refine.is_none() {
            // (A refine is a person asking, like `force`.)
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
            store::set_status(
                &mut *tx,
                org,
                doc,
                AutoCreateStatus::Skipped,
                None,
                Some(reason),
                now,
            )
            .await?;
            tx.commit().await?;
            info!(document_id = %doc, "skipped: {why}");
            return Ok(());
        }
        let resuming = runs::run_for_job(&mut *tx, job.job.id).await?.is_some();
        if matches!(
            state.auto_create_status,
            AutoCreateStatus::Proposed | AutoCreateStatus::Accepted
        ) && !p.force
            && p.refine.is_none()
            && !resuming
        {
            info!(document_id = %p.document_id, status = %state.auto_create_status, "already has a proposal; nothing to do (enqueue with --force to redo)");
            return Ok(());
        }
        // At most one run per document (a unique index on running runs backs this up).
        if let Some((run, other)) =
            super::reconcile::other_active_run(&mut *tx, p.org_id, p.document_id, job.job.id)
                .await?
        {
            return Err(JobError::fatal(format_args!(
                "refused: document {} already has a run in progress (run {run} of job {other}); enqueue again once it ended",
                p.document_id
            )));
        }
        // A refine's words and the status to restore if it fails (D13: not in the payload).
        let request = match &p.refine {
            Some(_) => {
                let r = store::refine_request(&mut *tx, org, doc, job.job.id).await?;
                let Some(r) = r else {
                    let why = "the refine's instructions are gone (refine_requests has no row for the job)";
                    return Err(refused(tx, org, doc, why, now).await);
                };
                Some(r)
            }
            None => None,
        };
        // What the run starts from: the proposal it refines, or what the job names.
        let start = if p.refine.is_some() {
            if !state.proposed.complete() {
                let why = "the document has no proposal to refine any more";
                return Err(refused(tx, org, doc, why, now).await);
            }
            StartFrom {
                schema: state.proposed.schema(),
                prompt: state.proposed.prompt(),
                tag_ids: Vec::new(),
                revise: true,
            }
        } else {
            match start::resolve(&mut tx, org, &p.start_ids()).await? {
                Ok(s) => s,
                Err(bad) => {
                    let why = format!("the job names what the org does not have: {bad}");
                    store::set_status(
                        &mut *tx,
                        org,
                        doc,
                        AutoCreateStatus::Failed,
                        None,
                        Some(&why),
                        now,
                    )
                    .await?;
                    tx.commit().await?;
                    return Err(JobError::fatal(why));
                }
            }
        };
        store::set_status(
            &mut *tx,
            p.org_id,
            p.document_id,
            AutoCreateStatus::Running,
            None,
            None,
            now,
        )
        .await?;
        tx.commit().await?;

        let spec = app.spec(Kind::NAME);
        let mut conn = app.pool.acquire().await?;
        let first = match &request {
            Some(r) => {
                let (proposed, words) = (&state.proposed, &r.instructions);
                refine::first_message(&mut conn, org, doc, proposed, words).await?
            }
            None => {
                let first = render(
                    &spec.agent.first_message,
                    &[("document_id", p.document_id.to_string())],
                );
                match start::intro(&mut conn, org, &start).await? {
                    Some(intro) => format!("{first}\n{intro}"),
                    None => first,
                }
            }
        };
        drop(conn);
        let mut run_spec = app.run_spec(
            spec,
            p.org_id,
            p.document_id.to_string(),
            Some(job.job.id),
            first,
        );
        run_spec.document_id = Some(p.document_id);
        // A new upload has no decisions yet: only a run again (forced, a refine) reads them.
        if p.force || p.refine.is_some() {
            run_spec.decisions = Some(DecisionScope::Document(p.document_id));
        }
        if p.refine.is_some() {
            // All of the proposal's tools at once (guided mode would offer one part's), none
            // that makes something new.
            run_spec.settings.guided = false;
            run_spec.system_prompt.push_str(REFINE_NOTE);
            let allow = &mut run_spec.policy.allow;
            allow.retain(|t| !refine::NOT_IN_REFINE.contains(&t.as_str()));
        }
        run_spec.start = start;
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
        let arts = store::proposal(
            &mut tx,
            p.org_id,
            outcome.run_id,
            p.document_id,
            &run_spec.start,
        )
        .await?;
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
            && self.app.spec(Kind::NAME).agent.cleanup_on_failure
        {
            let n = store::remove_proposed(&mut tx, p.org_id, run).await?;
            info!(run_id = %run, removed = n, "removed the failed run's proposed artifacts");
        }
        // A failed refine leaves the proposal it started from with the status it had
        // (`proposed` or `accepted`, D13), and says why.
        let prior = match p.refine {
            Some(_) => store::refine_request(&mut *tx, p.org_id, p.document_id, job.job.id)
                .await?
                .map(|r| r.prior_status),
            None => None,
        };
        let (status, run_id) = match (&p.refine, prior) {
            (Some(_), Some(prior)) => (prior, None),
            (Some(_), None) => (AutoCreateStatus::Proposed, None),
            (None, _) => (AutoCreateStatus::Failed, run_id),
        };
        store::set_status(
            &mut *tx,
            p.org_id,
            p.document_id,
            status,
            run_id,
            Some(reason),
            self.app.clock.now(),
        )
        .await?;
        tx.commit().await.map_err(JobError::from)
    }
}

/// True if this attempt still owns the job (locks the job row until `tx` ends).
/// A refine that cannot run: its document ends `failed` with `why` (in `tx`, committed), and
/// the job's fatal error names both.
async fn refused(
    mut tx: sqlx::Transaction<'_, sqlx::Postgres>,
    org: Uuid,
    doc: Uuid,
    why: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> JobError {
    let ended = async {
        store::set_status(
            &mut *tx,
            org,
            doc,
            AutoCreateStatus::Failed,
            None,
            Some(why),
            now,
        )
        .await?;
        tx.commit().await
    }
    .await;
    match ended {
        Ok(()) => JobError::fatal(format_args!("document {doc}: {why}")),
        Err(e) => e.into(),
    }
}

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
