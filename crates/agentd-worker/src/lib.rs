//! The worker process (layers 3–5 of ARCHITECTURE.md § Layers): the wiring of an [`app::App`],
//! one handler per job kind ([`jobs`]), the worker started from an app ([`worker`]), adding a
//! document with its job ([`documents`]), health and metrics ([`http`]) and webhook delivery
//! ([`webhooks`]). It may use every crate below it: `agentd-agent`, `agentd-llm`, `agentd-store`,
//! `agentd-queue`, `agentd-analysis` and `agentd-base`.

pub mod app;
pub mod documents;
pub mod http;
pub mod jobs;
pub mod webhooks;
pub mod worker;

// The modules of the crates below, under the names they had when they were one crate, so a
// path reads `crate::store::…` wherever it is used. Only crates below this one can be named
// here: Cargo has no edge upward.
use agentd_agent::{agent, approvals, tools};
use agentd_base::{catalog, clock, config, db, error_chain};
use agentd_llm as llm;
use agentd_queue as queue;
use agentd_store::{kinds, org_settings, pii, store};
