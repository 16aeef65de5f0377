//! Scale-out through PgBouncer in transaction pooling mode (issue 18): three workers, each with
//! its own pool through one real PgBouncer started here (own config in a temp dir, free port),
//! LISTEN on the direct connection, drain auto-create jobs and finish every agent run with the
//! scripted provider. Without a `pgbouncer` binary the tests fail and say how to install it
//! (`scripts/test` installs it): a missing tool never passes as a test that did not run.

use crate::common;
use agentd::app::App;
use agentd::clock::{SharedClock, SystemClock};
use agentd::documents::add_document;
use agentd::llm::scripted::{ScriptedProvider, Turn};
use agentd::llm::{
    Block, CompletionRequest, CompletionResponse, FinishReason, LlmError, Message, Role, Usage,
};
use common::{TestDb, wait_until};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use uuid::Uuid;

/// The `pgbouncer` binary: PATH, then Debian's /usr/sbin; else a panic with the install line.
fn pgbouncer_bin() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.push("/usr/sbin".into());
    dirs.into_iter()
        .map(|d| d.join("pgbouncer"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "the PgBouncer tests need the `pgbouncer` binary (none in PATH or /usr/sbin). \
                 Install it with `apt-get install -y pgbouncer` (scripts/test does this when it is missing)"
            )
        })
}

/// A PgBouncer in transaction mode in front of the test server; killed on drop.
struct Bouncer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Bouncer {
    fn start(bin: &PathBuf, pool_size: u32) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let (user, host, pg_port) = parts(&common::server_url());
        std::fs::write(dir.path().join("users.txt"), format!("\"{user}\" \"\"\n")).unwrap();
        let ini = format!(
            "[databases]\n* = host={host} port={pg_port}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\nauth_type = trust\nauth_file = {users}\npool_mode = transaction\nserver_reset_query = DEALLOCATE ALL\nserver_reset_query_always = 1\nmax_client_conn = 500\ndefault_pool_size = {pool_size}\nserver_lifetime = 3600\nlog_connections = 0\nlog_disconnections = 0\n",
            users = dir.path().join("users.txt").display(),
        );
        let ini_path = dir.path().join("pgbouncer.ini");
        std::fs::write(&ini_path, ini).unwrap();
        let mut cmd = Command::new(bin);
        if nix::unistd::geteuid().is_root() {
            // PgBouncer refuses to run as root; it drops to `postgres` (which must read the files).
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
            for f in ["users.txt", "pgbouncer.ini"] {
                std::fs::set_permissions(
                    dir.path().join(f),
                    std::fs::Permissions::from_mode(0o644),
                )
                .unwrap();
            }
            cmd.args(["-u", "postgres"]);
        }
        let child = cmd
            .arg(&ini_path)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start pgbouncer");
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        Self {
            child,
            port,
            _dir: dir,
        }
    }

    /// `db_url` with host and port replaced by the bouncer's.
    fn url_for(&self, db_url: &str) -> String {
        let (user, _, _) = parts(db_url);
        let db = db_url.rsplit_once('/').expect("a database in the URL").1;
        format!("postgres://{user}@127.0.0.1:{}/{db}", self.port)
    }
}

