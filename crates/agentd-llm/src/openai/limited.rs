//! The openai provider's HTTP transport: the fleet-wide limiter (`llm::limits`), if any, and the
//! bound on response bodies, below async-openai's retry layer.

use super::OpenAiProvider;
use crate::limits::{FleetLimiter, LimitedService};
use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::middleware::retry::OpenAIRetryLayer;
use std::sync::Arc;

impl OpenAiProvider {
    /// Sends every HTTP attempt (first tries and the transport's 429/5xx retries alike) through
    /// the fleet-wide `limiter`; the retry layer is async-openai's own, as without a limiter.
    pub fn with_limiter(mut self, limiter: Arc<FleetLimiter>) -> Self {
        self.limiter = Some(limiter);
        self.client = transport(&self);
        self
    }

    /// The same provider with another bound on one response body (`llm.max_response_bytes`).
    pub fn with_max_response_bytes(mut self, bytes: usize) -> Self {
        self.max_response_bytes = bytes;
        self.client = transport(&self);
        self
    }
}

/// The client of `p`: its retry layer over its transport.
pub(super) fn transport(p: &OpenAiProvider) -> Client<OpenAIConfig> {
    let config = OpenAIConfig::new()
        .with_api_base(p.settings.base_url.clone())
        .with_api_key(p.settings.api_key.clone());
    let service = tower::ServiceBuilder::new()
        .layer(OpenAIRetryLayer::default())
        .service(LimitedService::new(
            crate::limits::provider_http_client(),
            p.limiter.clone(),
            p.max_response_bytes,
        ));
    Client::with_config(config).with_http_service(service)
}
