//! The operator's surface: /healthz, /readyz (503 while the database is unreachable, 200 again
//! after), /metrics (parses as Prometheus text; counters move when jobs run), JSON logs that are
//! valid JSON lines and carry no secret and no document text.

use crate::common;
use agentd::clock::SystemClock;
use common::{TestDb, wait_until};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = match TcpStream::connect(addr) {
        Ok(s) => s,
        Err(_) => return (0, String::new()),
    };
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    let code = buf
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

async fn admin(sql: String) {
    let mut c = <sqlx::PgConnection as sqlx::Connection>::connect(&common::server_url())
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .execute(&mut c)
        .await
        .unwrap();
}

fn counter(body: &str, name: &str, kind: &str) -> f64 {
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
        .expect("Prometheus text");
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name && s.labels.get("kind") == Some(kind))
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => 0.0,
        })
        .sum()
}

#[tokio::test]
async fn readyz_follows_the_database_and_metrics_count_jobs() {
    let db = TestDb::new().await;
    let mut config = common::test_config();
    config.http.addr = "127.0.0.1:0".into();
    let app = common::app_with(&db, Arc::new(SystemClock), config);
    let (w, stop) = common::start_worker(&app, "auto_create", None).await;
    let addr = w.http_addr.unwrap();
    let a = addr;
    assert_eq!(
        tokio::task::spawn_blocking(move || get(a, "/healthz"))
            .await
            .unwrap()
            .0,
        200
    );
    let a = addr;
    assert_eq!(
        tokio::task::spawn_blocking(move || get(a, "/readyz"))
            .await
            .unwrap()
            .0,
        200
    );

    // Counters move when a job runs.
    let a = addr;
    let before = tokio::task::spawn_blocking(move || get(a, "/metrics"))
        .await
        .unwrap()
        .1;
    let org = agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id;
    agentd::documents::add_document(
        &app,
        org,
        "i.txt",
        "Invoice Number: A-1\nTotal: 3.00\n",
        true,
    )
    .await
    .unwrap();
    wait_until(30, "job succeeded", || async {
        let n: i64 =
            sqlx::query_scalar("SELECT count(*) FROM agentd_jobs WHERE state = 'succeeded'")
                .fetch_one(&db.pool)
                .await
                .unwrap();
        n == 1
    })
    .await;
    let a = addr;
    let after = tokio::task::spawn_blocking(move || get(a, "/metrics"))
        .await
        .unwrap()
        .1;
    let name = "agentd_jobs_succeeded_total";
    assert_eq!(
        counter(&after, name, "auto_create") - counter(&before, name, "auto_create"),
        1.0,
        "{after}"
    );
    assert!(
        after.contains("agentd_tool_calls_total"),
        "tool calls are counted"
    );
    assert!(after.contains("agentd_agent_runs_total"));

    // The database goes away: not ready. It comes back: ready again.
    admin(format!(
        "ALTER DATABASE {} WITH ALLOW_CONNECTIONS false",
        db.name
    ))
    .await;
    admin(format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{}'",
        db.name
    ))
    .await;
    wait_until(30, "/readyz turns 503", || async move {
        tokio::task::spawn_blocking(move || get(addr, "/readyz"))
            .await
            .unwrap()
            .0
            == 503
    })
    .await;
    admin(format!(
        "ALTER DATABASE {} WITH ALLOW_CONNECTIONS true",
        db.name
    ))
    .await;
    wait_until(30, "/readyz back to 200", || async move {
        tokio::task::spawn_blocking(move || get(addr, "/readyz"))
            .await
            .unwrap()
            .0
            == 200
    })
    .await;
    stop.cancel();
    w.join().await;
}

