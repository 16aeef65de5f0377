//! Fair claims between organisations (issue 30): a claim of `n` jobs of a kind shares its `n`
//! slots among the orgs that have ready jobs, so one org's backlog does not hold back the
//! others' jobs until it drains.
//!
//! One statement per round ([`CLAIM_SQL`]), all of it index descents on the claim index
//! (migration 0070: `(kind, priority DESC, ORG_KEY, run_at, id) WHERE state = 'available'`):
//!
//! 1. `top`: the highest priority among the kind's ready jobs, and the first org with ready jobs
//!    at it (where the ring wraps to). Priorities stay strict: only the orgs with jobs at that
//!    priority share the claim; lower priorities get the slots that are left (the next round).
//!    It starts past the jobs of that org this process already claimed (its [`Head`]), whose
//!    index entries stay until a vacuum; it still looks at every higher priority and lower org.
//! 2. `ring`: up to `n` orgs with ready jobs at that priority, in org order starting after a
//!    cursor and wrapping around (a skip scan: one index descent per org, however long each
//!    org's backlog is). The cursor is where the previous claim of the kind in this process
//!    stopped, so when more orgs wait than a claim has slots, claims take turns round robin.
//! 3. Each org of the ring not walked past (`sharing`) takes `n / m` of its oldest ready jobs
//!    (`m` orgs; the first `n % m` take one more), walking its own part of the index in
//!    `run_at, id` order (`top`'s org from `top`'s job on) under
//!    `FOR UPDATE SKIP LOCKED`: concurrent claimers skip each other's rows within each org, as
//!    the single walk of before did within the kind.
//!
//! Per-org caps (`max_running_per_org` in the job file, or an org's own row in
//! `agentd_org_queue_limits`, migration 0076; `agentd orgs set-limit`): an org that has its cap
//! of jobs of the kind running fleet-wide is `busy` and walked past like a paused org (the ring
//! walks on until it holds `n` orgs that take a share, so the orgs behind a busy one are served), and an org
//! under its cap takes at most what is left of it. The running jobs are counted on their own
//! index, and only when the kind or some org has a cap. The count is the statement's snapshot:
//! claims racing in other processes may pass a cap by their shares at most, so a cap bounds an
//! org's part of the fleet; it is not a semaphore. A finishing job does not wake claimers: an
//! org's jobs held back by its cap are claimed at the next wake-up or poll
//! (`worker.poll_interval_ms`).
//!
//! The claimed rows are updated by `ctid`, the address of the version the walk locked (a TID
//! scan, not a primary-key descent a job: ~15 % of a claim, docs/queue-profile.md). The lock
//! is the statement's own, so that version cannot be updated, deleted or pruned before the
//! update reads it. A row another transaction changed after the statement's snapshot and
//! before the walk locked it is locked in its new version, which the update (on the
//! snapshot) does not see: it stays `available` for the next claim, unclaimed and unharmed.
//!
//! Newcomer slots (the job file's `queue.newcomer_slots`, [`claim_capped`]): a worker caps the
//! org that holds most of its jobs at `concurrency - newcomer_slots` while other orgs' jobs ran
//! there in the last minute, so the slots left free take another org's job the moment it is
//! enqueued (its NOTIFY wakes the worker; a finished job wakes it too). At that cap the ring
//! walks past the org like a busy one. Without other orgs lately, nothing is capped.
//!
//! An org that paused the kind (migration 0075, [`super::pause`]) is walked past and takes no
//! share: the ring holds up to `n` orgs that did not (and are not busy).
//!
//! The shares add up to `n` exactly (nothing is locked and then left). An org with fewer ready
//! jobs than its share leaves slots unused; the next round (at most [`ROUNDS`] per claim) gives
//! them to the orgs that still have jobs. Jobs without an org (cron ticks, approval sweeps) are
//! one group, the org `''`.

use super::{ClaimedJob, QueueError};
use chrono::{DateTime, Duration, Utc};
use sqlx::PgPool;
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

