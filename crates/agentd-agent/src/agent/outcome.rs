//! How a run ends: its outcome as the job sees it, and why it could not go on.

use super::transcript;
use crate::llm::LlmError;
use crate::store::runs::{RunRow, RunStatus};
use serde::Serialize;
use uuid::Uuid;

/// How a run ended.
#[derive(Debug, Clone, Serialize)]
pub struct RunOutcome {
    pub run_id: Uuid,
    /// succeeded | capped | failed | cancelled
    pub status: RunStatus,
    pub stop_reason: Option<String>,
    pub final_text: Option<String>,
    pub error: Option<String>,
    pub rounds: i32,
    pub tool_calls: i32,
    pub tokens: i64,
}

impl RunOutcome {
    pub(super) fn from_row(r: &RunRow) -> Self {
        Self {
            run_id: r.id,
            status: r.status,
            stop_reason: r.stop_reason.clone(),
            final_text: r.final_text.clone(),
            error: r.error.clone(),
            rounds: r.counters.rounds,
            tool_calls: r.counters.tool_calls,
            tokens: r.counters.tokens(),
        }
    }
}

/// Why a run could not go on (the job decides whether to retry).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("provider failed: {0}")]
    Provider(LlmError),
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
    #[error("cancelled (lease lost or shutting down); the run resumes from its last checkpoint")]
    Cancelled,
    #[error(transparent)]
    Checkpoint(#[from] transcript::CheckpointError),
}

impl RunError {
    /// Worth another attempt of the job.
    pub fn is_retryable(&self) -> bool {
        match self {
            RunError::Provider(e) => e.retryable,
            RunError::Db(_) | RunError::Cancelled => true,
            RunError::Checkpoint(_) => false,
        }
    }
}
