//! Agent loop: per-step overhead with a trivial in-process provider and a cheap tool
//! (`list_tags`), each step being a checkpointed provider response plus a tool call with its
//! audit row and checkpoint, in their own transactions; and auto-create runs end to end with the
//! offline provider through the queue; and what a proposed document costs in model traffic,
//! before and after issue 11 (`cost`).

mod cost;

use super::{Opts, Report, Row, Server, Target, bench_app, median, percentile};
use agentd::agent::{Engine, Policy};
use agentd::app::{App, WorkerArgs};
use agentd::llm::{
    Block, CompletionRequest, CompletionResponse, FinishReason, LlmError, LlmProvider, Message,
    Role, Usage,
};
use agentd::queue::{NewJob, enqueue};
use agentd::store::{auto_create, documents, orgs};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const DB_STEPS: &str = "agentd_bench_agent";
const DB_AUTO: &str = "agentd_bench_auto_create";

/// Sample documents for auto-create (the ones `agentd demo` uses).
const SAMPLES: [(&str, &str); 4] = [
    (
        "invoice.txt",
        include_str!("../../../../samples/invoice.txt"),
    ),
    (
        "receipt.txt",
        include_str!("../../../../samples/receipt.txt"),
    ),
    (
        "purchase_order.txt",
        include_str!("../../../../samples/purchase_order.txt"),
    ),
    (
        "lab_report.txt",
        include_str!("../../../../samples/lab_report.txt"),
    ),
];

/// Calls `list_tags` for `rounds` rounds, then answers; records when each call arrives.
struct StepProvider {
    rounds: usize,
    calls: Mutex<Vec<Instant>>,
}

#[async_trait::async_trait]
impl LlmProvider for StepProvider {
    fn name(&self) -> &str {
        "bench"
    }

    async fn complete(&self, req: CompletionRequest) -> Result<CompletionResponse, LlmError> {
        self.calls.lock().expect("calls").push(Instant::now());
        let done = req
            .messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        let (content, finish) = if done < self.rounds {
            let call = Block::ToolUse {
                id: "c0".into(),
                name: "list_tags".into(),
                arguments: "{}".into(),
            };
            (vec![call], FinishReason::ToolUse)
        } else {
            (
                vec![Block::Text {
                    text: "done".into(),
                }],
                FinishReason::EndTurn,
            )
        };
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
            model: req.model,
        })
    }
}

/// The agent part.
pub async fn run(
    server: &Server,
    app: &App,
    opts: &Opts,
    report: &mut Report,
) -> anyhow::Result<()> {
    cost::run(server, app, report).await?;
    steps(server, app, opts, report).await?;
    auto_create_e2e(server, app, opts, report).await
}

