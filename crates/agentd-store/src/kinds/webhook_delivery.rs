//! `webhook_delivery`: one event sent to one subscription (handler: `jobs/webhook_delivery.rs`;
//! enqueued in SQL by the dispatcher trigger of migration 0042).

use super::{JobKind, Unique};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The kind.
pub struct WebhookDelivery;

/// The payload: `{org_id, event_id, webhook_id}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Payload {
    pub org_id: Uuid,
    pub event_id: i64,
    pub webhook_id: Uuid,
}

impl JobKind for WebhookDelivery {
    const NAME: &'static str = "webhook_delivery";
    type Payload = Payload;

    /// None: the trigger inserts one job per event and subscription.
    fn unique(_: &Payload) -> Option<Unique> {
        None
    }
}
