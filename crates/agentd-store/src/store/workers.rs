//! The registry of live worker processes (`agentd_workers`, migration 0096): each worker writes
//! its row every heartbeat with what only its memory holds — its provider entries' circuit
//! breakers, as JSON the provider layer made (`llm::chain::breaker::Snapshot`) — and deletes it
//! when it stops; `agentd status` reads the rows not yet expired. The queue's own tables say
//! which jobs a worker holds (`agentd_jobs.locked_by`), not which workers live.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgExecutor;

/// How long a row outlives its expiry before any worker's beat removes it (a worker that died).
const KEEP_EXPIRED_HOURS: i32 = 24;

/// A worker's row.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Worker {
    /// As in `agentd_jobs.locked_by` (host:pid:suffix).
    pub id: String,
    pub host: String,
    pub pid: i32,
    /// The job kinds it serves.
    pub kinds: Vec<String>,
    pub started_at: DateTime<Utc>,
    /// Its last beat.
    pub seen_at: DateTime<Utc>,
    /// Counted as live until then (a lease after its last beat).
    pub expires_at: DateTime<Utc>,
    /// Its provider entries' breakers at its last beat (a JSON array).
    pub breakers: serde_json::Value,
}

/// Writes `w` (a beat: inserted the first time, replaced after), and removes the rows of
/// workers that expired a day before `w.seen_at`.
pub async fn beat<'e, E: PgExecutor<'e> + Copy>(exec: E, w: &Worker) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO agentd_workers (id, host, pid, kinds, started_at, seen_at, expires_at, breakers)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (id) DO UPDATE SET seen_at = EXCLUDED.seen_at,
                expires_at = EXCLUDED.expires_at, breakers = EXCLUDED.breakers",
    )
    .bind(&w.id)
    .bind(&w.host)
    .bind(w.pid)
    .bind(&w.kinds)
    .bind(w.started_at)
    .bind(w.seen_at)
    .bind(w.expires_at)
    .bind(&w.breakers)
    .execute(exec)
    .await?;
    sqlx::query("DELETE FROM agentd_workers WHERE expires_at < $1 - make_interval(hours => $2)")
        .bind(w.seen_at)
        .bind(KEEP_EXPIRED_HOURS)
        .execute(exec)
        .await?;
    Ok(())
}

/// Removes worker `id`'s row (it stopped).
pub async fn gone<'e, E: PgExecutor<'e>>(exec: E, id: &str) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM agentd_workers WHERE id = $1")
        .bind(id)
        .execute(exec)
        .await?;
    Ok(())
}

/// The workers live at `now` (not expired), oldest first.
pub async fn live<'e, E: PgExecutor<'e>>(exec: E, now: DateTime<Utc>) -> sqlx::Result<Vec<Worker>> {
    sqlx::query_as(
        "SELECT id, host, pid, kinds, started_at, seen_at, expires_at, breakers
           FROM agentd_workers WHERE expires_at > $1 ORDER BY started_at, id",
    )
    .bind(now)
    .fetch_all(exec)
    .await
}
