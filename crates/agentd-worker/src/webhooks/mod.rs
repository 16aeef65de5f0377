//! Webhooks (issue 15): what a subscription may name (`validate_url`, `validate_events`), the
//! body of a delivery (`event_json`, the same shape as `GET /v1/events`), and its signature.
//!
//! A delivery is `POST <url>` with the event as a JSON body and these headers:
//! - `Agentd-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`
//! - `Agentd-Event-Id: <event id>` (at-least-once: the same id can arrive twice; dedupe by it)
//! - `Agentd-Event-Type: <type>`, `Agentd-Delivery-Attempt: <n>`
//!
//! A receiver recomputes the HMAC over the raw body, compares in constant time, and rejects a
//! timestamp further than [`REPLAY_WINDOW_SECS`] from its clock (see [`verify`]).

pub mod delivery;
pub mod guard;
mod hmac;

pub use hmac::hmac_sha256;

use crate::config::Invalid;
use crate::store::events::{EventRow, EventType};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use uuid::Uuid;

/// How far from the receiver's clock a signature's timestamp may be (documented for receivers;
/// [`verify`] enforces it).
pub const REPLAY_WINDOW_SECS: i64 = 300;

/// Longest URL a subscription may name.
pub const MAX_URL_LEN: usize = 2048;

/// Secrets: 16–256 characters.
pub const SECRET_LEN: (usize, usize) = (16, 256);

/// The wire form of an event (`GET /v1/events`, SSE, webhook body; `Event` in the OpenAPI
/// document).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Event {
    /// The cursor: events of an org are read in this order.
    pub id: i64,
    pub org_id: Uuid,
    #[serde(rename = "type")]
    #[schema(value_type = EventType)]
    pub kind: String,
    pub created_at: DateTime<Utc>,
    /// What it is about (a document, approval, suggestion or run), if anything.
    pub subject_id: Option<Uuid>,
    /// The event's details (ids and states; never document text).
    #[schema(value_type = Object)]
    pub payload: Value,
}

impl From<&EventRow> for Event {
    fn from(e: &EventRow) -> Self {
        Event {
            id: e.id,
            org_id: e.org_id,
            kind: e.kind.clone(),
            created_at: e.occurred_at,
            subject_id: e.subject_id,
            payload: e.payload.clone(),
        }
    }
}

/// The wire form of an event as JSON (see [`Event`]).
pub fn event_json(e: &EventRow) -> Value {
    json!(Event::from(e))
}

/// The `Agentd-Signature` header value of `body` sent at unix time `t`.
pub fn signature_header(secret: &str, t: i64, body: &[u8]) -> String {
    format!("t={t},v1={}", hex::encode(sign(secret, t, body)))
}

fn sign(secret: &str, t: i64, body: &[u8]) -> [u8; 32] {
    let mut msg = Vec::with_capacity(body.len() + 12);
    msg.extend_from_slice(t.to_string().as_bytes());
    msg.push(b'.');
    msg.extend_from_slice(body);
    hmac_sha256(secret.as_bytes(), &msg)
}

/// Why a delivery's signature was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the Agentd-Signature header is malformed (want t=<unix seconds>,v1=<hex>)")]
    Malformed,
    #[error("the signature's timestamp is {0} s from now (more than the replay window)")]
    OutsideWindow(i64),
    #[error("no v1 signature matches the body")]
    Mismatch,
}

