//! One handler per job kind. Payloads are validated here: a malformed payload is a fatal error
//! (the job goes `dead` with the reason at once, no retry storm).

use crate::app::App;
use crate::queue::JobError;
use crate::queue::worker::JobHandler;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The handlers this build has, by kind.
pub fn handlers(_app: &App) -> BTreeMap<String, Arc<dyn JobHandler>> {
    BTreeMap::new()
}

/// Kinds that have a job file but no handler yet (reported by `agentd status`).
pub fn unimplemented_kinds(app: &App) -> Vec<String> {
    let have = handlers(app);
    app.catalog
        .kinds
        .keys()
        .filter(|k| !have.contains_key(*k))
        .cloned()
        .collect()
}

/// Background services that belong to job kinds (none yet).
pub fn start_background(_app: &App, _stop: CancellationToken) {}

/// Parses a job payload; a malformed one is fatal and names what is wrong.
pub fn parse_payload<T: DeserializeOwned>(
    kind: &str,
    payload: &serde_json::Value,
) -> Result<T, JobError> {
    serde_json::from_value(payload.clone())
        .map_err(|e| JobError::Fatal(format!("malformed {kind} payload {payload}: {e}")))
}