#[tokio::test]
async fn json_logs_are_valid_lines_without_secrets_or_document_text() {
    let db = TestDb::new().await;
    let secret = "sk-test-SUPERSECRET-0123456789";
    let doc_text = "TOPSECRET-DOCTEXT Invoice Number: Z-1";
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("d.txt");
    std::fs::write(&f, doc_text).unwrap();
    let bin = env!("CARGO_BIN_EXE_agentd");
    let add = Command::new(bin)
        .args([
            "documents",
            "add",
            "--org",
            "acme",
            "--name",
            "d.txt",
            "--text-file",
            f.to_str().unwrap(),
            "--auto-create",
        ])
        .env("DATABASE_URL", &db.url)
        .output()
        .unwrap();
    assert!(add.status.success());
    // First the offline provider reads the document and runs the whole pipeline at debug level.
    let offline = worker_logs(
        &db,
        &[
            ("AGENTD_LOG", "debug"),
            ("OPENAI_API_KEY", ""),
            ("AGENTD_LLM__PROVIDER", "offline"),
        ],
        "offline run proposed",
        || async {
            let s: String = sqlx::query_scalar("SELECT auto_create_status FROM documents")
                .fetch_one(&db.pool)
                .await
                .unwrap();
            s == "proposed"
        },
    )
    .await;
    assert!(offline.contains("proposal ready"), "{offline}");
    assert!(
        !offline.contains("TOPSECRET-DOCTEXT"),
        "document text leaked into the logs"
    );
    // Then an OpenAI provider pointing at a closed port: every call fails and is logged.
    let org: uuid::Uuid = sqlx::query_scalar("SELECT id FROM orgs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let doc: uuid::Uuid = sqlx::query_scalar("SELECT id FROM documents")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let job = agentd::queue::NewJob::new(
        "auto_create",
        serde_json::json!({"org_id": org, "document_id": doc, "force": true}),
    );
    agentd::queue::enqueue(&db.pool, &job).await.unwrap();
    let env = [
        ("AGENTD_LOG", "debug"),
        ("OPENAI_API_KEY", secret),
        ("AGENTD_LLM__BASE_URL", "http://127.0.0.1:9/v1"),
        ("AGENTD_LLM__REQUEST_TIMEOUT_SECS", "2"),
        ("AGENTD_LLM__MAX_RETRIES", "0"),
    ];
    let logs = worker_logs(&db, &env, "a failed openai attempt", || async {
        let n: i64 =
            sqlx::query_scalar("SELECT count(*) FROM agentd_jobs WHERE last_error IS NOT NULL")
                .fetch_one(&db.pool)
                .await
                .unwrap();
        n > 0
    })
    .await;
    assert!(logs.contains("job failed"), "the failure is logged: {logs}");
    assert!(!logs.contains(secret), "the API key leaked into the logs");
    assert!(
        !logs.contains("TOPSECRET-DOCTEXT"),
        "document text leaked into the logs"
    );
    let err: String =
        sqlx::query_scalar("SELECT last_error FROM agentd_jobs WHERE last_error IS NOT NULL")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(!err.contains(secret));
}

/// Runs `agentd --log-format json worker` until `done`, then SIGTERM; checks every line is JSON.
async fn worker_logs<F, Fut>(db: &TestDb, env: &[(&str, &str)], what: &str, done: F) -> String
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentd"));
    cmd.args(["--log-format", "json", "worker", "--no-cron"])
        .env("DATABASE_URL", &db.url)
        .env("AGENTD_HTTP__ADDR", "")
        .env_remove("OPENAI_BASE_URL")
        .stderr(Stdio::piped())
        .stdout(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    // Drain stderr while the worker runs: a full pipe would block its logging.
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stderr.read_to_end(&mut buf);
        buf
    });
    wait_until(90, what, done).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(child.wait().unwrap().success());
    let logs = String::from_utf8_lossy(&reader.join().unwrap()).to_string();
    let mut lines = 0;
    for line in logs.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        assert!(
            v.get("timestamp").is_some() && v.get("level").is_some(),
            "{line}"
        );
        lines += 1;
    }
    assert!(lines > 3, "the worker logged: {logs}");
    logs
}

