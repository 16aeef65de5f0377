//! [`AgentdAck`]: apalis acknowledgements written to `agentd_jobs`, batched and fenced.

use super::backend::Shared;
use super::{AckError, AckOutcome, AckRequest, JobMeta, JobToken, Outcome};
use crate::store::{self, FailOutcome};
use crate::{JobError, QueueError};
use ::apalis::layers::catch_panic::PanicError;
use apalis_core::error::BoxDynError;
use apalis_core::task::ExecutionContext;
use apalis_core::task::metadata::Metadata;
use apalis_core::worker::ext::ack::Acknowledge;
use futures::FutureExt;
use futures::future::BoxFuture;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinError;
use tower::timeout::error::Elapsed;
use tracing::{debug, error, warn};

/// The apalis acknowledger: writes each task's outcome to `agentd_jobs`, fenced by attempt.
/// Success → `complete_many` (batched with whatever else is pending); failure → `fail` with
/// the kind's backoff written to `run_at`, `dead` when fatal or out of attempts. Resolves when
/// the write is done; a stale attempt resolves to [`AckError::Stale`].
#[derive(Clone)]
pub struct AgentdAck {
    pub(super) sh: Arc<Shared>,
}

impl Acknowledge<()> for AgentdAck {
    type Error = AckError;
    type Future = BoxFuture<'static, Result<(), AckError>>;

    fn ack(&mut self, res: &Result<(), BoxDynError>, ctx: &ExecutionContext) -> Self::Future {
        let sh = self.sh.clone();
        let meta = match JobMeta::extract(ctx.metadata()) {
            Ok(m) => m,
            Err(e) => return async move { Err(AckError::Meta(e)) }.boxed(),
        };
        let policy = sh.policies.get(&meta.kind);
        let outcome = match res {
            Ok(()) => Outcome::Succeeded,
            Err(e) => {
                let (message, fatal) = classify(e, policy.map(|p| p.timeout));
                let delay = policy.map(|p| p.backoff.delay(meta.attempt));
                let backoff = sh.clock.now()
                    + chrono::Duration::from_std(delay.unwrap_or_default()).unwrap_or_default();
                let asked = e.downcast_ref::<JobError>().and_then(JobError::not_before);
                let retry_at = asked.map_or(backoff, |at| at.max(backoff));
                Outcome::Failed {
                    message,
                    fatal,
                    retry_at,
                }
            }
        };
        // Whoever removes the held entry owns the outcome: a lost lease (heartbeat) or a
        // release at shutdown took it first, and this attempt reports nothing.
        let held = {
            let mut held = sh.held.lock().expect("held");
            match held.get(&meta.id) {
                Some(h) if h.attempt == meta.attempt => held.remove(&meta.id),
                _ => None,
            }
        };
        // With newcomer slots a claim may have left slots free for other orgs: a finished job
        // gives its org room again, so the backend claims now rather than at the next poll.
        if sh.newcomer_slots > 0 {
            sh.wake.notify_one();
        }
        if held.is_none() {
            sh.stats.stale.fetch_add(1, Ordering::Relaxed);
            debug!(
                job.id = meta.id,
                attempt = meta.attempt,
                "attempt no longer held; outcome dropped"
            );
            return async move {
                Err(AckError::NotHeld {
                    id: meta.id,
                    attempt: meta.attempt,
                })
            }
            .boxed();
        }
        let (reply, rx) = oneshot::channel();
        let sent = sh.ack_tx.send(AckRequest {
            id: meta.id,
            attempt: meta.attempt,
            kind: meta.kind,
            outcome,
            elapsed: ctx.data().get::<JobToken>().map(|t| t.yielded_at.elapsed()),
            reply,
        });
        let (id, attempt) = (meta.id, meta.attempt);
        async move {
            sent.map_err(|_| AckError::Closed)?;
            match rx.await {
                Ok(Ok(AckOutcome::Stale)) => Err(AckError::Stale { id, attempt }),
                Ok(Ok(_)) => Ok(()),
                Ok(Err(source)) => Err(AckError::Db { id, source }),
                Err(_) => Err(AckError::Closed),
            }
        }
        .boxed()
    }
}

/// A failed run's message and whether it is fatal (dead at once).
pub(super) fn classify(e: &BoxDynError, timeout: Option<Duration>) -> (String, bool) {
    if let Some(j) = e.downcast_ref::<JobError>() {
        return (j.to_string(), !j.is_retryable());
    }
    if e.is::<Elapsed>() {
        let secs = timeout.map(|t| t.as_secs_f64()).unwrap_or_default();
        return (
            format!("timed out after {secs:.1}s (queue.timeout_secs)"),
            false,
        );
    }
    if let Some(p) = e.downcast_ref::<PanicError>() {
        return (format!("handler panicked: {}", p.0), false);
    }
    if let Some(j) = e.downcast_ref::<JoinError>() {
        return (format!("handler task ended abnormally: {j}"), false);
    }
    (e.to_string(), false)
}

