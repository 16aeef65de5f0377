//! Periodic jobs. The `cron` crate computes ticks; each tick is enqueued under a unique key
//! (schedule, tick), so any number of worker processes produce exactly one job per tick (or,
//! for a fan-out schedule, one job per target its [`FanOut`] finds due at the tick, each under
//! the key the fan-out gives it: the nightly fan-out over orgs is `store::nightly`, the caller's,
//! since the queue knows only its own table). After downtime only the latest missed
//! tick is enqueued, never a burst. A tick's key keeps binding after its job finished (checked
//! at enqueue, until retention purges the job), so a finished tick is not run again.

use super::QueueError;
use crate::clock::SharedClock;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// One periodic schedule.
#[derive(Debug, Clone)]
pub struct CronEntry {
    pub kind: String,
    pub schedule: cron::Schedule,
    /// `None`: one job per tick. Else one job per target the fan-out finds due at the tick.
    pub fan_out: Option<Arc<dyn FanOut>>,
    pub priority: i16,
    pub max_attempts: i32,
}

/// The targets of a fan-out schedule: a tick enqueues one job for each (River's periodic job
/// constructor, for many jobs). Implemented where the targets live (`store::nightly`).
#[async_trait]
pub trait FanOut: Send + Sync + std::fmt::Debug {
    /// The jobs of `kind` due at `tick`, whether or not an earlier tick enqueued them already
    /// (their unique keys make that a no-op).
    async fn due(
        &self,
        pool: &PgPool,
        kind: &str,
        tick: DateTime<Utc>,
    ) -> Result<Vec<TickJob>, QueueError>;
}

/// One job a fan-out tick enqueues (kind, priority and attempts are the schedule's).
#[derive(Debug, Clone, PartialEq)]
pub struct TickJob {
    pub payload: serde_json::Value,
    /// Binds while the job waits or runs and, checked at enqueue, until retention purges it: a
    /// target is enqueued once per key however many ticks find it due.
    pub unique_key: String,
    pub run_at: DateTime<Utc>,
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

/// Enqueues one tick of `e`; returns the number of jobs inserted.
pub async fn enqueue_tick(
    pool: &PgPool,
    e: &CronEntry,
    tick: DateTime<Utc>,
) -> Result<u64, QueueError> {
    let done = match &e.fan_out {
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
        // Two round trips whatever the number of targets (10,000 orgs: one read, one insert).
        // A key already taken (another node, an earlier tick of the same period, a finished job
        // not yet purged) inserts nothing.
        Some(fan_out) => {
            let jobs = fan_out.due(pool, &e.kind, tick).await?;
            if jobs.is_empty() {
                return Ok(0);
            }
            let (mut payloads, mut keys, mut run_ats) = (Vec::new(), Vec::new(), Vec::new());
            for j in jobs {
                payloads.push(j.payload);
                keys.push(j.unique_key);
                run_ats.push(j.run_at);
            }
            sqlx::query(
                "INSERT INTO agentd_jobs (kind, payload, priority, max_attempts, unique_key, run_at)
                 SELECT $1, t.payload, $2, $3, t.unique_key, t.run_at
                   FROM unnest($4::jsonb[], $5::text[], $6::timestamptz[]) AS t(payload, unique_key, run_at)
                  WHERE NOT EXISTS (SELECT 1 FROM agentd_jobs j WHERE j.unique_key = t.unique_key)
                 ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state IN ('available', 'running') DO NOTHING",
            )
            .bind(&e.kind)
            .bind(e.priority)
            .bind(e.max_attempts)
            .bind(payloads)
            .bind(keys)
            .bind(run_ats)
            .execute(pool)
            .await?
        }
    };
    Ok(done.rows_affected())
}
