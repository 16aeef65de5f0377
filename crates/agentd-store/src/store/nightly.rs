//! The nightly fan-out (a schedule with `fan_out = "orgs"`, `jobs/proactive_suggestion.toml`):
//! each active org gets one job per local date, due once its local time (`orgs.timezone`)
//! reached its `nightly_hour`. The queue's scheduler asks for the targets of a tick
//! ([`crate::queue::cron::FanOut`]) and enqueues them; the orgs are read here.

use crate::catalog;
use crate::kinds::proactive_suggestion::Payload;
use crate::queue::QueueError;
use crate::queue::cron::{FanOut, TickJob};
use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use sqlx::PgPool;
use std::sync::Arc;
use uuid::Uuid;

/// The fan-out a job file's `fan_out` names, with its `spread_secs`.
pub fn fan_out(kind: catalog::FanOut, spread_secs: u32) -> Arc<dyn FanOut> {
    match kind {
        catalog::FanOut::Orgs => Arc::new(OrgNights { spread_secs }),
    }
}

/// One job per active org and local date: payload `{org_id, night}`, key `<kind>:<org>:<night>`
/// (for `proactive_suggestion` the key [`crate::kinds::JobKind::job`] gives, so a night enqueued
/// by the API is not enqueued again by the tick, nor the reverse).
#[derive(Debug, Clone, Copy)]
pub struct OrgNights {
    /// Each org's job runs up to this many seconds after its nightly hour, at its own offset
    /// ([`SPREAD_OFFSET`]), so the orgs of a time zone do not all start in one minute.
    pub spread_secs: u32,
}

/// An org's offset into the spread window, in seconds (`$2` the window; 0: none): the first 32
/// bits of the md5 of its id, modulo the window — the same for an org every night and on every
/// node, and even over the orgs of a time zone.
pub const SPREAD_OFFSET: &str = "CASE WHEN $2::int > 0 THEN ('x' || substr(md5(o.id::text), 1, 8))::bit(32)::bigint % $2::int ELSE 0 END";

#[async_trait]
impl FanOut for OrgNights {
    async fn due(
        &self,
        pool: &PgPool,
        kind: &str,
        tick: DateTime<Utc>,
    ) -> Result<Vec<TickJob>, QueueError> {
        // One set-based statement for every active org. Each org's night is its local date at
        // the tick; it is due once its local hour reached `orgs.nightly_hour`, and the key (org,
        // local date) makes it once per local date — a DST change that repeats or skips the hour
        // changes neither. Its job runs at its nightly hour plus the org's offset into
        // `spread_secs` (issue 30: the orgs of a time zone no longer all start in the same
        // minute), or at the tick if that is past: an org caught up hours later (a worker
        // started at 07:00 for `nightly_hour` 0) runs at once, and an org keeps its own time
        // whichever tick enqueues it. The hour's start is never after the tick (the tick is
        // past the hour, or it would not be due): where the local hour happens twice (autumn),
        // `AT TIME ZONE` reads the second, and the first wins.
        let due: Vec<(Uuid, NaiveDate, DateTime<Utc>)> =
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT o.id, l.night,
                        GREATEST($1, LEAST($1, (date_trunc('day', lt.t) + o.nightly_hour * interval '1 hour')
                                                   AT TIME ZONE o.timezone)
                                     + ({SPREAD_OFFSET}) * interval '1 second')
                   FROM orgs o
                  CROSS JOIN LATERAL (SELECT ($1::timestamptz AT TIME ZONE o.timezone) AS t) lt
                  CROSS JOIN LATERAL (SELECT lt.t::date AS night) l
                  WHERE o.active AND extract(hour FROM lt.t) >= o.nightly_hour"
            )))
            .bind(tick)
            .bind(i32::try_from(self.spread_secs).unwrap_or(i32::MAX))
            .fetch_all(pool)
            .await?;
        Ok(due
            .into_iter()
            .map(|(org_id, night, run_at)| job(kind, Payload { org_id, night }, run_at))
            .collect())
    }
}

/// The job of one org's night.
fn job(kind: &str, p: Payload, run_at: DateTime<Utc>) -> TickJob {
    TickJob {
        unique_key: format!("{kind}:{}:{}", p.org_id, p.night),
        payload: serde_json::json!({"org_id": p.org_id, "night": p.night}),
        run_at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::{JobKind, ProactiveSuggestion};

    /// The tick's job of a night is the one `JobKind` builds for it: the same payload and key.
    #[test]
    fn a_nights_job_is_the_kinds_own() {
        let p = Payload {
            org_id: Uuid::from_u128(7),
            night: NaiveDate::from_ymd_opt(2026, 11, 22).unwrap(),
        };
        let t = job(ProactiveSuggestion::NAME, p, Utc::now());
        let own = ProactiveSuggestion::unique(&p).unwrap();
        assert_eq!(t.unique_key, own.key);
        assert_eq!(ProactiveSuggestion::parse(&t.payload).unwrap(), p);
        assert_eq!(t.payload, serde_json::to_value(p).unwrap());
    }
}
