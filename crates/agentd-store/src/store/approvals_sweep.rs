//! SQL for the expiry sweep of pending approvals (`approvals::sweep`): its batches, the
//! set-based statement that judges and ends a batch, the decisions of the rows it leaves to
//! Rust, the re-proposals of stale approvals and the purge of decided ones. "Now" is always a
//! parameter.

pub use super::approval_life::Reproposals;
use super::approvals::ApprovalRow;
use super::events::EventType;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

/// Which batch of pending approvals the sweep takes: past their TTL at `now` (`expired_only`) or
/// not yet, after `after` in id order, at most `limit`, optionally only `only`.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    pub now: DateTime<Utc>,
    pub expired_only: bool,
    pub after: Uuid,
    pub only: Option<&'a [Uuid]>,
    pub limit: i64,
}

impl<'a> Batch<'a> {
    /// Binds `$1`–`$5`.
    fn bind<O>(
        &self,
        q: sqlx::query::QueryAs<'a, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::QueryAs<'a, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
        q.bind(self.now)
            .bind(self.expired_only)
            .bind(self.after)
            .bind(self.only)
            .bind(self.limit)
    }
}

/// A batch of pending approvals. With `lock` the rows are locked and rows locked by another
/// sweeper are skipped; without it they are only read (the sweep's pass over live approvals: most
/// stay unchanged, and locking them would write every row).
pub async fn pending_batch(
    conn: &mut PgConnection,
    batch: &Batch<'_>,
    lock: bool,
) -> sqlx::Result<Vec<ApprovalRow>> {
    let sql = if lock {
        include_str!("sql/approvals_batch_locked.sql")
    } else {
        include_str!("sql/approvals_batch.sql")
    };
    batch.bind(sqlx::query_as(sql)).fetch_all(conn).await
}

/// The ids of a [`Batch`], in order, read without locking them: the set-based sweep's scan,
/// which hands them to [`sweep_batch`] (the pkey's order, the batch's conditions; only ids are
/// sent). Each comes with whether [`sweep_batch`] has anything to do with it: past the TTL
/// always (it ends); live, unless it is an approval of `doc_tools` on a document still at the
/// version its snapshot was read from — unchanged, which the statement would only confirm.
pub async fn pending_ids(
    conn: &mut PgConnection,
    batch: &Batch<'_>,
    doc_tools: &[&str],
) -> sqlx::Result<Vec<(Uuid, bool)>> {
    batch
        .bind(sqlx::query_as(include_str!("sql/approvals_batch_ids.sql")))
        .bind(doc_tools)
        .fetch_all(conn)
        .await
}

/// What [`sweep_batch`] did with one batch of pending approvals.
#[derive(Debug, Default)]
pub struct SweptBatch {
    /// Approvals in the batch.
    pub seen: u64,
    /// Ended `expired` by the statement itself (past their TTL, snapshot unchanged).
    pub expired: u64,
    /// Ended `stale` by the statement itself (their document changed, see [`sweep_batch`]).
    pub stale: u64,
    /// The rest, in id order: approvals of another tool, or on a document whose change the
    /// statement leaves to the caller's re-check (a number in either snapshot).
    pub recheck: Vec<Uuid>,
}