/// Review N7: `agentd serve`'s public port answers `/metrics` only with the API's 401 (no
/// operator data without a key) and `/readyz` without the reason; the operator's listener
/// (`--ops-addr`) serves both.
#[tokio::test]
async fn metrics_live_on_the_operator_listener_only() {
    let db = TestDb::new().await;
    let app = common::app(&db, Arc::new(SystemClock));
    let public = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ops = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (public_addr, ops_addr) = (public.local_addr().unwrap(), ops.local_addr().unwrap());
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(agentd::api::serve(public, Some(ops), app, stop.clone()));
    let (code, body) = tokio::task::spawn_blocking(move || get(public_addr, "/metrics"))
        .await
        .unwrap();
    assert_eq!(code, 401, "/metrics on the public port: {body}");
    assert!(!body.contains("agentd_"), "{body}");
    let (code, body) = tokio::task::spawn_blocking(move || get(public_addr, "/readyz"))
        .await
        .unwrap();
    assert_eq!((code, body.as_str()), (200, "ready\n"));
    let (code, body) = tokio::task::spawn_blocking(move || get(ops_addr, "/metrics"))
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("agentd_queue_ready"), "{body}");
    stop.cancel();
}

/// Review N8: one org's job counts (`GET /v1/status`, the console's queue) read that org's jobs
/// by index, not the whole table, however many jobs other orgs have.
#[tokio::test]
async fn an_orgs_job_counts_do_not_scan_every_job() {
    let db = TestDb::new().await;
    let (quiet, noisy) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    sqlx::query(
        "INSERT INTO agentd_jobs (kind, payload, state, finished_at)
         SELECT 'auto_create', jsonb_build_object('org_id', $1::text, 'document_id', gen_random_uuid()),
                'succeeded', now()
           FROM generate_series(1, 20000)",
    )
    .bind(noisy)
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO agentd_jobs (kind, payload)
         SELECT 'auto_create', jsonb_build_object('org_id', $1::text, 'document_id', gen_random_uuid())
           FROM generate_series(1, 3)",
    )
    .bind(quiet)
    .execute(&db.pool)
    .await
    .unwrap();
    // Review D1: 10,000 approval sweeps of the noisy org made the old way (a list of its approval
    // ids and no org), and the quiet org with approvals of its own, which the old condition
    // probed once per such job.
    sqlx::query(
        "INSERT INTO agentd_jobs (kind, payload, state, finished_at)
         SELECT 'approval_expiry',
                jsonb_build_object('approval_ids', jsonb_build_array(gen_random_uuid(), gen_random_uuid())),
                'succeeded', now()
           FROM generate_series(1, 10000)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    for org in [quiet, noisy] {
        sqlx::query("INSERT INTO orgs (id, name) VALUES ($1, $1::text)")
            .bind(org)
            .execute(&db.pool)
            .await
            .unwrap();
    }
    sqlx::query(
        "INSERT INTO pending_approvals (id, org_id, tool, args, snapshot, snapshot_hash, created_at, expires_at, chain_id)
         SELECT gen_random_uuid(), $1, 'update_document', '{}'::jsonb, '{}'::jsonb, 'h', now(),
                now() + interval '1 day', gen_random_uuid()
           FROM generate_series(1, 200)",
    )
    .bind(quiet)
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE agentd_jobs")
        .execute(&db.pool)
        .await
        .unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    let scans = "SELECT relname::text, coalesce(seq_scan, 0), coalesce(idx_scan, 0)
                   FROM pg_stat_xact_user_tables
                  WHERE relname IN ('agentd_jobs', 'pending_approvals') ORDER BY relname";
    let before: Vec<(String, i64, i64)> = sqlx::query_as(scans).fetch_all(&mut *tx).await.unwrap();
    let counts = agentd::store::status::job_counts(&mut *tx, Some(quiet))
        .await
        .unwrap();
    let after: Vec<(String, i64, i64)> = sqlx::query_as(scans).fetch_all(&mut *tx).await.unwrap();
    assert_eq!(counts.iter().map(|c| c.count).sum::<i64>(), 3, "{counts:?}");
    let delta = |table: &str| {
        let of = |v: &[(String, i64, i64)]| {
            v.iter()
                .find(|r| r.0 == table)
                .map(|r| (r.1, r.2))
                .unwrap_or_default()
        };
        let (b, a) = (of(&before), of(&after));
        (a.0 - b.0, a.1 - b.1)
    };
    let (jobs_seq, jobs_idx) = delta("agentd_jobs");
    assert_eq!(jobs_seq, 0, "no sequential scan of agentd_jobs");
    assert!(jobs_idx > 0, "an index scan instead");
    assert_eq!(
        delta("pending_approvals"),
        (0, 0),
        "an org's job counts do not read approvals for other orgs' sweeps"
    );
}

