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

/// The condition and order of a [`Batch`] over `pending_approvals p`, parameters `$1`–`$5`.
macro_rules! batch_where {
    () => {
        "p.status = 'pending'
           AND (CASE WHEN $2 THEN p.expires_at <= $1 ELSE p.expires_at > $1 END)
           AND p.id > $3
           AND ($4::uuid[] IS NULL OR p.id = ANY($4))
         ORDER BY p.id LIMIT $5"
    };
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
    macro_rules! select {
        ($lock:literal) => {
            concat!(
                "SELECT * FROM pending_approvals p WHERE ",
                batch_where!(),
                $lock
            )
        };
    }
    let sql = if lock {
        select!(" FOR UPDATE SKIP LOCKED")
    } else {
        select!("")
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
        .bind(sqlx::query_as(concat!(
            "SELECT s.id,
                    $2 OR NOT COALESCE(s.tool = ANY($6) AND d.version = s.document_version, false)
               FROM (SELECT p.id, p.org_id, p.tool, p.document_id, p.document_version
                       FROM pending_approvals p
                      WHERE ",
            batch_where!(),
            ") s
               LEFT JOIN documents d ON NOT $2 AND d.org_id = s.org_id AND d.id = s.document_id
              ORDER BY s.id"
        )))
        .bind(doc_tools)
        .fetch_all(conn)
        .await
}

/// What the audit row of an approval the sweep decided keeps (`args`, `outcome`), as SQL over the
/// expressions `$args`, `$result` and `$status`: the SHA-256 of the arguments, and the status,
/// the names of the changed parts (stale ones) and the SHA-256 of the result — never the values
/// (review N2: they hold document metadata, extraction values and before/after copies, and the
/// trail is append-only). The approval's proposal has its own audit row with the arguments
/// redacted. One definition for the set-based sweep and the row-by-row one, so both write the
/// same rows.
macro_rules! swept_audit_values {
    ($args:literal, $result:literal, $status:literal) => {
        concat!(
            "jsonb_build_object('sha256', encode(sha256(convert_to((",
            $args,
            ")::text, 'UTF8')), 'hex')),
             jsonb_strip_nulls(jsonb_build_object(
               'status', ",
            $status,
            ",
               'changed', (SELECT jsonb_agg(k ORDER BY k)
                             FROM jsonb_object_keys(CASE WHEN jsonb_typeof((",
            $result,
            ") -> 'changes') = 'object'
                                                         THEN (",
            $result,
            ") -> 'changes' END) AS k),
               'sha256', encode(sha256(convert_to((",
            $result,
            ")::text, 'UTF8')), 'hex')))"
        )
    };
}

/// The audit rows and events of the approvals a sweep statement just decided: its CTE `up`
/// returns them (`id, org_id, run_id, suggestion_id, tool, args, status, result`); `$by`, `$now`
/// and `$event` name the statement's parameters. The same rows as [`decide_many`] and
/// `approvals::notify::swept` write, in id order.
macro_rules! swept_tail {
    ($by:literal, $now:literal, $event:literal) => {
        concat!(
            ", audit AS (
               INSERT INTO audit_events (org_id, run_id, call_id, actor, tool, category, decision,
                                         args, outcome, created_at)
               SELECT org_id, run_id, 'approval:' || id, ", $by, ", tool, 'approval', status, ",
            swept_audit_values!("args", "result", "status"),
            ", ", $now, "
                 FROM up ORDER BY id),
             events AS (
               INSERT INTO agentd_events (org_id, type, subject_id, occurred_at, payload, dedupe_key)
               SELECT org_id, ", $event, ", id, ", $now, ",
                      jsonb_build_object('approval_id', id, 'tool', tool, 'status', status,
                                         'decided_by', ", $by, ", 'run_id', run_id,
                                         'suggestion_id', suggestion_id),
                      ", $event, " || ':' || id
                 FROM up ORDER BY id
               ON CONFLICT (dedupe_key) DO NOTHING)"
        )
    };
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

/// `approvals::diff` of the `jsonb` objects `c.s` (the stored snapshot) and `c.cur` (the row's
/// now): every key of either whose values differ, as `{"before": …, "after": …}` (`null` for a
/// missing one). Equal to the Rust function for objects without numbers (`jsonb` compares `1` and
/// `1.0` equal, `serde_json` does not, and `serde_json` reads a long number as the nearest
/// `f64`): the sweep uses it only on such snapshots.
macro_rules! diff_sql {
    () => {
        "(SELECT COALESCE(jsonb_object_agg(k, jsonb_build_object('before', c.s -> k,
                                                                 'after', c.cur -> k)),
                          '{}'::jsonb)
            FROM (SELECT jsonb_object_keys(c.s) UNION SELECT jsonb_object_keys(c.cur)) AS keys(k)
           WHERE (c.s -> k) IS DISTINCT FROM (c.cur -> k))"
    };
}

/// The set-based expiry sweep's statement for the approvals `ids` (a batch [`pending_ids`] read)
/// that are still pending and past their TTL at `now` (`expired_only`) or not. Approvals of
/// `doc_tools` (whose snapshot is their document's row) are judged here:
/// - **unchanged** when the row is still the version their snapshot was read from, or else when
///   their stored snapshot equals [`super::documents::snapshot_sql!`] of the row now (or the
///   missing document's snapshot). The stored snapshot is the one its hash was computed from
///   (every writer stores both together, and the version with them or none), so an unchanged
///   snapshot means an unchanged hash. With `expired_only` these end `expired` with `result`.
/// - **changed** when the two snapshots differ and neither holds a number: they hash differently
///   (the canonical JSON of a string, boolean or array of them is the value itself), and
///   [`diff_sql!`] is what `approvals::diff` writes. These end `stale` with `{"changes": …}`, in
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
    macro_rules! sweep {
        ($lock:literal, $ends:literal) => {
            concat!(
                "WITH b AS MATERIALIZED (
                   SELECT p.id, p.org_id, p.snapshot, p.document_version,
                          CASE WHEN p.tool = ANY($4) THEN p.document_id END AS doc
                     FROM pending_approvals p
                    WHERE p.id = ANY($3) AND p.status = 'pending'
                      AND (CASE WHEN $2 THEN p.expires_at <= $1 ELSE p.expires_at > $1 END)
                    ORDER BY p.id",
                $lock,
                "),
                 n AS MATERIALIZED (
                   SELECT b.id, b.snapshot AS s,
                          CASE WHEN b.doc IS NULL OR b.document_version = d.version THEN NULL
                               WHEN d.id IS NULL
                                 THEN jsonb_build_object('exists', false, 'document_id', b.doc)
                               ELSE ",
                super::documents::snapshot_sql!(),
                " END AS cur,
                          b.doc IS NOT NULL AND b.document_version = d.version AS same_version
                     FROM b LEFT JOIN documents d ON d.org_id = b.org_id AND d.id = b.doc),
                 c AS MATERIALIZED (
                   SELECT n.id, n.s, n.cur,
                          CASE WHEN n.same_version THEN 'same'
                               WHEN n.cur IS NULL THEN 'recheck'
                               WHEN n.s = n.cur THEN 'same'
                               WHEN jsonb_typeof(n.s) = 'object'
                                AND NOT jsonb_path_exists(n.s, 'lax $.** ? (@.type() == \"number\")')
                                AND NOT jsonb_path_exists(n.cur, 'lax $.** ? (@.type() == \"number\")')
                                 THEN 'changed'
                               ELSE 'recheck' END AS verdict
                     FROM n),
                 e AS MATERIALIZED (
                   SELECT c.id,
                          CASE c.verdict WHEN 'same' THEN 'expired' ELSE 'stale' END AS status,
                          CASE c.verdict WHEN 'same' THEN $6
                               ELSE jsonb_build_object('changes', ",
                diff_sql!(),
                ") END AS result
                     FROM c WHERE c.verdict IN ",
                $ends,
                "),
                 up AS (
                   UPDATE pending_approvals p
                      SET status = x.status, decided_by = $5, decided_at = $1, result = x.result
                     FROM unnest(ARRAY(SELECT e.id FROM e ORDER BY e.id),
                                 ARRAY(SELECT e.status FROM e ORDER BY e.id),
                                 ARRAY(SELECT e.result FROM e ORDER BY e.id)) AS x(id, status, result)
                    WHERE p.id = x.id AND p.status = 'pending'
                   RETURNING p.id, p.org_id, p.run_id, p.suggestion_id, p.tool, p.args, p.status,
                             p.result)",
                swept_tail!("$5", "$1", "(CASE status WHEN 'expired' THEN $7 ELSE $8 END)"),
                " SELECT c.id, c.verdict <> 'recheck',
                         (SELECT count(*) FROM up WHERE up.status = 'expired'),
                         (SELECT count(*) FROM up WHERE up.status = 'stale')
                    FROM c ORDER BY c.id"
            )
        };
    }
    let sql = if expired_only {
        sweep!(" FOR UPDATE OF p SKIP LOCKED", "('same', 'changed')")
    } else {
        sweep!("", "('changed')")
    };
    let rows: Vec<(Uuid, bool, i64, i64)> = sqlx::query_as(sql)
        .bind(now)
        .bind(expired_only)
        .bind(ids)
        .bind(doc_tools)
        .bind(by)
        .bind(result)
        .bind(EventType::ApprovalExpired.as_str())
        .bind(EventType::ApprovalStale.as_str())
        .fetch_all(conn)
        .await?;
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
/// same single statement; only ids and results are sent. Returns how many were decided (the
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
    let n: i64 = sqlx::query_scalar(concat!(
        "WITH up AS (
           UPDATE pending_approvals p
              SET status = $4, decided_by = $5, decided_at = $1, result = d.result
             FROM unnest($2::uuid[], $3::jsonb[]) AS d(id, result)
            WHERE p.id = d.id AND p.status = 'pending'
           RETURNING p.id, p.org_id, p.run_id, p.suggestion_id, p.tool, p.args, p.status, p.result)",
        swept_tail!("$5", "$1", "$6"),
        " SELECT count(*) FROM up"
    ))
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
    sqlx::query(concat!(
        "INSERT INTO audit_events (org_id, run_id, call_id, actor, tool, category, decision, args, outcome, created_at)
         SELECT o, r, 'approval:' || i, $6, t, 'approval', $7, ",
        swept_audit_values!("a", "res", "$7"),
        ", $8
           FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::jsonb[], $9::jsonb[]) AS x(o, r, i, t, a, res)",
    ))
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
/// job `{"repropose": id}` per approval, unique key `repropose:<id>` held until purged (the
/// same rows `queue::enqueue_many` writes for them). Returns how many were inserted.
pub async fn enqueue_stale_reproposals<'e, E: PgExecutor<'e>>(
    exec: E,
    r: &Reproposals<'_>,
) -> sqlx::Result<u64> {
    let done = sqlx::query(
        "INSERT INTO agentd_jobs (kind, payload, priority, run_at, max_attempts, unique_key)
         SELECT 'approval_expiry', jsonb_build_object('repropose', p.id), $4, now(), $5,
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