/// The org of a job, as the claim index holds it: jobs without one are the group `''`. Every
/// statement that should use the claim index by org spells it exactly so.
pub const ORG_KEY: &str = "coalesce(payload->>'org_id', '')";

/// Statements per claim at most: the first shares the slots, the others hand out the slots
/// of orgs that had fewer ready jobs than their share.
pub const ROUNDS: usize = 3;

/// `$1` kind, `$2` slots, `$3` worker, `$4` now (`NULL`: the database's), `$5` lease in ms, `$6`
/// cursor (an org key; the ring starts after it), `$7` the kind's cap of running jobs per org
/// (`NULL`: none); `$10` the most jobs one org may hold in the claiming worker (`NULL`: no such
/// cap; newcomer slots, see [`claim_capped`]) with `$8` the orgs holding some there and `$9` how
/// many (parallel arrays): an org at that cap is walked past like a busy org.
static CLAIM_SQL: LazyLock<String> = LazyLock::new(|| {
    let k = ORG_KEY;
    // The ready jobs of the kind at the top priority, as index conditions.
    let now = super::store::lease_now("$4");
    let ready =
        format!("state = 'available' AND kind = $1 AND priority = top.p AND run_at <= {now}");
    // The next org after `after` in the ring, wrapping around to the first (`top.lo`).
    let next_after = |after: &str| {
        format!(
            "coalesce((SELECT {k} FROM agentd_jobs WHERE {ready} AND {k} > {after}
                         ORDER BY {k} LIMIT 1), top.lo)"
        )
    };
    // `OFFSET 0` keeps each lateral a subquery: inlined, its `coalesce` was evaluated once
    // for the column and again for the filter on it (two index descents per org, not one).
    let first = next_after("$6");
    let next = next_after("r.org");
    // An org's cap of running jobs of the kind: its own row, else the kind's (`NULL`: none).
    let cap_of = |org: &str| {
        format!(
            "coalesce((SELECT l.max_running FROM agentd_org_queue_limits l
                        WHERE l.kind = $1 AND l.org_key = {org}), $7::int)"
        )
    };
    let cap_running = cap_of("u.org");
    let cap_ring = cap_of("o.org");
    // An org's share of the `n` slots (`m` orgs in the ring, this one the `n`th).
    let share = "($2 / o.m + CASE WHEN o.n <= $2 % o.m THEN 1 ELSE 0 END)";
    // An org that paused the kind (migration 0075) stays in the ring, so the walk goes past it,
    // but takes no share: one primary-key probe per org visited.
    let paused = |org: &str| super::pause::paused_org("$1", org);
    let (paused_f, paused_x) = (paused("f.org"), paused("x.org"));
    // What an org may still take in the claiming worker (newcomer slots; `NULL`: no cap).
    let room = |org: &str| {
        format!("($10::int - coalesce(($9::int4[])[array_position($8::text[], {org})], 0))")
    };
    let held_f = format!("({} <= 0)", room("f.org"));
    let held_x = format!("({} <= 0)", room("x.org"));
    let room_o = room("o.org");
    // `top`'s probes: the first ready job of the kind in index order, starting at the head
    // (`$11`..`$14`, see [`Head`]) when one is given.
    let avail = format!("state = 'available' AND kind = $1 AND run_at <= {now}");
    let cols = format!("priority AS p, {k} AS lo, run_at AS r, id AS i");
    format!(
        "WITH RECURSIVE
         top AS (SELECT p, lo, r, i FROM (
                  (SELECT {cols} FROM agentd_jobs
                    WHERE {avail} AND $11::int4 IS NOT NULL AND priority > $11::int4
                    ORDER BY priority DESC, {k}, run_at, id LIMIT 1)
                  UNION ALL
                  (SELECT {cols} FROM agentd_jobs
                    WHERE {avail} AND $11::int4 IS NOT NULL AND priority = $11::int4
                      AND {k} < $12::text
                    ORDER BY {k}, run_at, id LIMIT 1)
                  UNION ALL
                  (SELECT {cols} FROM agentd_jobs
                    WHERE {avail} AND $11::int4 IS NOT NULL AND priority = $11::int4
                      AND {k} = $12::text AND (run_at, id) > ($13::timestamptz, $14::int8)
                    ORDER BY run_at, id LIMIT 1)
                  UNION ALL
                  (SELECT {cols} FROM agentd_jobs WHERE {avail}
                    ORDER BY priority DESC, {k}, run_at, id LIMIT 1)) t LIMIT 1),
         running AS (SELECT {k} AS org, count(*) AS c FROM agentd_jobs
                      WHERE state = 'running' AND kind = $1
                        AND ($7::int IS NOT NULL
                             OR EXISTS (SELECT 1 FROM agentd_org_queue_limits WHERE kind = $1))
                      GROUP BY 1),
         busy AS (SELECT u.org FROM running u WHERE u.c >= {cap_running}),
         ring(org, first, n, skip, held) AS (
            SELECT f.org, f.org, 1, f.skip, CASE WHEN f.skip THEN 0 ELSE 1 END
              FROM top CROSS JOIN LATERAL (
                   SELECT f.org, ({paused_f} OR coalesce({held_f}, false) OR f.org IN (SELECT org FROM busy)) AS skip
                     FROM (SELECT {first} AS org OFFSET 0) f) f
            UNION ALL
            SELECT x.org, r.first, r.n + 1, x.skip, r.held + CASE WHEN x.skip THEN 0 ELSE 1 END
              FROM ring r CROSS JOIN top CROSS JOIN LATERAL (
                   SELECT x.org, ({paused_x} OR coalesce({held_x}, false) OR x.org IN (SELECT org FROM busy)) AS skip
                     FROM (SELECT {next} AS org OFFSET 0) x) x
             WHERE r.held < $2 AND x.org <> r.first),
         sharing AS (SELECT org, row_number() OVER (ORDER BY n) AS n, count(*) OVER () AS m
                    FROM ring WHERE NOT skip)
         UPDATE agentd_jobs
            SET state = 'running', attempt = attempt + 1, locked_by = $3,
                lease_expires_at = {now} + $5 * interval '1 millisecond', started_at = {now}
          WHERE ctid = ANY(ARRAY(
                SELECT j.ctid FROM sharing o CROSS JOIN top CROSS JOIN LATERAL (
                       SELECT ctid FROM agentd_jobs
                        WHERE {ready} AND {k} = o.org
                          AND (run_at, id) >= (CASE WHEN o.org = top.lo THEN top.r
                                                    ELSE '-infinity'::timestamptz END,
                                               CASE WHEN o.org = top.lo THEN top.i ELSE 0 END)
                        ORDER BY run_at, id
                        LIMIT least({share}, coalesce(
                              {cap_ring} - coalesce((SELECT u.c FROM running u
                                                      WHERE u.org = o.org), 0),
                              {share}),
                              CASE WHEN $10::int IS NULL THEN {share}
                                   ELSE greatest({room_o}, 0) END)
                          FOR UPDATE SKIP LOCKED) j))
      RETURNING id, kind, payload, attempt, attempt - released AS counted_attempts, max_attempts,
                traceparent, priority::int4 AS priority, run_at"
    )
});