/// The set-based expiry sweep's statement (`sql/approvals_sweep_expired.sql` with
/// `expired_only`, else `sql/approvals_sweep_live.sql`) for the approvals `ids` (a batch
/// [`pending_ids`] read) that are still pending and past their TTL at `now` (`expired_only`) or
/// not. Approvals of
/// `doc_tools` (whose snapshot is their document's row) are judged here:
/// - **unchanged** when the row is still the version their snapshot was read from, or else when
///   their stored snapshot equals the row's snapshot now (`document_snapshot`, migration 0090,
///   the one definition [`super::documents::snapshot`] reads too; a missing document's form if
///   it is gone). The stored snapshot is the one its hash was computed from
///   (every writer stores both together, and the version with them or none), so an unchanged
///   snapshot means an unchanged hash. With `expired_only` these end `expired` with `result`.
/// - **changed** when the two snapshots differ and neither holds a number: they hash differently
///   (the canonical JSON of a string, boolean or array of them is the value itself), and
///   the statement's diff is what `approvals::diff` writes (every key of either whose values
///   differ, as `{"before": …, "after": …}`; equal to the Rust function for objects without
///   numbers: `jsonb` compares `1` and `1.0` equal, `serde_json` does not, and `serde_json`
///   reads a long number as the nearest `f64`). These end `stale` with `{"changes": …}`, in
///   both passes, as the caller would end them.
/// - the rest (another tool, a `document_id` not in the hyphenated form, migration 0063, a number in a snapshot) are named in
///   [`SweptBatch::recheck`] for the caller to re-check in Rust.
///
/// With `expired_only` the batch is locked (rows locked elsewhere are skipped); without it only
/// the changed rows are written, and only if still pending. Ended approvals get their audit rows
/// and events (`approval.expired`, `approval.stale`) in the same statement; the update finds them by
/// primary key (a join with a CTE made the planner, which expects few rows from it, hash the
/// whole table for every batch; with migration 0062 the update is HOT). Only ids and verdicts
/// leave the database.
pub async fn sweep_batch(
    conn: &mut PgConnection,
    ids: &[Uuid],
    now: DateTime<Utc>,
    expired_only: bool,
    doc_tools: &[&str],
    by: &str,
    result: &Value,
) -> sqlx::Result<SweptBatch> {
    let rows: Vec<(Uuid, bool, i64, i64)> = if expired_only {
        sqlx::query_as(include_str!("sql/approvals_sweep_expired.sql"))
            .bind(now)
            .bind(ids)
            .bind(doc_tools)
            .bind(by)
            .bind(result)
            .bind(EventType::ApprovalExpired.as_str())
            .bind(EventType::ApprovalStale.as_str())
            .fetch_all(conn)
            .await?
    } else {
        sqlx::query_as(include_str!("sql/approvals_sweep_live.sql"))
            .bind(now)
            .bind(ids)
            .bind(doc_tools)
            .bind(by)
            .bind(EventType::ApprovalStale.as_str())
            .fetch_all(conn)
            .await?
    };
    Ok(SweptBatch {
        seen: rows.len() as u64,
        expired: rows.first().map_or(0, |r| r.2 as u64),
        stale: rows.first().map_or(0, |r| r.3 as u64),
        recheck: rows.iter().filter(|r| !r.1).map(|r| r.0).collect(),
    })
}

/// Pending approvals among `ids`, in id order (the sweep's rows to re-check in Rust; the caller
/// holds their locks, if any).
pub async fn pending_by_ids(
    conn: &mut PgConnection,
    ids: &[Uuid],
) -> sqlx::Result<Vec<ApprovalRow>> {
    sqlx::query_as(
        "SELECT * FROM pending_approvals WHERE id = ANY($1) AND status = 'pending' ORDER BY id",
    )
    .bind(ids)
    .fetch_all(conn)
    .await
}

/// [`decide_many`] with the events (`event`, as `approvals::notify::swept` writes them) in the
/// same single statement (`sql/approvals_decide_swept.sql`); only ids and results are sent. Returns how many were decided (the
/// others were no longer pending).
pub async fn decide_swept(
    conn: &mut PgConnection,
    rows: &[(&ApprovalRow, Value)],
    status: &str,
    by: &str,
    now: DateTime<Utc>,
    event: &str,
) -> sqlx::Result<u64> {
    if rows.is_empty() {
        return Ok(0);
    }
    let ids: Vec<Uuid> = rows.iter().map(|(r, _)| r.id).collect();
    let results: Vec<&Value> = rows.iter().map(|(_, v)| v).collect();
    let n: i64 = sqlx::query_scalar(include_str!("sql/approvals_decide_swept.sql"))
        .bind(now)
        .bind(&ids)
        .bind(&results)
        .bind(status)
        .bind(by)
        .bind(event)
        .fetch_one(conn)
        .await?;
    Ok(n as u64)
}

