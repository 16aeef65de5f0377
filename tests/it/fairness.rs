//! Fair claims between organisations (issue 30, item 1) against a real PostgreSQL: a claim
//! shares its slots among the orgs with ready jobs, priorities stay strict, claims take turns
//! when more orgs wait than a claim has slots, and end to end (offline provider) a second org's
//! documents are proposed while the first org's backlog is still mostly waiting.

use crate::common;
use agentd::clock::{SharedClock, SystemClock};
use agentd::documents::add_document;
use agentd::queue::store;
use agentd::queue::{NewJob, enqueue_many};
use chrono::{Duration as CDuration, Utc};
use common::{TestDb, wait_until};
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

fn lease() -> CDuration {
    CDuration::seconds(30)
}

/// `n` jobs of `kind` for `org` (`None`: no org in the payload).
fn jobs(kind: &str, org: Option<&str>, n: usize) -> Vec<NewJob> {
    (0..n)
        .map(|i| match org {
            Some(o) => NewJob::new(kind, json!({ "org_id": o, "i": i })),
            None => NewJob::new(kind, json!({ "i": i })),
        })
        .collect()
}

fn orgs_of(got: &[agentd::queue::ClaimedJob]) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for j in got {
        *m.entry(agentd::queue::fair::org_key(&j.payload))
            .or_insert(0) += 1;
    }
    m
}

/// Each test claims its own kind: the round-robin cursor is per kind and per process.
#[tokio::test]
async fn a_claim_shares_its_slots_among_the_orgs_with_ready_jobs() {
    let db = TestDb::new().await;
    let kind = "fair_share";
    // A's backlog first (older run_at), then B's and the org-less group's few jobs.
    enqueue_many(&db.pool, &jobs(kind, Some("org-a"), 1_500))
        .await
        .unwrap();
    enqueue_many(&db.pool, &jobs(kind, Some("org-b"), 10))
        .await
        .unwrap();
    enqueue_many(&db.pool, &jobs(kind, None, 5)).await.unwrap();
    let got = store::claim(&db.pool, &[kind.to_string()], 32, "w", Utc::now(), lease())
        .await
        .unwrap();
    let by_org = orgs_of(&got);
    assert_eq!(
        got.len(),
        32,
        "the slots B and the org-less group leave go to A"
    );
    assert_eq!(
        by_org.get("org-b"),
        Some(&10),
        "all of B's jobs in the first claim"
    );
    assert_eq!(
        by_org.get(""),
        Some(&5),
        "jobs without an org are a group of their own"
    );
    assert_eq!(by_org.get("org-a"), Some(&17));
    // Next claims: only A has ready jobs, it takes whole claims, oldest first.
    let next = store::claim(&db.pool, &[kind.to_string()], 100, "w", Utc::now(), lease())
        .await
        .unwrap();
    assert_eq!(next.len(), 100);
    assert_eq!(orgs_of(&next).get("org-a"), Some(&100));
    let mut ids: Vec<i64> = got.iter().chain(&next).map(|j| j.id).collect();
    let before = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), before, "no job claimed twice");
}

#[tokio::test]
async fn priorities_stay_strict_and_orgs_share_within_one() {
    let db = TestDb::new().await;
    let kind = "fair_priority";
    enqueue_many(&db.pool, &jobs(kind, Some("org-a"), 20))
        .await
        .unwrap();
    let high: Vec<NewJob> = jobs(kind, Some("org-b"), 3)
        .into_iter()
        .map(|j| j.priority(5))
        .collect();
    enqueue_many(&db.pool, &high).await.unwrap();
    let later: Vec<NewJob> = jobs(kind, Some("org-c"), 3)
        .into_iter()
        .map(|j| j.priority(9).run_at(Utc::now() + CDuration::hours(1)))
        .collect();
    enqueue_many(&db.pool, &later).await.unwrap();
    // A claim of 2: only B's jobs are at the top ready priority (C's are not due).
    let got = store::claim(&db.pool, &[kind.to_string()], 2, "w", Utc::now(), lease())
        .await
        .unwrap();
    assert_eq!(
        orgs_of(&got).get("org-b"),
        Some(&2),
        "higher priority first, across orgs"
    );
    // A claim of 5: B's last high-priority job, then A's for the slots left.
    let got = store::claim(&db.pool, &[kind.to_string()], 5, "w", Utc::now(), lease())
        .await
        .unwrap();
    let by_org = orgs_of(&got);
    assert_eq!(by_org.get("org-b"), Some(&1));
    assert_eq!(by_org.get("org-a"), Some(&4));
    assert!(!by_org.contains_key("org-c"), "not due yet");
}

