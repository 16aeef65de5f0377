//! Rescue of expired leases (crashed or hung workers): the SQL, with backoff per kind.

use super::QueueError;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

/// Re-queues up to `limit` running jobs whose lease expired before `now` (crashed or hung
/// worker; `None`: the database's clock), available again at once. The lost attempt counts; out of attempts → `dead`.
/// The [`Rescuer`](super::maintenance::Rescuer) uses [`rescue_expired_with`], which backs off.
pub async fn rescue_expired(
    pool: &PgPool,
    now: impl Into<Option<DateTime<Utc>>>,
    limit: u32,
) -> Result<RescueReport, QueueError> {
    rescue_expired_with(pool, now, limit, &RescueBackoff::immediate()).await
}

/// How rescued jobs back off, like failed ones: per kind (the job files' `backoff_base_ms` /
/// `backoff_max_ms`), other kinds by `fallback`. Between half and all of
/// `base * 2^(counted attempts - 1)`, capped at `max`, written to `run_at`.
#[derive(Debug, Clone)]
pub struct RescueBackoff {
    pub per_kind: Vec<(String, crate::backoff::Backoff)>,
    pub fallback: crate::backoff::Backoff,
}

impl RescueBackoff {
    /// No delay at all (`run_at = now`).
    pub fn immediate() -> Self {
        Self {
            per_kind: Vec::new(),
            fallback: crate::backoff::Backoff {
                base: std::time::Duration::ZERO,
                max: std::time::Duration::ZERO,
            },
        }
    }

    /// Each kind's retry policy from its job file; 1 s doubling up to 5 min for other kinds.
    pub fn from_catalog(catalog: &crate::catalog::Catalog) -> Self {
        Self {
            per_kind: catalog
                .kinds
                .values()
                .map(|s| {
                    (
                        s.kind.clone(),
                        crate::backoff::Backoff {
                            base: std::time::Duration::from_millis(s.queue.backoff_base_ms),
                            max: std::time::Duration::from_millis(s.queue.backoff_max_ms),
                        },
                    )
                })
                .collect(),
            ..Self::default()
        }
    }
}

impl Default for RescueBackoff {
    fn default() -> Self {
        Self {
            per_kind: Vec::new(),
            fallback: crate::backoff::Backoff {
                base: std::time::Duration::from_secs(1),
                max: std::time::Duration::from_secs(300),
            },
        }
    }
}

/// [`rescue_expired`] with a backoff: a re-queued job is available again at
/// `now + delay(counted attempts)`, so a job that hangs or kills its worker does not come back
/// at once, again and again.
pub async fn rescue_expired_with(
    pool: &PgPool,
    now: impl Into<Option<DateTime<Utc>>>,
    limit: u32,
    backoff: &RescueBackoff,
) -> Result<RescueReport, QueueError> {
    let now: Option<DateTime<Utc>> = now.into();
    let ms = |d: std::time::Duration| d.as_millis() as f64;
    let kinds: Vec<&str> = backoff.per_kind.iter().map(|(k, _)| k.as_str()).collect();
    let bases: Vec<f64> = backoff.per_kind.iter().map(|(_, b)| ms(b.base)).collect();
    let maxes: Vec<f64> = backoff.per_kind.iter().map(|(_, b)| ms(b.max)).collect();
    // `$1`: the lease clock, `NULL` for the database's (review #11).
    let rows: Vec<(i64, super::JobState)> = sqlx::query_as(
        "WITH p AS (SELECT * FROM unnest($3::text[], $4::float8[], $5::float8[]) AS p(kind, base_ms, max_ms))
         UPDATE agentd_jobs j
            SET state = CASE WHEN attempt - released >= max_attempts THEN 'dead' ELSE 'available' END,
                finished_at = CASE WHEN attempt - released >= max_attempts THEN COALESCE($1::timestamptz, now()) ELSE NULL END,
                run_at = CASE WHEN attempt - released >= max_attempts THEN COALESCE($1::timestamptz, now()) ELSE COALESCE($1::timestamptz, now()) + (
                    LEAST(COALESCE((SELECT max_ms FROM p WHERE p.kind = j.kind), $7),
                          COALESCE((SELECT base_ms FROM p WHERE p.kind = j.kind), $6)
                          * power(2::float8, LEAST(GREATEST(attempt - released, 1), 30) - 1))
                    * (0.5 + 0.5 * random())) * interval '1 millisecond' END,
                lease_expires_at = NULL, locked_by = NULL,
                last_error = 'lease expired: the worker crashed, hung or lost its database connection (attempt ' || attempt || ')'
          WHERE id = ANY(ARRAY(
                SELECT id FROM agentd_jobs
                 WHERE state = 'running' AND kind IS NOT NULL
                   AND lease_expires_at < COALESCE($1::timestamptz, now())
                 ORDER BY lease_expires_at
                 LIMIT $2
                 FOR UPDATE SKIP LOCKED))
      RETURNING id, state",
    )
    .bind(now)
    .bind(i64::from(limit))
    .bind(&kinds)
    .bind(&bases)
    .bind(&maxes)
    .bind(ms(backoff.fallback.base))
    .bind(ms(backoff.fallback.max))
    .fetch_all(pool)
    .await?;
    let dead = rows
        .iter()
        .filter(|(_, s)| *s == super::JobState::Dead)
        .count() as u64;
    Ok(RescueReport {
        requeued: rows.len() as u64 - dead,
        dead,
    })
}

/// What a rescue pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RescueReport {
    pub requeued: u64,
    pub dead: u64,
}