async fn steps(server: &Server, app: &App, opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    let pool = server.agentd_db(DB_STEPS, 8).await?;
    let bapp = bench_app(app, pool.clone());
    let org = orgs::ensure(&pool, "bench-agent").await?;
    sqlx::query(
        "INSERT INTO tags (id, org_id, name, color)
         SELECT gen_random_uuid(), $1, 'tag-' || g, '#336699' FROM generate_series(1, 5) g",
    )
    .bind(org.id)
    .execute(&pool)
    .await?;
    let rounds = 10;
    let runs = opts.size(100, 20);
    let provider = Arc::new(StepProvider {
        rounds,
        calls: Mutex::new(Vec::new()),
    });
    let spec = bapp.spec("auto_create");
    let mut env = bapp.tool_env(spec);
    env.provider = provider.clone();
    let engine = Engine {
        pool: pool.clone(),
        clock: bapp.clock.clone(),
        env,
        // The step-overhead figure measures the loop itself, without redaction.
        pii: Default::default(),
        vault: None,
    };
    let mut rs = bapp.run_spec(spec, org.id, String::new(), None, "Call list_tags.".into());
    rs.policy = Policy::from_spec(&["list_tags".to_string()], &spec.agent.policy);
    // The bare step: the same call every round is the point here, not a repeat to refuse.
    rs.settings.compact = false;
    rs.caps.max_rounds = rounds as u32 + 5;
    rs.caps.max_tool_calls = rounds as u32 + 5;
    rs.caps.max_tokens = u64::MAX / 4;
    rs.caps.deadline = Duration::from_secs(3600);
    let mut step_ms = Vec::new();
    let mut run_ms = Vec::new();
    let cancel = CancellationToken::new();
    for i in 0..runs {
        rs.subject = format!("bench-{i}");
        let t0 = Instant::now();
        let out = engine.run(&rs, &cancel).await?;
        run_ms.push(t0.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(
            out.status == "succeeded",
            "bench run ended {} ({:?})",
            out.status,
            out.stop_reason
        );
        let calls = std::mem::take(&mut *provider.calls.lock().expect("calls"));
        step_ms.extend(
            calls
                .windows(2)
                .map(|w| w[1].duration_since(w[0]).as_secs_f64() * 1000.0),
        );
    }
    pool.close().await;
    server.drop_db(DB_STEPS).await?;
    let note = format!(
        "{} steps ({runs} runs × {rounds}); step = response checkpoint with its charge + list_tags + audit row with checkpoint (the transcript and the budget the charge returned are kept in memory)",
        step_ms.len()
    );
    report.push(
        Row::new("agent", "per-step overhead p50", median(&step_ms), "ms")
            .target(Target::AtMost(1.0))
            .note(note),
    );
    report.push(Row::new(
        "agent",
        "per-step overhead p99",
        percentile(&step_ms, 99.0),
        "ms",
    ));
    report.push(
        Row::new(
            "agent",
            format!("whole run of {rounds} steps p50"),
            median(&run_ms),
            "ms",
        )
        .note("open run + steps + final answer + finish"),
    );
    Ok(())
}

async fn auto_create_e2e(
    server: &Server,
    app: &App,
    opts: &Opts,
    report: &mut Report,
) -> anyhow::Result<()> {
    let pool = server
        .agentd_db(DB_AUTO, app.config.database.max_connections)
        .await?;
    let bapp = bench_app(app, pool.clone());
    let org = orgs::ensure(&pool, "bench-auto").await?;
    let docs = opts.size(200, 40);
    let q = bapp.spec("auto_create").queue.clone();
    for i in 0..docs {
        let (name, text) = SAMPLES[i % SAMPLES.len()];
        let now = bapp.clock.now();
        let mut tx = pool.begin().await?;
        let id = documents::insert(
            &mut tx,
            org.id,
            &format!("{i}-{name}"),
            Some(text),
            &json!({}),
            now,
        )
        .await?;
        let job = NewJob::new("auto_create", json!({"org_id": org.id, "document_id": id}))
            .unique_key(format!("auto_create:{id}"))
            .priority(q.priority)
            .max_attempts(q.max_attempts);
        enqueue(&mut *tx, &job).await?;
        auto_create::set_status(
            &mut *tx,
            org.id,
            id,
            documents::AutoCreateStatus::Queued,
            None,
            None,
            now,
        )
        .await?;
        tx.commit().await?;
    }
    let stop = CancellationToken::new();
    let t0 = Instant::now();
    let args = WorkerArgs::serving(&["auto_create"], None);
    let worker = bapp
        .start_worker(args, stop.clone())
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    let (proposed, finished) = loop {
        let (proposed, finished): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE auto_create_status = 'proposed'),
                    count(*) FILTER (WHERE auto_create_status IN ('proposed', 'failed', 'skipped'))
               FROM documents WHERE org_id = $1",
        )
        .bind(org.id)
        .fetch_one(&pool)
        .await?;
        if finished as usize >= docs || t0.elapsed() > Duration::from_secs(900) {
            break (proposed, finished);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let secs = t0.elapsed().as_secs_f64();
    stop.cancel();
    worker.join().await;
    let (rounds, calls, run_secs): (f64, f64, f64) = sqlx::query_as(
        "SELECT avg(rounds)::float8, avg(tool_calls)::float8,
                percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - started_at))::float8
           FROM agent_runs",
    )
    .fetch_one(&pool)
    .await?;
    pool.close().await;
    server.drop_db(DB_AUTO).await?;
    report.push(
        Row::new("agent", format!("auto-create end to end, c={}", q.concurrency), proposed as f64 / secs, "runs/s").note(
            format!(
                "offline provider; {docs} docs → {proposed} proposed, {} other, in {secs:.1}s; per run {rounds:.1} rounds, {calls:.1} tool calls, p50 {:.0} ms",
                finished - proposed,
                run_secs * 1000.0
            ),
        ),
    );
    Ok(())
}
