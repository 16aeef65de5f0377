//! The states rows move through, as enums: each derives `sqlx::Type` (stored as the same text
//! the columns' CHECK constraints list) and serde (the same strings on the wire), so a typo in a
//! state is a compile error. One macro writes what every state type has beside its derives:
//! `ALL`, `as_str`, `Display`, `FromStr` and comparison with the stored string.

use serde::{Deserialize, Serialize};

/// A state name that is not one of its type's values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be one of {allowed} (got {got:?})")]
pub struct UnknownState {
    /// The values allowed, comma-separated, in the order of the type's `ALL`.
    pub allowed: String,
    pub got: String,
}

/// What every state type has (the `states!` macro writes it): its values and their text.
pub trait State: Copy + Eq + std::str::FromStr<Err = UnknownState> + 'static {
    /// Every state, in the order of the life of a row.
    const ALL: &'static [Self];
    /// The stored (and wire) value.
    fn as_str(self) -> &'static str;
}

/// The state whose text is `s`.
fn parse<S: State>(s: &str) -> Result<S, UnknownState> {
    S::ALL
        .iter()
        .copied()
        .find(|v| v.as_str() == s)
        .ok_or_else(|| UnknownState {
            allowed: S::ALL
                .iter()
                .map(|v| v.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            got: s.to_string(),
        })
}

macro_rules! states {
    ($(#[$meta:meta])* pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema)]
        #[serde(rename_all = "lowercase")]
        #[sqlx(type_name = "text", rename_all = "lowercase")]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every state, in the order of the life of a row.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The stored (and wire) value.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl State for $name {
            const ALL: &'static [$name] = $name::ALL;

            fn as_str(self) -> &'static str {
                $name::as_str(self)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                // `pad`: widths and alignment (`{:<8}`) apply as to the text.
                f.pad(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = UnknownState;

            fn from_str(s: &str) -> Result<Self, UnknownState> {
                parse(s)
            }
        }

        /// Comparing with the stored string (code that still reads states as text, e.g. the
        /// benchmarks and the tests).
        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }
    };
}

states! {
    /// A document's `auto_create_status` (the column's values, lowercase on the wire).
    #[derive(schemars::JsonSchema)]
    #[schemars(inline)]
    pub enum AutoCreateStatus {
        None = "none",
        Queued = "queued",
        Running = "running",
        Proposed = "proposed",
        Accepted = "accepted",
        Rejected = "rejected",
        Failed = "failed",
        Skipped = "skipped",
    }
}

impl AutoCreateStatus {
    /// The states an auto-create ends in (a run's outcome, or a person's decision on it).
    pub const DONE: [AutoCreateStatus; 5] = [
        AutoCreateStatus::Proposed,
        AutoCreateStatus::Failed,
        AutoCreateStatus::Skipped,
        AutoCreateStatus::Accepted,
        AutoCreateStatus::Rejected,
    ];
}

states! {
    /// A schema's or prompt's version is `proposed` (an agent's) until a person accepts it and
    /// it is `active`.
    pub enum ArtifactStatus {
        Proposed = "proposed",
        Active = "active",
    }
}

states! {
    /// Where a run is: `running` until it ends `succeeded`, `capped`, `failed` or `cancelled`;
    /// `waiting` between (no job drives it) while the approvals it proposed are pending, when its
    /// kind awaits decisions (`agent.await_decisions`, migration 0107).
    pub enum RunStatus {
        Running = "running",
        Waiting = "waiting",
        Succeeded = "succeeded",
        Capped = "capped",
        Failed = "failed",
        Cancelled = "cancelled",
    }
}

states! {
    /// An extraction is `proposed` (the agent's, editable) until a person accepts it.
    pub enum ExtractionStatus {
        Proposed = "proposed",
        Accepted = "accepted",
    }
}

states! {
    /// An approval is `pending` until it ends `executed`, `rejected`, `expired`, `stale` (its
    /// data changed) or `failed` (the approved action errored).
    pub enum ApprovalStatus {
        Pending = "pending",
        Executed = "executed",
        Rejected = "rejected",
        Expired = "expired",
        Stale = "stale",
        Failed = "failed",
    }
}

impl ApprovalStatus {
    /// Still waiting for a decision.
    pub fn is_pending(self) -> bool {
        self == ApprovalStatus::Pending
    }
}

states! {
    /// A suggestion is `pending` until a person sees it (`shown`), its approval executes
    /// (`acted`), a person dismisses it, or it `expired`.
    pub enum SuggestionStatus {
        Pending = "pending",
        Shown = "shown",
        Acted = "acted",
        Dismissed = "dismissed",
        Expired = "expired",
    }
}

impl SuggestionStatus {
    /// The states a person's transition to `self` may start from (`shown` from `pending`,
    /// `dismissed` from `pending` or `shown`); none for the states only the system sets.
    pub fn reachable_from(self) -> &'static [SuggestionStatus] {
        match self {
            SuggestionStatus::Shown => &[SuggestionStatus::Pending],
            SuggestionStatus::Dismissed => &[SuggestionStatus::Pending, SuggestionStatus::Shown],
            _ => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_through_their_text() {
        for s in ApprovalStatus::ALL {
            assert_eq!(s.as_str().parse::<ApprovalStatus>(), Ok(*s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        for s in SuggestionStatus::ALL {
            assert_eq!(s.as_str().parse::<SuggestionStatus>(), Ok(*s));
        }
        assert_eq!(AutoCreateStatus::ALL.len(), 8);
        assert_eq!(RunStatus::Capped, "capped");
    }

    #[test]
    fn run_statuses_are_the_ones_the_runs_check_lists() {
        let sql = include_str!("../../../../migrations/0107_runs_await_decisions.sql");
        let list = sql
            .split_once("CHECK (status IN (")
            .and_then(|(_, rest)| rest.split_once("))"))
            .map(|(list, _)| list)
            .unwrap_or_default();
        let checked: Vec<&str> = list
            .split(',')
            .map(|s| s.trim().trim_matches('\''))
            .collect();
        let ours: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(ours, checked, "RunStatus and agent_runs' CHECK");
    }

    #[test]
    fn an_unknown_state_names_the_allowed_ones() {
        let e = "done".parse::<SuggestionStatus>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "must be one of pending, shown, acted, dismissed, expired (got \"done\")"
        );
    }
}