/// An `agentd --log-format json worker` with `env`, and the address its `/healthz /readyz
/// /metrics` listener logged (`None` when it exited first: its exit status and what it said).
fn worker_with_ops(
    db: &TestDb,
    env: &[(&str, &str)],
) -> (std::process::Child, Result<SocketAddr, String>) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentd"));
    cmd.args(["--log-format", "json", "worker", "--no-cron"])
        .env("DATABASE_URL", &db.url)
        .env_remove("AGENTD_HTTP__ADDR")
        .env_remove("OPENAI_BASE_URL")
        .stderr(Stdio::piped())
        .stdout(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut said = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        let Ok(line) = rx.recv_timeout(left) else {
            break;
        };
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if v["message"] == "serving /healthz /readyz /metrics" {
            let addr = v["addr"].as_str().unwrap_or_default().parse();
            return (child, addr.map_err(|e| format!("{e}: {line}")));
        }
        said.push(line);
    }
    let status = child.try_wait().ok().flatten();
    (child, Err(format!("{status:?}: {}", said.join("\n"))))
}

/// What a worker started with `env` (and without any provider variable of this process)
/// logged before it served its ops endpoint, as JSON lines.
fn start_log(db: &TestDb, env: &[(&str, &str)]) -> Vec<serde_json::Value> {
    let (child, rx) = spawn_logged(&db.url, env);
    let said = until_serving(&rx);
    stop(child);
    said
}

/// The JSON lines read from `rx` until the worker says it serves its ops endpoint (at most 60 s).
fn until_serving(rx: &std::sync::mpsc::Receiver<String>) -> Vec<serde_json::Value> {
    let mut said = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        let Ok(line) = rx.recv_timeout(left) else {
            break;
        };
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        let serving = v["message"] == "serving /healthz /readyz /metrics";
        said.push(v);
        if serving {
            break;
        }
    }
    said
}

