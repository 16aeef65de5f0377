//! Periodic jobs. The `cron` crate computes ticks; each tick is enqueued under a unique key
//! (schedule, tick), so any number of worker processes produce exactly one job per tick (or,
//! for a fan-out schedule, one per org per local date: the org's nightly job is due once its
//! local time reached its `nightly_hour`, so the schedule of a fan-out kind ticks often). After downtime only the latest missed
//! tick is enqueued, never a burst. A tick's key keeps binding after its job finished (checked
//! at enqueue, until retention purges the job), so a finished tick is not run again.

use super::QueueError;
use crate::catalog::FanOut;
use crate::clock::SharedClock;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// One periodic schedule.
#[derive(Debug, Clone)]
pub struct CronEntry {
    pub kind: String,
    pub schedule: cron::Schedule,
    pub fan_out: Option<FanOut>,
    /// With a fan-out: each org's job is due up to this many seconds after the tick (its own
    /// offset, [`SPREAD_OFFSET`]), so the orgs of a time zone do not all start in one minute.
    pub spread_secs: u32,
    pub priority: i16,
    pub max_attempts: i32,
}

/// What one tick enqueued.
#[derive(Debug, Clone, Serialize)]
pub struct TickReport {
    pub kind: String,
    pub tick: DateTime<Utc>,
    /// Jobs inserted (0 when another node already enqueued this tick).
    pub inserted: u64,
}

/// Enqueues periodic jobs.
pub struct Scheduler {
    pool: PgPool,
    clock: SharedClock,
    entries: Vec<CronEntry>,
}

impl Scheduler {
    /// A scheduler for `entries`.
    pub fn new(pool: PgPool, clock: SharedClock, entries: Vec<CronEntry>) -> Self {
        Self {
            pool,
            clock,
            entries,
        }
    }

    /// The latest tick of `schedule` at or before `now`.
    pub fn latest_tick(schedule: &cron::Schedule, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        schedule
            .after(&(now + chrono::Duration::seconds(1)))
            .next_back()
            .filter(|t| *t <= now)
    }

    /// Enqueues the latest tick at or before "now" of every schedule (idempotent).
    pub async fn run_once(&self) -> Result<Vec<TickReport>, QueueError> {
        let now = self.clock.now();
        let mut reports = Vec::new();
        for e in &self.entries {
            let Some(tick) = Self::latest_tick(&e.schedule, now) else {
                continue;
            };
            let inserted = enqueue_tick(&self.pool, e, tick).await?;
            if inserted > 0 {
                info!(kind = %e.kind, %tick, inserted, "cron tick enqueued");
            }
            reports.push(TickReport {
                kind: e.kind.clone(),
                tick,
                inserted,
            });
        }
        Ok(reports)
    }

    /// Runs `run_once` at start and at every tick until `stop`.
    pub async fn run(self, stop: CancellationToken) {
        loop {
            if let Err(e) = self.run_once().await {
                warn!(error = %e, "cron tick failed; retrying at the next wake-up");
            }
            let now = self.clock.now();
            let next = self
                .entries
                .iter()
                .filter_map(|e| e.schedule.after(&now).next())
                .min();
            let wait = next
                .and_then(|t| (t - now).to_std().ok())
                .unwrap_or(Duration::from_secs(60))
                .min(Duration::from_secs(60))
                + Duration::from_millis(5);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {},
                _ = stop.cancelled() => return,
            }
        }
    }
}

/// An org's offset into the fan-out's spread window, in seconds (`$5` the window; 0: none): the
/// first 32 bits of the md5 of its id, modulo the window — the same for an org every night and
/// on every node, and even over the orgs of a time zone.
pub const SPREAD_OFFSET: &str = "CASE WHEN $5::int > 0 THEN ('x' || substr(md5(o.id::text), 1, 8))::bit(32)::bigint % $5::int ELSE 0 END";

/// Enqueues one tick of `e`; returns the number of jobs inserted.
pub async fn enqueue_tick(
    pool: &PgPool,
    e: &CronEntry,
    tick: DateTime<Utc>,
) -> Result<u64, QueueError> {
    let done = match e.fan_out {
        None => sqlx::query(
            "INSERT INTO agentd_jobs (kind, payload, priority, max_attempts, unique_key, run_at)
             SELECT $1, jsonb_build_object('tick', $2::timestamptz), $3, $4, 'cron:' || $1 || ':' || $5, $2
              WHERE NOT EXISTS (SELECT 1 FROM agentd_jobs WHERE unique_key = 'cron:' || $1 || ':' || $5)
             ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state IN ('available', 'running') DO NOTHING",
        )
        .bind(&e.kind)
        .bind(tick)
        .bind(e.priority)
        .bind(e.max_attempts)
        .bind(tick.to_rfc3339())
        .execute(pool)
        .await?,
        // One set-based statement for every active org: 10,000 orgs are one round trip. Each
        // org's night is its local date at the tick (`orgs.timezone`); it is due once its local
        // hour reached `orgs.nightly_hour`, and the key (org, local date) makes it once per local
        // date — a DST change that repeats or skips the hour changes neither. Its job runs at
        // its nightly hour plus the org's offset into `spread_secs` (issue 30: the orgs of a
        // time zone no longer all start in the same minute), or at the tick if that is past: an
        // org caught up hours later (a worker started at 07:00 for `nightly_hour` 0) runs at
        // once, and an org keeps its own time whichever tick enqueues it. The hour's start is
        // never after the tick (the tick is past the hour, or it would not be due): where the
        // local hour happens twice (autumn), `AT TIME ZONE` reads the second, and the first wins.
        Some(FanOut::Orgs) => sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO agentd_jobs (kind, payload, priority, max_attempts, unique_key, run_at)
             SELECT $1, jsonb_build_object('org_id', o.id, 'night', l.night), $3, $4,
                    $1 || ':' || o.id || ':' || l.night,
                    GREATEST($2, LEAST($2, (date_trunc('day', lt.t) + o.nightly_hour * interval '1 hour')
                                               AT TIME ZONE o.timezone)
                                 + ({SPREAD_OFFSET}) * interval '1 second')
               FROM orgs o
              CROSS JOIN LATERAL (SELECT ($2::timestamptz AT TIME ZONE o.timezone) AS t) lt
              CROSS JOIN LATERAL (SELECT lt.t::date AS night) l
              WHERE o.active AND extract(hour FROM lt.t) >= o.nightly_hour
                AND NOT EXISTS (SELECT 1 FROM agentd_jobs j
                                 WHERE j.unique_key = $1 || ':' || o.id || ':' || l.night)
             ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state IN ('available', 'running') DO NOTHING",
        )))
        .bind(&e.kind)
        .bind(tick)
        .bind(e.priority)
        .bind(e.max_attempts)
        .bind(i32::try_from(e.spread_secs).unwrap_or(i32::MAX))
        .execute(pool)
        .await?,
    };
    Ok(done.rows_affected())
}
