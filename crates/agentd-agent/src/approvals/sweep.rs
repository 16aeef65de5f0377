//! The expiry sweep (`approval_expiry`): in batches, pending approvals past their TTL become
//! `expired` (or `stale` if their data changed meanwhile); pending ones whose data changed become
//! `stale` early; stale ones that asked for it get a capped re-proposal job; decided approvals
//! older than the retention are purged (their audit rows stay). "Now" comes from the Clock.
//!
//! Set-based, each batch is one statement (`store::approvals_sweep::sweep_batch`) that judges the
//! approvals on documents in the database — unchanged when the row is still the version the
//! snapshot was read from or the stored snapshot equals the row's, changed when the two differ
//! and hold no number — and ends the unchanged expired ones and the changed ones with their audit
//! rows and events; only the rest (other tools, snapshots with numbers) are read here, re-hashed
//! and ended in one more statement. Row by row (`Sweeper::row_by_row`, the reference) reads every
//! approval and re-validates it through its tool.

use super::{ToolEnv, snapshot_hash};
use crate::clock::SharedClock;
use crate::kinds::approval_expiry::Reproposal;
use crate::queue::NewJob;
use crate::store::approvals::ApprovalRow;
use crate::store::approvals_sweep::{self as store, Reproposals};
use crate::store::documents;
use crate::store::states::ApprovalStatus;
use crate::tools::Snapshot;
use crate::tools::ToolError;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use sqlx::{PgConnection, PgPool};
use std::sync::Mutex;
use uuid::Uuid;

/// What one sweep did.
#[derive(Debug, Default, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct SweepReport {
    /// Pending approvals whose snapshot was recomputed.
    pub checked: u64,
    pub expired: u64,
    pub stale: u64,
    pub reproposals_enqueued: u64,
    pub purged: u64,
    /// `approval.expiring` events written.
    pub expiring_notified: u64,
    /// Expired approvals queued for re-proposal on their org's next working day.
    pub expired_reproposals_enqueued: u64,
    /// Suggestions whose approval ended unexecuted, or older than [`SUGGESTION_TTL_DAYS`]
    /// without one pending, marked `expired`.
    pub suggestions_expired: u64,
}

/// A suggestion nobody acted on expires after this many days.
pub const SUGGESTION_TTL_DAYS: i64 = 7;

/// Who the sweep's decisions are by.
const BY: &str = "system:approval_expiry";

/// `None` if `current` still hashes to the approval's snapshot hash, else what changed.
fn changes(row: &ApprovalRow, current: &Value) -> Option<Value> {
    (snapshot_hash(&row.action.tool, &row.action.args, current) != row.snapshot_hash)
        .then(|| super::diff(&row.snapshot, current))
}

/// A callback given the running totals after each batch.
pub type Progress = std::sync::Arc<dyn Fn(&SweepReport) + Send + Sync>;

/// The sweep, with its settings from `jobs/approval_expiry.toml`.
pub struct Sweeper {
    pub pool: PgPool,
    pub clock: SharedClock,
    pub env: ToolEnv,
    pub batch: u32,
    /// Batches judged at once, each on its own connection (`sweep.workers`).
    pub workers: u32,
    pub retention: chrono::Duration,
    pub max_reproposals: u32,
    /// `approval.expiring` is written this long before an approval expires.
    pub expiring_notice: chrono::Duration,
    /// Queue policy of the re-proposal jobs.
    pub repropose_priority: i16,
    pub repropose_max_attempts: i32,
    /// Called after every batch with the totals so far (`agentd approvals sweep` prints them).
    pub progress: Option<Progress>,
    /// Read every approval, re-validate it through its tool one by one and write the decisions
    /// from here (the set-based path's baseline in `agentd bench approvals`, and its reference in
    /// the tests).
    #[doc(hidden)]
    pub row_by_row: bool,
}