/// Sets (`Some`) or clears (`None`) one org's own cap of running jobs of `kind` (see the
/// module); the kind's `queue.max_running_per_org` applies where no row is.
pub async fn set_org_limit(
    pool: &PgPool,
    kind: &str,
    org: uuid::Uuid,
    max_running: Option<u32>,
) -> Result<(), QueueError> {
    let org = org.to_string();
    match max_running {
        Some(cap) => {
            sqlx::query(
                "INSERT INTO agentd_org_queue_limits (kind, org_key, max_running) VALUES ($1, $2, $3)
                 ON CONFLICT (kind, org_key) DO UPDATE SET max_running = EXCLUDED.max_running",
            )
            .bind(kind)
            .bind(&org)
            .bind(i32::try_from(cap.max(1)).unwrap_or(i32::MAX))
            .execute(pool)
            .await?;
        }
        None => {
            sqlx::query("DELETE FROM agentd_org_queue_limits WHERE kind = $1 AND org_key = $2")
                .bind(kind)
                .bind(&org)
                .execute(pool)
                .await?;
        }
    }
    Ok(())
}

/// One org's own caps, by kind.
pub async fn org_limits(pool: &PgPool, org: uuid::Uuid) -> Result<Vec<(String, i32)>, QueueError> {
    Ok(sqlx::query_as(
        "SELECT kind, max_running FROM agentd_org_queue_limits WHERE org_key = $1 ORDER BY kind",
    )
    .bind(org.to_string())
    .fetch_all(pool)
    .await?)
}