/// Sets `status` on many pending approvals in one statement, with per-row results, and writes
/// their audit rows (decision = status) in a second statement. `rows` keeps only the approvals
/// this call decided: one decided meanwhile (no longer pending) gets no second decision, audit
/// row or event.
pub async fn decide_many(
    conn: &mut PgConnection,
    rows: &mut Vec<(&ApprovalRow, Value)>,
    status: &str,
    by: &str,
    now: DateTime<Utc>,
) -> sqlx::Result<u64> {
    if rows.is_empty() {
        return Ok(0);
    }
    let ids: Vec<Uuid> = rows.iter().map(|(r, _)| r.id).collect();
    let results: Vec<Value> = rows.iter().map(|(_, v)| v.clone()).collect();
    let done: Vec<Uuid> = sqlx::query_scalar(
        "UPDATE pending_approvals p SET status = $2, decided_by = $3, decided_at = $4, result = d.result
           FROM unnest($1::uuid[], $5::jsonb[]) AS d(id, result)
          WHERE p.id = d.id AND p.status = 'pending'
         RETURNING p.id",
    )
    .bind(&ids)
    .bind(status)
    .bind(by)
    .bind(now)
    .bind(&results)
    .fetch_all(&mut *conn)
    .await?;
    if done.len() < rows.len() {
        let done: std::collections::HashSet<Uuid> = done.iter().copied().collect();
        rows.retain(|(r, _)| done.contains(&r.id));
    }
    let ids: Vec<Uuid> = rows.iter().map(|(r, _)| r.id).collect();
    let results: Vec<Value> = rows.iter().map(|(_, v)| v.clone()).collect();
    let orgs: Vec<Uuid> = rows.iter().map(|(r, _)| r.org_id).collect();
    let runs: Vec<Option<Uuid>> = rows.iter().map(|(r, _)| r.run_id).collect();
    let tools: Vec<&str> = rows.iter().map(|(r, _)| r.action.tool.as_str()).collect();
    let args: Vec<&Value> = rows.iter().map(|(r, _)| &r.action.args).collect();
    sqlx::query(include_str!("sql/approvals_audit_decided.sql"))
        .bind(&orgs)
        .bind(&runs)
        .bind(&ids)
        .bind(&tools)
        .bind(&args)
        .bind(by)
        .bind(status)
        .bind(now)
        .bind(&results)
        .execute(&mut *conn)
        .await?;
    Ok(rows.len() as u64)
}

/// Stale approvals that asked for a re-proposal, below the chain cap, decided since `since`
/// (by the sweep or by a person), optionally only `ids`.
pub async fn stale_to_repropose<'e, E: PgExecutor<'e>>(
    exec: E,
    r: &Reproposals<'_>,
) -> sqlx::Result<Vec<ApprovalRow>> {
    sqlx::query_as(
        "SELECT * FROM pending_approvals
          WHERE status = 'stale' AND repropose AND chain_depth < $3 AND decided_at >= $1
            AND ($2::uuid[] IS NULL OR id = ANY($2))",
    )
    .bind(r.since)
    .bind(r.only)
    .bind(r.max_depth)
    .fetch_all(exec)
    .await
}

/// [`stale_to_repropose`] and their re-proposal jobs in one statement: one `approval_expiry`
/// job `{"org_id": org, "repropose": id}` per approval, unique key `repropose:<id>` held until purged (the
/// same rows `queue::enqueue_many` writes for them). Returns how many were inserted.
pub async fn enqueue_stale_reproposals<'e, E: PgExecutor<'e>>(
    exec: E,
    r: &Reproposals<'_>,
) -> sqlx::Result<u64> {
    let done = sqlx::query(
        "INSERT INTO agentd_jobs (kind, payload, priority, run_at, max_attempts, unique_key)
         SELECT 'approval_expiry', jsonb_build_object('org_id', p.org_id, 'repropose', p.id), $4, now(), $5,
                'repropose:' || p.id
           FROM pending_approvals p
          WHERE p.status = 'stale' AND p.repropose AND p.chain_depth < $3 AND p.decided_at >= $1
            AND ($2::uuid[] IS NULL OR p.id = ANY($2))
            AND NOT EXISTS (SELECT 1 FROM agentd_jobs j WHERE j.unique_key = 'repropose:' || p.id)
          ORDER BY p.id
         ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state IN ('available', 'running') DO NOTHING",
    )
    .bind(r.since)
    .bind(r.only)
    .bind(r.max_depth)
    .bind(r.priority)
    .bind(r.max_attempts)
    .execute(exec)
    .await?;
    Ok(done.rows_affected())
}

/// Deletes up to `limit` decided approvals decided before `cutoff` (audit rows stay). Since
/// migration 0062 no index has `decided_at` (so deciding is a HOT update); an approval is decided
/// after it was made, so the candidates are read through `created_at` (an approval decided before
/// `cutoff` but made after it, which only a clock set back could write, waits until it is
/// older).
pub async fn purge_decided<'e, E: PgExecutor<'e>>(
    exec: E,
    cutoff: DateTime<Utc>,
    limit: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query(
        "DELETE FROM pending_approvals WHERE id = ANY(ARRAY(
            SELECT id FROM pending_approvals
             WHERE created_at < $1 AND status <> 'pending' AND decided_at < $1 LIMIT $2))",
    )
    .bind(cutoff)
    .bind(limit)
    .execute(exec)
    .await?;
    Ok(done.rows_affected())
}
