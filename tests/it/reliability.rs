//! Faults, several nodes, hostile sizes: nothing lost, nothing twice. These drive the real binary
//! (child `agentd worker` processes killed with SIGKILL or stopped with SIGTERM) and a real
//! PostgreSQL; crashes are simulated by killing processes and rewriting leases into the past.

use crate::common;
use agentd::app::App;
use agentd::clock::SystemClock;
use agentd::documents::{SAMPLES, add_document};
use agentd::llm::scripted::{ScriptedProvider, Turn};
use common::{TestDb, wait_until};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uuid::Uuid;

struct Node {
    child: std::process::Child,
    logs: Option<std::thread::JoinHandle<Vec<u8>>>,
}

impl Node {
    fn start(db: &TestDb, env: &[(&str, &str)], cron: bool) -> Self {
        let mut c = Command::new(env!("CARGO_BIN_EXE_agentd"));
        c.arg("worker");
        if !cron {
            c.arg("--no-cron");
        }
        c.env("DATABASE_URL", &db.url)
            .env("AGENTD_HTTP__ADDR", "")
            .env("AGENTD_WORKER__LEASE_SECS", "4")
            .env("AGENTD_WORKER__HEARTBEAT_SECS", "1")
            .env("AGENTD_WORKER__RESCUE_INTERVAL_SECS", "1")
            .env("AGENTD_WORKER__POLL_INTERVAL_MS", "200")
            .env("AGENTD_LLM__PROVIDER", "offline")
            .env_remove("OPENAI_API_KEY")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        let mut child = c.spawn().expect("start agentd worker");
        let mut err = child.stderr.take().unwrap();
        let logs = std::thread::spawn(move || {
            let mut b = Vec::new();
            let _ = err.read_to_end(&mut b);
            b
        });
        Self {
            child,
            logs: Some(logs),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal(&self, s: Signal) {
        kill(Pid::from_raw(self.child.id() as i32), s).unwrap();
    }

    /// Waits for exit; returns (success, seconds, logs).
    fn wait(mut self) -> (bool, f64, String) {
        let t = Instant::now();
        let ok = self.child.wait().unwrap().success();
        let logs = String::from_utf8_lossy(&self.logs.take().unwrap().join().unwrap()).to_string();
        (ok, t.elapsed().as_secs_f64(), logs)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Schema versions runs made plus the runs that reused an org schema as it was: one per run
/// when every run decided its schema exactly once (`create_schema` reuses the org's schema for
/// the same kind of document, issue 28).
const SCHEMA_DECISIONS: &str = "SELECT (SELECT count(*) FROM schemas)
    + (SELECT count(*) FROM agent_runs WHERE reused_schema_id IS NOT NULL)";

async fn count(db: &TestDb, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

fn app(db: &TestDb) -> App {
    common::app(db, Arc::new(SystemClock))
}

/// Every tool call of every run has exactly one audit row, and no call id appears twice.
async fn assert_audit_integrity(db: &TestDb) {
    let missing = count(
        db,
        "SELECT count(*) FROM agent_steps s WHERE s.kind = 'tool_result' AND NOT EXISTS
           (SELECT 1 FROM audit_events a WHERE a.run_id = s.run_id AND a.call_id = s.call_id)",
    )
    .await;
    assert_eq!(missing, 0, "tool calls without an audit row");
    let dup = count(
        db,
        "SELECT count(*) FROM (SELECT run_id, call_id FROM audit_events WHERE run_id IS NOT NULL
           GROUP BY run_id, call_id HAVING count(*) > 1) d",
    )
    .await;
    assert_eq!(dup, 0, "a call audited twice");
}

/// Pushes running leases into the past so the next worker's rescuer takes the jobs at once.
async fn expire_leases(db: &TestDb, locked_by_pid: Option<u32>) {
    let pattern = locked_by_pid
        .map(|p| format!("%:{p}:%"))
        .unwrap_or_else(|| "%".into());
    sqlx::query("UPDATE agentd_jobs SET lease_expires_at = now() - interval '1 second' WHERE state = 'running' AND locked_by LIKE $1")
        .bind(pattern)
        .execute(&db.pool)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_worker_killed_mid_run_is_resumed_without_duplicates() {
    // Kill points: while provider call 2 is in flight, right after the second tool's commit,
    // and while the final summary call is in flight (the offline flow makes three tool calls).
    for kill_after_results in [1_i64, 2, 3] {
        let db = TestDb::new().await;
        let app = app(&db);
        let org = agentd::store::orgs::ensure(&db.pool, "acme")
            .await
            .unwrap()
            .id;
        let (doc, _) = add_document(&app, org, "invoice.txt", SAMPLES[0].1, true)
            .await
            .unwrap();
        let node = Node::start(&db, &[("AGENTD_LLM__OFFLINE_LATENCY_MS", "400")], false);
        wait_until(60, "the run reached the kill point", || async {
            count(
                &db,
                "SELECT count(*) FROM agent_steps WHERE kind = 'tool_result'",
            )
            .await
                >= kill_after_results
        })
        .await;
        node.signal(Signal::SIGKILL);
        let (ok, _, _) = node.wait();
        assert!(!ok, "killed");
        let at_kill = count(
            &db,
            "SELECT count(*) FROM agent_steps WHERE kind = 'tool_result'",
        )
        .await;
        assert_ne!(
            count(
                &db,
                "SELECT count(*) FROM documents WHERE auto_create_status = 'proposed'"
            )
            .await,
            1,
            "the kill came before the end"
        );
        expire_leases(&db, None).await;
        let node = Node::start(&db, &[], false);
        wait_until(60, "the resumed run proposed", || async {
            count(&db, &format!("SELECT count(*) FROM documents WHERE id = '{doc}' AND auto_create_status = 'proposed'")).await == 1
        })
        .await;
        node.signal(Signal::SIGTERM);
        assert!(node.wait().0);
        for table in ["schemas", "prompts", "extractions", "agent_runs"] {
            assert_eq!(
                count(&db, &format!("SELECT count(*) FROM {table}")).await,
                1,
                "kill after {kill_after_results}: one row in {table}"
            );
        }
        // The offline flow is 4 provider calls and 3 tool calls (the document excerpt is in the
        // first message); a repeated completed call would leave an extra checkpoint.
        assert_eq!(
            count(
                &db,
                "SELECT count(*) FROM agent_steps WHERE kind = 'llm_response'"
            )
            .await,
            4
        );
        assert_eq!(
            count(
                &db,
                "SELECT count(*) FROM agent_steps WHERE kind = 'tool_result'"
            )
            .await,
            3
        );
        assert_eq!(count(&db, "SELECT count(*) FROM audit_events").await, 3);
        assert_audit_integrity(&db).await;
        // The run's events (issue 49): started once (the resume reopened it), one `run.step`
        // per checkpoint at its seq (none written again by the resumed attempt), finished once.
        for (kind, n) in [
            ("run.started", 1),
            ("run.finished", 1),
            ("proposal.ready", 1),
        ] {
            assert_eq!(
                count(
                    &db,
                    &format!("SELECT count(*) FROM agentd_events WHERE type = '{kind}'")
                )
                .await,
                n,
                "kill after {kill_after_results}: {kind}"
            );
        }
        let unmatched = count(
            &db,
            "SELECT count(*) FROM agent_steps s
              FULL JOIN (SELECT subject_id, (payload->>'seq')::int AS seq FROM agentd_events
                          WHERE type = 'run.step') e
                ON e.subject_id = s.run_id AND e.seq = s.seq
             WHERE (s.kind IS NULL OR s.kind IN ('llm_response', 'tool_model', 'tool_result'))
               AND (s.run_id IS NULL OR e.seq IS NULL)",
        )
        .await;
        assert_eq!(
            unmatched, 0,
            "kill after {kill_after_results}: a checkpoint without its run.step or one without its checkpoint"
        );
        assert_eq!(
            count(&db, "SELECT count(*) FROM agentd_events WHERE type = 'run.step'").await,
            count(&db, "SELECT count(*) FROM agent_steps WHERE kind IN ('llm_response', 'tool_model', 'tool_result')").await,
        );
        let (state, attempt): (String, i32) =
            sqlx::query_as("SELECT state, attempt FROM agentd_jobs")
                .fetch_one(&db.pool)
                .await
                .unwrap();
        assert_eq!(
            (state.as_str(), attempt),
            ("succeeded", 2),
            "kill after {kill_after_results} (observed {at_kill})"
        );
    }
}

#[tokio::test]
async fn three_nodes_run_5000_mixed_jobs_exactly_once_even_when_one_dies() {
    let db = TestDb::new().await;
    let app = app(&db);
    let org = agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id;
    // The nodes run on the real clock, and the nightly fan-out enqueues an org's job once its
    // local hour reaches `nightly_hour` (02:00 by default: none before then). Hour 0 makes
    // tonight's job due whatever the time of day the test runs.
    sqlx::query("UPDATE orgs SET nightly_hour = 0 WHERE id = $1")
        .bind(org)
        .execute(&db.pool)
        .await
        .unwrap();
    // 300 auto-creates through the agent loop.
    let mut docs = Vec::new();
    for i in 0..300 {
        let (name, text) = SAMPLES[i % SAMPLES.len()];
        docs.push(
            add_document(&app, org, &format!("{i}-{name}"), text, true)
                .await
                .unwrap()
                .0,
        );
    }
    // 4,700 approval sweeps, each owning one expired pending approval.
    sqlx::query(
        "INSERT INTO pending_approvals (id, org_id, tool, args, snapshot, snapshot_hash, created_at, expires_at, chain_id)
         SELECT gen_random_uuid(), $1, 'update_document', jsonb_build_object('document_id', $2::uuid, 'metadata', jsonb_build_object('n', g)),
                '{}'::jsonb, 'not-the-hash', now() - interval '5 hours', now() - interval '1 hour', gen_random_uuid()
           FROM generate_series(1, 4700) g",
    )
    .bind(org)
    .bind(docs[0])
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO agentd_jobs (kind, payload, max_attempts)
         SELECT 'approval_expiry', jsonb_build_object('approval_ids', jsonb_build_array(id)), 5 FROM pending_approvals",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let nodes: Vec<Node> = (0..3).map(|_| Node::start(&db, &[], true)).collect();
    wait_until(120, "a third of the work done", || async {
        count(
            &db,
            "SELECT count(*) FROM agentd_jobs WHERE state = 'succeeded'",
        )
        .await
            >= 1700
    })
    .await;
    // One node dies without a word; its leases are pushed into the past.
    let mut nodes = nodes.into_iter();
    let victim = nodes.next().unwrap();
    let victim_pid = victim.pid();
    victim.signal(Signal::SIGKILL);
    victim.wait();
    expire_leases(&db, Some(victim_pid)).await;
    wait_until(240, "every job finished", || async {
        count(
            &db,
            "SELECT count(*) FROM agentd_jobs WHERE state IN ('available', 'running')",
        )
        .await
            == 0
    })
    .await;
    for n in nodes {
        n.signal(Signal::SIGTERM);
        assert!(n.wait().0);
    }
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM agentd_jobs WHERE state <> 'succeeded'"
        )
        .await,
        0,
        "nothing dead or lost"
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM documents WHERE auto_create_status = 'proposed'"
        )
        .await,
        300
    );
    // A schema per document: made by its run, or an org schema its run reused (issue 28).
    assert_eq!(
        count(&db, SCHEMA_DECISIONS).await,
        300,
        "one schema per document"
    );
    for table in ["prompts", "extractions"] {
        assert_eq!(
            count(&db, &format!("SELECT count(*) FROM {table}")).await,
            300,
            "{table}: one per document"
        );
    }
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM pending_approvals WHERE status = 'pending'"
        )
        .await,
        0
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(DISTINCT call_id) FROM audit_events WHERE call_id LIKE 'approval:%'"
        )
        .await,
        4700
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM audit_events WHERE call_id LIKE 'approval:%'"
        )
        .await,
        4700,
        "each approval decided once"
    );
    assert_audit_integrity(&db).await;
    // Cron: three schedulers, one nightly fan-out job for the one org, one job per expiry tick.
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM agentd_jobs WHERE kind = 'proactive_suggestion'"
        )
        .await,
        1
    );
    let ticks = count(
        &db,
        "SELECT count(*) FROM agentd_jobs WHERE unique_key LIKE 'cron:approval_expiry:%'",
    )
    .await;
    let distinct = count(&db, "SELECT count(DISTINCT payload->>'tick') FROM agentd_jobs WHERE unique_key LIKE 'cron:approval_expiry:%'").await;
    assert!(
        ticks >= 1 && ticks == distinct,
        "one job per tick ({ticks} jobs, {distinct} ticks)"
    );
}