/// Issue 46, item 3: a worker says at start which provider, model and endpoint it will call
/// (never the key), for each way a user sets a key, and warns when it runs on the offline
/// heuristic or a key goes unused.
#[tokio::test]
async fn a_worker_logs_its_provider_model_and_endpoint_at_start() {
    let db = TestDb::new().await;
    let provider_line = |log: &[serde_json::Value]| {
        log.iter()
            .find(|v| v["message"] == "model provider")
            .cloned()
            .unwrap_or_default()
    };
    let warns = |log: &[serde_json::Value]| -> String {
        log.iter()
            .filter(|v| v["level"] == "WARN")
            .map(|v| v["message"].to_string())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let anthropic = start_log(&db, &[("ANTHROPIC_API_KEY", "sk-ant-test-000000000000")]);
    let p = provider_line(&anthropic);
    assert_eq!(
        (&p["provider"], &p["model"], &p["endpoint"], &p["api_key"]),
        (
            &serde_json::json!("anthropic"),
            &serde_json::json!("claude-sonnet-4-5"),
            &serde_json::json!("https://api.anthropic.com"),
            &serde_json::json!("set")
        ),
        "{anthropic:?}"
    );
    let text = format!("{anthropic:?}");
    assert!(
        !text.contains("sk-ant-test"),
        "the key is never logged: {text}"
    );

    let openai = start_log(&db, &[("OPENAI_API_KEY", "sk-test-000000000000")]);
    let p = provider_line(&openai);
    assert_eq!(
        (&p["provider"], &p["model"], &p["endpoint"]),
        (
            &serde_json::json!("openai"),
            &serde_json::json!("gpt-4o-mini"),
            &serde_json::json!("https://api.openai.com/v1")
        ),
        "{openai:?}"
    );

    let local = start_log(&db, &[("OPENAI_BASE_URL", "http://127.0.0.1:8089/v1")]);
    let p = provider_line(&local);
    assert_eq!(p["endpoint"], "http://127.0.0.1:8089/v1", "{local:?}");
    assert_eq!(p["api_key"], "not set", "{local:?}");

    let both = start_log(
        &db,
        &[
            ("OPENAI_API_KEY", "sk-test-000000000000"),
            ("ANTHROPIC_API_KEY", "sk-ant-test-000000000000"),
        ],
    );
    assert_eq!(provider_line(&both)["provider"], "openai", "{both:?}");
    assert!(
        warns(&both).contains("ANTHROPIC_API_KEY is set but unused"),
        "{both:?}"
    );

    let none = start_log(&db, &[]);
    assert_eq!(provider_line(&none), serde_json::Value::Null, "{none:?}");
    assert!(warns(&none).contains("OFFLINE HEURISTIC"), "{none:?}");
}

fn stop(mut child: std::process::Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(child.wait().unwrap().success());
}

/// Two `agentd worker`s on one host with the default config both run: the built-in
/// `http.addr` taken, a worker serves `/healthz /readyz /metrics` on a port the system picks and
/// says where. An address set on purpose that is taken still stops the worker with exit 2,
/// naming the key.
#[tokio::test]
async fn two_workers_on_one_host_with_the_defaults_both_run() {
    let db = TestDb::new().await;
    let (first, a) = worker_with_ops(&db, &[]);
    let (second, b) = worker_with_ops(&db, &[]);
    let (a, b) = (a.expect("the first worker"), b.expect("the second worker"));
    assert_ne!(a, b);
    for addr in [a, b] {
        let (code, body) = tokio::task::spawn_blocking(move || get(addr, "/healthz"))
            .await
            .unwrap();
        assert_eq!(code, 200, "{addr}: {body}");
    }
    stop(first);
    stop(second);

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let at = taken.local_addr().unwrap().to_string();
    let (mut child, said) = worker_with_ops(&db, &[("AGENTD_HTTP__ADDR", &at)]);
    let said = said.expect_err("a taken address set on purpose is an error");
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(2), "{said}");
    assert!(
        said.contains(&format!("http.addr {at}: cannot listen"))
            && said.contains("in use")
            && said.contains("AGENTD_HTTP__ADDR"),
        "{said}"
    );
    drop(taken);
}

/// Issue 46, item 7: text logs sent to a file or a pipe carry no ANSI colour codes (a terminal
/// gets them, unless `NO_COLOR` is set: `telemetry::ansi`'s unit test).
#[tokio::test]
async fn text_logs_to_a_pipe_carry_no_colour_codes() {
    let db = TestDb::new().await;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentd"));
    cmd.args(["--log-format", "text", "worker", "--no-cron"])
        .env("DATABASE_URL", &db.url)
        .env("AGENTD_HTTP__ADDR", "127.0.0.1:0")
        // Neither set here: the pipe alone must turn colour off.
        .env_remove("NO_COLOR")
        .env_remove("AGENTD_LOG")
        .env_remove("RUST_LOG")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("ANTHROPIC_API_KEY")
        .stderr(Stdio::piped())
        .stdout(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut said = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        let Ok(line) = rx.recv_timeout(left) else {
            break;
        };
        let serving = line.contains("serving /healthz /readyz /metrics");
        said.push(line);
        if serving {
            break;
        }
    }
    stop(child);
    let log = said.join("\n");
    assert!(
        said.iter()
            .any(|l| l.contains("serving /healthz /readyz /metrics")),
        "the worker logged its start: {log}"
    );
    assert!(
        !log.contains("\x1b["),
        "no ANSI escape in a piped log: {log:?}"
    );
    assert!(
        said.iter()
            .any(|l| l.contains(" WARN ") && l.contains("OFFLINE HEURISTIC")),
        "levels are plain words: {log}"
    );
}

