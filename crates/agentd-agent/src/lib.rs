//! The one tool loop and what it calls (layers 6–8 of ARCHITECTURE.md § Layers): the registry
//! and every tool ([`tools`]), pending actions with snapshot hashes and the expiry sweep
//! ([`approvals`]), and the loop itself — caps, goals, checkpoints, resume ([`agent`]). It may use
//! `agentd-llm`, `agentd-store`, `agentd-queue`, `agentd-analysis` and `agentd-base`.

pub mod agent;
pub mod approvals;
pub mod tools;

// The modules of the crates below, under the names they had when they were one crate, so a
// path reads `crate::store::…` wherever it is used. Only crates below this one can be named
// here: Cargo has no edge upward.
use agentd_analysis as analysis;
use agentd_base::{catalog, clock, config, db};
use agentd_llm as llm;
use agentd_queue as queue;
use agentd_store::{kinds, pii, store};
