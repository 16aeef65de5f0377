//! agentd: a durable Postgres job-queue worker that runs a headless LLM agent.
//!
//! Workers pull `auto_create`, `proactive_suggestion`, `approval_expiry` and `webhook_delivery`
//! jobs from the `agentd_jobs` table and run one tool loop under caps, writing proposed results,
//! audit rows and checkpoints in one short transaction per step — never with a transaction open
//! while a model answers. ARCHITECTURE.md is the map (layers, the life of a job, where each
//! guarantee is enforced); the code is the contract.
//!
//! # Layout
//!
//! This package is the `agentd` binary (`cli`, `eval`) and a facade: every other module is a
//! crate of the workspace, one per layer (`crates/`, ARCHITECTURE.md § Layers), re-exported here
//! under its module name. Bottom to top: `agentd-analysis`, `agentd-base` (config, clock,
//! catalog, db, telemetry), `agentd-queue`, `agentd-store` (store, pii, kinds, org_settings),
//! `agentd-llm`, `agentd-agent` (tools, approvals, agent), `agentd-worker` (app, jobs, worker,
//! documents, http, webhooks), `agentd-api` (api, console).
//!
//! - [`queue`]: the durable queue — enqueue, batched claims, leases and fencing, retries,
//!   cron, maintenance (rescuer, retention); [`queue::apalis`] runs it under apalis.
//! - [`jobs`]: one handler per job kind; what a finished run means for the domain.
//! - [`agent`]: the one tool loop — caps, goals and nudges, checkpoints, resume.
//! - [`llm`]: providers (OpenAI-compatible, Anthropic, scripted, offline) and the tolerant
//!   boundary (text tool calls, argument repair, token estimates).
//! - [`pii`]: the redaction boundary in front of every provider call; audit minimisation;
//!   retention and erasure.
//! - [`analysis`]: a deterministic reading of a document's text — candidate fields (label–value
//!   lines in many languages, tables, totals, dates and amounts in local formats, OCR repairs),
//!   the document's kind — and the grounding check of extracted values.
//! - [`tools`]: the registry (the one chokepoint) and every tool, each a typed tool whose
//!   parameter schema is generated from its argument type; a run's subject scope.
//! - [`approvals`]: pending actions with snapshot hashes; the expiry sweep.
//! - [`webhooks`]: event delivery to subscribers (signing, the HTTP send).
//! - [`store`]: all domain SQL, scoped by org.
//! - [`kinds`]: the job kinds as types, each owning its name, payload, unique key and how a
//!   job of it is built; every producer builds its jobs through them.
//! - [`api`], [`console`]: the HTTP API (`agentd serve`) and the web console it serves.
//! - [`documents`]: add a document with its job, its auto-create report, the bundled samples.
//! - [`org_settings`]: per-org settings and their one validator.
//! - [`eval`]: auto-create over labelled samples (`agentd eval`).
//! - [`app`], [`config`], [`catalog`], [`db`], [`clock`]: wiring, settings, job files, pool,
//!   time; [`worker`]: the worker process started from an `App`.
//!
//! - [`telemetry`]: the log and the OpenTelemetry trace export; `traceparent` through the queue.
//! - [`cli`], [`http`]: the operator's edges (commands, health and metrics). The benchmarks
//!   are a workspace member of their own (`benches/agentd-bench`); `agentd bench` runs it.
//!
//! The crates form layers without cycles (Cargo refuses an edge upward); inside a crate of
//! several modules `tests/it/module_graph.rs` keeps them.

// The crates by layer, bottom to top, under the module names they had as one crate: the
// tests, the benchmarks, the fuzz targets and the examples name `agentd::queue::…`,
// `agentd::store::…` as before.
pub use agentd_agent::{agent, approvals, tools};
pub use agentd_analysis as analysis;
pub use agentd_api::{api, console};
pub use agentd_base::{catalog, clock, config, db, error_chain, telemetry};
pub use agentd_llm as llm;
pub use agentd_queue as queue;
pub use agentd_store::{kinds, org_settings, pii, store};
pub use agentd_worker::{app, documents, http, jobs, webhooks, worker};

pub mod charts;
pub mod cli;
pub mod eval;

/// The names of every tool the registry knows (the job files are validated against it).
pub fn known_tool_names() -> Vec<&'static str> {
    tools::builtin_registry().names()
}
