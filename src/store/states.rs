//! The states rows move through, as enums: each derives `sqlx::Type` (stored as the same text
//! the columns' CHECK constraints list) and serde (the same strings on the wire), so a typo in a
//! state is a compile error.

use serde::Serialize;

/// A document's `auto_create_status` (the column's values, lowercase on the wire).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
    sqlx::Type,
)]
#[serde(rename_all = "lowercase")]
#[sqlx(type_name = "text", rename_all = "lowercase")]
#[schemars(inline)]
pub enum AutoCreateStatus {
    None,
    Queued,
    Running,
    Proposed,
    Accepted,
    Rejected,
    Failed,
    Skipped,
}

impl std::fmt::Display for AutoCreateStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl AutoCreateStatus {
    /// Every status, in the order of the life of a document.
    pub const ALL: [AutoCreateStatus; 8] = [
        Self::None,
        Self::Queued,
        Self::Running,
        Self::Proposed,
        Self::Accepted,
        Self::Rejected,
        Self::Failed,
        Self::Skipped,
    ];

    /// The stored value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Proposed => "proposed",
            Self::Accepted => "accepted",
            Self::Rejected => "rejected",
            Self::Failed => "failed",
            Self::Skipped => "skipped",
        }
    }
}

/// Where a run is: `running` until it ends `succeeded`, `capped`, `failed` or `cancelled` (the
/// stored and wire strings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, sqlx::Type)]
#[serde(rename_all = "lowercase")]
#[sqlx(type_name = "text", rename_all = "lowercase")]
pub enum RunStatus {
    Running,
    Succeeded,
    Capped,
    Failed,
    Cancelled,
}

impl RunStatus {
    /// The stored value.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Capped => "capped",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }
}

/// Comparing with the stored string (code outside the crate's core that still reads statuses
/// as text, e.g. the benchmarks).
impl PartialEq<&str> for RunStatus {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An extraction is `proposed` (the agent's, editable) until a person accepts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, sqlx::Type)]
#[serde(rename_all = "lowercase")]
#[sqlx(type_name = "text", rename_all = "lowercase")]
pub enum ExtractionStatus {
    Proposed,
    Accepted,
}

impl std::fmt::Display for ExtractionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ExtractionStatus::Proposed => "proposed",
            ExtractionStatus::Accepted => "accepted",
        })
    }
}
