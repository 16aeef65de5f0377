//! Provider limits across the fleet (issue 18): requests and tokens per minute toward a
//! provider endpoint, enforced for every worker process through one row in the database
//! (`agentd_provider_limits`, migration 0055), and a 429 with `Retry-After` that stops the
//! endpoint for everyone.
//!
//! - **Where.** Below async-openai's retry layer, around each HTTP attempt
//!   ([`LimitedService`]): a retried 429 or 5xx passes the limiter again, like the first try.
//! - **Requests** (`llm.requests_per_minute`): grants are at least 60/rpm seconds apart across
//!   the fleet (a bucket of one request refilled by time), so no minute ever holds more than
//!   rpm requests. The price is no burst: N workers starting together wait their turn.
//! - **Tokens** (`llm.tokens_per_minute`): each request is charged an estimate before it is
//!   sent (prompt bytes / 4 + its `max_completion_tokens`, the way OpenAI counts toward its
//!   limit); the bucket goes into debt by it, and the next request waits until the debt is
//!   repaid at tpm/60 per second. A minute holds at most tpm plus one request's estimate.
//! - **429.** The response's `Retry-After` (seconds; 1 s when absent) blocks the endpoint for
//!   every process and empties the buckets; the retry layer then retries through the limiter.
//! - **Per-org shares** (`llm.org_share_percent`, issue 30): while another org's calls wait
//!   for the bucket, an org's grants are spaced as if it had only its share of the rate (and of
//!   the tokens), so one busy org cannot take the whole fleet bucket and starve the others;
//!   calling alone, an org has the whole rate (`agentd_provider_org_shares`, migration 0077).
//!   The org is the one of the run making the call ([`for_org`]); calls outside a run are the
//!   org `''`.
//! - **Time** is the database's (`clock_timestamp()`), the one clock the processes share.
//! - **Failure.** If the database cannot be asked, the request is not sent (a retryable error):
//!   the limit is never exceeded because the bookkeeping failed.

use async_openai::error::OpenAIError;
use async_openai::middleware::HttpRequestFactory;
use sqlx::PgPool;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OnceCell;

/// What a call that could not ask the fleet limiter fails with (inside async-openai's
/// `InvalidArgument`, the only error its middleware can return): the request was not sent, and
/// the failure is retryable — a database blip must not kill runs (review N5).
pub const LIMITER_UNREACHABLE: &str = "the database could not be asked";

pub use crate::config::DEFAULT_ORG_SHARE_PERCENT;

tokio::task_local! {
    /// The org whose run makes the provider calls of this task (see [`for_org`]).
    static CALL_ORG: String;
}

/// Runs `f` with its provider calls counted against `org`'s share of the fleet limits.
pub async fn for_org<F: Future>(org: uuid::Uuid, f: F) -> F::Output {
    CALL_ORG.scope(org.to_string(), f).await
}

/// The org of the calls of this task (`''`: none, e.g. a call outside a run).
fn call_org() -> String {
    CALL_ORG.try_with(Clone::clone).unwrap_or_default()
}

/// The fleet-wide limiter of one provider endpoint.
#[derive(Debug)]
pub struct FleetLimiter {
    pool: PgPool,
    key: String,
    rpm: u32,
    tpm: u64,
    /// One org's share of the rate while others wait (1.0: no shares).
    org_share: f64,
    ready: OnceCell<()>,
}

impl FleetLimiter {
    /// A limiter for `key` (the endpoint), or None when both limits are 0 (off); each org's
    /// share is [`DEFAULT_ORG_SHARE_PERCENT`].
    pub fn new(pool: PgPool, key: &str, rpm: u32, tpm: u64) -> Option<Arc<Self>> {
        Self::with_org_share(pool, key, rpm, tpm, DEFAULT_ORG_SHARE_PERCENT)
    }

