//! Retry delays: exponential with full jitter over the upper half, capped. Computed here and
//! written to the job's `run_at` in the database, so a retry survives any restart.

use rand::Rng;
use std::time::Duration;

/// Retry delay policy of one job kind.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// Delay after the first failed attempt.
    pub base: Duration,
    /// No delay exceeds this.
    pub max: Duration,
}

impl Backoff {
    /// The delay before attempt `attempt + 1`, given that `attempt` (1-based) failed.
    /// Between half and all of `base * 2^(attempt-1)`, capped at `max`.
    pub fn delay(&self, attempt: i32) -> Duration {
        let exp = attempt.clamp(1, 30) as u32 - 1;
        let full = self
            .base
            .saturating_mul(2u32.saturating_pow(exp))
            .min(self.max);
        let half = full / 2;
        let jitter_ms = rand::rng().random_range(0..=half.as_millis().max(1) as u64);
        (half + Duration::from_millis(jitter_ms)).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_and_is_capped() {
        let b = Backoff {
            base: Duration::from_millis(1000),
            max: Duration::from_secs(60),
        };
        for _ in 0..100 {
            let d1 = b.delay(1);
            assert!(d1 >= Duration::from_millis(500) && d1 <= Duration::from_millis(1001));
            let d4 = b.delay(4);
            assert!(d4 >= Duration::from_millis(4000) && d4 <= Duration::from_millis(8001));
            assert!(b.delay(30) <= Duration::from_secs(60));
            assert!(b.delay(30) >= Duration::from_secs(30));
        }
    }
}
