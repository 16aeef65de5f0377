//! The binary as operators use it: exit codes and messages for bad config, bad job files and bad
//! input; enqueue, jobs list/retry/cancel, status, documents, runs.

use crate::common;
use common::TestDb;
use std::process::{Command, Output};

pub(crate) fn agentd(db: &TestDb, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_agentd"));
    c.args(args)
        .env("DATABASE_URL", &db.url)
        .env("AGENTD_HTTP__ADDR", "")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run agentd")
}

pub(crate) fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

#[tokio::test]
async fn bad_config_values_exit_2_naming_the_key() {
    let db = TestDb::new().await;
    let o = agentd(&db, &["status"], &[("AGENTD_WORKER__HEARTBEAT_SECS", "40")]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("AGENTD_WORKER__HEARTBEAT_SECS") && err.contains("worker.heartbeat_secs"),
        "{err}"
    );
    let o = agentd(&db, &["status"], &[("AGENTD_WORKER__NO_SUCH_KEY", "1")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("unknown key `worker.no_such_key`"));
    let o = agentd(&db, &["status"], &[("AGENTD_LLM__PROVIDER", "gpt")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o)
            .1
            .contains("llm.provider must be one of auto, openai, anthropic, offline")
    );
    let o = agentd(&db, &["status"], &[("AGENTD_WORKER__LEASE_SECS", "thirty")]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o).1);
    // The native runtime was removed (issue 18): selecting it is a config error.
    let o = agentd(&db, &["status"], &[("AGENTD_WORKER__RUNTIME", "native")]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("worker.runtime") && err.contains("apalis is the only runtime"),
        "{err}"
    );
    let o = agentd(&db, &["status"], &[("AGENTD_WORKER__RUNTIME", "apalis")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o).1);
    // worker.prefetch: "auto" or a count, from the environment too.
    let o = agentd(&db, &["status"], &[("AGENTD_WORKER__PREFETCH", "lots")]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("worker.prefetch") && err.contains("\"auto\" or a number"),
        "{err}"
    );
    for ok in ["500", "0", "auto"] {
        let o = agentd(&db, &["status"], &[("AGENTD_WORKER__PREFETCH", ok)]);
        assert_eq!(o.status.code(), Some(0), "{ok}: {}", text(&o).1);
    }
}

/// Review D12: a bad `webhooks.denied_cidrs` or `webhooks.allowed_ports`, in a file or the
/// environment, stops the process with exit 2 naming the file (or variable), the key with its
/// index and the problem; good ones start.
#[tokio::test]
async fn bad_webhook_guard_settings_exit_2_naming_file_key_and_problem() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agentd.toml");
    let file = path.display().to_string();
    let with_file = |body: &str| {
        std::fs::write(&path, body).unwrap();
        agentd(&db, &["status"], &[("AGENTD_CONFIG", &file)])
    };
    for (body, expected) in [
        (
            "[webhooks]\ndenied_cidrs = [\"10.0.0.0/8\", \"10.0.0.1/8\"]\n",
            "webhooks.denied_cidrs[1]: \"10.0.0.1/8\" has host bits set; the network is 10.0.0.0/8",
        ),
        (
            "[webhooks]\ndenied_cidrs = [\"metadata.internal\"]\n",
            "webhooks.denied_cidrs[0]: \"metadata.internal\" is not an IP network",
        ),
        (
            "[webhooks]\nallowed_ports = [443, 0]\n",
            "webhooks.allowed_ports[1] must be a port, 1–65535 (got 0",
        ),
        (
            "[webhooks]\nallowed_ports = [70000]\n",
            "webhooks.allowed_ports[0]",
        ),
        (
            "[webhooks]\ndenied_cidrs = \"10.0.0.0/8\"\n",
            "webhooks.denied_cidrs",
        ),
    ] {
        let o = with_file(body);
        let err = text(&o).1;
        assert_eq!(o.status.code(), Some(2), "{body}: {err}");
        assert!(
            err.contains(&file) && err.contains(expected),
            "{body}: expected {expected:?} in: {err}"
        );
    }
    let o = agentd(
        &db,
        &["status"],
        &[("AGENTD_WEBHOOKS__DENIED_CIDRS", "[\"fd00::/129\"]")],
    );
    let err = text(&o).1;
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("AGENTD_WEBHOOKS__DENIED_CIDRS")
            && err.contains(
                "webhooks.denied_cidrs[0]: \"fd00::/129\": the prefix length must be 0–128"
            ),
        "{err}"
    );
    let o = with_file(
        "[webhooks]\ndenied_cidrs = [\"168.63.129.16\", \"fd00:ec2::/32\"]\nallowed_ports = [443, 8443]\n",
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o).1);
}

