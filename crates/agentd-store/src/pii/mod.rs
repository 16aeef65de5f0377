//! Personal data never reaches the model provider: the redaction boundary.
//!
//! - [`detect`]: rules that find emails, phone numbers, IBANs (mod-97), payment cards (Luhn +
//!   issuer), national/patient ids, and labelled person names.
//! - [`Vault`]: a run's symbol table. Each detected value gets a stable opaque token
//!   (`EMAIL_1`, `IBAN_2`, `PERSON_3`); the same value always maps to the same token within a
//!   run, also across a crash and resume (the table is persisted in `pii_tokens`).
//! - `llm::redacting::RedactingProvider` (with `llm::redacting::provider_for_run` and [`PiiSettings`]): wraps any
//!   provider. Every outgoing request (the loop's rounds and
//!   tool-internal calls such as `run_extraction`) has its text redacted; every answer (text and
//!   tool-call arguments) is rehydrated before anything else in agentd sees it, so tools execute
//!   with real values, extractions are stored with real values, and people see real values.
//!
//! Limits (docs/personal-data.md): names written in free text with no label ("… signed by Jane
//! Doe") are found only if the same name was labelled elsewhere in the run; postal addresses and
//! dates of birth without a label are not detected.

pub mod audit;
pub mod corpus;
pub mod detect;
pub mod retention;
mod vault;

pub use detect::{Finding, Kind, detect};
pub use vault::{SaveError, Vault};

use regex::Regex;
use std::sync::Arc;

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
}
