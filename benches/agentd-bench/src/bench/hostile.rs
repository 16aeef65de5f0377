//! Hostile input (issue 29): what a runaway or hostile model server costs the worker.
//! - One answer with 10,000 tool calls written as text (`<tool_call>…</tool_call>`): CPU time of
//!   the whole run (recovering the calls, dropping those past `max_tool_calls`, the steps) and
//!   the audit rows it leaves, against a run whose answer has one call, in the same run.
//! - A 64 MB response body from an HTTP server on loopback: the call is refused at
//!   `llm.max_response_bytes` (32 MB by default), and the process's peak RSS grows by at most
//!   the cap + 64 MB (it is not read whole).

use super::{Report, Row, Server, Target, bench_app};
use agentd::agent::Engine;
use agentd::app::App;
use agentd::llm::openai::{DEFAULT_MAX_RESPONSE_BYTES, OpenAiProvider, OpenAiSettings};
use agentd::llm::scripted::{ScriptedProvider, Turn};
use agentd::llm::{CompletionRequest, LlmProvider, Message, Role, ToolChoice};
use agentd::store::orgs;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const DB: &str = "agentd_bench_hostile";
const SECTION: &str = "hostile input";

/// User + system CPU seconds of this process so far (`/proc/self/stat`, clock ticks of
/// 1/100 s).
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line; 12 and 13 after the name and state.
    (ticks(11) + ticks(12)) / 100.0
}

/// Peak resident set of this process, bytes (`VmHWM`).
fn peak_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// CPU seconds and audit rows of one auto_create-shaped run whose first answer is `answer`.
async fn run_with(
    app: &App,
    pool: &sqlx::PgPool,
    org: uuid::Uuid,
    subject: &str,
    answer: Turn,
) -> anyhow::Result<(f64, i64)> {
    let provider = Arc::new(ScriptedProvider::new(vec![answer, Turn::text("done")]));
    let spec = app.spec("auto_create");
    let mut env = app.tool_env(spec);
    env.provider = provider;
    let engine = Engine {
        pool: pool.clone(),
        clock: app.clock.clone(),
        env,
        pii: Default::default(),
        vault: None,
    };
    let mut rs = app.run_spec(spec, org, subject.into(), None, "Read the document.".into());
    rs.settings.compact = false;
    rs.caps.max_tool_calls = 20;
    let cpu = cpu_secs();
    let out = engine.run(&rs, &CancellationToken::new()).await?;
    let spent = cpu_secs() - cpu;
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_events WHERE run_id = $1")
        .bind(out.run_id)
        .fetch_one(pool)
        .await?;
    Ok((spent, rows))
}

/// The hostile-input part.
pub async fn run(server: &Server, app: &App, report: &mut Report) -> anyhow::Result<()> {
    let pool = server.agentd_db(DB, 4).await?;
    let bapp = bench_app(app, pool.clone());
    let org = orgs::ensure(&pool, "bench-hostile").await?.id;
    let call = |i: usize| {
        format!(
            "<tool_call>{{\"name\": \"get_document\", \"arguments\": {{\"n\": {i}}}}}</tool_call>\n"
        )
    };
    let flood: String = (0..10_000).map(call).collect();
    let (one_cpu, _) = run_with(&bapp, &pool, org, "one", Turn::Text(call(0))).await?;
    let (cpu, rows) = run_with(&bapp, &pool, org, "flood", Turn::Text(flood)).await?;
    report.push(
        Row::new(SECTION, "run with 10,000 text tool calls: CPU", cpu, "s")
            .baseline("a run with 1 call", one_cpu)
            .target(Target::AtMost(1.0))
            .note("max_tool_calls = 20: calls past it are dropped when the answer is stored"),
    );
    report.push(
        Row::new(SECTION, "audit rows of that run", rows as f64, "rows")
            .target(Target::AtMost(22.0))
            .note(
                "at most max_tool_calls + 2: the calls made, one row for the dropped ones, the cap",
            ),
    );
    pool.close().await;
    server.drop_db(DB).await?;

    // A 64 MB body, chunked (nothing announces its size), from a loopback server.
    async fn huge() -> axum::response::Response {
        let part = axum::body::Bytes::from(vec![b' '; 1 << 20]);
        let body =
            futures::stream::iter((0..64).map(move |_| Ok::<_, std::io::Error>(part.clone())));
        axum::response::Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(axum::body::Body::from_stream(body))
            .expect("a response")
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base_url = format!("http://{}/v1", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, axum::Router::new().fallback(huge)).await });
    let provider = OpenAiProvider::new(OpenAiSettings {
        base_url,
        api_key: String::new(),
        timeout: Duration::from_secs(60),
        max_retries: 0,
        stream: false,
    });
    let before = peak_rss();
    let err = provider
        .complete(CompletionRequest {
            model: "m".into(),
            messages: vec![Message::text(Role::User, "hi")],
            tools: vec![],
            tool_choice: ToolChoice::Auto,
            max_tokens: Some(16),
            response_format: None,
        })
        .await;
    let grew = peak_rss().saturating_sub(before) as f64 / (1 << 20) as f64;
    let refused = err
        .as_ref()
        .err()
        .is_some_and(|e| e.message.contains("llm.max_response_bytes"));
    anyhow::ensure!(
        refused,
        "the 64 MB body was not refused at the cap: {err:?}"
    );
    let cap_mb = (DEFAULT_MAX_RESPONSE_BYTES >> 20) as f64;
    report.push(
        Row::new(SECTION, "64 MB body: peak RSS growth", grew, "MB")
            .target(Target::AtMost(cap_mb + 64.0))
            .note(format!("refused at llm.max_response_bytes ({cap_mb} MB)")),
    );
    Ok(())
}