#[tokio::test]
async fn bad_job_files_exit_2_naming_file_key_and_problem() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    for (kind, body) in agentd::catalog::BUILTIN {
        std::fs::write(dir.path().join(format!("{kind}.toml")), body).unwrap();
    }
    let path = dir.path().join("auto_create.toml");
    let original = std::fs::read_to_string(&path).unwrap();
    let cases = [
        (
            original.replace("max_rounds = 10", "max_rounds = 0"),
            "agent.max_rounds must be ≥ 1 (got 0)",
        ),
        (
            original.replace("\"get_document\",", "\"get_documentz\","),
            "unknown tool `get_documentz`",
        ),
        (
            original.replace("destructive = \"deny\"", "destructive = \"maybe\""),
            "unknown variant `maybe`",
        ),
        (
            original.replace("max_rounds = 10", "max_rounds = 10\nmax_roundz = 3"),
            "unknown field `max_roundz`",
        ),
        (original.replace("[queue]", "[queue\n"), "line"),
    ];
    let dir_s = dir.path().display().to_string();
    for (body, expected) in cases {
        std::fs::write(&path, &body).unwrap();
        let o = agentd(&db, &["status"], &[("AGENTD_WORKER__JOBS_DIR", &dir_s)]);
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains("auto_create.toml") && err.contains(expected),
            "expected {expected:?} in: {err}"
        );
    }
    std::fs::write(&path, &original).unwrap();
    std::fs::write(dir.path().join("nightly.toml"), "kind = \"nightly\"").unwrap();
    let o = agentd(&db, &["status"], &[("AGENTD_WORKER__JOBS_DIR", &dir_s)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("unknown job kind `nightly`"));
    std::fs::remove_file(dir.path().join("nightly.toml")).unwrap();
    // One value made bad in one file: exit 2 naming the file and the problem; then restored.
    let broken = |file: &str, from: &str, to: &str, expected: &str| {
        let path = dir.path().join(file);
        let good = std::fs::read_to_string(&path).unwrap();
        assert!(good.contains(from), "{file} has no {from:?}");
        std::fs::write(&path, good.replace(from, to)).unwrap();
        let o = agentd(&db, &["status"], &[("AGENTD_WORKER__JOBS_DIR", &dir_s)]);
        let err = text(&o).1;
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(&format!("{file}: {expected}")), "{err}");
        std::fs::write(&path, good).unwrap();
    };
    broken(
        "proactive_suggestion.toml",
        "0 */15 * * * *",
        "every night",
        "schedule.cron is not a valid cron expression",
    );
    broken(
        "approval_expiry.toml",
        "workers = 2",
        "workers = 0",
        "sweep.workers must be ≥ 1 (got 0)",
    );
    // `agent.await_decisions`: a boolean, for the kinds whose runs can wait only.
    broken(
        "auto_create.toml",
        "[agent]\n",
        "[agent]\nawait_decisions = true\n",
        "agent.await_decisions is supported by proactive_suggestion only (this is auto_create)",
    );
    let path = dir.path().join("proactive_suggestion.toml");
    let good = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        good.replace("await_decisions = false", "await_decisions = \"yes\""),
    )
    .unwrap();
    let o = agentd(&db, &["status"], &[("AGENTD_WORKER__JOBS_DIR", &dir_s)]);
    let err = text(&o).1;
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("proactive_suggestion.toml: agent.await_decisions must be true or false")
            && err.contains("expected a boolean"),
        "{err}"
    );
    std::fs::write(
        &path,
        good.replace("await_decisions = false", "await_decisions = true"),
    )
    .unwrap();
    let o = agentd(&db, &["status"], &[("AGENTD_WORKER__JOBS_DIR", &dir_s)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o).1);
    std::fs::write(&path, good).unwrap();
}

