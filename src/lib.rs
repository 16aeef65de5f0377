//! agentd: a durable Postgres job-queue worker that runs a headless LLM agent.
//!
//! Workers pull `auto_create`, `proactive_suggestion` and `approval_expiry` jobs from the
//! `agentd_jobs` table and run one tool loop under caps, writing proposed results, audit rows
//! and checkpoints in one transaction per step. See DESIGN.md for the contract.

pub mod agent;
pub mod app;
pub mod approvals;
pub mod bench;
pub mod catalog;
pub mod cli;
pub mod clock;
pub mod config;
pub mod db;
pub mod http;
pub mod jobs;
pub mod llm;
pub mod pii;
pub mod queue;
pub mod store;
pub mod tools;

/// The names of every tool the registry knows (the job files are validated against it).
pub fn known_tool_names() -> Vec<&'static str> {
    tools::builtin_registry().names()
}
