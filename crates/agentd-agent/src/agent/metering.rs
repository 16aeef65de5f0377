//! Every provider call of a run counted, also when the server sends no `usage` (some vLLM and
//! Ollama stream setups): a provider wrapper that fills in tokenizer counts over the request and
//! the answer and marks the run `tokens_estimated`. It wraps the run's provider once, so the
//! loop's calls and the calls tools make (run_extraction) are covered alike.

use crate::llm::{CompletionRequest, CompletionResponse, LlmError, LlmProvider, SharedProvider};
use crate::store::agent_loop;
use sqlx::PgPool;
use std::sync::Arc;
use tracing::warn;
use uuid::Uuid;

/// The run's provider with usage estimated where missing.
pub struct Metered {
    inner: SharedProvider,
    pool: PgPool,
    run_id: Uuid,
}

impl Metered {
    /// Wraps `inner` for run `run_id`.
    pub fn wrap(inner: SharedProvider, pool: PgPool, run_id: Uuid) -> SharedProvider {
        Arc::new(Self {
            inner,
            pool,
            run_id,
        })
    }
}

#[async_trait::async_trait]
impl LlmProvider for Metered {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn endpoint(&self, model: &str) -> Option<crate::llm::schema_output::Endpoint<'_>> {
        self.inner.endpoint(model)
    }

    fn model_for<'a>(&'a self, requested: &'a str) -> &'a str {
        self.inner.model_for(requested)
    }

    async fn complete(&self, req: CompletionRequest) -> Result<CompletionResponse, LlmError> {
        let mut resp = self.inner.complete(req.clone()).await?;
        if resp.usage.total() == 0 {
            resp.usage = crate::llm::tokens::estimate(&req, &resp.message);
            if let Err(e) = agent_loop::mark_estimated(&self.pool, self.run_id).await {
                warn!(error = %e, "could not mark the run's tokens as estimated");
            }
        }
        Ok(resp)
    }
}
