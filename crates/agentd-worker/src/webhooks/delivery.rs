//! One delivery: `POST` the event to the subscription's URL, signed. A 2xx answer is delivered;
//! anything else (another status, a timeout, a refused connection) is an error the queue retries
//! with backoff until the job's attempts run out (`dead`, with the last error). A destination the
//! SSRF guard refuses (`guard.rs`) is `SendError::Blocked`, never sent.

use super::guard::{GuardedResolver, Policy};
use super::{event_json, signature_header};
use crate::store::events::EventRow;
use std::time::Duration;

/// An HTTP client for deliveries (one per process: connections are reused).
#[derive(Clone)]
pub struct Sender {
    client: reqwest::Client,
    /// The SSRF guard (`[webhooks]`).
    guard: Policy,
}

/// Why a delivery did not land.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("the receiver answered HTTP {0}")]
    Status(u16),
    #[error("the request failed: {0}")]
    Request(String),
    /// The URL is, or resolves to, an address of the service's own network.
    #[error("not sent: {0}")]
    Blocked(String),
}

impl Sender {
    /// A sender whose requests give up after `timeout`; redirects are not followed (a
    /// subscription names the final URL). Unless `allow_private_networks`, every name is
    /// resolved by the guard's resolver and no proxy is used (a proxy would resolve it instead).
    /// The other `[webhooks]` settings are their defaults.
    pub fn new(timeout: Duration, allow_private_networks: bool) -> Self {
        let config = crate::config::WebhooksConfig {
            allow_private_networks,
            ..Default::default()
        };
        Self::with_connect_timeout(timeout, Duration::from_secs(2), Policy::new(&config))
    }

    /// [`Sender::new`] with the guard `guard`, giving up on a receiver that has not accepted
    /// the connection within `connect` (a black-holed address fails fast instead of holding a
    /// slot for `timeout`). Unless the guard is off, every name is resolved by its resolver and
    /// no proxy is used.
    pub fn with_connect_timeout(timeout: Duration, connect: Duration, guard: Policy) -> Self {
        let mut b = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(connect.min(timeout))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("agentd-webhooks/", env!("CARGO_PKG_VERSION")));
        if !guard.is_off() {
            b = b.dns_resolver(GuardedResolver(guard.clone())).no_proxy();
        }
        let client = b.build().expect("a reqwest client builds");
        Self { client, guard }
    }

    /// Sends `event` to `url`, signed with `secret` at unix time `now` (attempt `attempt`).
    pub async fn send(
        &self,
        url: &str,
        secret: &str,
        event: &EventRow,
        attempt: i32,
        now: i64,
    ) -> Result<u16, SendError> {
        if !self.guard.is_off() {
            let u = reqwest::Url::parse(url).map_err(|e| SendError::Request(e.to_string()))?;
            self.guard
                .check_ip_literal(&u)
                .map_err(|e| SendError::Blocked(e.to_string()))?;
        }
        let body = serde_json::to_vec(&event_json(event)).expect("JSON serialises");
        let res = self
            .client
            .post(url)
            .header("Content-Type", "application/json")
            .header("Agentd-Signature", signature_header(secret, now, &body))
            .header("Agentd-Event-Id", event.id.to_string())
            .header("Agentd-Event-Type", event.kind.as_str())
            .header("Agentd-Delivery-Attempt", attempt.to_string())
            .body(body)
            .send()
            .await
            .map_err(|e| match super::guard::blocked_in(&e) {
                Some(b) => SendError::Blocked(b.to_string()),
                None => SendError::Request(without_url(e)),
            })?;
        let status = res.status().as_u16();
        if res.status().is_success() {
            Ok(status)
        } else {
            Err(SendError::Status(status))
        }
    }
}

/// The error's text without the URL (a URL may carry a token in its query), with its causes.
fn without_url(e: reqwest::Error) -> String {
    crate::error_chain(&e.without_url())
}