#[tokio::test]
async fn jobs_can_be_enqueued_listed_cancelled_and_retried() {
    let db = TestDb::new().await;
    let raw = |kind: &str, payload: &str, key: Option<&str>| {
        let mut a = vec!["enqueue", "raw", "--kind", kind, "--payload", payload];
        if let Some(k) = key {
            a.extend(["--unique-key", k]);
        }
        a.iter().map(|s| s.to_string()).collect::<Vec<String>>()
    };
    let run = |args: Vec<String>| {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        agentd(&db, &refs, &[])
    };
    let o = run(raw("noop_kind", "{}", None));
    assert_eq!(o.status.code(), Some(2), "an unknown kind is refused");
    assert!(
        text(&o).1.contains("unknown job kind `noop_kind`"),
        "{}",
        text(&o).1
    );
    let o = run(raw("approval_expiry", "{\"a\":1}", Some("k1")));
    assert_eq!(o.status.code(), Some(0), "{:?}", text(&o));
    assert!(text(&o).0.contains("enqueued approval_expiry job"));
    let o = run(raw("approval_expiry", "{}", Some("k1")));
    assert!(text(&o).0.contains("skipped"), "duplicate key is skipped");
    let o = run(raw("approval_expiry", "{not json", None));
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("--payload is not valid JSON"));
    let o = agentd(&db, &["jobs", "list", "--json"], &[]);
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let id = rows[0]["id"].as_i64().unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 1);
    let o = agentd(&db, &["jobs", "cancel", &id.to_string()], &[]);
    assert_eq!(o.status.code(), Some(0));
    let o = agentd(&db, &["jobs", "cancel", &id.to_string()], &[]);
    assert_eq!(o.status.code(), Some(2), "already cancelled");
    let o = agentd(&db, &["jobs", "retry", &id.to_string()], &[]);
    assert_eq!(o.status.code(), Some(0));
    let state: String = sqlx::query_scalar("SELECT state FROM agentd_jobs WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(state, "available");
    let o = agentd(&db, &["jobs", "list", "--state", "bogus"], &[]);
    assert_eq!(o.status.code(), Some(2));
    let o = agentd(&db, &["jobs", "show", "999999"], &[]);
    assert_eq!(o.status.code(), Some(2));
    let o = agentd(&db, &["status", "--json"], &[]);
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["jobs"][0]["kind"], "approval_expiry");
    assert_eq!(s["provider"], "offline");
}

#[tokio::test]
async fn documents_add_with_auto_create_then_worker_then_show_and_accept() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("inv.txt");
    // Invalid UTF-8 and a NUL byte are handled at the boundary.
    std::fs::write(
        &f,
        b"Invoice Number: INV-9\x00\nTotal: 10.00\nNote: caf\xe9\n",
    )
    .unwrap();
    let o = agentd(
        &db,
        &[
            "documents",
            "add",
            "--org",
            "acme",
            "--name",
            "inv.txt",
            "--text-file",
            f.to_str().unwrap(),
            "--auto-create",
            "--json",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{:?}", text(&o));
    let added: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let doc = added["document_id"].as_str().unwrap().to_string();
    assert!(added["job_id"].is_i64());
    // Run a worker until the job is done, then stop it with SIGTERM.
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentd"))
        .args(["worker", "--no-cron"])
        .env("DATABASE_URL", &db.url)
        .env("AGENTD_HTTP__ADDR", "")
        .env_remove("OPENAI_API_KEY")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .spawn()
        .unwrap();
    common::wait_until(60, "document proposed", || async {
        let s: String = sqlx::query_scalar("SELECT auto_create_status FROM documents")
            .fetch_one(&db.pool)
            .await
            .unwrap();
        s == "proposed"
    })
    .await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "graceful exit on SIGTERM: {status}");
    let o = agentd(&db, &["documents", "show", &doc, "--json"], &[]);
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["auto_create_status"], "proposed");
    assert_eq!(r["extraction"]["result"]["invoice_number"], "INV-9");
    assert_eq!(r["run"]["provider"], "offline");
    let run = r["run"]["id"].as_str().unwrap().to_string();
    let o = agentd(&db, &["runs", "show", &run], &[]);
    let (out, _) = text(&o);
    assert!(
        out.contains("create_schema") && out.contains("audit:") && out.contains("auto_approved"),
        "{out}"
    );
    let o = agentd(&db, &["documents", "accept", &doc], &[]);
    assert_eq!(o.status.code(), Some(0), "{:?}", text(&o));
    let st: (String, String) = sqlx::query_as("SELECT d.auto_create_status, s.status FROM documents d JOIN schemas s ON s.schema_id = d.proposed_schema_id").fetch_one(&db.pool).await.unwrap();
    assert_eq!(st, ("accepted".to_string(), "active".to_string()));
    let o = agentd(&db, &["documents", "accept", &doc], &[]);
    assert_eq!(o.status.code(), Some(2), "nothing left to accept");
    let o = agentd(
        &db,
        &[
            "documents",
            "add",
            "--org",
            "acme",
            "--name",
            "x",
            "--text-file",
            "/nonexistent/file",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o)
            .1
            .contains("--text-file /nonexistent/file: cannot read")
    );
}

