//! A circuit breaker per provider entry (and per entry and org for an org's own key): closed,
//! it counts consecutive failures; after `failures_to_open` of them it opens and the entry is
//! skipped until the cool-down has passed; then one call is let through as a probe — its
//! success closes the breaker, its failure opens it for another cool-down. The state lives in
//! the process's memory (each worker process learns an outage on its own, from its own calls);
//! time comes from the app's [`crate::clock::Clock`], so tests move it instead of sleeping.
//! A worker writes its breakers' [`Snapshot`]s to its row of `agentd_workers` every heartbeat
//! (`store::workers`), which is how `agentd status`, another process, shows them.
//!
//! A probe cannot stick. Its admission is a [`Probe`] guard: dropped without an outcome (the
//! call's future cancelled, its job's lease lost or its timeout reached), it frees the probe's
//! slot, so the next call probes. And a probe out longer than the longest one call may take
//! (`probe_deadline`: the request timeout times its attempts) is presumed lost whatever
//! happened to it: the next call probes. Before, a dropped probe left the breaker half-open
//! with its slot taken until the process restarted, and every call to the entry was refused.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};

/// Where a breaker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Since when (`None`: since the process started).
    Closed {
        failures: u32,
        since: Option<DateTime<Utc>>,
    },
    /// Opened at `since`, skipped until `until`.
    Open {
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    },
    /// Past the cool-down (since then): the probe out (its number and when it left), if one is.
    HalfOpen {
        probe: Option<(u64, DateTime<Utc>)>,
        since: DateTime<Utc>,
    },
}

/// Whether a call may go to the entry.
#[derive(Debug)]
pub enum Admit {
    /// The breaker is closed.
    Yes,
    /// The one probe after a cool-down: its outcome decides. Keep the guard until the call
    /// ends; dropping it without an outcome frees the probe's slot.
    Probe(Probe),
    /// Open (until then), or another call is probing.
    No(DateTime<Utc>),
}

/// The admission of a probe: frees the probe's slot when dropped while the breaker still waits
/// for this probe's outcome (a success, failure or neutral end settles it first).
#[derive(Debug)]
#[must_use = "dropping the probe frees its slot at once"]
pub struct Probe {
    breaker: Arc<Breaker>,
    id: u64,
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.breaker.release(self.id);
    }
}

/// The breaker's state as metrics and status show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shown {
    Closed,
    Open,
    HalfOpen,
}

impl Shown {
    /// As status shows it: `closed`, `open`, `half-open`.
    pub fn as_str(self) -> &'static str {
        match self {
            Shown::Closed => "closed",
            Shown::Open => "open",
            Shown::HalfOpen => "half-open",
        }
    }
}

/// A breaker at one moment, as a worker reports it (`agentd_workers.breakers`, `agentd status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The provider entry.
    pub provider: String,
    pub state: Shown,
    /// Since when it is in that state (`None`: closed since the process started).
    pub since: Option<DateTime<Utc>>,
    /// While open: when a probe may go.
    pub until: Option<DateTime<Utc>>,
    /// While closed: consecutive failures so far (it opens at `llm.breaker_failures`).
    pub failures: u32,
}

impl Shown {
    /// The gauge's value: 0 closed, 1 half-open (a probe may go or is out), 2 open.
    pub fn gauge(self) -> f64 {
        match self {
            Shown::Closed => 0.0,
            Shown::HalfOpen => 1.0,
            Shown::Open => 2.0,
        }
    }
}

/// One entry's breaker.
#[derive(Debug)]
pub struct Breaker {
    failures_to_open: u32,
    cooldown: Duration,
    probe_deadline: Duration,
    state: Mutex<(State, u64)>,
}

