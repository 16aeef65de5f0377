//! Request rates per key and per org (issue 47, item 5; review N28/D1): a token bucket per API
//! key and one per org, and a stricter one per key for the requests that enqueue model runs
//! (an upload, `POST /v1/jobs`, a refine) — an uploader key looping on them spends the org's
//! budget at the rate the operator chose, not as fast as the server answers. Past a bucket the
//! request gets 429 with `Retry-After` (whole seconds until one token is back), before its
//! handler runs: nothing is read or written.
//!
//! The buckets live in this `agentd serve` process. With P processes behind a load balancer a
//! key gets at most P times the rate: the fleet bound. `api.serve_processes` divides each rate
//! so the fleet's total is the configured one (round-robin balancing spreads a key's requests
//! evenly; a skewed balancer makes the bound looser, never stricter than configured / P).
//! Another org's requests never wait on these buckets: each org and key has its own.
//!
//! An org may have rates of its own (org settings `requests_per_minute`, `runs_per_minute`,
//! migration 0097): they replace the service's per-org rate and per-key runs rate for it, and
//! are shared across the processes the same way. The per-key request rate stays the service's.
//!
//! Refused bearer tokens (review D8) have a bucket per source address (an IPv6 source per /64,
//! what one host is usually given): `api.refused_per_minute_per_source` lookups of unknown
//! tokens a minute. Past it, a token the source has not used successfully lately is refused
//! with 429 before it costs a database query (`auth.rs`).

use super::auth::Caller;
use crate::config::ApiConfig;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// Most buckets kept; past it, buckets that refilled completely are forgotten (they hold no
/// state a new bucket would not have).
const MAX_BUCKETS: usize = 100_000;

/// What a request is charged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Scope {
    Key,
    Org,
    KeyRuns,
    RefusedFromSource,
}

impl Scope {
    fn name(self) -> &'static str {
        match self {
            Scope::Key => "api.requests_per_minute_per_key",
            Scope::Org => "api.requests_per_minute_per_org",
            Scope::KeyRuns => "api.runs_per_minute_per_key",
            Scope::RefusedFromSource => "api.refused_per_minute_per_source",
        }
    }
}

/// Whom a bucket counts: a key or an org, or a source address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Subject {
    Id(Uuid),
    Source(IpAddr),
}

/// The bucket `ip` is counted in: an IPv4 address (also written as IPv6) as itself, an IPv6
/// address by its /64.
fn source_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        v4 => v4,
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
    /// Tokens a minute (and most held) when it was last charged.
    rate: u32,
}

/// An org's own rates, over the service's (`None`: the service's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OrgRates {
    /// Requests a minute of all the org's keys together.
    pub requests_per_minute: Option<u32>,
    /// Run-enqueuing requests a minute of each of its keys.
    pub runs_per_minute: Option<u32>,
}

/// The buckets of one process.
#[derive(Debug)]
pub struct RateLimits {
    processes: u32,
    per_key: u32,
    per_org: u32,
    runs_per_key: u32,
    refused_per_source: u32,
    buckets: Mutex<HashMap<(Scope, Subject), Bucket>>,
}

/// A refusal: which limit, and when a token is back.
#[derive(Debug, Clone, PartialEq)]
pub struct Limited {
    pub limit: &'static str,
    pub per_minute: u32,
    pub retry_after: Duration,
}

/// Whether `method path` enqueues a model run (charged to the runs bucket too).
pub fn enqueues_runs(method: &axum::http::Method, path: &str) -> bool {
    if method != axum::http::Method::POST {
        return false;
    }
    if path == "/v1/documents" || path == "/v1/jobs" {
        return true;
    }
    path.strip_prefix("/v1/documents/")
        .is_some_and(|rest| rest.ends_with("/refine"))
        || path
            .strip_prefix("/v1/runs/")
            .is_some_and(|rest| rest.ends_with("/fork"))
}

