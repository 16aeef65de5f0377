//! `webhook_delivery`: sends one event to one subscription (`{org_id, event_id, webhook_id}`,
//! enqueued by the dispatcher trigger of migration 0042 in the event's own transaction). A
//! failed send is retried with the job file's backoff; after `max_attempts` the job is `dead`
//! with the last error (`agentd jobs list --kind webhook_delivery`). A subscription deleted in
//! the meantime ends the job without sending.

use super::parse_payload;
use crate::app::App;
use crate::queue::JobError;
use crate::queue::worker::{JobContext, JobHandler};
use crate::store::{events, webhooks};
use crate::webhooks::delivery::Sender;
use serde::Deserialize;
use std::time::Duration;
use tracing::info;
use uuid::Uuid;

/// The payload.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Payload {
    pub org_id: Uuid,
    pub event_id: i64,
    pub webhook_id: Uuid,
}

/// The handler.
pub struct WebhookDelivery {
    pub app: App,
    pub sender: Sender,
}

impl WebhookDelivery {
    /// The handler with the job file's request timeout.
    pub fn new(app: &App) -> Self {
        let secs = app
            .catalog
            .get("webhook_delivery")
            .and_then(|s| s.webhook.as_ref())
            .map_or(10, |w| w.request_timeout_secs);
        Self {
            app: app.clone(),
            sender: Sender::new(
                Duration::from_secs(secs),
                app.config.webhooks.allow_private_networks,
            ),
        }
    }
}

#[async_trait::async_trait]
impl JobHandler for WebhookDelivery {
    async fn handle(&self, job: JobContext) -> Result<(), JobError> {
        let p: Payload = parse_payload("webhook_delivery", &job.job.payload)?;
        let pool = &self.app.pool;
        let Some((url, secret)) = webhooks::target(pool, p.org_id, p.webhook_id).await? else {
            info!(webhook_id = %p.webhook_id, event_id = p.event_id, "the subscription was deleted; delivery dropped");
            return Ok(());
        };
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
                    Ok(())
                }
                // A destination of the service's own network: dead now, with the reason.
                Err(e @ crate::webhooks::delivery::SendError::Blocked(_)) => Err(JobError::fatal(format_args!(
                    "delivery of event {} to webhook {}: {e}",
                    p.event_id, p.webhook_id
                ))),
                Err(e) => Err(JobError::retryable(format_args!(
                    "delivery of event {} to webhook {} (attempt {attempt}): {e}",
                    p.event_id, p.webhook_id
                ))),
            },
            _ = job.cancel.cancelled() => Err(JobError::retryable(
                "the lease was lost or the worker stopped during the delivery",
            )),
        }
    }
}