/// What this process remembers of its last claims of a kind (per database and kind).
#[derive(Debug, Clone, Default)]
struct Ring {
    /// Where the last claim stopped in the ring of orgs (an org key; the next starts after it).
    cursor: String,
    /// Where the first org's ready jobs start, as far as this process knows.
    head: Option<Head>,
}

/// A position in the claim index: the last job this process claimed of the first org (the
/// lowest org key) at the top priority. The jobs before it in that org are claimed, but
/// their index entries stay until a vacuum, and a claim read all of them twice (the `top`
/// probe and the org's own walk): 7.2–7.7 index entries read per job in a drain, not 4.1.
/// With a head, `top` looks before the head's org (higher priorities, lower orgs: exact) and
/// then from the head on in its org; the org's walk starts where `top` found its first job.
/// What that skips is a job of the head's org made ready at a position before the head
/// after it was taken (a rolled-back claim, a job enqueued with an earlier `run_at`): it is
/// claimed when the head is dropped, at most [`HEAD_TTL`] after it was found by a full probe.
#[derive(Debug, Clone)]
struct Head {
    priority: i32,
    org: String,
    run_at: DateTime<Utc>,
    id: i64,
    /// When a claim without a head found the org's first job (the head is kept from then on).
    since: std::time::Instant,
}

/// How long a head is used before a claim probes from the start of the index again.
pub const HEAD_TTL: std::time::Duration = std::time::Duration::from_secs(1);

static RINGS: LazyLock<Mutex<HashMap<(String, String), Ring>>> = LazyLock::new(Default::default);

/// A claimed job with its place in the claim index (for [`Head`]).
#[derive(sqlx::FromRow)]
struct ClaimedRow {
    #[sqlx(flatten)]
    job: ClaimedJob,
    priority: i32,
    run_at: DateTime<Utc>,
}

/// A job's org as [`ORG_KEY`] computes it (`->>` gives a non-string value's JSON text).
pub fn org_key(payload: &serde_json::Value) -> String {
    match payload.get("org_id") {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    }
}

/// The last org served by a ring that started after `cursor`: the ring visits the orgs after
/// the cursor in order, then wraps to the ones at or before it.
fn ring_end<'a>(cursor: &str, orgs: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    orgs.max_by(|a, b| {
        let wrapped = |o: &str| o <= cursor;
        (wrapped(a), *a).cmp(&(wrapped(b), *b))
    })
}

fn rings() -> std::sync::MutexGuard<'static, HashMap<(String, String), Ring>> {
    RINGS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The head after a claim that returned `rows` (their org keys `keys`): the last job it took
/// of its lowest org, or further on where the head already was (concurrent claims of the
/// process return in any order).
fn next_head(
    old: Option<Head>,
    rows: &[ClaimedRow],
    keys: &[String],
    since: std::time::Instant,
) -> Option<Head> {
    let first = keys.iter().min()?;
    let last = rows
        .iter()
        .zip(keys)
        .filter(|(_, k)| *k == first)
        .map(|(r, _)| r)
        .max_by_key(|r| (r.run_at, r.job.id))?;
    let new = Head {
        priority: last.priority,
        org: first.clone(),
        run_at: last.run_at,
        id: last.job.id,
        since,
    };
    match old {
        Some(o)
            if o.since.elapsed() < HEAD_TTL
                && o.priority == new.priority
                && o.org == new.org
                && (o.run_at, o.id) > (new.run_at, new.id) =>
        {
            Some(o)
        }
        _ => Some(new),
    }
}