impl RateLimits {
    /// The limits of `cfg`, each divided by `serve_processes` (0 = off).
    pub fn new(cfg: &ApiConfig) -> Self {
        let processes = cfg.serve_processes.max(1);
        Self {
            processes,
            per_key: share(cfg.requests_per_minute_per_key, processes),
            per_org: share(cfg.requests_per_minute_per_org, processes),
            runs_per_key: share(cfg.runs_per_minute_per_key, processes),
            refused_per_source: share(cfg.refused_per_minute_per_source, processes),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Charges one request of `caller` (a run-enqueuing one to the runs bucket too) at `now`,
    /// at the org's own `rates` where it has them; every bucket it needs must have a token, else
    /// none is taken.
    pub fn admit(
        &self,
        caller: &Caller,
        rates: OrgRates,
        runs: bool,
        now: Instant,
    ) -> Result<(), Limited> {
        // (bucket, id, rate here, the setting that sets it)
        let own = |r: Option<u32>, service: u32, scope: Scope, setting: &'static str| match r {
            Some(r) => (share(r, self.processes), setting),
            None => (service, scope.name()),
        };
        let (org_rate, org_limit) = own(
            rates.requests_per_minute,
            self.per_org,
            Scope::Org,
            "the org's setting requests_per_minute",
        );
        let mut charged = vec![
            (
                Scope::Key,
                Subject::Id(caller.key_id),
                self.per_key,
                Scope::Key.name(),
            ),
            (Scope::Org, Subject::Id(caller.org_id), org_rate, org_limit),
        ];
        if runs {
            let (rate, limit) = own(
                rates.runs_per_minute,
                self.runs_per_key,
                Scope::KeyRuns,
                "the org's setting runs_per_minute",
            );
            charged.push((Scope::KeyRuns, Subject::Id(caller.key_id), rate, limit));
        }
        self.take(&charged, now, true)
    }

    /// Whether `source` may have one more unknown token looked up at `now` (nothing taken:
    /// [`RateLimits::refused`] takes it once the token is refused).
    pub fn may_look_up(&self, source: IpAddr, now: Instant) -> Result<(), Limited> {
        self.take(&[self.refused_bucket(source)], now, false)
    }

    /// Charges one refused token to `source` at `now` (past its bucket: nothing more to take).
    pub fn refused(&self, source: IpAddr, now: Instant) {
        let _ = self.take(&[self.refused_bucket(source)], now, true);
    }

    fn refused_bucket(&self, source: IpAddr) -> (Scope, Subject, u32, &'static str) {
        let scope = Scope::RefusedFromSource;
        let subject = Subject::Source(source_of(source));
        (scope, subject, self.refused_per_source, scope.name())
    }

    /// One token of every bucket of `charged` (at its rate here, for the setting named), or
    /// none when one is empty; `take: false` only checks.
    fn take(
        &self,
        charged: &[(Scope, Subject, u32, &'static str)],
        now: Instant,
        take: bool,
    ) -> Result<(), Limited> {
        let charged: Vec<_> = charged.iter().filter(|c| c.2 > 0).collect();
        if charged.is_empty() {
            return Ok(());
        }
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if buckets.len() > MAX_BUCKETS {
            buckets.retain(|_, b| refilled(*b, b.rate, now).tokens < f64::from(b.rate));
        }
        let mut next = Vec::with_capacity(charged.len());
        for &&(scope, id, rate, limit) in &charged {
            let b = buckets.get(&(scope, id)).copied().unwrap_or(Bucket {
                tokens: f64::from(rate),
                at: now,
                rate,
            });
            let b = refilled(b, rate, now);
            if b.tokens < 1.0 {
                let per_sec = f64::from(rate) / 60.0;
                let wait = ((1.0 - b.tokens) / per_sec).ceil().max(1.0);
                return Err(Limited {
                    limit,
                    per_minute: rate,
                    retry_after: Duration::from_secs(wait as u64),
                });
            }
            next.push(((scope, id), b));
        }
        if !take {
            return Ok(());
        }
        for (k, mut b) in next {
            b.tokens -= 1.0;
            buckets.insert(k, b);
        }
        Ok(())
    }
}

/// This process's share of `rate` a minute when `processes` share the traffic (0: off).
fn share(rate: u32, processes: u32) -> u32 {
    match rate {
        0 => 0,
        r => (r / processes.max(1)).max(1),
    }
}

/// `b` at `now`: `rate` tokens a minute added, at most `rate` held (a rate changed since the
/// bucket was last charged takes effect at once).
fn refilled(b: Bucket, rate: u32, now: Instant) -> Bucket {
    let secs = now.saturating_duration_since(b.at).as_secs_f64();
    let cap = f64::from(rate);
    Bucket {
        tokens: (b.tokens + secs * cap / 60.0).min(cap),
        at: now,
        rate,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::auth::Role;

    fn caller(org: Uuid) -> Caller {
        Caller {
            key_id: Uuid::new_v4(),
            org_id: org,
            role: Role::Uploader,
        }
    }

    fn limits(per_key: u32, per_org: u32, runs: u32) -> RateLimits {
        RateLimits::new(&ApiConfig {
            requests_per_minute_per_key: per_key,
            requests_per_minute_per_org: per_org,
            runs_per_minute_per_key: runs,
            ..ApiConfig::default()
        })
    }

    #[test]
    fn a_key_past_its_rate_waits_for_a_token_and_others_do_not() {
        let l = limits(3, 0, 0);
        let (a, b) = (caller(Uuid::new_v4()), caller(Uuid::new_v4()));
        let t0 = Instant::now();
        for _ in 0..3 {
            l.admit(&a, OrgRates::default(), false, t0).unwrap();
        }
        let refused = l.admit(&a, OrgRates::default(), false, t0).unwrap_err();
        assert_eq!(refused.limit, "api.requests_per_minute_per_key");
        assert_eq!(
            refused.retry_after,
            Duration::from_secs(20),
            "3 a minute: one per 20 s"
        );
        l.admit(&b, OrgRates::default(), false, t0).unwrap();
        // 20 s later one token is back, not two.
        let t1 = t0 + Duration::from_secs(20);
        l.admit(&a, OrgRates::default(), false, t1).unwrap();
        assert!(l.admit(&a, OrgRates::default(), false, t1).is_err());
    }

    #[test]
    fn an_org_bucket_is_shared_by_its_keys_and_a_refusal_takes_no_token() {
        let l = limits(100, 2, 1);
        let org = Uuid::new_v4();
        let (k1, k2) = (caller(org), caller(org));
        let t = Instant::now();
        l.admit(&k1, OrgRates::default(), true, t).unwrap();
        // k1's runs bucket is empty: refused, and the org's token is not spent.
        assert_eq!(
            l.admit(&k1, OrgRates::default(), true, t)
                .unwrap_err()
                .limit,
            "api.runs_per_minute_per_key"
        );
        l.admit(&k2, OrgRates::default(), false, t).unwrap();
        assert_eq!(
            l.admit(&k2, OrgRates::default(), false, t)
                .unwrap_err()
                .limit,
            "api.requests_per_minute_per_org"
        );
    }

    #[test]
    fn rates_are_shared_across_the_serve_processes_and_zero_is_off() {
        let l = RateLimits::new(&ApiConfig {
            requests_per_minute_per_key: 600,
            requests_per_minute_per_org: 0,
            runs_per_minute_per_key: 0,
            serve_processes: 3,
            ..ApiConfig::default()
        });
        assert_eq!((l.per_key, l.per_org, l.runs_per_key), (200, 0, 0));
        let c = caller(Uuid::new_v4());
        let t = Instant::now();
        for _ in 0..200 {
            l.admit(&c, OrgRates::default(), true, t).unwrap();
        }
        assert!(l.admit(&c, OrgRates::default(), true, t).is_err());
    }

    #[test]
    fn an_orgs_own_rates_replace_the_services_for_it_only() {
        let l = RateLimits::new(&ApiConfig {
            requests_per_minute_per_key: 1000,
            requests_per_minute_per_org: 10,
            runs_per_minute_per_key: 5,
            serve_processes: 2,
            ..ApiConfig::default()
        });
        let (slow, other) = (caller(Uuid::new_v4()), caller(Uuid::new_v4()));
        let own = OrgRates {
            requests_per_minute: Some(4),
            runs_per_minute: Some(2),
        };
        let t = Instant::now();
        // Its runs rate: 2 a minute over 2 processes, 1 here.
        l.admit(&slow, own, true, t).unwrap();
        let refused = l.admit(&slow, own, true, t).unwrap_err();
        assert_eq!(
            (refused.limit, refused.per_minute),
            ("the org's setting runs_per_minute", 1)
        );
        // Its request rate: 4 a minute, 2 here (one spent above).
        l.admit(&slow, own, false, t).unwrap();
        let refused = l.admit(&slow, own, false, t).unwrap_err();
        assert_eq!(
            (refused.limit, refused.per_minute),
            ("the org's setting requests_per_minute", 2)
        );
        // Another org keeps the service's: 5 of 10 here, 2 of 5 runs.
        for _ in 0..2 {
            l.admit(&other, OrgRates::default(), true, t).unwrap();
        }
        for _ in 0..3 {
            l.admit(&other, OrgRates::default(), false, t).unwrap();
        }
        assert!(l.admit(&other, OrgRates::default(), false, t).is_err());
    }

    #[test]
    fn refused_tokens_are_counted_per_source_and_an_ipv6_host_by_its_64() {
        let l = RateLimits::new(&ApiConfig {
            refused_per_minute_per_source: 2,
            ..ApiConfig::default()
        });
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let t = Instant::now();
        let a = ip("203.0.113.7");
        for _ in 0..2 {
            l.may_look_up(a, t).unwrap();
            l.refused(a, t);
        }
        let refused = l.may_look_up(a, t).unwrap_err();
        assert_eq!(
            (refused.limit, refused.retry_after),
            ("api.refused_per_minute_per_source", Duration::from_secs(30))
        );
        // The same host written as IPv6; another host is not held back.
        assert!(l.may_look_up(ip("::ffff:203.0.113.7"), t).is_err());
        l.may_look_up(ip("203.0.113.8"), t).unwrap();
        // One /64 is one source.
        let v6 = ip("2001:db8:1:2::1");
        l.refused(v6, t);
        l.refused(ip("2001:db8:1:2:ffff::9"), t);
        assert!(l.may_look_up(ip("2001:db8:1:2:abcd::1"), t).is_err());
        l.may_look_up(ip("2001:db8:1:3::1"), t).unwrap();
        // Checking takes nothing; 0 is off.
        let fresh = ip("198.51.100.1");
        for _ in 0..10 {
            l.may_look_up(fresh, t).unwrap();
        }
        let off = RateLimits::new(&ApiConfig {
            refused_per_minute_per_source: 0,
            ..ApiConfig::default()
        });
        for _ in 0..10 {
            off.refused(a, t);
        }
        off.may_look_up(a, t).unwrap();
    }

    #[test]
    fn which_requests_enqueue_runs() {
        use axum::http::Method;
        for (m, p, runs) in [
            (Method::POST, "/v1/documents", true),
            (Method::POST, "/v1/jobs", true),
            (Method::POST, "/v1/documents/0190/refine", true),
            (Method::POST, "/v1/runs/0190/fork", true),
            (Method::POST, "/v1/documents/0190/accept", false),
            (Method::GET, "/v1/documents", false),
            (Method::POST, "/v1/webhooks", false),
        ] {
            assert_eq!(enqueues_runs(&m, p), runs, "{m} {p}");
        }
    }
}