/// (user, host, port) of a `postgres://user@host:port/db` URL (the test server's form).
fn parts(url: &str) -> (String, String, u16) {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let (auth, hostpart) = rest.split_once('@').unwrap_or(("postgres", rest));
    let user = auth.split(':').next().unwrap_or("postgres").to_string();
    let hostport = hostpart.split('/').next().unwrap_or("127.0.0.1:5432");
    let (host, port) = hostport.split_once(':').unwrap_or((hostport, "5432"));
    (user, host.to_string(), port.parse().unwrap_or(5432))
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn answer(content: Vec<Block>, finish: FinishReason) -> Result<CompletionResponse, LlmError> {
    Ok(CompletionResponse {
        message: Message {
            role: Role::Assistant,
            content,
        },
        usage: Usage {
            input_tokens: 100,
            output_tokens: 20,
            ..Default::default()
        },
        finish,
        model: "scripted".into(),
    })
}

fn call(name: &str, args: Value) -> Result<CompletionResponse, LlmError> {
    answer(
        vec![Block::ToolUse {
            id: format!("c-{name}"),
            name: name.into(),
            arguments: args.to_string(),
        }],
        FinishReason::ToolUse,
    )
}

/// The next step of the auto-create happy path, decided from the request alone (runs of many
/// documents interleave, so one shared script of these turns serves them all in any order).
fn next_step(req: &CompletionRequest) -> Result<CompletionResponse, LlmError> {
    if req.response_format.is_some() {
        return answer(
            vec![Block::Text {
                text: json!({"invoice_number": "INV-77", "total_due": 1250.0}).to_string(),
            }],
            FinishReason::EndTurn,
        );
    }
    let last_tool = req
        .messages
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            Block::ToolUse { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .next_back();
    let last_result: Value = req
        .messages
        .iter()
        .rev()
        .flat_map(|m| m.content.iter())
        .find_map(|b| match b {
            Block::ToolResult { content, .. } => serde_json::from_str(content).ok(),
            _ => None,
        })
        .unwrap_or(Value::Null);
    let format = json!({"type": "json_schema", "json_schema": {"name": "invoice", "strict": true, "schema": {
        "type": "object", "additionalProperties": false, "required": ["invoice_number", "total_due"],
        "properties": {"invoice_number": {"type": "string"}, "total_due": {"type": "number"}}}}});
    match last_tool {
        None => call("get_document", json!({})),
        Some("get_document") => call(
            "create_schema",
            json!({"name": "Invoice", "response_format": format}),
        ),
        Some("create_schema") => call(
            "create_prompt",
            json!({"name": "Extract invoice", "content": "Extract the invoice number and total.",
                   "schema_revid": last_result["schema_revid"].as_str().unwrap_or_default()}),
        ),
        Some("create_prompt") => call(
            "run_extraction",
            json!({"prompt_revid": last_result["prompt_revid"].as_str().unwrap_or_default()}),
        ),
        Some(_) => answer(
            vec![Block::Text {
                text: "Proposed an invoice schema, a prompt and an extraction.".into(),
            }],
            FinishReason::EndTurn,
        ),
    }
}

const INVOICE: &str =
    "Invoice Number: INV-77\nInvoice Date: 2026-11-02\nTotal Due: 1,250.00\nCustomer: Blue Fox\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_workers_through_pgbouncer_drain_jobs_and_finish_agent_runs() {
    let bin = pgbouncer_bin();
    let db = TestDb::new().await;
    // Fewer server connections than the three workers' pools together: the bouncer must
    // multiplex transactions, which is what breaks session state and prepared statements.
    let bouncer = Bouncer::start(&bin, 6);
    let pooled_url = bouncer.url_for(&db.url);

    const DOCS: usize = 24;
    let provider = Arc::new(ScriptedProvider::new(
        (0..DOCS * 6).map(|_| Turn::Dynamic(next_step)).collect(),
    ));
    let mut apps: Vec<App> = Vec::new();
    for _ in 0..3 {
        let mut config = common::test_config();
        config.database.transaction_pooling = true;
        config.database.url = pooled_url.clone();
        config.database.listen_url = db.url.clone();
        config.database.max_connections = 12;
        let pool = agentd::db::pool_for_config(&pooled_url, &config.database, false)
            .await
            .expect("a pool through pgbouncer");
        // Session state is per transaction: the settings hold inside every checkout.
        let lock: String = sqlx::query_scalar("SHOW lock_timeout")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(lock, "5s");
        let mut app = App::new(
            pool,
            Arc::new(SystemClock) as SharedClock,
            config,
            agentd::catalog::Catalog::builtin(&agentd::known_tool_names()).unwrap(),
        );
        app.provider = provider.clone();
        apps.push(app);
    }
    // Through the bouncer: statements from many clients interleave on few server connections
    // (named statements of one client would collide with or miss another's).
    // Outside a transaction a pooled statement commits when its connection returns to the
    // pool, a moment after the call; in one, `commit()` returns once it is visible everywhere
    // (crates/agentd-base/src/db/pooling.rs): the documents below are added through other connections.
    let mut tx = apps[0].pool.begin().await.unwrap();
    let org = agentd::store::orgs::ensure(&mut *tx, "acme")
        .await
        .unwrap()
        .id;
    tx.commit().await.unwrap();
    let mut docs: Vec<Uuid> = Vec::new();
    for i in 0..DOCS {
        let app = &apps[i % 3];
        let (doc, job) = add_document(app, org, &format!("invoice-{i}.txt"), INVOICE, true)
            .await
            .unwrap();
        assert!(job.is_some());
        docs.push(doc);
    }
    let mut running = Vec::new();
    for app in &apps {
        running.push(common::start_worker(app, "auto_create", Some(3)).await);
    }
    let pool = db.pool.clone();
    let ids = docs.clone();
    wait_until(120, "every document is proposed", || {
        let (pool, ids) = (pool.clone(), ids.clone());
        async move {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM documents WHERE id = ANY($1) AND auto_create_status IN ('proposed','failed','skipped')",
            )
            .bind(&ids)
            .fetch_one(&pool)
            .await
            .unwrap();
            n == ids.len() as i64
        }
    })
    .await;
    let mut handled = Vec::new();
    for (w, stop) in running {
        let stats = w.stats.clone();
        stop.cancel();
        w.join().await;
        handled.push(
            stats
                .iter()
                .map(|s| s.succeeded.load(std::sync::atomic::Ordering::Relaxed))
                .sum::<u64>(),
        );
    }
    // The script holds more turns than the runs need (a run's path, e.g. whether it reads the
    // document first, is the model's choice): what matters is below, what the runs left.
    assert!(
        provider.remaining() < DOCS * 6,
        "the runs called the provider"
    );
    let statuses: Vec<(String, i64)> =
        sqlx::query_as("SELECT auto_create_status, count(*) FROM documents GROUP BY 1 ORDER BY 1")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let errors: Vec<Option<String>> = sqlx::query_scalar(
        "SELECT auto_create_error FROM documents WHERE auto_create_status <> 'proposed'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        statuses,
        vec![("proposed".to_string(), DOCS as i64)],
        "{errors:?}"
    );
    let runs: Vec<(String, i64)> =
        sqlx::query_as("SELECT status, count(*) FROM agent_runs GROUP BY 1 ORDER BY 1")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(runs, vec![("succeeded".to_string(), DOCS as i64)]);
    let jobs: Vec<(String, i64)> =
        sqlx::query_as("SELECT state, count(*) FROM agentd_jobs GROUP BY 1 ORDER BY 1")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(jobs, vec![("succeeded".to_string(), DOCS as i64)]);
    // Every audit row of every run: 4 tool calls each, none lost between transactions.
    let audit: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_events")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(audit, 4 * DOCS as i64);
    // The work was shared: more than one worker handled jobs.
    assert_eq!(handled.iter().sum::<u64>(), DOCS as u64, "{handled:?}");
    assert!(
        handled.iter().filter(|n| **n > 0).count() >= 2,
        "jobs spread over the workers: {handled:?}"
    );
    drop(bouncer);
}