pub(super) async fn ack_loop(sh: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<AckRequest>) {
    let mut batch = Vec::new();
    loop {
        let first = tokio::select! {
            biased;
            r = rx.recv() => match r {
                Some(r) => r,
                None => break,
            },
            // Only reached with nothing queued: every ack sent before closing was flushed.
            _ = sh.closing.cancelled() => break,
        };
        batch.push(first);
        while batch.len() < 1000 {
            match rx.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        flush(&sh, std::mem::take(&mut batch)).await;
    }
}

pub(super) async fn flush(sh: &Shared, batch: Vec<AckRequest>) {
    let now = sh.clock.now();
    let deletes = |r: &AckRequest| {
        sh.policies
            .get(&r.kind)
            .is_some_and(|p| p.delete_on_success)
    };
    // (job id, attempt) of the successes to keep and to delete.
    let mut keep: Vec<(i64, i32)> = Vec::new();
    let mut delete: Vec<(i64, i32)> = Vec::new();
    for r in batch
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Succeeded))
    {
        if deletes(r) {
            delete.push((r.id, r.attempt));
        } else {
            keep.push((r.id, r.attempt));
        }
    }
    let mut acked: Result<HashSet<i64>, Arc<QueueError>> = Ok(HashSet::new());
    if !keep.is_empty() {
        acked = crate::worker::retry_db(|| store::complete_many(&sh.pool, &keep, now))
            .await
            .map(|v| v.into_iter().collect())
            .map_err(Arc::new);
    }
    if !delete.is_empty() {
        let gone = crate::worker::retry_db(|| store::delete_succeeded(&sh.pool, &delete))
            .await
            .map_err(Arc::new);
        acked = match (acked, gone) {
            (Ok(mut set), Ok(v)) => {
                set.extend(v);
                Ok(set)
            }
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
    }
    for req in batch {
        if let Some(d) = req.elapsed {
            metrics::histogram!("agentd_job_duration_seconds", "kind" => req.kind.clone())
                .record(d.as_secs_f64());
        }
        let result = match &req.outcome {
            Outcome::Succeeded => match &acked {
                Ok(set) if set.contains(&req.id) => {
                    sh.stats.succeeded.fetch_add(1, Ordering::Relaxed);
                    metrics::counter!("agentd_jobs_succeeded_total", "kind" => req.kind.clone())
                        .increment(1);
                    Ok(AckOutcome::Succeeded)
                }
                Ok(_) => {
                    sh.stats.stale.fetch_add(1, Ordering::Relaxed);
                    warn!(
                        job.id = req.id,
                        attempt = req.attempt,
                        "stale attempt: success ignored"
                    );
                    Ok(AckOutcome::Stale)
                }
                Err(m) => {
                    error!(job.id = req.id, error = %m, "could not record success; the lease will expire and the job is retried");
                    Err(m.clone())
                }
            },
            Outcome::Failed {
                message,
                fatal,
                retry_at,
            } => {
                let res = crate::worker::retry_db(|| {
                    store::fail(
                        &sh.pool,
                        req.id,
                        req.attempt,
                        message,
                        *fatal,
                        *retry_at,
                        now,
                    )
                })
                .await;
                match res {
                    Ok(FailOutcome::Retry) => {
                        sh.stats.retried.fetch_add(1, Ordering::Relaxed);
                        metrics::counter!("agentd_jobs_failed_total", "kind" => req.kind.clone())
                            .increment(1);
                        warn!(job.id = req.id, kind = %req.kind, attempt = req.attempt, error = %message, retry_at = %retry_at, "job failed; will retry");
                        Ok(AckOutcome::Retry)
                    }
                    Ok(FailOutcome::Dead) => {
                        sh.stats.dead.fetch_add(1, Ordering::Relaxed);
                        metrics::counter!("agentd_jobs_dead_total", "kind" => req.kind.clone())
                            .increment(1);
                        error!(job.id = req.id, kind = %req.kind, attempt = req.attempt, error = %message, fatal, "job is dead");
                        Ok(AckOutcome::Dead)
                    }
                    Ok(FailOutcome::Stale) => {
                        sh.stats.stale.fetch_add(1, Ordering::Relaxed);
                        Ok(AckOutcome::Stale)
                    }
                    Err(e) => {
                        error!(job.id = req.id, error = %e, "could not record the failure; the lease will expire and the job is retried");
                        Err(Arc::new(e))
                    }
                }
            }
        };
        let _ = req.reply.send(result);
    }
}
