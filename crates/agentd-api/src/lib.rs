//! The HTTP API `agentd serve` answers (layer 2 of ARCHITECTURE.md § Layers): the routes, their
//! problem details and the OpenAPI document ([`api`]), and the web console it serves ([`console`]).
//! It may use every crate below it (`agentd-worker` and down).

pub mod api;
pub mod console;

// The modules of the crates below, under the names they had when they were one crate, so a
// path reads `crate::store::…` wherever it is used. Only crates below this one can be named
// here: Cargo has no edge upward.
use agentd_agent::approvals;
use agentd_base::{catalog, config, db, telemetry};
use agentd_llm as llm;
use agentd_queue as queue;
use agentd_store::{kinds, org_settings, store};
use agentd_worker::{app, documents, http, jobs, webhooks};