/// `agentd worker --no-cron` on `url` with a JSON log and `env`, without any provider variable
/// of this process: the child and its stderr lines.
fn spawn_logged(
    url: &str,
    env: &[(&str, &str)],
) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentd"));
    cmd.args(["--log-format", "json", "worker", "--no-cron"])
        .env("DATABASE_URL", url)
        .env("AGENTD_HTTP__ADDR", "127.0.0.1:0");
    for k in [
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "AGENTD_LLM__PROVIDER",
        "AGENTD_LLM__MODEL",
    ] {
        cmd.env_remove(k);
    }
    cmd.stderr(Stdio::piped()).stdout(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// A free port on 127.0.0.1 that nothing listens on (bound, then let go).
fn unused_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Issue 47, item 4: a worker started while its database does not answer yet — nothing listens
/// on its port, as while PostgreSQL restarts — waits for it, warning at each try, and serves once
/// the database is there, instead of exiting (the chaos suite's workers that "exited on their
/// own" around restarts). With nothing ever answering it gives up after
/// `database.connect_wait_secs` with exit 1 (a supervisor's to retry), naming the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_before_its_database_answers_waits_for_it_then_serves() {
    let db = TestDb::new().await;
    let port = unused_port();
    let real: SocketAddr = {
        let opts: sqlx::postgres::PgConnectOptions = db.url.parse().unwrap();
        format!("{}:{}", opts.get_host(), opts.get_port())
            .parse()
            .unwrap()
    };
    let url = db
        .url
        .replace(&format!(":{}/", real.port()), &format!(":{port}/"));
    assert_ne!(url, db.url);
    let (mut child, rx) = spawn_logged(&url, &[]);
    // Twelve seconds with nothing listening (past the pool's own 10 s connect timeout, where
    // the worker used to exit), then a proxy to the real server on that port.
    tokio::time::sleep(std::time::Duration::from_secs(12)).await;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let proxy = tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut out) = tokio::net::TcpStream::connect(real).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                }
            });
        }
    });
    let lines = tokio::task::spawn_blocking(move || until_serving(&rx))
        .await
        .unwrap();
    let exited = child.try_wait().unwrap();
    let _ = child.kill();
    let _ = child.wait();
    proxy.abort();
    assert_eq!(exited, None, "the worker exited: {lines:?}");
    let waits: Vec<_> = lines
        .iter()
        .filter(|v| {
            v["level"] == "WARN"
                && v["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("does not answer yet"))
        })
        .collect();
    assert!(!waits.is_empty(), "no wait was logged: {lines:?}");
    assert!(
        lines
            .iter()
            .any(|v| v["message"] == "serving /healthz /readyz /metrics"),
        "the worker did not start: {lines:?}"
    );

    // Nothing ever answers: exit 1 after the wait, naming the database (its URL without a
    // password).
    let never = db.url.replace(
        &format!(":{}/", real.port()),
        &format!(":{}/", unused_port()),
    );
    let started = std::time::Instant::now();
    let (mut child, rx) = spawn_logged(&never, &[("AGENTD_DATABASE__CONNECT_WAIT_SECS", "1")]);
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    let said: Vec<String> = rx.try_iter().collect();
    assert_eq!(status.code(), Some(1), "{said:?}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "gave up after {:?}",
        started.elapsed()
    );
    assert!(
        said.iter().any(|l| l.contains("cannot connect")),
        "{said:?}"
    );
}
