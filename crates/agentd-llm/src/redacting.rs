//! The redaction boundary (`pii`) around a provider: a provider that redacts what goes out and
//! rehydrates what comes back, and the provider a run or a decision talks to.

use super::{Block, CompletionRequest, CompletionResponse, LlmError, LlmProvider, SharedProvider};
use crate::pii::{PiiSettings, Vault};
use sqlx::PgPool;
use std::sync::Arc;
use uuid::Uuid;

/// The provider a run talks to: `inner` behind the run's redaction boundary when the service
/// (`settings`) and the org have redaction on (recorded on the run), else `inner` itself; with
/// the run's table, which its audit rows are redacted with too (review N10).
pub async fn provider_for_run(
    settings: &PiiSettings,
    pool: &PgPool,
    org_id: Uuid,
    run_id: Uuid,
    inner: SharedProvider,
) -> sqlx::Result<(SharedProvider, Option<Arc<Vault>>)> {
    if !settings.enabled || !crate::store::pii::org_redacts(pool, org_id).await? {
        return Ok((inner, None));
    }
    crate::store::pii::mark_run_redacted(pool, run_id).await?;
    let vault = Arc::new(
        Vault::for_run(
            pool.clone(),
            org_id,
            run_id,
            settings.extra_ids.as_ref().clone(),
        )
        .await?,
    );
    let provider = Arc::new(RedactingProvider::new(inner, vault.clone()));
    Ok((provider, Some(vault)))
}

/// For a call outside a run (a person approving a proposed `run_extraction`): `inner` behind
/// an in-memory table when `settings` and the org have redaction on.
pub async fn provider_for_decision(
    settings: &PiiSettings,
    pool: &PgPool,
    org_id: Uuid,
    inner: SharedProvider,
) -> sqlx::Result<SharedProvider> {
    if !settings.enabled || !crate::store::pii::org_redacts(pool, org_id).await? {
        return Ok(inner);
    }
    let vault = Vault::in_memory(settings.extra_ids.as_ref().clone());
    Ok(Arc::new(RedactingProvider::new(inner, Arc::new(vault))))
}

/// Wraps a provider for one run (or one decision): requests leave with tokens in place of
/// personal data; answers come back with the real values.
pub struct RedactingProvider {
    inner: SharedProvider,
    vault: Arc<Vault>,
}

impl RedactingProvider {
    /// `inner` behind the redaction boundary of `vault`.
    pub fn new(inner: SharedProvider, vault: Arc<Vault>) -> Self {
        Self { inner, vault }
    }

    /// The outgoing request with every message redacted, and the strings of the tools' specs
    /// and of `response_format` (an extraction's JSON Schema may carry values a person or a
    /// model wrote into a description, an enum or a const: review N9). Nothing in those is
    /// rehydrated back; the answer's values are, as every answer's.
    pub fn redact_request(&self, mut req: CompletionRequest) -> CompletionRequest {
        self.escape_token_literals(&req);
        if let Some(rf) = &req.response_format {
            req.response_format = Some(self.vault.redact_strings(rf));
        }
        for t in &mut req.tools {
            t.description = self.vault.redact(&t.description);
            t.parameters = self.vault.redact_strings(&t.parameters);
        }
        for m in &mut req.messages {
            for b in &mut m.content {
                match b {
                    Block::Text { text } => *text = self.vault.redact(text),
                    Block::ToolUse { arguments, .. } => {
                        *arguments = self.redact_maybe_json(arguments)
                    }
                    Block::ToolResult { content, .. } => *content = self.redact_maybe_json(content),
                }
            }
        }
        req
    }

    /// Token-shaped strings already in the request become values of the table (review L1,
    /// [`Vault::escape_token_literals`]): everything that is redacted below, read as text (a
    /// token has no character JSON escapes, so the serialised form shows the same ones).
    fn escape_token_literals(&self, req: &CompletionRequest) {
        let v = &self.vault;
        if let Some(rf) = &req.response_format {
            v.escape_token_literals(&rf.to_string());
        }
        for t in &req.tools {
            v.escape_token_literals(&t.description);
            v.escape_token_literals(&t.parameters.to_string());
        }
        for m in &req.messages {
            for b in &m.content {
                match b {
                    Block::Text { text } => v.escape_token_literals(text),
                    Block::ToolUse { arguments: s, .. } | Block::ToolResult { content: s, .. } => {
                        // As JSON they leave re-serialised: a `\u0050ERSON_1` goes as `PERSON_1`.
                        match serde_json::from_str::<serde_json::Value>(s) {
                            Ok(json) => v.escape_token_literals(&json.to_string()),
                            Err(_) => v.escape_token_literals(s),
                        }
                    }
                }
            }
        }
    }

    /// JSON text is redacted value by value (escaped newlines would hide labels from the
    /// rules); anything else as text.
    fn redact_maybe_json(&self, text: &str) -> String {
        let t = text.trim_start();
        if (t.starts_with('{') || t.starts_with('['))
            && let Ok(v) = serde_json::from_str::<serde_json::Value>(text)
        {
            return self.vault.redact_json(&v).to_string();
        }
        self.vault.redact(text)
    }

    /// The answer with real values back in place of tokens.
    pub fn rehydrate_response(&self, mut resp: CompletionResponse) -> CompletionResponse {
        for b in &mut resp.message.content {
            match b {
                Block::Text { text } => *text = self.vault.rehydrate(text),
                Block::ToolUse { arguments, .. } => {
                    *arguments = self.vault.rehydrate_arguments(arguments)
                }
                Block::ToolResult { content, .. } => *content = self.vault.rehydrate(content),
            }
        }
        resp
    }
}

#[async_trait::async_trait]
impl LlmProvider for RedactingProvider {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn endpoint(&self, model: &str) -> Option<crate::schema_output::Endpoint<'_>> {
        self.inner.endpoint(model)
    }

    fn model_for<'a>(&'a self, requested: &'a str) -> &'a str {
        self.inner.model_for(requested)
    }

    async fn complete(&self, req: CompletionRequest) -> Result<CompletionResponse, LlmError> {
        let req = self.redact_request(req);
        // New tokens are stored before the provider can echo them, so a crash after this call
        // still rehydrates the checkpointed answer on resume.
        self.vault.save().await.map_err(|e| {
            LlmError::new(
                self.inner.name(),
                format!("could not store the redaction table: {e}"),
                true,
            )
        })?;
        let resp = self.inner.complete(req).await?;
        Ok(self.rehydrate_response(resp))
    }
}