impl Breaker {
    /// A closed breaker opening after `failures_to_open` consecutive failures for `cooldown`,
    /// whose probe is presumed lost after `probe_deadline`.
    pub fn new(
        failures_to_open: u32,
        cooldown: std::time::Duration,
        probe_deadline: std::time::Duration,
    ) -> Self {
        Self {
            failures_to_open: failures_to_open.max(1),
            cooldown: Duration::from_std(cooldown).unwrap_or(Duration::seconds(30)),
            probe_deadline: Duration::from_std(probe_deadline).unwrap_or(Duration::minutes(5)),
            state: Mutex::new((
                State::Closed {
                    failures: 0,
                    since: None,
                },
                0,
            )),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, (State, u64)> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a call at `now` may go.
    pub fn admit(self: &Arc<Self>, now: DateTime<Utc>) -> Admit {
        let mut s = self.state();
        let (state, probes) = &mut *s;
        let (free, half_open_since) = match *state {
            State::Closed { .. } => return Admit::Yes,
            State::Open { until, .. } if now < until => return Admit::No(until),
            // Half-open from the end of the cool-down.
            State::Open { until, .. } => (true, until),
            State::HalfOpen { probe: None, since } => (true, since),
            // A probe out past the deadline is lost (its outcome will never come).
            State::HalfOpen {
                probe: Some((_, left)),
                since,
            } => (now >= left + self.probe_deadline, since),
        };
        if !free {
            return Admit::No(now);
        }
        *probes += 1;
        *state = State::HalfOpen {
            probe: Some((*probes, now)),
            since: half_open_since,
        };
        Admit::Probe(Probe {
            breaker: self.clone(),
            id: *probes,
        })
    }

    /// Probe `id` ended without an outcome: its slot is free if it still holds it.
    fn release(&self, id: u64) {
        let mut s = self.state();
        if let State::HalfOpen {
            probe: Some((p, _)),
            since,
        } = s.0
            && p == id
        {
            s.0 = State::HalfOpen { probe: None, since };
        }
    }

    /// The entry answered at `now`: closed again (since `now` if it was not closed).
    pub fn success(&self, now: DateTime<Utc>) {
        let mut s = self.state();
        let since = match s.0 {
            State::Closed { since, .. } => since,
            State::Open { .. } | State::HalfOpen { .. } => Some(now),
        };
        s.0 = State::Closed { failures: 0, since };
    }

    /// The entry failed in a way that counts (timeout, 5xx, overload, 429 past its wait).
    /// Returns true when this failure opened the breaker.
    pub fn failure(&self, now: DateTime<Utc>) -> bool {
        let mut s = self.state();
        let open = State::Open {
            since: now,
            until: now + self.cooldown,
        };
        match s.0 {
            State::Closed { failures, since } if failures + 1 < self.failures_to_open => {
                s.0 = State::Closed {
                    failures: failures + 1,
                    since,
                };
                false
            }
            State::Closed { .. } | State::HalfOpen { .. } => {
                s.0 = open;
                true
            }
            State::Open { .. } => false,
        }
    }

    /// A call ended in a way that says nothing about the endpoint (a 400, a refused key):
    /// a probe's slot is freed for the next call; a closed breaker keeps its count.
    pub fn neutral(&self) {
        let mut s = self.state();
        if let State::HalfOpen {
            probe: Some(_),
            since,
        } = s.0
        {
            s.0 = State::HalfOpen { probe: None, since };
        }
    }

    /// Whether calls are being skipped at `now` (for metrics and status).
    pub fn is_open(&self, now: DateTime<Utc>) -> bool {
        matches!(self.state().0, State::Open { until, .. } if now < until)
    }

    /// Where the breaker is at `now`, as metrics and status show it.
    pub fn shown(&self, now: DateTime<Utc>) -> Shown {
        self.snapshot("", now).state
    }

    /// Where the breaker of entry `provider` is at `now`, since when.
    pub fn snapshot(&self, provider: &str, now: DateTime<Utc>) -> Snapshot {
        let (state, since, until, failures) = match self.state().0 {
            State::Closed { failures, since } => (Shown::Closed, since, None, failures),
            State::Open { since, until } if now < until => {
                (Shown::Open, Some(since), Some(until), 0)
            }
            State::Open { until, .. } => (Shown::HalfOpen, Some(until), None, 0),
            State::HalfOpen { since, .. } => (Shown::HalfOpen, Some(since), None, 0),
        };
        Snapshot {
            provider: provider.to_string(),
            state,
            since,
            until,
            failures,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker() -> Arc<Breaker> {
        Arc::new(Breaker::new(
            2,
            std::time::Duration::from_secs(30),
            std::time::Duration::from_secs(240),
        ))
    }

    fn is_probe(a: &Admit) -> bool {
        matches!(a, Admit::Probe(_))
    }

    #[test]
    fn opens_after_k_failures_then_one_probe_decides() {
        let b = breaker();
        let t0 = Utc::now();
        assert!(matches!(b.admit(t0), Admit::Yes));
        assert!(!b.failure(t0), "one failure of two");
        assert!(b.failure(t0), "the second opens it");
        assert!(matches!(b.admit(t0), Admit::No(_)));
        assert_eq!(b.shown(t0), Shown::Open);
        let later = t0 + Duration::seconds(31);
        assert_eq!(b.shown(later), Shown::HalfOpen);
        let probe = b.admit(later);
        assert!(is_probe(&probe));
        assert!(
            matches!(b.admit(later), Admit::No(_)),
            "one probe at a time"
        );
        assert!(b.failure(later), "a failed probe opens it again");
        drop(probe);
        assert!(
            matches!(b.admit(later), Admit::No(_)),
            "a settled probe's guard frees nothing"
        );
        let again = later + Duration::seconds(31);
        let probe = b.admit(again);
        assert!(is_probe(&probe));
        b.success(again);
        drop(probe);
        assert!(matches!(b.admit(again), Admit::Yes));
        assert_eq!(b.shown(again), Shown::Closed);
        b.failure(again);
        b.success(again);
        assert!(!b.failure(again), "a success resets the count");
    }

    #[test]
    fn a_snapshot_says_since_when_the_breaker_is_where_it_is() {
        let b = breaker();
        let t0 = Utc::now();
        let at = |t| b.snapshot("primary", t);
        assert_eq!(
            (at(t0).state, at(t0).since, at(t0).failures),
            (Shown::Closed, None, 0),
            "closed since the process started"
        );
        b.failure(t0);
        assert_eq!(at(t0).failures, 1);
        let t1 = t0 + Duration::seconds(5);
        b.failure(t1);
        let open = at(t1);
        assert_eq!(
            (open.state, open.since, open.until),
            (Shown::Open, Some(t1), Some(t1 + Duration::seconds(30)))
        );
        // Past the cool-down it is half-open from the cool-down's end, probe out or not.
        let end = t1 + Duration::seconds(30);
        let later = end + Duration::seconds(7);
        assert_eq!(
            (at(later).state, at(later).since),
            (Shown::HalfOpen, Some(end))
        );
        let probe = b.admit(later);
        assert!(is_probe(&probe));
        assert_eq!(
            (at(later).state, at(later).since),
            (Shown::HalfOpen, Some(end))
        );
        b.success(later);
        drop(probe);
        assert_eq!(
            (at(later).state, at(later).since, at(later).failures),
            (Shown::Closed, Some(later), 0)
        );
        assert_eq!(serde_json::to_value(at(later)).unwrap()["state"], "closed");
        b.failure(later);
        b.failure(later);
        let half = later + Duration::seconds(31);
        assert_eq!(
            serde_json::to_value(at(half)).unwrap()["state"],
            "half-open"
        );
    }

    #[test]
    fn a_dropped_probe_frees_its_slot_and_the_next_call_probes() {
        let b = breaker();
        let t0 = Utc::now();
        b.failure(t0);
        b.failure(t0);
        let later = t0 + Duration::seconds(31);
        let probe = b.admit(later);
        assert!(is_probe(&probe));
        assert!(matches!(b.admit(later), Admit::No(_)));
        // The call's future is dropped (cancelled, lease lost, the job's timeout).
        drop(probe);
        let next = b.admit(later);
        assert!(is_probe(&next), "{next:?}");
        b.success(later);
        drop(next);
        assert!(matches!(b.admit(later), Admit::Yes));
    }

    #[test]
    fn a_probe_out_past_its_deadline_is_lost_and_its_late_guard_frees_nothing() {
        let b = breaker();
        let t0 = Utc::now();
        b.failure(t0);
        b.failure(t0);
        let later = t0 + Duration::seconds(31);
        // A probe whose guard is never dropped (a call stuck for good).
        let stuck = b.admit(later);
        assert!(is_probe(&stuck));
        assert!(matches!(
            b.admit(later + Duration::seconds(239)),
            Admit::No(_)
        ));
        let past = later + Duration::seconds(240);
        let second = b.admit(past);
        assert!(is_probe(&second), "past the deadline the next call probes");
        // The lost probe's guard, dropped at last, does not free the second probe's slot.
        drop(stuck);
        assert!(matches!(b.admit(past), Admit::No(_)));
        b.success(past);
        drop(second);
        assert!(matches!(b.admit(past), Admit::Yes));
    }
}
