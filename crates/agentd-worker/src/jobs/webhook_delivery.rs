//! `webhook_delivery`: sends one event to one subscription (`{org_id, event_id, webhook_id}`,
//! enqueued by the dispatcher trigger of migration 0042 in the event's own transaction). A
//! failed send is retried with the job file's backoff; after `max_attempts` the job is `dead`
//! with the last error (`agentd jobs list --kind webhook_delivery`). A subscription deleted in
//! the meantime ends the job without sending.

use crate::app::App;
use crate::kinds::{self, JobKind};
use crate::queue::JobError;
use crate::queue::worker::{JobContext, JobHandler};
use crate::store::{events, webhooks};
use crate::webhooks::delivery::Sender;
use std::time::Duration;
use tracing::info;

pub use crate::kinds::webhook_delivery::Payload;

/// The handler.
pub struct WebhookDelivery {
    pub app: App,
    pub sender: Sender,
    /// Consecutive failures that open a subscription's breaker (`webhook.failures_to_open`).
    pub failures_to_open: i32,
}

impl WebhookDelivery {
    /// The handler with the job file's timeouts and breaker threshold.
    pub fn new(app: &App) -> Self {
        let w = app
            .catalog
            .get(kinds::WebhookDelivery::NAME)
            .and_then(|s| s.webhook.as_ref());
        let secs = w.map_or(10, |w| w.request_timeout_secs);
        let connect = w.map_or(2, |w| w.connect_timeout_secs);
        Self {
            app: app.clone(),
            sender: Sender::with_connect_timeout(
                Duration::from_secs(secs),
                Duration::from_secs(connect),
                crate::webhooks::guard::Policy::new(&app.config.webhooks),
            ),
            failures_to_open: w.map_or(5, |w| w.failures_to_open).min(i32::MAX as u32) as i32,
        }
    }
}

#[async_trait::async_trait]
impl JobHandler for WebhookDelivery {
    async fn handle(&self, job: JobContext) -> Result<(), JobError> {
        let p = kinds::WebhookDelivery::parse(&job.job.payload)?;
        let pool = &self.app.pool;
        let Some((url, secret, open_until)) =
            webhooks::target(pool, p.org_id, p.webhook_id).await?
        else {
            info!(webhook_id = %p.webhook_id, event_id = p.event_id, "the subscription was deleted; delivery dropped");
            return Ok(());
        };
        // A sealed secret (review D9) is opened here, for this send only. One the configured
        // keys cannot open (check_startup refuses a server that cannot open every row) is
        // retried: a fixed config and restart sends it.
        let cipher = crate::llm::org_keys::Cipher::from_config(&self.app.config.llm);
        let secret = crate::llm::org_keys::Cipher::open_webhook_secret(
            cipher.as_deref(),
            p.org_id,
            p.webhook_id,
            &secret,
        )
        .map_err(|m| JobError::Retryable(format!("webhook {}: {m}", p.webhook_id)))?;
        // Claimed before the breaker opened (its waiting deliveries were pushed past it): not
        // sent while it is open, retried later.
        if let Some(until) = open_until.filter(|u| *u > self.app.clock.now()) {
            return Err(JobError::RetryAt(
                format!(
                    "webhook {} is failing (its breaker is open until {until}); not sent",
                    p.webhook_id
                ),
                until,
            ));
        }
        let (id, org) = (p.event_id, p.org_id);
        let event = events::get(pool, org, id).await?;
        let event = JobError::when_gone(event, || {
            format!("event {id} of org {org} does not exist (purged?)")
        })?;
        let now = self.app.clock.now().timestamp();
        let attempt = job.job.counted_attempts;
        tokio::select! {
            r = self.sender.send(&url, &secret, &event, attempt, now) => match r {
                Ok(status) => {
                    info!(webhook_id = %p.webhook_id, event_id = p.event_id, status, "webhook delivered");
                    if webhooks::delivered(pool, p.webhook_id).await? {
                        info!(webhook_id = %p.webhook_id, "webhook recovered; its breaker is closed");
                    }
                    Ok(())
                }
                // A destination of the service's own network: dead now, with the reason.
                Err(e @ crate::webhooks::delivery::SendError::Blocked(_)) => Err(JobError::fatal(format_args!(
                    "delivery of event {} to webhook {}: {e}",
                    p.event_id, p.webhook_id
                ))),
                Err(e) => {
                    let now = self.app.clock.now();
                    let open =
                        webhooks::failed(pool, p.webhook_id, now, self.failures_to_open).await?;
                    let msg = format!(
                        "delivery of event {} to webhook {} (attempt {attempt}): {e}",
                        p.event_id, p.webhook_id
                    );
                    match open {
                        Some(until) => {
                            tracing::warn!(webhook_id = %p.webhook_id, %until, "webhook failing: its deliveries wait until the breaker's probe");
                            Err(JobError::RetryAt(msg, until))
                        }
                        None => Err(JobError::Retryable(msg)),
                    }
                }
            },
            _ = job.cancel.cancelled() => Err(JobError::retryable(
                "the lease was lost or the worker stopped during the delivery",
            )),
        }
    }
}