/// Claims up to `limit` ready jobs of `kind`, shared among the orgs that have ready jobs (see
/// the module). At most [`ROUNDS`] statements; each commits on its own.
pub async fn claim(
    pool: &PgPool,
    kind: &str,
    max_running_per_org: Option<u32>,
    limit: u32,
    worker_id: &str,
    now: Option<DateTime<Utc>>,
    lease: Duration,
) -> Result<Vec<ClaimedJob>, QueueError> {
    claim_capped(
        pool,
        kind,
        max_running_per_org,
        None,
        limit,
        worker_id,
        now,
        lease,
    )
    .await
}

/// How many jobs each org may hold in one worker, and what the orgs hold there now: the slots
/// a worker keeps for other orgs while one org fills the rest (the kind's
/// `queue.newcomer_slots`, `queue::apalis`).
#[derive(Debug, Clone, Default)]
pub struct WorkerShare {
    /// The most jobs one org may hold (claimed, buffered or running).
    pub max: u32,
    /// The orgs holding jobs (org keys) and how many.
    pub holds: HashMap<String, u32>,
}

/// [`claim`], giving no org more than `share.max` jobs held in this worker in all.
#[allow(clippy::too_many_arguments)]
pub async fn claim_capped(
    pool: &PgPool,
    kind: &str,
    max_running_per_org: Option<u32>,
    share: Option<&WorkerShare>,
    limit: u32,
    worker_id: &str,
    now: Option<DateTime<Utc>>,
    lease: Duration,
) -> Result<Vec<ClaimedJob>, QueueError> {
    let key = (
        pool.connect_options()
            .get_database()
            .unwrap_or_default()
            .to_string(),
        kind.to_string(),
    );
    let mut out: Vec<ClaimedJob> = Vec::new();
    for _ in 0..ROUNDS {
        let want = limit.saturating_sub(out.len() as u32);
        if want == 0 {
            break;
        }
        // What the orgs hold, with the rounds before.
        let (held_orgs, held_n): (Vec<String>, Vec<i32>) = match share {
            Some(sh) => {
                let mut holds = sh.holds.clone();
                for j in &out {
                    *holds.entry(org_key(&j.payload)).or_default() += 1;
                }
                holds
                    .into_iter()
                    .map(|(o, n)| (o, i32::try_from(n).unwrap_or(i32::MAX)))
                    .unzip()
            }
            None => (Vec::new(), Vec::new()),
        };
        let ring = rings().get(&key).cloned().unwrap_or_default();
        let cursor = ring.cursor;
        let head = ring.head.filter(|h| h.since.elapsed() < HEAD_TTL);
        let q = sqlx::query_as::<_, ClaimedRow>(sqlx::AssertSqlSafe(CLAIM_SQL.as_str()))
            .bind(kind)
            .bind(i64::from(want))
            .bind(worker_id)
            .bind(now)
            .bind(lease.num_milliseconds() as f64)
            .bind(&cursor)
            .bind(max_running_per_org.map(|c| i32::try_from(c).unwrap_or(i32::MAX)))
            .bind(held_orgs)
            .bind(held_n)
            .bind(share.map(|s| i32::try_from(s.max).unwrap_or(i32::MAX)))
            .bind(head.as_ref().map(|h| h.priority))
            .bind(head.as_ref().map(|h| h.org.clone()))
            .bind(head.as_ref().map(|h| h.run_at))
            .bind(head.as_ref().map(|h| h.id));
        let rows = super::store::fetch_claimed(pool, q).await?;
        if rows.is_empty() {
            break;
        }
        let keys: Vec<String> = rows.iter().map(|r| org_key(&r.job.payload)).collect();
        {
            let mut rings = rings();
            let ring = rings.entry(key.clone()).or_default();
            if let Some(end) = ring_end(&cursor, keys.iter().map(String::as_str)) {
                ring.cursor = end.to_string();
            }
            let since = head
                .as_ref()
                .map_or_else(std::time::Instant::now, |h| h.since);
            ring.head = next_head(ring.head.take(), &rows, &keys, since);
        }
        let got: Vec<ClaimedJob> = rows.into_iter().map(|r| r.job).collect();
        let short = (got.len() as u32) < want;
        out.extend(got);
        if !short {
            break;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{ClaimedJob, ClaimedRow, HEAD_TTL, Head, next_head, org_key, ring_end};
    use chrono::{DateTime, Utc};
    use serde_json::json;
    use std::time::Instant;

    fn row(id: i64, org: &str, run_at: DateTime<Utc>) -> ClaimedRow {
        ClaimedRow {
            job: ClaimedJob {
                id,
                kind: "k".into(),
                payload: json!({ "org_id": org }),
                attempt: 1,
                counted_attempts: 1,
                max_attempts: 3,
                traceparent: None,
            },
            priority: 0,
            run_at,
        }
    }

    fn head_of(rows: &[ClaimedRow], old: Option<Head>, since: Instant) -> Option<Head> {
        let keys: Vec<String> = rows.iter().map(|r| org_key(&r.job.payload)).collect();
        next_head(old, rows, &keys, since)
    }

    #[test]
    fn the_head_is_the_last_job_taken_of_the_lowest_org_and_only_moves_on() {
        let t = Utc::now();
        let later = t + chrono::Duration::seconds(1);
        let now = Instant::now();
        let rows = [
            row(5, "b", t),
            row(9, "a", t),
            row(7, "a", t),
            row(1, "a", later),
        ];
        let h = head_of(&rows, None, now).expect("a head");
        assert_eq!((h.org.as_str(), h.id, h.run_at), ("a", 1, later));
        // A concurrent claim that returns after it with jobs before it leaves it.
        let h = head_of(&[row(3, "a", t)], Some(h), now).expect("a head");
        assert_eq!(h.id, 1);
        // Another org (say, a lower one got ready jobs) replaces it.
        let h = head_of(&[row(2, "0", t)], Some(h), now).expect("a head");
        assert_eq!((h.org.as_str(), h.id), ("0", 2));
        // An expired head is replaced even by a position before it.
        let old = now.checked_sub(HEAD_TTL * 2).unwrap_or(now);
        let h = head_of(&[row(50, "0", later)], Some(Head { since: old, ..h }), old);
        let h = head_of(&[row(1, "0", t)], h, now).expect("a head");
        assert_eq!(h.id, 1);
        assert!(head_of(&[], None, now).is_none());
    }

    #[test]
    fn the_ring_ends_at_the_last_org_after_wrapping() {
        let orgs = ["a", "c", "e"];
        assert_eq!(ring_end("", orgs.iter().copied()), Some("e"));
        assert_eq!(
            ring_end("c", orgs.iter().copied()),
            Some("c"),
            "e, then a, c"
        );
        assert_eq!(ring_end("b", ["c", "e"].iter().copied()), Some("e"));
        assert_eq!(ring_end("z", orgs.iter().copied()), Some("e"));
        assert_eq!(ring_end("a", std::iter::empty()), None);
    }

    #[test]
    fn org_keys_match_the_sql_expression() {
        assert_eq!(org_key(&json!({ "org_id": "o1" })), "o1");
        assert_eq!(org_key(&json!({})), "");
        assert_eq!(org_key(&json!({ "org_id": null })), "");
        assert_eq!(org_key(&json!({ "org_id": 7 })), "7");
        assert_eq!(org_key(&json!([1])), "");
    }
}
