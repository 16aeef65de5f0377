//! Building one entry's provider from its `[[llm.providers]]` entry: the match on its kind is
//! the one place a kind is constructed.

use crate::config::{LlmConfig, ProviderEntry, ProviderKind};
use crate::{SharedProvider, anthropic, limits, offline, openai};
use std::sync::Arc;
use std::time::Duration;

/// The provider of entry `e`, calling with `key`. `pool` carries the fleet-wide limits of the
/// entry (none for an org's own key: its quota is the org's, not the operator's).
pub(super) fn build(
    e: &ProviderEntry,
    key: &str,
    llm: &LlmConfig,
    pool: Option<&sqlx::PgPool>,
) -> SharedProvider {
    match e.kind {
        ProviderKind::OpenAi => {
            let base_url = base_url_or(e, "https://api.openai.com/v1");
            let mut p = openai::OpenAiProvider::new(openai::OpenAiSettings {
                base_url: base_url.clone(),
                api_key: key.to_string(),
                timeout: Duration::from_secs(
                    e.request_timeout_secs.unwrap_or(llm.request_timeout_secs),
                ),
                max_retries: e.max_retries.unwrap_or(llm.max_retries),
                stream: e.stream.unwrap_or(llm.stream),
            })
            .with_max_stream_bytes(llm.max_stream_bytes)
            .with_max_response_bytes(llm.max_response_bytes);
            if let Some(limiter) = fleet_limiter(e, &base_url, llm, pool) {
                p = p.with_limiter(limiter);
            }
            Arc::new(p)
        }
        ProviderKind::Offline => Arc::new(offline::OfflineProvider {
            latency: Duration::from_millis(llm.offline_latency_ms),
        }),
        ProviderKind::Anthropic => {
            let base_url = base_url_or(e, anthropic::DEFAULT_BASE_URL);
            let mut p = anthropic::AnthropicProvider::new(anthropic::AnthropicSettings {
                base_url: base_url.clone(),
                api_key: key.to_string(),
                timeout: Duration::from_secs(
                    e.request_timeout_secs.unwrap_or(llm.request_timeout_secs),
                ),
                max_retries: e.max_retries.unwrap_or(llm.max_retries),
                stream: e.stream.unwrap_or(llm.stream),
                max_stream_bytes: llm.max_stream_bytes,
                max_response_bytes: llm.max_response_bytes,
            });
            if let Some(limiter) = fleet_limiter(e, &base_url, llm, pool) {
                p = p.with_limiter(limiter);
            }
            Arc::new(p)
        }
    }
}

/// The entry's base URL, or `default` when it names none.
fn base_url_or(e: &ProviderEntry, default: &str) -> String {
    if e.base_url.trim().is_empty() {
        default.to_string()
    } else {
        e.base_url.clone()
    }
}

/// The fleet-wide limiter of the entry's endpoint, if it sets limits and a pool carries them.
fn fleet_limiter(
    e: &ProviderEntry,
    base_url: &str,
    llm: &LlmConfig,
    pool: Option<&sqlx::PgPool>,
) -> Option<Arc<limits::FleetLimiter>> {
    limits::FleetLimiter::with_org_share(
        pool?.clone(),
        &limits::endpoint_key(base_url),
        e.requests_per_minute,
        e.tokens_per_minute,
        llm.org_share_percent,
    )
}