    /// [`FleetLimiter::new`] with each org's share of the rate while others wait, in percent
    /// (100: no shares; `llm.org_share_percent`).
    pub fn with_org_share(
        pool: PgPool,
        key: &str,
        rpm: u32,
        tpm: u64,
        org_share_percent: u8,
    ) -> Option<Arc<Self>> {
        (rpm > 0 || tpm > 0).then(|| {
            Arc::new(Self {
                pool,
                key: key.to_string(),
                rpm,
                tpm,
                org_share: f64::from(org_share_percent.clamp(1, 100)) / 100.0,
                ready: OnceCell::new(),
            })
        })
    }

    /// The endpoint this limiter guards.
    pub fn key(&self) -> &str {
        &self.key
    }

    async fn ensure(&self) -> sqlx::Result<()> {
        self.ready
            .get_or_try_init(|| async {
                crate::store::provider_limits::ensure(&self.pool, &self.key, self.rpm, self.tpm)
                    .await
            })
            .await
            .map(|_| ())
    }

    /// Waits until the fleet may send one request costing `tokens`; returns the time waited.
    pub async fn acquire(&self, tokens: u64) -> sqlx::Result<Duration> {
        self.ensure().await?;
        let started = std::time::Instant::now();
        let org = call_org();
        loop {
            let (ok, wait) = crate::store::provider_limits::take_for_org(
                &self.pool,
                &self.key,
                &org,
                tokens as f64,
                self.org_share,
            )
            .await?;
            if ok {
                let waited = started.elapsed();
                metrics::histogram!("agentd_provider_limit_wait_seconds", "endpoint" => self.key.clone())
                    .record(waited.as_secs_f64());
                return Ok(waited);
            }
            // Ask again when the bucket says; a little jitter keeps waiters from arriving at
            // the same instant, and at most 5 s so a changed limit is seen.
            let jitter = Duration::from_millis(rand::random::<u64>() % 15);
            tokio::time::sleep(Duration::from_secs_f64(wait.clamp(0.001, 5.0)) + jitter).await;
        }
    }

    /// A 429 from the endpoint: blocks it for everyone for `retry_after`.
    pub async fn rate_limited(&self, retry_after: Duration) -> sqlx::Result<()> {
        self.ensure().await?;
        crate::store::provider_limits::block(&self.pool, &self.key, retry_after.as_secs_f64()).await
    }
}

/// Publishes the fleet-wide figures of every endpoint (from the table) as metrics.
pub async fn publish_metrics(pool: &PgPool) -> sqlx::Result<()> {
    for r in crate::store::provider_limits::list(pool).await? {
        let e = r.key.clone();
        metrics::gauge!("agentd_provider_limit_requests_per_minute", "endpoint" => e.clone())
            .set(r.requests_per_minute as f64);
        metrics::gauge!("agentd_provider_limit_tokens_per_minute", "endpoint" => e.clone())
            .set(r.tokens_per_minute as f64);
        metrics::counter!("agentd_provider_limit_granted_total", "endpoint" => e.clone())
            .absolute(r.granted as u64);
        metrics::counter!("agentd_provider_limit_waits_total", "endpoint" => e.clone())
            .absolute(r.throttled as u64);
        metrics::counter!("agentd_provider_limit_rate_limited_total", "endpoint" => e.clone())
            .absolute(r.rate_limited as u64);
        metrics::gauge!("agentd_provider_limit_blocked_seconds", "endpoint" => e)
            .set(r.blocked_secs);
    }
    Ok(())
}

/// `agentd status` lines for the endpoints with limits (none: nothing).
pub fn status_lines(rows: &[crate::store::provider_limits::LimitRow]) -> Vec<String> {
    let mut out = Vec::new();
    if rows.is_empty() {
        return out;
    }
    out.push("provider limits (fleet-wide):".to_string());
    for r in rows {
        let per = |n: i64| if n > 0 { n.to_string() } else { "-".into() };
        let blocked = if r.blocked_secs > 0.0 {
            format!(", blocked {:.1}s more after a 429", r.blocked_secs)
        } else {
            String::new()
        };
        out.push(format!(
            "  {}: {} req/min, {} tokens/min; {} granted, {} waits, {} 429s{blocked}",
            r.key,
            per(r.requests_per_minute.into()),
            per(r.tokens_per_minute),
            r.granted,
            r.throttled,
            r.rate_limited
        ));
    }
    out
}

