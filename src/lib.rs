//! agentd: a durable Postgres job-queue worker that runs a headless LLM agent.
//!
//! Workers pull `auto_create`, `proactive_suggestion` and `approval_expiry` jobs from the
//! `agentd_jobs` table and run one tool loop under caps, writing proposed results, audit rows
//! and checkpoints in one short transaction per step — never with a transaction open while a
//! model answers. ARCHITECTURE.md is the map (layers, the life of a job, where each guarantee
//! is enforced); the code is the contract.
//!
//! # Layout
//!
//! - [`queue`]: the durable queue — enqueue, batched claims, leases and fencing, retries,
//!   cron, maintenance (rescuer, retention); [`queue::apalis`] runs it under apalis.
//! - [`jobs`]: one handler per job kind; what a finished run means for the domain.
//! - [`agent`]: the one tool loop — caps, goals and nudges, checkpoints, resume.
//! - [`llm`]: providers (OpenAI-compatible, scripted, offline) and the tolerant boundary
//!   (text tool calls, argument repair, token estimates).
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
//! - [`api`], [`console`]: the HTTP API (`agentd serve`) and the web console it serves.
//! - [`documents`]: add a document with its job, its auto-create report, the bundled samples.
//! - [`org_settings`]: per-org settings and their one validator.
//! - [`eval`]: auto-create over labelled samples (`agentd eval`).
//! - [`app`], [`config`], [`catalog`], [`db`], [`clock`]: wiring, settings, job files, pool,
//!   time; [`worker`]: the worker process started from an `App`.
//!
//! The modules form layers without cycles (ARCHITECTURE.md § Layers, `tests/module_graph.rs`).
//! - [`telemetry`]: the log and the OpenTelemetry trace export; `traceparent` through the queue.
//! - [`cli`], [`http`]: the operator's edges (commands, health and metrics). The benchmarks
//!   are a workspace member of their own (`benches/agentd-bench`); `agentd bench` runs it.

pub mod agent;
pub mod analysis;
pub mod api;
pub mod app;
pub mod approvals;
pub mod catalog;
pub mod cli;
pub mod clock;
pub mod config;
pub mod console;
pub mod db;
pub mod documents;
pub mod eval;
pub mod http;
pub mod jobs;
pub mod kinds;
pub mod llm;
pub mod org_settings;
pub mod pii;
pub mod queue;
pub mod store;
pub mod telemetry;
pub mod tools;
pub mod webhooks;
pub mod worker;

/// The names of every tool the registry knows (the job files are validated against it).
pub fn known_tool_names() -> Vec<&'static str> {
    tools::builtin_registry().names()
}

/// `e` and its sources, joined with ": ".
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
