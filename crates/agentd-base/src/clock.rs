//! Time comes from a [`Clock`] so TTL, lease and cron logic can be tested by moving time
//! instead of sleeping. "Now" is passed into SQL as a parameter, never read from `now()`
//! in logic that tests must control.

use chrono::{DateTime, Duration, Utc};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

/// A source of the current time.
pub trait Clock: Send + Sync + Debug {
    /// The current instant.
    fn now(&self) -> DateTime<Utc>;

    /// The instant queue leases are stamped and judged by (claim, heartbeat, rescue; review
    /// #11): `None` leaves it to the database's `now()`, one clock for the whole fleet, so a
    /// node whose clock runs ahead cannot rescue another node's live lease, nor one running
    /// behind hand out leases that are already over. The wall clock says `None`; a test clock
    /// gives its own time, so tests still move leases by moving it.
    fn lease_now(&self) -> Option<DateTime<Utc>> {
        Some(self.now())
    }
}

/// A clock shared by every part of the service.
pub type SharedClock = Arc<dyn Clock>;

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    fn lease_now(&self) -> Option<DateTime<Utc>> {
        None
    }
}

/// A clock that only moves when told to (tests).
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<DateTime<Utc>>,
}

impl ManualClock {
    /// A clock frozen at `start`.
    pub fn new(start: DateTime<Utc>) -> Arc<Self> {
        Arc::new(Self {
            now: Mutex::new(start),
        })
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().expect("clock lock");
        *now += by;
    }

    /// Sets the clock to `to`.
    pub fn set(&self, to: DateTime<Utc>) {
        *self.now.lock().expect("clock lock") = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().expect("clock lock")
    }
}

/// The wall clock, shared.
pub fn system() -> SharedClock {
    Arc::new(SystemClock)
}