/// The token estimate of one request body: its bytes / 4 plus the output it may generate.
pub fn estimate_tokens(body: &[u8]) -> u64 {
    let max_out = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            v.get("max_completion_tokens")
                .or_else(|| v.get("max_tokens"))
                .and_then(|m| m.as_u64())
        })
        .unwrap_or(0);
    (body.len() as u64).div_ceil(4) + max_out
}

/// `Retry-After` in seconds (HTTP dates are not used by model servers); 1 s when absent.
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Duration {
    headers
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(|s| Duration::from_secs_f64(s.min(600.0)))
        .unwrap_or(Duration::from_secs(1))
}

/// The key of an endpoint's limits: its base URL without userinfo, query or fragment (a token
/// in them would be published in `/metrics` labels and `agentd status`; review L7).
pub fn endpoint_key(base_url: &str) -> String {
    let trimmed = base_url.trim().trim_end_matches('/');
    match reqwest::Url::parse(trimmed) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            u.as_str().trim_end_matches('/').to_string()
        }
        Err(_) => trimmed.to_string(),
    }
}

#[cfg(test)]
mod key_tests {
    #[test]
    fn the_key_carries_no_credentials() {
        assert_eq!(
            super::endpoint_key("https://user:pw@api.example.com/v1/?key=sk-1#x"),
            "https://api.example.com/v1"
        );
        assert_eq!(
            super::endpoint_key("http://localhost:8000/v1/"),
            "http://localhost:8000/v1"
        );
    }
}

/// The HTTP client every provider sends through: redirects are not followed (review D10).
/// reqwest drops only `Authorization`, `Cookie` and `Proxy-Authorization` on a redirect to
/// another host, never Anthropic's `x-api-key`, and a 307 or 308 resends the body; a provider
/// endpoint that redirects gets its 3xx back as the failure instead.
pub fn provider_http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        // The same condition `reqwest::Client::new()` panics on (no TLS backend).
        .expect("a reqwest client builds")
}

/// What a provider's failure says of a 3xx answer, which [`provider_http_client`] does not
/// follow (the adapters read it as a non-retryable failure naming the setting).
pub const REDIRECT_NOT_FOLLOWED: &str = "the server answered with a redirect, which is not \
     followed (the request would carry the API key to wherever it points): set the provider's \
     base_url to the URL it redirects to";

/// What a response whose body passed `llm.max_response_bytes` fails with (in the body
/// stream's error, which the adapter reads as a non-retryable failure naming the setting).
pub const BODY_TOO_LARGE: &str = "the response body passed llm.max_response_bytes";

/// The HTTP transport of the openai provider: the fleet limiter (if any) in front of each
/// attempt, and a bound on every response body, streamed or not — read through a counter that
/// fails the body past `max_body` bytes, so a hostile or broken server cannot make the worker
/// buffer gigabytes (review N15).
#[derive(Clone)]
pub struct LimitedService {
    client: reqwest::Client,
    limiter: Option<Arc<FleetLimiter>>,
    max_body: usize,
}

impl LimitedService {
    pub fn new(
        client: reqwest::Client,
        limiter: Option<Arc<FleetLimiter>>,
        max_body: usize,
    ) -> Self {
        Self {
            client,
            limiter,
            max_body,
        }
    }
}