impl Sweeper {
    /// One full pass (all batches). `only`: restrict to these approvals.
    pub async fn run_once(&self, only: Option<&[Uuid]>) -> sqlx::Result<SweepReport> {
        let now = self.clock.now();
        let report = Mutex::new(SweepReport::default());
        for expired_only in [true, false] {
            let first = self.first_batch(now, expired_only, only);
            if self.row_by_row {
                self.pass_row_by_row(first, &report).await?;
            } else {
                self.pass(first, &report).await?;
            }
        }
        let mut report = report.into_inner().unwrap_or_else(|e| e.into_inner());
        if self.max_reproposals > 0 {
            let r = Reproposals {
                since: now - chrono::Duration::days(1),
                only,
                max_depth: self.max_reproposals as i32,
                priority: self.repropose_priority,
                max_attempts: self.repropose_max_attempts,
            };
            report.reproposals_enqueued = self.enqueue_reproposals(&r).await?;
            report.expired_reproposals_enqueued =
                super::expiring::enqueue_reproposals(&self.pool, &r).await?;
        }
        if only.is_none() {
            let mut conn = self.pool.acquire().await?;
            report.suggestions_expired = crate::store::suggestions::expire(
                &mut conn,
                now,
                chrono::Duration::days(SUGGESTION_TTL_DAYS),
            )
            .await?;
            drop(conn);
            report.expiring_notified = super::expiring::notify_expiring(
                &self.pool,
                now,
                self.expiring_notice,
                i64::from(self.batch),
            )
            .await?;
        }
        let cutoff = now - self.retention;
        loop {
            let n = store::purge_decided(&self.pool, cutoff, i64::from(self.batch)).await?;
            report.purged += n;
            if n < u64::from(self.batch) {
                break;
            }
        }
        metrics::counter!("agentd_approvals_swept_total", "result" => "expired")
            .increment(report.expired);
        metrics::counter!("agentd_approvals_swept_total", "result" => "stale")
            .increment(report.stale);
        metrics::counter!("agentd_approvals_swept_total", "result" => "purged")
            .increment(report.purged);
        Ok(report)
    }

    /// One pass, from its first `batch`, over the approvals past their TTL (`expired_only`) or
    /// live: one task reads the batches' ids in order (`store::approvals_sweep::pending_ids`, ids
    /// only, nothing locked; live approvals whose document is still at their snapshot's version
    /// are unchanged and not sent, only counted) and hands each batch to the first free of `workers` tasks,
    /// each on its own connection, which judges and ends it in one statement (`sweep_batch`), re-checks the rest
    /// here and commits. Batches are disjoint, so the workers never wait for each other's rows;
    /// the statement is the work (one core of the database each), so on a database with cores to
    /// spare more workers sweep faster (`sweep.workers`).
    async fn pass(
        &self,
        mut batch: store::Batch<'_>,
        report: &Mutex<SweepReport>,
    ) -> sqlx::Result<()> {
        let (now, expired_only, limit) = (batch.now, batch.expired_only, batch.limit);
        let workers = self.workers.max(1) as usize;
        // A batch's ids to judge, and how many of it the scan found unchanged.
        let (send, recv) = tokio::sync::mpsc::channel::<(Vec<Uuid>, u64)>(workers);
        let recv = tokio::sync::Mutex::new(recv);
        let doc_tools = self.document_tools();
        let doc_tools = &doc_tools;
        let scan = async move {
            loop {
                // A connection per read: the scan never holds one a worker could use.
                let mut conn = self.pool.acquire().await?;
                let read = store::pending_ids(&mut conn, &batch, doc_tools).await?;
                drop(conn);
                let full = read.len() as i64 >= limit;
                let Some(&(last, _)) = read.last() else { break };
                batch.after = last;
                // Live approvals on a document still at their snapshot's version are unchanged:
                // not sent, only counted as checked (here when the whole batch is).
                let ids: Vec<Uuid> = read.iter().filter(|r| r.1).map(|r| r.0).collect();
                let unchanged = (read.len() - ids.len()) as u64;
                if ids.is_empty() {
                    let done = SweepReport {
                        checked: unchanged,
                        ..Default::default()
                    };
                    self.record(report, done);
                } else if send.send((ids, unchanged)).await.is_err() {
                    break;
                }
                if !full {
                    break;
                }
            }
            Ok::<(), sqlx::Error>(())
        };
        let ttl = json!({"reason": "ttl"});
        let work = |_| async {
            loop {
                let Some((ids, unchanged)) = recv.lock().await.recv().await else {
                    return Ok::<(), sqlx::Error>(());
                };
                let mut tx = self.pool.begin().await?;
                let b = store::sweep_batch(&mut tx, &ids, now, expired_only, doc_tools, BY, &ttl)
                    .await?;
                let rows = if b.recheck.is_empty() {
                    Vec::new()
                } else {
                    store::pending_by_ids(&mut tx, &b.recheck).await?
                };
                let done = SweepReport {
                    checked: b.seen + unchanged,
                    expired: b.expired,
                    stale: b.stale,
                    ..Default::default()
                };
                self.finish(tx, &rows, now, expired_only, done, report)
                    .await?;
            }
        };
        futures::future::try_join(scan, futures::future::try_join_all((0..workers).map(work)))
            .await?;
        Ok(())
    }

