//! One handler per job kind. Payloads are validated here: a malformed payload is a fatal error
//! (the job goes `dead` with the reason at once, no retry storm).

pub mod approval_expiry;
pub mod auto_create;
pub mod cancel;
pub mod fork;
pub mod proactive_suggestion;
pub mod reconcile;
pub mod refine;
pub mod replay;
pub mod start;
pub mod webhook_delivery;

use crate::agent::RunError;
use crate::app::App;
use crate::kinds::{
    ApprovalExpiry, AutoCreate, JobKind, ProactiveSuggestion, RunFork, WebhookDelivery,
};
use crate::queue::JobError;
use crate::queue::worker::JobHandler;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The handlers this build has, by kind.
pub fn handlers(app: &App) -> BTreeMap<String, Arc<dyn JobHandler>> {
    let mut m: BTreeMap<String, Arc<dyn JobHandler>> = BTreeMap::new();
    m.insert(
        AutoCreate::NAME.into(),
        Arc::new(auto_create::AutoCreate { app: app.clone() }),
    );
    m.insert(
        ProactiveSuggestion::NAME.into(),
        Arc::new(proactive_suggestion::Proactive { app: app.clone() }),
    );
    m.insert(
        ApprovalExpiry::NAME.into(),
        Arc::new(approval_expiry::ApprovalExpiry { app: app.clone() }),
    );
    m.insert(
        WebhookDelivery::NAME.into(),
        Arc::new(webhook_delivery::WebhookDelivery::new(app)),
    );
    m.insert(
        RunFork::NAME.into(),
        Arc::new(fork::Fork { app: app.clone() }),
    );
    m
}

/// Kinds that have a job file but no handler in this build (reported by `agentd status`).
pub fn unimplemented_kinds(app: &App) -> Vec<String> {
    let have = handlers(app);
    app.catalog
        .kinds
        .keys()
        .filter(|k| !have.contains_key(*k))
        .cloned()
        .collect()
}

/// Fills `{name}` placeholders of a job file's message.
pub fn render(template: &str, vars: &[(&str, String)]) -> String {
    let mut out = template.trim().to_string();
    for (k, v) in vars {
        out = out.replace(&format!("{{{k}}}"), v);
    }
    out
}

/// Why [`run_loop`] gave up: the job's error and, when the error ends the job, the run it
/// marked failed with the reason.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct LoopError {
    pub error: JobError,
    pub failed_run: Option<(uuid::Uuid, String)>,
}

impl From<sqlx::Error> for LoopError {
    fn from(e: sqlx::Error) -> Self {
        LoopError {
            error: e.into(),
            failed_run: None,
        }
    }
}

impl From<LoopError> for JobError {
    fn from(e: LoopError) -> Self {
        e.error
    }
}

/// Runs the tool loop for a job. On an error that ends the job (not retryable, or the last
/// attempt) the run is marked failed, and `on_give_up` gets its id and the reason first.
pub async fn run_loop(
    app: &App,
    spec: &crate::catalog::JobSpec,
    run_spec: &crate::agent::RunSpec,
    job: &crate::queue::worker::JobContext,
) -> Result<crate::agent::RunOutcome, LoopError> {
    let engine = app.engine(spec);
    // The org's model, if it chose one, replaces the job file's.
    let org_model = crate::store::org_settings::get(&app.pool, run_spec.org_id)
        .await?
        .and_then(|o| o.model);
    let with_model;
    let run_spec = match org_model {
        Some(m) if m != run_spec.model => {
            with_model = crate::agent::RunSpec {
                model: m,
                ..run_spec.clone()
            };
            &with_model
        }
        _ => run_spec,
    };
    match engine.run(run_spec, &job.cancel).await {
        Ok(o) => Ok(o),
        Err(e) => {
            let mut failed = None;
            if last_attempt(&e, &job.job) {
                let run = crate::store::runs::run_for_job(&app.pool, job.job.id).await?;
                if let Some(r) = run
                    && fail_run_fenced(app, &job.job, r.id, &e.to_string()).await?
                {
                    failed = Some((r.id, e.to_string()));
                }
            }
            Err(LoopError {
                error: job_error(&e, &job.job),
                failed_run: failed,
            })
        }
    }
}

/// Marks run `run_id` failed, fenced by the job's attempt: a worker whose attempt no longer owns
/// the job (rescued, cancelled, taken by another worker) changes nothing and gets `false`.
pub async fn fail_run_fenced(
    app: &App,
    job: &crate::queue::ClaimedJob,
    run_id: uuid::Uuid,
    error: &str,
) -> sqlx::Result<bool> {
    let mut tx = app.pool.begin().await?;
    if !crate::queue::store::holds_attempt(&mut tx, job.id, job.attempt).await? {
        tracing::warn!(job.id = job.id, attempt = job.attempt, %run_id, "stale attempt: the run is not failed by this worker");
        return Ok(false);
    }
    crate::store::runs::fail_run(&mut *tx, run_id, error, app.clock.now()).await?;
    tx.commit().await?;
    Ok(true)
}

/// Maps a run error to the job's outcome: retryable while attempts remain, else fatal.
pub fn job_error(e: &RunError, job: &crate::queue::ClaimedJob) -> JobError {
    if e.is_retryable() && job.counted_attempts < job.max_attempts {
        JobError::retryable(e)
    } else {
        JobError::fatal(e)
    }
}

/// True if this is the job's last attempt (the handler records the failure for good).
pub fn last_attempt(e: &RunError, job: &crate::queue::ClaimedJob) -> bool {
    !e.is_retryable() || job.counted_attempts >= job.max_attempts
}
