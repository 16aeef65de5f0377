//! The job table vacuums itself (issue 30 item 5). Every job leaves dead row versions behind
//! (the claim, the ack, retention's delete); autovacuum looks at a table at most once a naptime
//! and can be off, and a queue table that is not vacuumed grows without end (a compressed week
//! with autovacuum on: 72 → 476 MiB). So the retention unit, after each pass, reads the dead
//! rows PostgreSQL counts for `agentd_jobs` and runs `VACUUM (ANALYZE, SKIP_LOCKED, TRUNCATE
//! false)` on it when
//! they pass [`JobsVacuum::dead_rows`] and a tenth of the live rows.
//!
//! Bounded: at most [`MAX_PER_PASS`] vacuums per retention pass (back to back only while the
//! dead rows stay past the threshold); each skips the table instead of waiting when
//! another vacuum (autovacuum, another node's unit) holds it; the tenth of the live rows keeps a
//! large backlog from being vacuumed for a few dead rows. VACUUM cannot run inside a
//! transaction block: it goes straight to the pool, never through a transaction. A role that
//! may not vacuum the table (not its owner, not the database's owner) is told once in the log
//! and left to autovacuum.

use sqlx::PgPool;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use tracing::{info, warn};

/// When the unit vacuums `agentd_jobs`.
#[derive(Debug, Default)]
pub struct JobsVacuum {
    /// Dead rows that start a vacuum (with at least a tenth of the live rows); 0: never (left
    /// to autovacuum). `[retention] vacuum_dead_rows`.
    pub dead_rows: u64,
    /// Set once the role was found unable to vacuum the table (logged once, then skipped).
    refused: AtomicBool,
}

/// Vacuums one pass may run back to back: at a high churn a vacuum's own duration lets as many
/// dead rows pile up as the threshold, so the pass vacuums again while they do (bounded).
pub const MAX_PER_PASS: u32 = 3;

impl JobsVacuum {
    pub fn new(dead_rows: u64) -> Self {
        Self {
            dead_rows,
            refused: AtomicBool::new(false),
        }
    }

    /// The threshold for a table with `live` rows.
    pub fn threshold(&self, live: u64) -> u64 {
        self.dead_rows.max(live / 10)
    }

    /// Vacuums `agentd_jobs` while its dead rows (the first time also `deleted`, the rows the
    /// pass just deleted, which PostgreSQL's statistics may not hold yet) pass the threshold, at
    /// most [`MAX_PER_PASS`] times; returns how many vacuums ran.
    pub async fn check(&self, pool: &PgPool, deleted: u64) -> sqlx::Result<u32> {
        let mut ran = 0;
        let mut deleted = deleted;
        while ran < MAX_PER_PASS && self.dead_rows > 0 && !self.refused.load(Ordering::Relaxed) {
            let (dead, live, allowed): (i64, i64, bool) = sqlx::query_as(
                "SELECT coalesce(s.n_dead_tup, 0), coalesce(s.n_live_tup, 0),
                        pg_has_role(c.relowner, 'USAGE')
                        OR pg_has_role((SELECT datdba FROM pg_database
                                         WHERE datname = current_database()), 'USAGE')
                   FROM pg_class c
                   LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
                  WHERE c.oid = 'agentd_jobs'::regclass",
            )
            .fetch_one(pool)
            .await?;
            let dead = u64::try_from(dead)
                .unwrap_or(0)
                .max(std::mem::take(&mut deleted));
            let live = u64::try_from(live).unwrap_or(0);
            if dead < self.threshold(live) {
                break;
            }
            if !allowed {
                self.refused.store(true, Ordering::Relaxed);
                warn!(
                    dead,
                    "agentd_jobs is not vacuumed by agentd: its role neither owns the table nor \
                     the database (autovacuum must keep up; or set retention.vacuum_dead_rows = 0)"
                );
                break;
            }
            let t0 = Instant::now();
            // A statement of its own on a pooled connection: never inside a transaction block.
            // The first vacuum of a pass also refreshes the planner's statistics. No truncation
            // of empty pages at the end: it takes an exclusive lock on the hot table, and the
            // next jobs would only extend it again.
            let sql = if ran == 0 {
                "VACUUM (ANALYZE, SKIP_LOCKED, TRUNCATE false) agentd_jobs"
            } else {
                "VACUUM (SKIP_LOCKED, TRUNCATE false) agentd_jobs"
            };
            sqlx::raw_sql(sql).execute(pool).await?;
            ran += 1;
            metrics::counter!("agentd_jobs_vacuums_total").increment(1);
            info!(
                dead,
                live,
                millis = t0.elapsed().as_millis() as u64,
                "vacuumed agentd_jobs"
            );
        }
        Ok(ran)
    }
}