#[tokio::test]
async fn sigterm_finishes_short_work_and_releases_long_work_within_the_grace_period() {
    // Short work: the run (5 calls × 100 ms) finishes inside a 10 s grace period.
    let db = TestDb::new().await;
    let app = app(&db);
    let org = agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id;
    add_document(&app, org, "r.txt", SAMPLES[1].1, true)
        .await
        .unwrap();
    let node = Node::start(
        &db,
        &[
            ("AGENTD_LLM__OFFLINE_LATENCY_MS", "100"),
            ("AGENTD_WORKER__SHUTDOWN_GRACE_SECS", "10"),
        ],
        false,
    );
    wait_until(30, "run started", || async {
        count(&db, "SELECT count(*) FROM agent_steps").await >= 1
    })
    .await;
    node.signal(Signal::SIGTERM);
    let (ok, secs, logs) = node.wait();
    assert!(ok, "{logs}");
    assert!(secs < 10.0);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM documents WHERE auto_create_status = 'proposed'"
        )
        .await,
        1,
        "finished during the grace period"
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM agentd_jobs WHERE state = 'succeeded'"
        )
        .await,
        1
    );

    // Long work: 3 s per provider call, 1 s grace: released, not lost, not counted.
    let db = TestDb::new().await;
    let app = app_for(&db);
    let org = agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id;
    let (doc, _) = add_document(&app, org, "r.txt", SAMPLES[1].1, true)
        .await
        .unwrap();
    let node = Node::start(
        &db,
        &[
            ("AGENTD_LLM__OFFLINE_LATENCY_MS", "3000"),
            ("AGENTD_WORKER__SHUTDOWN_GRACE_SECS", "1"),
        ],
        false,
    );
    wait_until(30, "job running", || async {
        count(
            &db,
            "SELECT count(*) FROM agentd_jobs WHERE state = 'running'",
        )
        .await
            == 1
    })
    .await;
    node.signal(Signal::SIGTERM);
    let (ok, secs, logs) = node.wait();
    assert!(ok, "{logs}");
    assert!(secs < 4.0, "stopped within the grace period ({secs:.1}s)");
    let (state, released, lease): (String, i32, Option<chrono::DateTime<chrono::Utc>>) =
        sqlx::query_as("SELECT state, released, lease_expires_at FROM agentd_jobs")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        (state.as_str(), released, lease),
        ("available", 1, None),
        "released for another worker at once"
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM agentd_jobs WHERE state = 'running'"
        )
        .await,
        0
    );
    // Another worker picks it up at once and finishes it.
    let node = Node::start(&db, &[], false);
    wait_until(30, "finished elsewhere", || async {
        count(&db, &format!("SELECT count(*) FROM documents WHERE id = '{doc}' AND auto_create_status = 'proposed'")).await == 1
    })
    .await;
    node.signal(Signal::SIGTERM);
    assert!(node.wait().0);
    assert_eq!(count(&db, "SELECT count(*) FROM schemas").await, 1);
}