    /// The first batch of a pass (the next ones start after the last id read).
    fn first_batch<'a>(
        &self,
        now: DateTime<Utc>,
        expired_only: bool,
        only: Option<&'a [Uuid]>,
    ) -> store::Batch<'a> {
        store::Batch {
            now,
            expired_only,
            after: Uuid::nil(),
            only,
            limit: i64::from(self.batch),
        }
    }

    /// [`Self::pass`] row by row: every approval read (and, past its TTL, locked) and re-validated
    /// through its tool, one batch after the other.
    async fn pass_row_by_row(
        &self,
        mut batch: store::Batch<'_>,
        report: &Mutex<SweepReport>,
    ) -> sqlx::Result<()> {
        let (now, expired_only) = (batch.now, batch.expired_only);
        loop {
            let mut tx = self.pool.begin().await?;
            let rows = store::pending_batch(&mut tx, &batch, expired_only).await?;
            let Some(last) = rows.last().map(|r| r.id) else {
                break;
            };
            batch.after = last;
            let seen = rows.len() as u64;
            let done = SweepReport {
                checked: seen,
                ..Default::default()
            };
            self.finish(tx, &rows, now, expired_only, done, report)
                .await?;
            if seen < u64::from(self.batch) {
                break;
            }
        }
        Ok(())
    }

    /// The end of a batch: `rows` (those its statement left, or all of them row by row) are
    /// re-checked here; past their TTL unchanged ones end `expired`, changed ones `stale` (live
    /// ones are decided only if still pending: `decide_many` keeps those); then the batch commits
    /// and its figures (`done` plus these) join the report.
    async fn finish(
        &self,
        mut tx: sqlx::Transaction<'static, sqlx::Postgres>,
        rows: &[ApprovalRow],
        now: DateTime<Utc>,
        expired_only: bool,
        mut done: SweepReport,
        report: &Mutex<SweepReport>,
    ) -> sqlx::Result<()> {
        let ttl = json!({"reason": "ttl"});
        let mut unchanged = Vec::new();
        let mut changed = Vec::new();
        // Approvals past their TTL all end now: locked. Live ones are only read.
        let lock = expired_only;
        for (row, change) in rows
            .iter()
            .zip(self.recheck_all(&mut tx, rows, now, lock).await?)
        {
            match change {
                None => unchanged.push((row, ttl.clone())),
                Some(changes) => changed.push((row, json!({"changes": changes}))),
            }
        }
        if expired_only {
            done.expired += self
                .end(&mut tx, unchanged, ApprovalStatus::Expired, now)
                .await?;
        }
        done.stale += self
            .end(&mut tx, changed, ApprovalStatus::Stale, now)
            .await?;
        tx.commit().await?;
        self.record(report, done);
        Ok(())
    }

    /// Adds a finished batch's figures to the pass's `report` and reports the totals.
    fn record(&self, report: &Mutex<SweepReport>, done: SweepReport) {
        let total = {
            let mut r = report.lock().unwrap_or_else(|e| e.into_inner());
            r.checked += done.checked;
            r.expired += done.expired;
            r.stale += done.stale;
            *r
        };
        if let Some(p) = &self.progress {
            p(&total);
        }
    }

    /// Ends `rows` (with their results) as `status`, with audit rows and events; returns how many
    /// were still pending.
    async fn end(
        &self,
        tx: &mut PgConnection,
        mut rows: Vec<(&ApprovalRow, Value)>,
        status: ApprovalStatus,
        now: chrono::DateTime<chrono::Utc>,
    ) -> sqlx::Result<u64> {
        let event = super::notify::type_for(status).as_str();
        let status = status.as_str();
        if !self.row_by_row {
            return store::decide_swept(tx, &rows, status, BY, now, event).await;
        }
        let n = store::decide_many(tx, &mut rows, status, BY, now).await?;
        super::notify::swept(tx, &rows, status, BY, now).await?;
        Ok(n)
    }

    /// The tools of this registry whose snapshot is their document's row
    /// ([`Snapshot::DocumentRow`]).
    fn document_tools(&self) -> Vec<&'static str> {
        let registry = &self.env.registry;
        registry
            .names()
            .into_iter()
            .filter(|t| {
                registry
                    .get(t)
                    .is_some_and(|x| x.snapshot_kind() == Snapshot::DocumentRow)
            })
            .collect()
    }

    /// [`Self::recheck`] for a whole batch, in order. Set-based, approvals on a document (the tools
    /// whose snapshot is the document row) are re-validated together: one statement reads (and,
    /// with `lock`, locks) every document of the batch; the rest go through their tool one by one.
    async fn recheck_all(
        &self,
        conn: &mut PgConnection,
        rows: &[ApprovalRow],
        now: chrono::DateTime<chrono::Utc>,
        lock: bool,
    ) -> sqlx::Result<Vec<Option<Value>>> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let on_document = |row: &ApprovalRow| {
            let tool = self
                .env
                .registry
                .get(&row.action.tool)
                .filter(|_| !self.row_by_row)?;
            super::document_target(tool.as_ref(), &row.action.args)
        };
        let targets: Vec<Option<Uuid>> = rows.iter().map(on_document).collect();
        let mut keys: Vec<(Uuid, Uuid)> = rows
            .iter()
            .zip(&targets)
            .filter_map(|(r, d)| Some((r.org_id, (*d)?)))
            .collect();
        keys.sort_unstable_by_key(|k| (k.1, k.0));
        keys.dedup();
        let docs: std::collections::HashMap<(Uuid, Uuid), Value> =
            documents::snapshots(conn, &keys, lock)
                .await?
                .into_iter()
                .map(|(org, id, snapshot)| ((org, id), snapshot))
                .collect();
        let mut out = Vec::with_capacity(rows.len());
        for (row, target) in rows.iter().zip(targets) {
            // Every key read has its snapshot (a missing document's too); one absent would be
            // re-checked through its tool.
            let change = match target.and_then(|doc| docs.get(&(row.org_id, doc))) {
                Some(current) => changes(row, current),
                None => self.recheck(conn, row, now).await?,
            };
            out.push(change);
        }
        Ok(out)
    }

    /// `None` if the data is unchanged, else what changed.
    async fn recheck(
        &self,
        conn: &mut PgConnection,
        row: &ApprovalRow,
        now: chrono::DateTime<chrono::Utc>,
    ) -> sqlx::Result<Option<Value>> {
        let Some(tool) = self.env.registry.get(&row.action.tool).cloned() else {
            return Ok(Some(
                json!({"tool": format!("`{}` no longer exists", row.action.tool)}),
            ));
        };
        let mut ctx = self.env.ctx(
            conn,
            row.org_id,
            row.run_id,
            "system:approval_expiry".into(),
            now,
        );
        let current = match tool.snapshot(&mut ctx, &row.action.args).await {
            Some(Ok(v)) => v,
            Some(Err(ToolError::Db(e))) => return Err(e),
            Some(Err(e)) => json!({"error": e.to_string()}),
            None => Value::Null,
        };
        Ok(changes(row, &current))
    }

    /// Enqueues a re-proposal job (unique per approval) for every stale approval of the last
    /// day that asked for one, whether the sweep or a person found it stale.
    async fn enqueue_reproposals(&self, r: &Reproposals<'_>) -> sqlx::Result<u64> {
        if !self.row_by_row {
            return store::enqueue_stale_reproposals(&self.pool, r).await;
        }
        let rows = store::stale_to_repropose(&self.pool, r).await?;
        let jobs: Vec<NewJob> = rows
            .iter()
            .map(|row| super::expiring::reproposal_job(r, Reproposal::Stale, row.org_id, row.id))
            .collect();
        super::expiring::enqueue_reproposal_jobs(&self.pool, &jobs).await
    }
}