/// What the loop relies on, alone: a `pool.begin()` transaction through the pooler is visible
/// to another connection as soon as `commit()` returns (it used to wait for the connection's
/// return to the pool), a dropped one leaves nothing, and a statement run outside a
/// transaction just before shutdown is committed by `pooling::close`, not rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_commits_are_visible_on_return_and_survive_close() {
    let bin = pgbouncer_bin();
    let db = TestDb::new().await;
    let bouncer = Bouncer::start(&bin, 2);
    let pooled_url = bouncer.url_for(&db.url);
    let mut config = common::test_config();
    config.database.transaction_pooling = true;
    config.database.listen_url = db.url.clone();
    config.database.max_connections = 4;
    let pool = agentd::db::pool_for_config(&pooled_url, &config.database, false)
        .await
        .unwrap();
    assert!(agentd::db::pooling::is_pooled(&pool));
    for i in 0..40 {
        let name = format!("org-{i}");
        let mut tx = pool.begin().await.unwrap();
        agentd::store::orgs::ensure(&mut *tx, &name).await.unwrap();
        tx.commit().await.unwrap();
        // Read at once on the direct pool: no waiting, no retry.
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM orgs WHERE name = $1")
            .bind(&name)
            .fetch_one(&db.pool)
            .await
            .unwrap();
        assert_eq!(n, 1, "commit {i} not visible when commit() returned");
    }
    {
        let mut tx = pool.begin().await.unwrap();
        agentd::store::orgs::ensure(&mut *tx, "dropped")
            .await
            .unwrap();
        drop(tx);
    }
    agentd::store::orgs::ensure(&pool, "last-autocommit")
        .await
        .unwrap();
    agentd::db::pooling::close(&pool, std::time::Duration::from_secs(5)).await;
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM orgs WHERE name IN ('dropped', 'last-autocommit') ORDER BY name",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(names, vec!["last-autocommit".to_string()]);
    drop(bouncer);
}