#[test]
fn with_nothing_answering_agentd_starts_and_stops_a_private_cluster() {
    let Some(bin_dir) = agentd::db::find_pg_bin() else {
        panic!("PostgreSQL binaries are required for this test (initdb, pg_ctl)");
    };
    let dir = tempfile::tempdir().unwrap();
    // The cluster may belong to the postgres user (when tests run as root): let it traverse.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let data = dir.path().join("pg");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_agentd"))
            .args(args)
            .env_remove("DATABASE_URL")
            .env(
                "AGENTD_DATABASE__LOCAL_URL",
                "postgres://127.0.0.1:1/agentd",
            )
            .env("AGENTD_DATABASE__PRIVATE_DIR", data.to_str().unwrap())
            .env("AGENTD_DATABASE__PRIVATE_PORT", port.to_string())
            .env("AGENTD_HTTP__ADDR", "")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap()
    };
    let o = run(&["status", "--json"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("private PostgreSQL cluster"), "says so: {err}");
    let s: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(s["jobs"].is_array());
    assert!(
        data.join("PG_VERSION").exists(),
        "initialised under its own data directory"
    );
    // Stopped on exit: nothing listens on the port any more.
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the private cluster was stopped"
    );
    // A second start reuses the data directory.
    let o = run(&["status"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o).1);
    let _ = bin_dir;
}

/// `agentd bench …` runs the `agentd-bench` binary found beside `agentd` (the benchmarks are a
/// workspace member of their own) with the arguments unchanged, and names what to build when it
/// is absent.
#[test]
fn bench_runs_agentd_bench_beside_it_or_names_what_to_build() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("agentd");
    std::fs::copy(env!("CARGO_BIN_EXE_agentd"), &exe).unwrap();
    let run = |args: &[&str]| {
        Command::new(&exe)
            .args(args)
            .env("PATH", dir.path().join("empty"))
            .env_remove("AGENTD_CONFIG")
            .output()
            .expect("run agentd")
    };
    let o = run(&["bench", "drain", "--quick"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("agentd-bench") && err.contains("cargo build -p agentd-bench"),
        "{err}"
    );

    // A stand-in that prints its arguments and exits 7: the exit code and arguments pass through.
    let fake = dir.path().join("agentd-bench");
    std::fs::write(&fake, "#!/bin/sh\necho \"args: $*\"\nexit 7\n").unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = run(&[
        "--config",
        "x.toml",
        "bench",
        "drain",
        "--backlog",
        "20000",
        "--help",
    ]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(7), "{out}{err}");
    assert_eq!(
        out.trim(),
        "args: --config x.toml drain --backlog 20000 --help"
    );
}

#[tokio::test]
async fn an_org_gets_its_own_cap_of_running_jobs_and_bad_ones_exit_2() {
    let db = TestDb::new().await;
    let o = agentd(&db, &["orgs", "create", "acme", "--json"], &[]);
    assert_eq!(o.status.code(), Some(0), "{:?}", text(&o));
    let set = |extra: &[&str]| {
        let mut a = vec!["orgs", "set-limit", "acme"];
        a.extend_from_slice(extra);
        agentd(&db, &a, &[])
    };
    let o = set(&["--kind", "no_such_kind", "--max-running", "2"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).1.contains("--kind: no job kind \"no_such_kind\""),
        "{}",
        text(&o).1
    );
    let o = set(&["--kind", "webhook_delivery", "--max-running", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).1.contains("--max-running must be at least 1"),
        "{}",
        text(&o).1
    );
    let o = set(&["--kind", "webhook_delivery", "--max-running", "3", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{:?}", text(&o));
    let shown: serde_json::Value = serde_json::from_str(&text(&o).0).unwrap();
    assert_eq!(
        shown["max_running"],
        serde_json::json!({"webhook_delivery": 3})
    );
    let o = set(&["--kind", "webhook_delivery", "--clear", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{:?}", text(&o));
    let shown: serde_json::Value = serde_json::from_str(&text(&o).0).unwrap();
    assert_eq!(shown["max_running"], serde_json::json!({}));
}
