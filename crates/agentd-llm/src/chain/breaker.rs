//! A circuit breaker per provider entry (and per entry and org for an org's own key): closed,
//! it counts consecutive failures; after `failures_to_open` of them it opens and the entry is
//! skipped until the cool-down has passed; then one call is let through as a probe — its
//! success closes the breaker, its failure opens it for another cool-down. The state lives in
//! the process's memory (each worker process learns an outage on its own, from its own calls);
//! time comes from the app's [`crate::clock::Clock`], so tests move it instead of sleeping.

use chrono::{DateTime, Duration, Utc};
use std::sync::Mutex;

/// Where a breaker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed {
        failures: u32,
    },
    Open {
        until: DateTime<Utc>,
    },
    /// Past the cool-down: `probing` while the one probe call is out.
    HalfOpen {
        probing: bool,
    },
}

/// Whether a call may go to the entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// The breaker is closed.
    Yes,
    /// The one probe after a cool-down: its outcome decides.
    Probe,
    /// Open (until then), or another call is probing.
    No(DateTime<Utc>),
}

/// One entry's breaker.
#[derive(Debug)]
pub struct Breaker {
    failures_to_open: u32,
    cooldown: Duration,
    state: Mutex<State>,
}

impl Breaker {
    /// A closed breaker opening after `failures_to_open` consecutive failures for `cooldown`.
    pub fn new(failures_to_open: u32, cooldown: std::time::Duration) -> Self {
        Self {
            failures_to_open: failures_to_open.max(1),
            cooldown: Duration::from_std(cooldown).unwrap_or(Duration::seconds(30)),
            state: Mutex::new(State::Closed { failures: 0 }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a call at `now` may go.
    pub fn admit(&self, now: DateTime<Utc>) -> Admit {
        let mut s = self.state();
        match *s {
            State::Closed { .. } => Admit::Yes,
            State::Open { until } if now < until => Admit::No(until),
            State::Open { .. } | State::HalfOpen { probing: false } => {
                *s = State::HalfOpen { probing: true };
                Admit::Probe
            }
            State::HalfOpen { probing: true } => Admit::No(now),
        }
    }

    /// The entry answered: closed again.
    pub fn success(&self) {
        *self.state() = State::Closed { failures: 0 };
    }

    /// The entry failed in a way that counts (timeout, 5xx, overload, 429 past its wait).
    /// Returns true when this failure opened the breaker.
    pub fn failure(&self, now: DateTime<Utc>) -> bool {
        let mut s = self.state();
        let open = State::Open {
            until: now + self.cooldown,
        };
        match *s {
            State::Closed { failures } if failures + 1 < self.failures_to_open => {
                *s = State::Closed {
                    failures: failures + 1,
                };
                false
            }
            State::Closed { .. } | State::HalfOpen { .. } => {
                *s = open;
                true
            }
            State::Open { .. } => false,
        }
    }

    /// A call ended in a way that says nothing about the endpoint (a 400, a refused key):
    /// a probe's slot is freed for the next call; a closed breaker keeps its count.
    pub fn neutral(&self) {
        let mut s = self.state();
        if *s == (State::HalfOpen { probing: true }) {
            *s = State::HalfOpen { probing: false };
        }
    }

    /// Whether calls are being skipped at `now` (for metrics and status).
    pub fn is_open(&self, now: DateTime<Utc>) -> bool {
        matches!(*self.state(), State::Open { until } if now < until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_k_failures_then_one_probe_decides() {
        let b = Breaker::new(2, std::time::Duration::from_secs(30));
        let t0 = Utc::now();
        assert_eq!(b.admit(t0), Admit::Yes);
        assert!(!b.failure(t0), "one failure of two");
        assert!(b.failure(t0), "the second opens it");
        assert!(matches!(b.admit(t0), Admit::No(_)));
        let later = t0 + Duration::seconds(31);
        assert_eq!(b.admit(later), Admit::Probe);
        assert!(
            matches!(b.admit(later), Admit::No(_)),
            "one probe at a time"
        );
        assert!(b.failure(later), "a failed probe opens it again");
        assert!(matches!(b.admit(later), Admit::No(_)));
        let again = later + Duration::seconds(31);
        assert_eq!(b.admit(again), Admit::Probe);
        b.success();
        assert_eq!(b.admit(again), Admit::Yes);
        b.failure(again);
        b.success();
        assert!(!b.failure(again), "a success resets the count");
    }
}
