//! Clients generated from the document `agentd serve` serves drive the main flow against a real
//! `agentd serve` and `agentd worker` (offline provider), each on its own database: a Python
//! client (openapi-python-client) runs `tests/clients/python/flow.py`, TypeScript types
//! (openapi-typescript) with openapi-fetch type-check and run `tests/clients/ts/flow.ts`. Upload
//! with an Idempotency-Key → poll until proposed → accept; the nightly review → approve its
//! pending approval with `If-Match`; the events by cursor. What each program printed is checked
//! against the rows. The generators' output is never committed: it is made here, in a temporary
//! folder, from the served document. `scripts/test` installs the tools under
//! `$AGENTD_TOOLS_DIR` (default `~/.cache/agentd/tools`); without them a test fails and says how
//! to install them. The client snippets of docs/http-api.md are excerpts of the two programs
//! (checked here).

use crate::common;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use uuid::Uuid;

const CLIENTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients");

/// Where `scripts/test` installs the tools: `AGENTD_TOOLS_DIR`, else `~/.cache/agentd/tools`.
fn tools_dir() -> PathBuf {
    std::env::var_os("AGENTD_TOOLS_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/agentd/tools")))
        .expect("AGENTD_TOOLS_DIR or HOME")
}

/// The virtualenv's `bin` with openapi-python-client (and the httpx and attrs its clients use).
fn python_bin() -> PathBuf {
    let bin = tools_dir().join("venv/bin");
    if !bin.join("openapi-python-client").is_file() {
        panic!(
            "the Python client test needs openapi-python-client (PyPI) in {}. Install it with \
             `python3 -m venv {venv} && {venv}/bin/pip install openapi-python-client==0.29.1` \
             (scripts/test does this when it is missing).",
            bin.display(),
            venv = tools_dir().join("venv").display()
        );
    }
    bin
}

/// `node_modules` installed from the committed lock file (openapi-typescript, openapi-fetch,
/// typescript), and `node` itself.
fn node_modules() -> PathBuf {
    let node = tools_dir().join("node");
    let install = format!(
        "Install them with `mkdir -p {n} && cp {c}/ts/package.json {c}/ts/package-lock.json {n}/ && \
         (cd {n} && npm ci) && cp {c}/ts/package-lock.json {n}/installed.json` (scripts/test does \
         this when they are missing or the lock file changed).",
        n = node.display(),
        c = CLIENTS
    );
    // `v20.20.2` → 20.
    let major = Command::new("node")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| {
            v.trim()
                .trim_start_matches('v')
                .split('.')
                .next()?
                .parse::<u32>()
                .ok()
        });
    assert!(
        major.is_some_and(|m| m >= 20),
        "the TypeScript client test needs Node.js 20 or later on PATH (found: {major:?}; \
         https://nodejs.org, or Debian's nodejs and npm where they are 20 or later)"
    );
    let committed = std::fs::read(format!("{CLIENTS}/ts/package-lock.json")).unwrap();
    // Written by scripts/test after `npm ci` finished.
    let installed = std::fs::read(node.join("installed.json")).unwrap_or_default();
    assert!(
        installed == committed,
        "the TypeScript client test needs the npm packages of tests/clients/ts/package-lock.json \
         in {}. {install}",
        node.join("node_modules").display()
    );
    node.join("node_modules")
}

