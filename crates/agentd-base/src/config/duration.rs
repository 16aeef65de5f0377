//! Bounds of duration settings: every duration in the config or a job file is at most 100
//! years, checked with checked arithmetic.

/// The longest any duration in the config or a job file may be: 100 years. Anything longer is a
/// typo, and every instant computed from a setting (`now + approval_ttl_secs`, a run's
/// deadline, a retention cutoff) must stay representable instead of overflowing.
pub const MAX_DURATION_SECS: u64 = 100 * 365 * 24 * 3600;

/// The unit a duration setting is written in (the key's suffix).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    Millis,
    Secs,
    Hours,
    Days,
}

impl TimeUnit {
    /// `value` of this unit in whole seconds (rounded up), or `None` if that overflows.
    fn to_secs(self, value: u64) -> Option<u64> {
        match self {
            TimeUnit::Millis => Some(value.div_ceil(1000)),
            TimeUnit::Secs => Some(value),
            TimeUnit::Hours => value.checked_mul(3600),
            TimeUnit::Days => value.checked_mul(86_400),
        }
    }

    fn max(self) -> u64 {
        match self {
            TimeUnit::Millis => MAX_DURATION_SECS * 1000,
            TimeUnit::Secs => MAX_DURATION_SECS,
            TimeUnit::Hours => MAX_DURATION_SECS / 3600,
            TimeUnit::Days => MAX_DURATION_SECS / 86_400,
        }
    }
}

/// Checks a duration setting with checked arithmetic: at most [`MAX_DURATION_SECS`], and
/// `now + value` representable. The error names the key and the limit in the key's unit.
pub fn duration_at_most(key: &str, value: u64, unit: TimeUnit) -> Result<(), super::Invalid> {
    let fits = unit
        .to_secs(value)
        .filter(|s| *s <= MAX_DURATION_SECS)
        .and_then(|s| chrono::TimeDelta::try_seconds(i64::try_from(s).ok()?))
        .and_then(|d| chrono::Utc::now().checked_add_signed(d))
        .is_some();
    if fits {
        Ok(())
    } else {
        let max = unit.max();
        let message = format!("{key} must be at most {max} (100 years; got {value})");
        Err(super::Invalid::new(key, message))
    }
}