/// A body chunk, or why reading stopped (the transport's error, or [`BODY_TOO_LARGE`]).
pub type BodyChunk = Result<bytes::Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// `response`'s body as chunks read through a byte counter: past `max` bytes the stream fails
/// with [`BODY_TOO_LARGE`]; a declared `Content-Length` past it is refused before anything is
/// read (`Err` with the message). Every HTTP provider reads its bodies through this.
pub fn bounded_body(
    response: reqwest::Response,
    max: usize,
) -> Result<impl futures::Stream<Item = BodyChunk> + Send + 'static, String> {
    use futures::StreamExt;
    let too_large = move |n: u64| {
        std::io::Error::other(format!(
            "{BODY_TOO_LARGE} ({max} bytes; the server sent {n} or more)"
        ))
    };
    if let Some(n) = response.content_length().filter(|n| *n > max as u64) {
        return Err(too_large(n).to_string());
    }
    let mut seen = 0usize;
    Ok(response.bytes_stream().map(move |chunk| {
        let chunk = chunk.map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)?;
        seen = seen.saturating_add(chunk.len());
        if seen > max {
            return Err(
                Box::new(too_large(seen as u64)) as Box<dyn std::error::Error + Send + Sync>
            );
        }
        Ok(chunk)
    }))
}

/// `response` with its body read through [`bounded_body`] (what async-openai reads).
fn bounded(response: reqwest::Response, max: usize) -> Result<reqwest::Response, OpenAIError> {
    let status = response.status();
    let version = response.version();
    let headers = response.headers().clone();
    let body = bounded_body(response, max).map_err(OpenAIError::InvalidArgument)?;
    let mut built = http::Response::builder().status(status).version(version);
    if let Some(h) = built.headers_mut() {
        *h = headers;
    }
    built
        .body(reqwest::Body::wrap_stream(body))
        .map(reqwest::Response::from)
        .map_err(|e| {
            OpenAIError::InvalidArgument(format!("could not bound the response body: {e}"))
        })
}

type HttpFuture = Pin<Box<dyn Future<Output = Result<reqwest::Response, OpenAIError>> + Send>>;

impl tower::Service<HttpRequestFactory> for LimitedService {
    type Response = reqwest::Response;
    type Error = OpenAIError;
    type Future = HttpFuture;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, factory: HttpRequestFactory) -> Self::Future {
        let (client, limiter, max) = (self.client.clone(), self.limiter.clone(), self.max_body);
        Box::pin(async move {
            let request = factory.build().await?;
            if let Some(limiter) = &limiter {
                let tokens = request
                    .body()
                    .and_then(|b| b.as_bytes())
                    .map(estimate_tokens)
                    .unwrap_or(0);
                limiter.acquire(tokens).await.map_err(|e| {
                    OpenAIError::InvalidArgument(format!(
                        "provider limit of {}: {LIMITER_UNREACHABLE}: {e}",
                        limiter.key()
                    ))
                })?;
            }
            let response = client
                .execute(request)
                .await
                .map_err(OpenAIError::Reqwest)?;
            if let Some(limiter) = &limiter
                && response.status().as_u16() == 429
            {
                let wait = retry_after(response.headers());
                if let Err(e) = limiter.rate_limited(wait).await {
                    tracing::warn!(error = %e, endpoint = limiter.key(), "could not record a 429 for the fleet");
                }
            }
            if response.status().is_redirection() {
                return Err(OpenAIError::InvalidArgument(format!(
                    "HTTP {}: {REDIRECT_NOT_FOLLOWED}",
                    response.status().as_u16()
                )));
            }
            bounded(response, max)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_count_the_prompt_and_the_output_allowance() {
        let body = br#"{"model":"m","messages":[],"max_completion_tokens":100}"#;
        assert_eq!(estimate_tokens(body), (body.len() as u64).div_ceil(4) + 100);
        assert_eq!(estimate_tokens(b"not json"), 2);
    }

    #[test]
    fn retry_after_reads_seconds_and_defaults_to_one() {
        let mut h = reqwest::header::HeaderMap::new();
        assert_eq!(retry_after(&h), Duration::from_secs(1));
        h.insert(reqwest::header::RETRY_AFTER, "2.5".parse().unwrap());
        assert_eq!(retry_after(&h), Duration::from_millis(2500));
        h.insert(reqwest::header::RETRY_AFTER, "soon".parse().unwrap());
        assert_eq!(retry_after(&h), Duration::from_secs(1));
    }
}