fn app_for(db: &TestDb) -> App {
    app(db)
}

#[tokio::test]
async fn terminated_database_connections_lose_no_job_and_run_none_twice() {
    let db = TestDb::new().await;
    let mut app = app(&db);
    app.provider = Arc::new(agentd::llm::offline::OfflineProvider {
        latency: Duration::from_millis(20),
    });
    let mut catalog = (*app.catalog).clone();
    catalog
        .kinds
        .get_mut("auto_create")
        .unwrap()
        .queue
        .max_attempts = 20;
    app.catalog = Arc::new(catalog);
    let org = agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id;
    let mut docs = Vec::new();
    for i in 0..120 {
        let (name, text) = SAMPLES[i % SAMPLES.len()];
        docs.push(
            add_document(&app, org, &format!("{i}-{name}"), text, true)
                .await
                .unwrap()
                .0,
        );
    }
    let (w, stop) = common::start_worker(&app, "auto_create", Some(8)).await;
    let admin = sqlx::PgPool::connect(&common::server_url()).await.unwrap();
    let mut kills = 0;
    let mut saw_unhealthy = false;
    while count(
        &db,
        "SELECT count(*) FROM documents WHERE auto_create_status = 'proposed'",
    )
    .await
        < 120
        && kills < 4
    {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let n: i64 = sqlx::query_scalar(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1",
        )
        .bind(&db.name)
        .fetch_one(&admin)
        .await
        .unwrap();
        if n > 0 {
            kills += 1;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        saw_unhealthy |= !w.db_ok();
    }
    assert!(
        kills >= 2,
        "the faults were injected while work was in progress ({kills})"
    );
    wait_until(120, "all proposed", || async {
        count(
            &db,
            "SELECT count(*) FROM documents WHERE auto_create_status = 'proposed'",
        )
        .await
            == 120
    })
    .await;
    wait_until(30, "all acked", || async {
        count(
            &db,
            "SELECT count(*) FROM agentd_jobs WHERE state <> 'succeeded'",
        )
        .await
            == 0
    })
    .await;
    stop.cancel();
    w.join().await;
    assert_eq!(
        count(&db, SCHEMA_DECISIONS).await,
        120,
        "schemas: exactly one made or reused per document"
    );
    for table in ["prompts", "extractions", "agent_runs"] {
        assert_eq!(
            count(&db, &format!("SELECT count(*) FROM {table}")).await,
            120,
            "{table}: exactly one per document"
        );
    }
    assert_audit_integrity(&db).await;
    let _ = saw_unhealthy; // reported by /readyz; see tests/it/operator.rs for the 503 check
}

#[tokio::test]
async fn a_model_repeating_one_call_forever_is_stopped_by_its_caps() {
    let db = TestDb::new().await;
    let mut app = app(&db);
    let p = Arc::new(ScriptedProvider::new(
        (0..60)
            .map(|i| Turn::tool(&format!("c{i}"), "list_tags", json!({})))
            .collect(),
    ));
    app.provider = p.clone();
    let org = agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id;
    let (doc, _) = add_document(&app, org, "d.txt", "Total: 1", true)
        .await
        .unwrap();
    let (w, stop) = common::start_worker(&app, "auto_create", None).await;
    wait_until(30, "run ended", || async {
        count(&db, &format!("SELECT count(*) FROM documents WHERE id = '{doc}' AND auto_create_status = 'failed'")).await == 1
    })
    .await;
    stop.cancel();
    w.join().await;
    let (status, reason, rounds): (String, String, i32) =
        sqlx::query_as("SELECT status, stop_reason, rounds FROM agent_runs")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    // The repeat guard refuses the identical calls; max_repeats (3) ends the run long before
    // the round cap: the first call, three refused repeats, then the forced summary.
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("capped", "max_repeats")
    );
    assert_eq!(rounds, 5, "4 rounds and the forced summary");
    assert_eq!(p.calls(), 5);
}

