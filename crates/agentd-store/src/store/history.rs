//! Time-based retention of the history tables (review #10): agent runs (their transcripts,
//! symbol tables and loop marks go with them by foreign key), events, suggestions, audit rows
//! and provider calls older than `[retention] *_after_days` (0: kept) are deleted, a batch per
//! statement, by the maintenance loop ([`crate::queue::maintenance::every`]).
//!
//! Never deleted: a run still running, or one a pending approval, a pending or shown suggestion
//! or a waiting or running job still names; a suggestion still pending or shown, one a pending
//! approval names, or a dismissal the nightly run still reads
//! ([`super::suggestions::DISMISSED_DAYS`]); an event a webhook delivery still has to
//! send. Audit rows and provider calls are append-only: they go through
//! `agentd_purge_history` (migration 0080), which runs as the schema owner, keeps the rows of
//! running runs and whatever is younger than `agentd_history_min_days()` (30) days. "Now" comes
//! from the clock.

use crate::clock::SharedClock;
use crate::config::RetentionConfig;
use crate::queue::maintenance::{drain, every};
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::info;

/// Days each table keeps (0: everything is kept).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HistoryDays {
    pub runs: u64,
    pub events: u64,
    pub suggestions: u64,
    pub audit: u64,
    pub provider_calls: u64,
}

impl HistoryDays {
    /// The `[retention]` keys.
    pub fn from_config(r: &RetentionConfig) -> Self {
        Self {
            runs: r.runs_after_days,
            events: r.events_after_days,
            suggestions: r.suggestions_after_days,
            audit: r.audit_after_days,
            provider_calls: r.provider_calls_after_days,
        }
    }
}

/// Rows deleted by one pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Purged {
    pub runs: u64,
    pub events: u64,
    pub suggestions: u64,
    pub audit: u64,
    pub provider_calls: u64,
}

impl Purged {
    fn total(&self) -> u64 {
        self.runs + self.events + self.suggestions + self.audit + self.provider_calls
    }
}

/// Deletes history older than its table's retention, in batches.
pub struct HistoryRetention {
    pub pool: PgPool,
    pub clock: SharedClock,
    pub days: HistoryDays,
    pub batch: u32,
    pub interval: Duration,
}

const RUNS: &str = "DELETE FROM agent_runs WHERE id = ANY(ARRAY(
    SELECT r.id FROM agent_runs r
     WHERE r.status <> 'running' AND r.finished_at < $1
       AND NOT EXISTS (SELECT 1 FROM pending_approvals p
                        WHERE p.run_id = r.id AND p.status = 'pending')
       AND NOT EXISTS (SELECT 1 FROM suggestions s
                        WHERE s.run_id = r.id AND s.status IN ('pending', 'shown'))
       AND NOT EXISTS (SELECT 1 FROM agentd_jobs j
                        WHERE j.id = r.job_id AND j.state IN ('available', 'running'))
     ORDER BY r.finished_at LIMIT $2))";

const SUGGESTIONS: &str = "DELETE FROM suggestions WHERE id = ANY(ARRAY(
    SELECT s.id FROM suggestions s
     WHERE s.status NOT IN ('pending', 'shown') AND s.created_at < $1
       AND coalesce(s.status_changed_at, s.created_at) < $1
       AND (s.status <> 'dismissed' OR s.status_changed_at < $3)
       AND NOT EXISTS (SELECT 1 FROM pending_approvals p
                        WHERE p.suggestion_id = s.id AND p.status = 'pending')
     ORDER BY s.created_at LIMIT $2))";

/// Events older than the cutoff and older than the first event a waiting or running webhook
/// delivery still has to send.
const EVENTS: &str = "DELETE FROM agentd_events WHERE id = ANY(ARRAY(
    SELECT e.id FROM agentd_events e
     WHERE e.occurred_at < $1
       AND e.id < coalesce((SELECT min(CASE WHEN jsonb_typeof(j.payload->'event_id') = 'number'
                                            THEN (j.payload->>'event_id')::numeric END)
                              FROM agentd_jobs j
                             WHERE j.kind = 'webhook_delivery'
                               AND j.state IN ('available', 'running')),
                           'Infinity'::numeric)
     ORDER BY e.occurred_at LIMIT $2))";

impl HistoryRetention {
    /// For the service: the `[retention]` section.
    pub fn from_config(pool: PgPool, clock: SharedClock, r: &RetentionConfig) -> Self {
        Self {
            pool,
            clock,
            days: HistoryDays::from_config(r),
            batch: r.batch,
            interval: Duration::from_secs(r.interval_secs),
        }
    }

    /// One pass over every table; returns what it deleted.
    pub async fn run_once(&self) -> sqlx::Result<Purged> {
        let now = self.clock.now();
        let cutoff = |days: u64| {
            (days > 0).then(|| now - chrono::Duration::days(i64::try_from(days).unwrap_or(36_500)))
        };
        let mut p = Purged::default();
        if let Some(c) = cutoff(self.days.runs) {
            p.runs = self.delete(RUNS, c, None).await?;
        }
        if let Some(c) = cutoff(self.days.suggestions) {
            let dismissals = now - chrono::Duration::days(super::suggestions::DISMISSED_DAYS);
            p.suggestions = self.delete(SUGGESTIONS, c, Some(dismissals)).await?;
        }
        if let Some(c) = cutoff(self.days.events) {
            p.events = self.delete(EVENTS, c, None).await?;
        }
        if let Some(c) = cutoff(self.days.audit) {
            p.audit = self.append_only("audit_events", c).await?;
        }
        if let Some(c) = cutoff(self.days.provider_calls) {
            p.provider_calls = self.append_only("provider_calls", c).await?;
        }
        if p.total() > 0 {
            info!(
                runs = p.runs,
                suggestions = p.suggestions,
                events = p.events,
                audit = p.audit,
                provider_calls = p.provider_calls,
                "retention deleted history"
            );
        }
        Ok(p)
    }

    async fn delete(
        &self,
        sql: &'static str,
        cutoff: DateTime<Utc>,
        extra: Option<DateTime<Utc>>,
    ) -> sqlx::Result<u64> {
        drain(self.batch, || async move {
            let mut q = sqlx::query(sql).bind(cutoff).bind(i64::from(self.batch));
            if let Some(t) = extra {
                q = q.bind(t);
            }
            Ok(q.execute(&self.pool).await?.rows_affected())
        })
        .await
    }

    async fn append_only(&self, table: &'static str, cutoff: DateTime<Utc>) -> sqlx::Result<u64> {
        drain(self.batch, || async move {
            let n: i64 = sqlx::query_scalar("SELECT agentd_purge_history($1, $2, $3)")
                .bind(table)
                .bind(cutoff)
                .bind(i32::try_from(self.batch).unwrap_or(i32::MAX))
                .fetch_one(&self.pool)
                .await?;
            Ok(u64::try_from(n).unwrap_or(0))
        })
        .await
    }

    /// Runs until `stop`.
    pub async fn run(self, stop: CancellationToken) {
        every(self.interval, stop, "history retention", || self.run_once()).await
    }
}
