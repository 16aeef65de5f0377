//! What every layer stands on (layers 13–14 of ARCHITECTURE.md § Layers): the settings
//! ([`config`]), time ([`clock`]), the job files ([`catalog`]), the pool and the migrations ([`db`],
//! [`db::MIGRATOR`] owns `migrations/`) and the log and trace export ([`telemetry`]). It uses no
//! other agentd crate.

pub mod catalog;
pub mod clock;
pub mod config;
pub mod db;
pub mod telemetry;

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