#[tokio::test]
async fn claims_take_turns_when_more_orgs_wait_than_a_claim_has_slots() {
    let db = TestDb::new().await;
    let kind = "fair_round_robin";
    for o in ["o1", "o2", "o3", "o4", "o5"] {
        enqueue_many(&db.pool, &jobs(kind, Some(o), 3))
            .await
            .unwrap();
    }
    let mut served = Vec::new();
    for _ in 0..3 {
        let got = store::claim(&db.pool, &[kind.to_string()], 2, "w", Utc::now(), lease())
            .await
            .unwrap();
        assert_eq!(got.len(), 2);
        let orgs = orgs_of(&got);
        assert_eq!(orgs.len(), 2, "two orgs, one job each: {orgs:?}");
        served.extend(orgs.into_keys());
    }
    let distinct: HashSet<&String> = served.iter().collect();
    assert_eq!(
        distinct.len(),
        5,
        "every org served within three claims: {served:?}"
    );
}

/// A fair claim with a cap of running jobs per org (the job file's `max_running_per_org`).
async fn claim_capped(
    db: &TestDb,
    kind: &str,
    cap: Option<u32>,
    n: u32,
) -> Vec<agentd::queue::ClaimedJob> {
    store::claim_scoped(
        &db.pool,
        &[kind.to_string()],
        None,
        cap,
        n,
        "w",
        Utc::now(),
        lease(),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn an_org_at_its_cap_of_running_jobs_gets_no_more_until_one_finishes() {
    let db = TestDb::new().await;
    let kind = "fair_cap";
    enqueue_many(&db.pool, &jobs(kind, Some("org-a"), 50))
        .await
        .unwrap();
    enqueue_many(&db.pool, &jobs(kind, Some("org-b"), 50))
        .await
        .unwrap();
    let got = claim_capped(&db, kind, Some(2), 10).await;
    let by_org = orgs_of(&got);
    assert_eq!(
        by_org.get("org-a"),
        Some(&2),
        "shares of 5 cut to the cap: {by_org:?}"
    );
    assert_eq!(by_org.get("org-b"), Some(&2), "{by_org:?}");
    assert!(
        claim_capped(&db, kind, Some(2), 10).await.is_empty(),
        "both orgs are at their cap"
    );
    // Without the cap the same queue still has jobs to give: the cap, not the queue, held them.
    let a_done: Vec<(i64, i32)> = got
        .iter()
        .filter(|j| agentd::queue::fair::org_key(&j.payload) == "org-a")
        .take(1)
        .map(|j| (j.id, j.attempt))
        .collect();
    store::complete_many(&db.pool, &a_done, Utc::now())
        .await
        .unwrap();
    let next = claim_capped(&db, kind, Some(2), 10).await;
    assert_eq!(
        orgs_of(&next),
        HashMap::from([("org-a".to_string(), 1)]),
        "one of A's finished"
    );
    assert_eq!(
        claim_capped(&db, kind, None, 4).await.len(),
        4,
        "no cap: claims go on"
    );
}

#[tokio::test]
async fn the_orgs_behind_busy_orgs_in_the_ring_are_served() {
    let db = TestDb::new().await;
    let kind = "fair_cap_ring";
    for o in ["o1", "o2", "o3"] {
        enqueue_many(&db.pool, &jobs(kind, Some(o), 5))
            .await
            .unwrap();
    }
    // o1 and o2 reach their cap of 1; o3's single job is then claimed and finished.
    let first = claim_capped(&db, kind, Some(1), 3).await;
    assert_eq!(orgs_of(&first).len(), 3, "one each: {:?}", orgs_of(&first));
    let o3: Vec<(i64, i32)> = first
        .iter()
        .filter(|j| agentd::queue::fair::org_key(&j.payload) == "o3")
        .map(|j| (j.id, j.attempt))
        .collect();
    store::complete_many(&db.pool, &o3, Utc::now())
        .await
        .unwrap();
    // A claim of one slot: the ring passes the busy o1 and o2 and serves o3, every time.
    for _ in 0..3 {
        let got = claim_capped(&db, kind, Some(1), 1).await;
        assert_eq!(orgs_of(&got), HashMap::from([("o3".to_string(), 1)]));
        let done: Vec<(i64, i32)> = got.iter().map(|j| (j.id, j.attempt)).collect();
        store::complete_many(&db.pool, &done, Utc::now())
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn an_orgs_own_cap_wins_over_the_kinds() {
    let db = TestDb::new().await;
    let kind = "fair_cap_own";
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    enqueue_many(&db.pool, &jobs(kind, Some(&a.to_string()), 20))
        .await
        .unwrap();
    enqueue_many(&db.pool, &jobs(kind, Some(&b.to_string()), 20))
        .await
        .unwrap();
    agentd::queue::fair::set_org_limit(&db.pool, kind, a, Some(1))
        .await
        .unwrap();
    agentd::queue::fair::set_org_limit(&db.pool, kind, b, Some(6))
        .await
        .unwrap();
    // No cap for the kind: the org rows alone apply.
    let got = claim_capped(&db, kind, None, 20).await;
    let by_org = orgs_of(&got);
    assert_eq!(by_org.get(&a.to_string()), Some(&1), "{by_org:?}");
    assert_eq!(by_org.get(&b.to_string()), Some(&6), "{by_org:?}");
    assert_eq!(
        agentd::queue::fair::org_limits(&db.pool, a).await.unwrap(),
        vec![(kind.to_string(), 1)]
    );
    // Cleared, A falls back to the kind's cap (here 3: two more than it has running).
    agentd::queue::fair::set_org_limit(&db.pool, kind, a, None)
        .await
        .unwrap();
    let more = claim_capped(&db, kind, Some(3), 20).await;
    assert_eq!(
        orgs_of(&more).get(&a.to_string()),
        Some(&2),
        "{:?}",
        orgs_of(&more)
    );
}

/// Concurrent fair claims never hand out a job twice and lose none.
#[tokio::test]
async fn concurrent_fair_claims_never_get_the_same_job() {
    let db = TestDb::new().await;
    let kind = "fair_concurrent";
    for o in 0..7 {
        let n = if o == 0 { 400 } else { 30 };
        enqueue_many(&db.pool, &jobs(kind, Some(&format!("org-{o}")), n))
            .await
            .unwrap();
    }
    enqueue_many(&db.pool, &jobs(kind, None, 20)).await.unwrap();
    let mut tasks = Vec::new();
    for w in 0..4 {
        let pool = db.pool.clone();
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            let mut empty = 0;
            // A claim may come back empty while another claimer holds the rows it chose; stop
            // after several empty claims in a row.
            while empty < 5 {
                let got = store::claim(
                    &pool,
                    &[kind.to_string()],
                    9,
                    &format!("w{w}"),
                    Utc::now(),
                    lease(),
                )
                .await
                .unwrap();
                if got.is_empty() {
                    empty += 1;
                } else {
                    empty = 0;
                }
                seen.extend(got.iter().map(|j| j.id));
            }
            seen
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let unique: HashSet<_> = all.iter().collect();
    assert_eq!(all.len(), 400 + 6 * 30 + 20, "every job claimed");
    assert_eq!(unique.len(), all.len(), "no job claimed twice");
}

async fn final_count(db: &TestDb, docs: &[Uuid]) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM documents WHERE id = ANY($1)
            AND auto_create_status IN ('proposed', 'failed', 'skipped')",
    )
    .bind(docs)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// Issue 30's case end to end (offline provider): with org A's 1,500 auto_create jobs queued
/// first, org B's 10 documents uploaded right after are all proposed while more than half of
/// A's jobs are still waiting. Before fair claims they waited for A's whole backlog.
#[tokio::test]
async fn another_orgs_documents_are_proposed_long_before_a_backlog_drains() {
    let db = TestDb::new().await;
    let app = common::app(&db, Arc::new(SystemClock) as SharedClock);
    let org_a = agentd::store::orgs::ensure(&db.pool, "a-corp")
        .await
        .unwrap()
        .id;
    let org_b = agentd::store::orgs::ensure(&db.pool, "b-corp")
        .await
        .unwrap()
        .id;
    let (name, text) = agentd::documents::SAMPLES[0];
    let mut a_docs = Vec::with_capacity(1_500);
    for i in 0..1_500 {
        let doc = add_document(&app, org_a, &format!("a-{i}-{name}"), text, true)
            .await
            .unwrap()
            .0;
        a_docs.push(doc);
    }
    let (w, stop) = common::start_worker(&app, "auto_create", None).await;
    // A's backlog is being worked on; then B uploads.
    wait_until(60, "the worker starts on A's backlog", || async {
        final_count(&db, &a_docs).await > 0
    })
    .await;
    let uploaded = Instant::now();
    let mut b_docs = Vec::new();
    for i in 0..10 {
        let doc = add_document(&app, org_b, &format!("b-{i}-{name}"), text, true)
            .await
            .unwrap()
            .0;
        b_docs.push(doc);
    }
    wait_until(60, "B's 10 documents reach a final status", || async {
        final_count(&db, &b_docs).await == 10
    })
    .await;
    let b_took = uploaded.elapsed();
    let a_waiting: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM agentd_jobs WHERE kind = 'auto_create' AND state = 'available'
            AND payload->>'org_id' = $1",
    )
    .bind(org_a.to_string())
    .fetch_one(&db.pool)
    .await
    .unwrap();
    eprintln!(
        "B's 10 documents final after {b_took:?}; A's jobs still waiting: {a_waiting} of 1,500"
    );
    stop.cancel();
    w.join().await;
    let proposed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM documents WHERE id = ANY($1) AND auto_create_status = 'proposed'",
    )
    .bind(&b_docs)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(proposed, 10, "B's documents are proposed");
    assert!(
        a_waiting > 750,
        "B was done while A still had {a_waiting} of 1,500 jobs waiting (more than half expected); B took {b_took:?}"
    );
    assert!(
        b_took < std::time::Duration::from_secs(10),
        "B's documents took {b_took:?}"
    );
}

/// Runs each job for `ms` of its payload and keeps, per org, how many of its jobs run at once
/// (now and at most) and when each job started.
#[derive(Default)]
struct Timed {
    running: std::sync::Mutex<HashMap<String, usize>>,
    most: std::sync::Mutex<HashMap<String, usize>>,
    /// (org, the job's `i`, when it started, the other orgs' jobs running then).
    started: std::sync::Mutex<Vec<(String, i64, Instant, usize)>>,
}

#[async_trait::async_trait]
impl agentd::queue::worker::JobHandler for Timed {
    async fn handle(
        &self,
        job: agentd::queue::worker::JobContext,
    ) -> Result<(), agentd::queue::JobError> {
        let org = agentd::queue::fair::org_key(&job.job.payload);
        let i = job.job.payload["i"].as_i64().unwrap_or(-1);
        {
            let mut running = self.running.lock().unwrap();
            let others: usize = running
                .iter()
                .filter(|(o, _)| **o != org)
                .map(|(_, n)| *n)
                .sum();
            let now = running.entry(org.clone()).or_default();
            *now += 1;
            let mut most = self.most.lock().unwrap();
            let m = most.entry(org.clone()).or_default();
            *m = (*m).max(*now);
            self.started
                .lock()
                .unwrap()
                .push((org.clone(), i, Instant::now(), others));
        }
        let ms = job.job.payload["ms"].as_u64().unwrap_or(0);
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        *self.running.lock().unwrap().get_mut(&org).unwrap() -= 1;
        Ok(())
    }
}

fn timed_jobs(kind: &str, org: &str, n: usize, ms: u64, from: usize) -> Vec<NewJob> {
    (from..from + n)
        .map(|i| NewJob::new(kind, json!({ "org_id": org, "i": i, "ms": ms })))
        .collect()
}

/// A worker of `kind` running `h` at `concurrency`, with a fixed prefetch of `prefetch`, a
/// poll of 10 s (so only NOTIFYs wake it in time) and `newcomer_slots`.
fn timed_worker(
    db: &TestDb,
    id: &str,
    prefetch: u32,
    kind: &str,
    h: Arc<Timed>,
    concurrency: usize,
    newcomer_slots: usize,
) -> agentd::queue::apalis::ApalisWorker {
    use agentd::queue::worker::{KindRuntime, Prefetch, WorkerOptions};
    let opts = WorkerOptions {
        worker_id: id.into(),
        claim_batch: 16,
        prefetch: Prefetch::Fixed(prefetch),
        poll_interval: std::time::Duration::from_secs(10),
        lease: std::time::Duration::from_secs(30),
        heartbeat: std::time::Duration::from_secs(5),
        shutdown_grace: std::time::Duration::from_millis(200),
    };
    agentd::queue::apalis::build_worker(
        db.pool.clone(),
        Arc::new(SystemClock) as SharedClock,
        &opts,
        KindRuntime {
            kind: kind.into(),
            handler: h,
            concurrency,
            timeout: std::time::Duration::from_secs(60),
            backoff: agentd::queue::backoff::Backoff {
                base: std::time::Duration::from_millis(10),
                max: std::time::Duration::from_millis(20),
            },
            delete_on_success: false,
            max_running_per_org: None,
            newcomer_slots,
        },
    )
}

/// Issue 30 (the fairness benchmark's target): with newcomer slots, an org whose backlog fills
/// a worker keeps at most `concurrency - newcomer_slots` of its slots while other orgs' jobs
/// ran there lately, so another org's job arriving starts at once (here well within the poll
/// interval of 10 s and while the busy org's jobs of 2 s are still running) instead of waiting
/// for a slot to free; alone, the org has every slot.
#[tokio::test]
async fn newcomer_slots_start_another_orgs_job_at_once_and_cost_nothing_alone() {
    let db = TestDb::new().await;
    let worker = |kind: &str, h: Arc<Timed>| timed_worker(&db, "fair-newcomer", 0, kind, h, 4, 1);

    // Alone: A's backlog takes all four slots.
    let kind = "fair_newcomer_alone";
    enqueue_many(&db.pool, &timed_jobs(kind, "org-a", 8, 400, 0))
        .await
        .unwrap();
    let h = Arc::new(Timed::default());
    let stop = CancellationToken::new();
    let run = tokio::spawn(worker(kind, h.clone()).run(stop.clone()));
    wait_until(30, "A's eight jobs started", || async {
        h.started.lock().unwrap().len() == 8
    })
    .await;
    stop.cancel();
    run.await.unwrap();
    assert_eq!(
        h.most.lock().unwrap().get("org-a"),
        Some(&4),
        "alone, an org has every slot"
    );

    // Beside B: B's first job is claimed with A's first claim; from then A holds at most 3.
    let kind = "fair_newcomer";
    enqueue_many(&db.pool, &timed_jobs(kind, "org-b", 1, 10, 0))
        .await
        .unwrap();
    enqueue_many(&db.pool, &timed_jobs(kind, "org-a", 40, 2_000, 0))
        .await
        .unwrap();
    let h = Arc::new(Timed::default());
    let stop = CancellationToken::new();
    let run = tokio::spawn(worker(kind, h.clone()).run(stop.clone()));
    wait_until(30, "three of A's jobs running", || async {
        h.running.lock().unwrap().get("org-a").copied() == Some(3)
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let sent = Instant::now();
    enqueue_many(&db.pool, &timed_jobs(kind, "org-b", 1, 10, 1))
        .await
        .unwrap();
    wait_until(30, "B's second job started", || async {
        h.started
            .lock()
            .unwrap()
            .iter()
            .any(|(o, i, _, _)| o == "org-b" && *i == 1)
    })
    .await;
    let (_, _, at, a_running) = h
        .started
        .lock()
        .unwrap()
        .iter()
        .find(|(o, i, _, _)| o == "org-b" && *i == 1)
        .cloned()
        .unwrap();
    assert!(
        at.duration_since(sent) < std::time::Duration::from_secs(1),
        "B's job started {:?} after it was enqueued (the poll interval is 10 s)",
        at.duration_since(sent)
    );
    assert_eq!(a_running, 3, "while A's three jobs still ran");
    // A keeps its three slots: its jobs go on one after another.
    wait_until(30, "A's next jobs started", || async {
        h.started
            .lock()
            .unwrap()
            .iter()
            .filter(|(o, _, _, _)| o == "org-a")
            .count()
            >= 6
    })
    .await;
    stop.cancel();
    run.await.unwrap();
    assert_eq!(
        h.most.lock().unwrap().get("org-a"),
        Some(&3),
        "beside another org, A holds at most concurrency - newcomer_slots"
    );
}

/// Issue 30, newcomer claims (`queue::apalis::AgentdBackend`): one org's backlog fills a
/// worker's slots and its prefetch buffer; a job another org enqueues then is claimed at the
/// next free slot and put ahead of the buffer, so it starts at most a slot or two later — not
/// after the buffered jobs (here eight of 300 ms on two slots), and not at the poll (10 s).
#[tokio::test]
async fn another_orgs_job_is_claimed_ahead_of_a_full_buffer() {
    let db = TestDb::new().await;
    let kind = "fair_front";
    enqueue_many(&db.pool, &timed_jobs(kind, "org-a", 40, 300, 0))
        .await
        .unwrap();
    let h = Arc::new(Timed::default());
    let worker = timed_worker(&db, "fair-front", 8, kind, h.clone(), 2, 0);
    let stop = CancellationToken::new();
    let run = tokio::spawn(worker.run(stop.clone()));
    wait_until(30, "A's first two jobs running", || async {
        h.running.lock().unwrap().get("org-a").copied() == Some(2)
    })
    .await;
    // The buffer is full: A's jobs claimed and not started.
    let buffered = || async {
        let claimed: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM agentd_jobs WHERE kind = 'fair_front' AND state = 'running'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        claimed as usize - h.running.lock().unwrap().values().sum::<usize>()
    };
    wait_until(30, "A's jobs buffered", || async { buffered().await >= 6 }).await;
    let sent = Instant::now();
    enqueue_many(&db.pool, &timed_jobs(kind, "org-b", 1, 10, 0))
        .await
        .unwrap();
    wait_until(30, "B's job started", || async {
        h.started.lock().unwrap().iter().any(|(o, ..)| o == "org-b")
    })
    .await;
    stop.cancel();
    run.await.unwrap();
    let started = h.started.lock().unwrap().clone();
    let b_at = started
        .iter()
        .find(|(o, ..)| o == "org-b")
        .map(|(_, _, at, _)| *at)
        .unwrap();
    let a_between = started
        .iter()
        .filter(|(o, _, at, _)| o == "org-a" && *at > sent && *at < b_at)
        .count();
    assert!(
        a_between <= 2,
        "{a_between} of A's buffered jobs started before B's (enqueued {:?} earlier)",
        b_at.duration_since(sent)
    );
    assert!(
        b_at.duration_since(sent) < std::time::Duration::from_secs(2),
        "B's job started {:?} after it was enqueued",
        b_at.duration_since(sent)
    );
}

/// A claim starts past the jobs of the first org this process already took (the head), yet
/// higher priorities and lower orgs that became ready are still seen at once, and a job made
/// ready before the head is claimed once the head expires.
#[tokio::test]
async fn claims_past_the_taken_head_still_see_every_ready_job() {
    let db = TestDb::new().await;
    let kind = "fair_head";
    let k = [kind.to_string()];
    enqueue_many(&db.pool, &jobs(kind, Some("org-b"), 100))
        .await
        .unwrap();
    let first = store::claim(&db.pool, &k, 32, "w", Utc::now(), lease())
        .await
        .unwrap();
    assert_eq!(first.len(), 32);
    // A higher priority (same org) and a lower org (same priority) after the head was set.
    enqueue_many(
        &db.pool,
        &[NewJob::new(kind, json!({ "org_id": "org-b", "urgent": true })).priority(3)],
    )
    .await
    .unwrap();
    let got = store::claim(&db.pool, &k, 1, "w", Utc::now(), lease())
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].payload["urgent"],
        json!(true),
        "priorities stay strict"
    );
    enqueue_many(&db.pool, &jobs(kind, Some("org-a"), 1))
        .await
        .unwrap();
    let got = store::claim(&db.pool, &k, 4, "w", Utc::now(), lease())
        .await
        .unwrap();
    assert_eq!(orgs_of(&got).get("org-a"), Some(&1), "a lower org is seen");
    // B's next jobs in order: nothing of B skipped, nothing taken twice.
    let ids_b: Vec<i64> = first
        .iter()
        .chain(got.iter())
        .filter(|j| j.payload["org_id"] == json!("org-b"))
        .map(|j| j.id)
        .collect();
    let mut sorted = ids_b.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 35);
    assert_eq!(
        sorted[34] - sorted[0],
        34,
        "B's oldest 35 jobs, none skipped"
    );
    // A job of B made ready before the head (an older run_at): claimed once the head expires.
    let old = NewJob::new(kind, json!({ "org_id": "org-b", "old": true }))
        .run_at(Utc::now() - CDuration::hours(1));
    enqueue_many(&db.pool, &[old]).await.unwrap();
    tokio::time::sleep(agentd::queue::fair::HEAD_TTL + std::time::Duration::from_millis(100)).await;
    let got = store::claim(&db.pool, &k, 1, "w", Utc::now(), lease())
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload["old"], json!(true), "oldest first again");
}
