//! The domain's data (layers 10–11 of ARCHITECTURE.md § Layers): all domain SQL, scoped by org
//! ([`store`]); the redaction boundary, audit minimisation and retention ([`pii`]); the job kinds and
//! their payloads ([`kinds`]); per-org settings and their validator ([`org_settings`]). It may use
//! `agentd-queue` and `agentd-base`.

pub mod kinds;
pub mod org_settings;
pub mod pii;
pub mod store;

// The modules of the crates below, under the names they had when they were one crate, so a
// path reads `crate::store::…` wherever it is used. Only crates below this one can be named
// here: Cargo has no edge upward.
use agentd_base::{catalog, clock, config};
use agentd_queue as queue;
