//! agentd's integration tests, one binary (a test binary links the whole workspace; one link
//! instead of one per file): each module is what was one `tests/<name>.rs`. The support modules
//! (`common`, `api_support`, …) are compiled once here. Kept apart, each in a process of its
//! own: `tests/tls.rs` (it starts children with their own CA store), `tests/providers.rs` (it
//! installs a global tracing subscriber) and `tests/console_browser.rs` (a real Chromium).
//!
//! One module: `cargo test --test it <module>::` (e.g. `cargo test --test it queue::`).

mod anthropic_support;
mod api_support;
mod common;
mod console_support;
mod safety_common;
mod source_scan;

mod admin_acts;
mod agent;
mod analysis;
mod anthropic_adapter;
mod anthropic_runs;
mod api;
mod api_forks;
mod api_isolation;
mod api_lists;
mod api_openapi;
mod approvals;
mod auto_create;
mod await_decisions;
mod bounds;
mod chaos;
mod cli;
mod clients;
mod console_api;
mod constrained_auto;
mod cost;
mod db_roles;
mod db_session;
mod demo;
mod dev;
mod document_words;
mod eval;
mod events;
mod events_sources;
mod fairness;
mod fleet_limits;
mod forks;
mod fuzz_regressions;
mod history_retention;
mod key_rotation;
mod kind_names;
mod languages;
mod lease_loss;
mod lifecycle;
mod lifecycle_api;
mod module_graph;
mod no_panic_parsers;
mod openai_adapter;
mod operate;
mod operator;
mod otel;
mod people;
mod pgbouncer;
mod pii;
mod proactive;
mod proposals;
mod queue;
mod real_models;
mod reliability;
mod replay;
mod runtime_conformance;
mod safety;
mod safety_accounting;
mod safety_suggestions;
mod sql_files;
mod stuck;
mod tool_names;
mod tools;
mod webhook_guard;
mod webhooks;