/// What a receiver does: checks `header` against `body` and `secret` at unix time `now`.
pub fn verify(secret: &str, header: &str, body: &[u8], now: i64) -> Result<(), VerifyError> {
    let mut t = None;
    let mut sigs = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = v.parse::<i64>().ok(),
            Some(("v1", v)) => sigs.push(hex::decode(v).map_err(|_| VerifyError::Malformed)?),
            _ => {}
        }
    }
    let t = t.ok_or(VerifyError::Malformed)?;
    if sigs.is_empty() {
        return Err(VerifyError::Malformed);
    }
    // Both times are the sender's or the caller's: the difference of two i64 may not fit one.
    let skew = now
        .checked_sub(t)
        .map_or(u64::MAX, i64::unsigned_abs)
        .min(i64::MAX as u64) as i64;
    if skew > REPLAY_WINDOW_SECS {
        return Err(VerifyError::OutsideWindow(skew));
    }
    let want = sign(secret, t, body);
    if sigs.iter().any(|s| constant_time_eq(s, &want)) {
        Ok(())
    } else {
        Err(VerifyError::Mismatch)
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The subscription's `url` as a URL (`Invalid` naming `url` otherwise).
pub(crate) fn parse_url(url: &str) -> Result<reqwest::Url, Invalid> {
    reqwest::Url::parse(url)
        .map_err(|e| Invalid::new("url", format!("url is not an absolute URL: {e}")))
}

/// A webhook URL: absolute `http` or `https`, with a host, no user info, no fragment.
pub fn validate_url(url: &str) -> Result<(), Invalid> {
    let bad = |message: String| Err(Invalid::new("url", message));
    if url.len() > MAX_URL_LEN {
        return bad(format!("url must be at most {MAX_URL_LEN} characters"));
    }
    let u = parse_url(url)?;
    if !matches!(u.scheme(), "http" | "https") {
        return bad(format!("url must use http or https (got {:?})", u.scheme()));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return bad("url must name a host".into());
    }
    if !u.username().is_empty() || u.password().is_some() {
        return bad("url must not carry user info (put credentials in the secret)".into());
    }
    if u.fragment().is_some() {
        return bad("url must not have a #fragment".into());
    }
    Ok(())
}

/// Event names of a subscription: 1–20 known types, no duplicates. The error's key is `events`,
/// or `events[i]` for the bad entry.
pub fn validate_events(events: &[String]) -> Result<(), Invalid> {
    let known = || {
        EventType::ALL
            .iter()
            .map(|t| t.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if events.is_empty() {
        let message = format!("events must name at least one of: {}", known());
        return Err(Invalid::new("events", message));
    }
    for (i, e) in events.iter().enumerate() {
        let bad = |message: String| Err(Invalid::new(format!("events[{i}]"), message));
        if EventType::parse(e).is_none() {
            return bad(format!("unknown event type {e:?} (known: {})", known()));
        }
        if events.iter().take(i).any(|x| x == e) {
            return bad(format!("event type {e:?} is listed twice"));
        }
    }
    Ok(())
}

/// A secret: 16–256 printable ASCII characters.
pub fn validate_secret(secret: &str) -> Result<(), Invalid> {
    let n = secret.chars().count();
    let (min, max) = SECRET_LEN;
    if n < min || n > max {
        let message = format!("secret must be {min}–{max} characters (got {n})");
        return Err(Invalid::new("secret", message));
    }
    if !secret.chars().all(|c| c.is_ascii_graphic()) {
        let message = "secret must be printable ASCII without spaces";
        return Err(Invalid::new("secret", message));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_round_trips_and_rejects_changes() {
        let h = signature_header("0123456789abcdef", 1_700_000_000, b"{\"id\":1}");
        assert!(h.starts_with("t=1700000000,v1="));
        assert_eq!(
            verify("0123456789abcdef", &h, b"{\"id\":1}", 1_700_000_100),
            Ok(())
        );
        assert_eq!(
            verify("0123456789abcdef", &h, b"{\"id\":2}", 1_700_000_100),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify("another-secret-xx", &h, b"{\"id\":1}", 1_700_000_100),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify("0123456789abcdef", &h, b"{\"id\":1}", 1_700_000_301),
            Err(VerifyError::OutsideWindow(301))
        );
        assert_eq!(
            verify("0123456789abcdef", "v1=00", b"", 0),
            Err(VerifyError::Malformed)
        );
        // A hostile timestamp neither overflows nor wraps into the window (review L6).
        let min = format!("t={},v1=00", i64::MIN);
        assert_eq!(
            verify("0123456789abcdef", &min, b"", 1_700_000_000),
            Err(VerifyError::OutsideWindow(i64::MAX))
        );
    }

    #[test]
    fn urls_and_events_are_checked() {
        assert!(validate_url("https://example.com/hook").is_ok());
        assert!(validate_url("http://127.0.0.1:8080/x?y=1").is_ok());
        let refused = |url: &str| validate_url(url).unwrap_err();
        assert!(refused("ftp://example.com").message.contains("http"));
        assert!(refused("/relative").message.contains("absolute"));
        assert!(
            refused("https://u:p@example.com")
                .message
                .contains("user info")
        );
        assert_eq!(refused("ftp://example.com").key, "url");
        assert!(validate_events(&["run.failed".into()]).is_ok());
        assert_eq!(validate_events(&[]).unwrap_err().key, "events");
        let e = validate_events(&["run.failed".into(), "run.failde".into()]).unwrap_err();
        assert_eq!(e.key, "events[1]");
        assert!(e.message.contains("run.failde"));
        assert_eq!(
            validate_events(&["run.failed".into(), "run.failed".into()])
                .unwrap_err()
                .key,
            "events[1]"
        );
    }
}