#[tokio::test]
async fn a_multi_megabyte_document_is_read_as_a_bounded_excerpt() {
    let db = TestDb::new().await;
    let app = app(&db);
    let org = agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id;
    let mut text = String::from("Invoice Number: BIG-1\nTotal: 42.00\n");
    while text.len() < 5_000_000 {
        text.push_str("Line item: lorem ipsum dolor sit amet, consectetur adipiscing elit\n");
    }
    let (doc, _) = add_document(&app, org, "big.txt", &text, true)
        .await
        .unwrap();
    let (w, stop) = common::start_worker(&app, "auto_create", None).await;
    wait_until(60, "proposed", || async {
        count(&db, &format!("SELECT count(*) FROM documents WHERE id = '{doc}' AND auto_create_status = 'proposed'")).await == 1
    })
    .await;
    stop.cancel();
    w.join().await;
    let excerpt = app.spec("auto_create").agent.excerpt_chars as i64;
    let biggest = count(&db, "SELECT max(length(payload->>'content'))::bigint FROM agent_steps WHERE kind = 'tool_result'").await;
    assert!(
        biggest < excerpt + 4000,
        "tool results stay bounded ({biggest} chars for a 5 MB document)"
    );
    let result: serde_json::Value = sqlx::query_scalar("SELECT result FROM extractions")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(result["invoice_number"], "BIG-1");
    let _ = Uuid::nil();
}
