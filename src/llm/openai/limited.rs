//! The openai provider behind the fleet-wide limiter (`llm::limits`).

use super::OpenAiProvider;
use crate::llm::limits::{FleetLimiter, LimitedService};
use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::middleware::retry::OpenAIRetryLayer;
use std::sync::Arc;

impl OpenAiProvider {
    /// Sends every HTTP attempt (first tries and the transport's 429/5xx retries alike) through
    /// the fleet-wide `limiter`; the retry layer is async-openai's own, as without a limiter.
    pub fn with_limiter(mut self, limiter: Arc<FleetLimiter>) -> Self {
        let config = OpenAIConfig::new()
            .with_api_base(self.settings.base_url.clone())
            .with_api_key(self.settings.api_key.clone());
        let service = tower::ServiceBuilder::new()
            .layer(OpenAIRetryLayer::default())
            .service(LimitedService::new(reqwest::Client::new(), limiter));
        self.client = Client::with_config(config).with_http_service(service);
        self
    }
}
