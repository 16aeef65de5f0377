//! Personal data never reaches the model provider: the redaction boundary.
//!
//! - [`detect`]: rules that find emails, phone numbers, IBANs (mod-97), payment cards (Luhn +
//!   issuer), national/patient ids, and labelled person names.
//! - [`Vault`]: a run's symbol table. Each detected value gets a stable opaque token
//!   (`EMAIL_1`, `IBAN_2`, `PERSON_3`); the same value always maps to the same token within a
//!   run, also across a crash and resume (the table is persisted in `pii_tokens`).
//! - [`RedactingProvider`]: wraps any provider. Every outgoing request (the loop's rounds and
//!   tool-internal calls such as `run_extraction`) has its text redacted; every answer (text and
//!   tool-call arguments) is rehydrated before anything else in agentd sees it, so tools execute
//!   with real values, extractions are stored with real values, and people see real values.
//!
//! Limits (also in the README): names written in free text with no label ("… signed by Jane
//! Doe") are found only if the same name was labelled elsewhere in the run; postal addresses and
//! dates of birth without a label are not detected.

pub mod audit;
pub mod corpus;
pub mod detect;
pub mod history;
mod provider;
pub mod retention;
mod vault;

pub use detect::{Finding, Kind, detect};
pub use provider::RedactingProvider;
pub use vault::{SaveError, Vault};

use crate::llm::SharedProvider;
use regex::Regex;
use sqlx::PgPool;
use std::sync::Arc;
use uuid::Uuid;

/// What the service config says about redaction, compiled once.
#[derive(Clone, Default)]
pub struct PiiSettings {
    /// The service-wide switch (`pii.enabled`); each org has its own too.
    pub enabled: bool,
    /// Configured national-id patterns.
    pub extra_ids: Arc<Vec<Regex>>,
}

impl PiiSettings {
    /// From `[pii]` (validated at load: the patterns compile).
    pub fn from_config(c: &crate::config::PiiConfig) -> Self {
        Self {
            enabled: c.enabled,
            extra_ids: Arc::new(
                c.national_id_patterns
                    .iter()
                    .filter_map(|p| Regex::new(p).ok())
                    .collect(),
            ),
        }
    }

    /// The provider a run talks to: `inner` behind the run's redaction boundary when the
    /// service and the org have redaction on (recorded on the run), else `inner` itself; with
    /// the run's table, which its audit rows are redacted with too (review N10).
    pub async fn provider_for_run(
        &self,
        pool: &PgPool,
        org_id: Uuid,
        run_id: Uuid,
        inner: SharedProvider,
    ) -> sqlx::Result<(SharedProvider, Option<Arc<Vault>>)> {
        if !self.enabled || !crate::store::pii::org_redacts(pool, org_id).await? {
            return Ok((inner, None));
        }
        crate::store::pii::mark_run_redacted(pool, run_id).await?;
        let vault = Arc::new(
            Vault::for_run(
                pool.clone(),
                org_id,
                run_id,
                self.extra_ids.as_ref().clone(),
            )
            .await?,
        );
        let provider = Arc::new(RedactingProvider::new(inner, vault.clone()));
        Ok((provider, Some(vault)))
    }

    /// For a call outside a run (a person approving a proposed `run_extraction`): an
    /// in-memory table.
    pub async fn provider_for_decision(
        &self,
        pool: &PgPool,
        org_id: Uuid,
        inner: SharedProvider,
    ) -> sqlx::Result<SharedProvider> {
        if !self.enabled || !crate::store::pii::org_redacts(pool, org_id).await? {
            return Ok(inner);
        }
        let vault = Vault::in_memory(self.extra_ids.as_ref().clone());
        Ok(Arc::new(RedactingProvider::new(inner, Arc::new(vault))))
    }
}