/// A child process killed when the test ends, pass or fail.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `agentd ARGS` on `db`; its stdout.
fn agentd(db: &common::TestDb, args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_agentd"))
        .args(args)
        .env("DATABASE_URL", &db.url)
        .env("AGENTD_HTTP__ADDR", "")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "agentd {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// Runs `cmd` to its end; its stdout and stderr, or a panic with everything it said.
fn run2(what: &str, cmd: &mut Command) -> (String, String) {
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start {cmd:?}: {e}"));
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(
        o.status.success(),
        "{what} failed ({}):\n{out}\n{err}",
        o.status
    );
    (out.into_owned(), err.into_owned())
}

/// Runs `cmd` to its end; its stdout, or a panic with everything it said.
fn run(what: &str, cmd: &mut Command) -> String {
    run2(what, cmd).0
}

/// A real `agentd serve` (on a free port) and `agentd worker` (offline provider, no cron) over a
/// fresh database with one org, a reviewer key and the tag the nightly review proposes.
struct Stack {
    db: common::TestDb,
    url: String,
    key: String,
    org_id: Uuid,
    tag_id: Uuid,
    _serve: Killed,
    _worker: Killed,
}

async fn stack(org: &str) -> Stack {
    let db = common::TestDb::new().await;
    agentd(&db, &["orgs", "create", org, "--json"]);
    let key: Value = serde_json::from_str(&agentd(
        &db,
        &[
            "keys", "create", "--org", org, "--role", "reviewer", "--json",
        ],
    ))
    .unwrap();
    let org_id: Uuid = key["org_id"].as_str().unwrap().parse().unwrap();
    // A person made a tag (the console's or the CLI's part, not the API's): the nightly review
    // proposes it for untagged documents, an action that waits for approval.
    let mut conn = db.pool.acquire().await.unwrap();
    let (tag, _) = agentd::store::tags::create(
        &mut conn,
        org_id,
        "paperwork",
        "#4a90d9",
        None,
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    drop(conn);

    let spawn = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentd"));
        cmd.args(args)
            .env("DATABASE_URL", &db.url)
            .env("AGENTD_HTTP__ADDR", "")
            .env("AGENTD_LLM__PROVIDER", "offline")
            .env_remove("OPENAI_API_KEY")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(Stdio::null());
        cmd
    };
    let mut serve = Killed(
        spawn(&["serve", "--addr", "127.0.0.1:0"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stderr = serve.0.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split("listening on http://").nth(1) {
                let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_string());
            }
        }
    });
    let addr = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("serve prints its address");
    let worker = Killed(
        spawn(&["worker", "--no-cron"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    Stack {
        url: format!("http://{addr}"),
        key: key["key"].as_str().unwrap().to_string(),
        org_id,
        tag_id: tag.id,
        db,
        _serve: serve,
        _worker: worker,
    }
}

/// What a flow program printed (its last line, JSON), checked against the rows.
async fn check_flow(s: &Stack, printed: &str, by: &str) {
    let line = printed.lines().last().unwrap_or_default();
    let out: Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("{e}: the program printed:\n{printed}"));
    let pool = &s.db.pool;

    // One upload, replayed: one document, accepted, with the proposal the offline model made.
    assert_eq!(out["document_id"], out["replayed_id"], "{out}");
    let doc: Uuid = out["document_id"].as_str().unwrap().parse().unwrap();
    let docs: Vec<(Uuid, String, Vec<Uuid>)> =
        sqlx::query_as("SELECT id, auto_create_status, tag_ids FROM documents WHERE org_id = $1")
            .bind(s.org_id)
            .fetch_all(pool)
            .await
            .unwrap();
    assert_eq!(
        docs.len(),
        1,
        "the Idempotency-Key stored one document: {docs:?}"
    );
    assert_eq!((docs[0].0, docs[0].1.as_str()), (doc, "accepted"));
    assert!(out["job_id"].as_i64().is_some_and(|j| j > 0), "{out}");
    assert_eq!(out["proposed"], "proposed");
    assert_eq!(out["accepted"], "accepted");
    assert!(
        out["fields"]
            .as_array()
            .unwrap()
            .contains(&"invoice_number".into()),
        "{out}"
    );
    assert_eq!(out["extraction"]["invoice_number"], "INV-42", "{out}");
    // listJobs by document and kind: the upload's one job.
    assert_eq!(
        out["document_jobs"],
        serde_json::json!([out["job_id"]]),
        "{out}"
    );

    // The nightly review's one approval, listed, refused with a moved If-Match, approved with
    // the ETag it was shown: executed by this client, so the document now has the tag.
    assert_eq!(out["nightly"], "succeeded");
    let approval: Uuid = out["approval_id"].as_str().unwrap().parse().unwrap();
    assert_eq!(out["pending"], serde_json::json!([approval.to_string()]));
    assert_eq!(out["moved_if_match"], 412);
    assert_eq!(
        out["moved_problem"],
        "urn:agentd:problem:precondition-failed"
    );
    let (status, hash, decided_by): (String, String, Option<String>) = sqlx::query_as(
        "SELECT status, snapshot_hash, decided_by FROM pending_approvals WHERE id = $1 AND org_id = $2",
    )
    .bind(approval)
    .bind(s.org_id)
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(status, "executed");
    assert_eq!(out["etag"], format!("\"{hash}\""));
    assert_eq!(
        (&out["approved"], &out["changed"]),
        (&"executed".into(), &true.into())
    );
    let decided_by = decided_by.unwrap_or_default();
    assert!(decided_by.contains(by), "{decided_by}");
    assert_eq!(out["decided_by"], decided_by);
    let tags: Vec<Uuid> = sqlx::query_scalar("SELECT tag_ids FROM documents WHERE id = $1")
        .bind(doc)
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(
        tags,
        vec![s.tag_id],
        "the approved action tagged the document"
    );

    // Every event of the org up to the decision's, in order, none missed, read two at a time
    // with the cursor.
    let next_after = out["next_after"].as_i64().unwrap();
    let events: Vec<(i64, String)> = sqlx::query_as(
        "SELECT id, type FROM agentd_events WHERE org_id = $1 AND id <= $2 ORDER BY id",
    )
    .bind(s.org_id)
    .bind(next_after)
    .fetch_all(pool)
    .await
    .unwrap();
    let seen: Vec<(i64, String)> = serde_json::from_value(out["events"].clone()).unwrap();
    assert_eq!(seen, events);
    for kind in ["proposal.ready", "approval.created", "approval.decided"] {
        assert!(
            events.iter().any(|(_, t)| t == kind),
            "no {kind}: {events:?}"
        );
    }
    assert_eq!(Some(next_after), events.last().map(|e| e.0));
}

/// `PATH` with `dir` first.
fn path_with(dir: &Path) -> std::ffi::OsString {
    let mut dirs = vec![dir.to_path_buf()];
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(dirs).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_client_generated_from_the_served_document_drives_the_flow() {
    let bin = python_bin();
    let s = stack("py").await;
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = run2(
        "openapi-python-client generate",
        Command::new(bin.join("openapi-python-client"))
            .args(["generate", "--meta", "none", "--url"])
            .arg(format!("{}/v1/openapi.json", s.url))
            .arg("--config")
            .arg(format!("{CLIENTS}/python/config.yaml"))
            .arg("--output-path")
            .arg(dir.path().join("agentd_client"))
            // Its post-hooks (ruff) come with it in the virtualenv.
            .env("PATH", path_with(&bin)),
    );
    // A schema the generator cannot read is a warning and a missing piece, not an error.
    let said = format!("{out}{err}");
    assert!(
        !said.contains("Warning") && !said.contains("Error"),
        "openapi-python-client did not read the whole document:\n{said}"
    );
    let printed = run(
        "tests/clients/python/flow.py",
        Command::new(bin.join("python"))
            .arg(format!("{CLIENTS}/python/flow.py"))
            .env("PYTHONPATH", dir.path())
            .env("AGENTD_URL", &s.url)
            .env("AGENTD_KEY", &s.key),
    );
    check_flow(&s, &printed, "python-client").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typescript_client_typed_by_the_served_document_drives_the_flow() {
    let modules = node_modules();
    let s = stack("ts").await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for f in ["flow.ts", "tsconfig.json", "package.json"] {
        std::fs::copy(format!("{CLIENTS}/ts/{f}"), d.join(f)).unwrap();
    }
    std::os::unix::fs::symlink(&modules, d.join("node_modules")).unwrap();
    let (_, warned) = run2(
        "openapi-typescript",
        Command::new("node")
            .arg(modules.join("openapi-typescript/bin/cli.js"))
            .arg(format!("{}/v1/openapi.json", s.url))
            .arg("--output")
            .arg(d.join("agentd.d.ts")),
    );
    // Its warnings (` ⚠  …`, on stderr) name what it could not type.
    assert!(
        !warned.contains('\u{26A0}'),
        "openapi-typescript did not type the whole document:\n{warned}"
    );
    let tsc = modules.join("typescript/bin/tsc");

    // The type check bites: a body field of the wrong type is refused, naming it.
    let flow = std::fs::read_to_string(d.join("flow.ts")).unwrap();
    let typo = flow.replacen("auto_create: true", "auto_create: \"yes\"", 1);
    assert_ne!(typo, flow, "flow.ts uploads with auto_create: true");
    std::fs::write(d.join("flow.ts"), &typo).unwrap();
    let o = Command::new("node")
        .arg(&tsc)
        .args(["--noEmit", "-p"])
        .arg(d)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        !o.status.success() && said.contains("flow.ts") && said.contains("boolean"),
        "tsc accepted a string for auto_create:\n{said}"
    );
    std::fs::write(d.join("flow.ts"), &flow).unwrap();

    run("tsc", Command::new("node").arg(&tsc).arg("-p").arg(d));
    let printed = run(
        "tests/clients/ts/flow.ts",
        Command::new("node")
            .arg(d.join("out/flow.js"))
            .env("AGENTD_URL", &s.url)
            .env("AGENTD_KEY", &s.key),
    );
    check_flow(&s, &printed, "typescript-client").await;
}

/// The lines of `file` between the `README: LANG, from here` and `…, to here` comments.
fn excerpt(file: &str, lang: &str) -> String {
    let text = std::fs::read_to_string(format!("{CLIENTS}/{file}")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.ends_with(&format!("README: {lang}, from here")))
        .unwrap_or_else(|| panic!("{file}: no `README: {lang}, from here`"));
    let end = lines
        .iter()
        .position(|l| l.ends_with(&format!("README: {lang}, to here")))
        .unwrap_or_else(|| panic!("{file}: no `README: {lang}, to here`"));
    lines[start + 1..end].join("\n")
}

#[test]
fn the_docs_show_the_client_code_ci_runs() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/http-api.md")).unwrap();
    for (file, lang, fence) in [
        ("python/flow.py", "Python", "```python\n"),
        ("ts/flow.ts", "TypeScript", "```ts\n"),
    ] {
        let code = format!("{fence}{}\n```", excerpt(file, lang));
        assert!(
            doc.contains(&code),
            "docs/http-api.md does not show tests/clients/{file} as it is; it should hold:\n{code}"
        );
    }
}
