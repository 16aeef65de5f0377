//! What one proposed document costs in model traffic (issue 11): request bytes and input tokens
//! (o200k tokenizer over each request as sent to the provider) per proposed one-page invoice,
//! with the request shape of before issue 11 (a flag: the 24-tool list, no document in the first
//! message, no compaction or working state, `tool_choice: auto`) and with today's; and a 65 KB
//! multi-page document run with the job file's default caps. The model is the offline one, so
//! both shapes make the same calls; the figures measure the loop, not a model.

use super::super::{Report, Row, Server, Target, bench_app};
use agentd::agent::Engine;
use agentd::app::App;
use agentd::llm::{CompletionRequest, CompletionResponse, LlmError, LlmProvider, SharedProvider};
use agentd::store::{auto_create, documents, orgs};
use serde_json::json;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

const DB: &str = "agentd_bench_agent_cost";

/// auto_create's tools before issue 11.
const LEGACY_TOOLS: [&str; 24] = [
    "get_document",
    "get_ocr_text",
    "list_documents",
    "update_document",
    "get_schema",
    "list_schemas",
    "validate_schema",
    "create_schema",
    "update_schema",
    "get_prompt",
    "list_prompts",
    "create_prompt",
    "update_prompt",
    "list_tags",
    "create_tag",
    "get_extraction_result",
    "run_extraction",
    "update_extraction_field",
    "help_schemas",
    "help_prompts",
    "delete_document",
    "delete_schema",
    "delete_prompt",
    "delete_tag",
];

/// auto_create's first message before issue 11.
const LEGACY_FIRST: &str = "Document {document_id} was uploaded. Read it, create a schema and a \
    prompt for it, run the extraction, check the result, and summarise what you proposed.";

/// Records what each request weighs.
struct Metered {
    inner: SharedProvider,
    /// (request bytes, input tokens by tokenizer, tool-loop call?) per call.
    calls: Mutex<Vec<(usize, u64, bool)>>,
}

#[async_trait::async_trait]
impl LlmProvider for Metered {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn complete(&self, req: CompletionRequest) -> Result<CompletionResponse, LlmError> {
        let bytes = serde_json::to_string(&req).map(|s| s.len()).unwrap_or(0);
        let tokens = agentd::llm::tokens::request(&req);
        let loop_call = req.response_format.is_none();
        if std::env::var("AGENTD_BENCH_DEBUG").is_ok() {
            let tools = serde_json::to_string(&req.tools)
                .map(|s| s.len())
                .unwrap_or(0);
            let msgs: Vec<usize> = req
                .messages
                .iter()
                .map(|m| serde_json::to_string(m).map(|s| s.len()).unwrap_or(0))
                .collect();
            eprintln!("call: {bytes} B, tools {tools} B, messages {msgs:?}");
        }
        self.calls
            .lock()
            .expect("calls")
            .push((bytes, tokens, loop_call));
        self.inner.complete(req).await
    }
}

/// One auto-create run of `text`; returns (proposed, calls, bytes, tokens, run tokens).
async fn one(
    app: &App,
    org: uuid::Uuid,
    name: &str,
    text: &str,
    legacy: bool,
) -> anyhow::Result<(bool, usize, usize, u64, i64)> {
    let metered = Arc::new(Metered {
        inner: app.provider.clone(),
        calls: Mutex::new(Vec::new()),
    });
    let spec = app.spec("auto_create");
    let mut env = app.tool_env(spec);
    env.provider = metered.clone();
    let engine = Engine {
        pool: app.pool.clone(),
        clock: app.clock.clone(),
        env,
        // The figures measure the loop's requests, without redaction.
        pii: Default::default(),
        vault: None,
    };
    let mut conn = app.pool.acquire().await?;
    let doc = documents::insert(
        &mut conn,
        org,
        name,
        Some(text),
        &json!({}),
        app.clock.now(),
    )
    .await?;
    drop(conn);
    let template = if legacy {
        LEGACY_FIRST
    } else {
        spec.agent.first_message.as_str()
    };
    let first = agentd::jobs::render(template, &[("document_id", doc.to_string())]);
    let mut rs = app.run_spec(spec, org, doc.to_string(), None, first);
    rs.document_id = Some(doc);
    if legacy {
        rs.settings.compact = false;
        rs.policy.allow = LEGACY_TOOLS.iter().map(|t| t.to_string()).collect();
    }
    let out = engine.run(&rs, &CancellationToken::new()).await?;
    let a = auto_create::artifacts(&app.pool, org, out.run_id, doc).await?;
    let proposed = a.complete();
    let calls = metered.calls.lock().expect("calls").clone();
    Ok((
        proposed,
        calls.len(),
        calls.iter().map(|c| c.0).sum(),
        calls.iter().map(|c| c.1).sum(),
        out.tokens,
    ))
}

/// A multi-page document of about `bytes` bytes: a header of `Key: value` lines, then pages
/// of line items separated by form feeds.
fn multi_page(bytes: usize) -> String {
    let mut s = String::from(
        "Invoice Number: INV-2026-0999\nInvoice Date: 2026-11-02\nCustomer: Blue Fox Ltd\nTotal Due: 48,210.40\nCurrency: EUR\n",
    );
    let mut page = 1;
    while s.len() < bytes {
        s.push_str(&format!("\u{c}Page {page}\n"));
        for l in 0..40 {
            s.push_str(&format!(
                "Item {page}-{l:02}  Widget type {l} grade B   qty {}   unit 12.40   amount {}.00\n",
                l % 7 + 1,
                (l % 7 + 1) * 12
            ));
        }
        page += 1;
    }
    s
}

/// The cost rows.
pub async fn run(server: &Server, app: &App, report: &mut Report) -> anyhow::Result<()> {
    let pool = server.agentd_db(DB, 8).await?;
    let bapp = bench_app(app, pool.clone());
    let org = orgs::ensure(&pool, "bench-cost").await?.id;
    let invoice = include_str!("../../../../../samples/invoice.txt");
    let (b_ok, b_calls, b_bytes, b_tokens, b_run) =
        one(&bapp, org, "invoice.txt", invoice, true).await?;
    let (a_ok, a_calls, a_bytes, a_tokens, a_run) =
        one(&bapp, org, "invoice.txt", invoice, false).await?;
    anyhow::ensure!(
        b_ok && a_ok,
        "the invoice was not proposed (before {b_ok}, after {a_ok})"
    );
    let free = {
        let mut config = (*bapp.config).clone();
        config.llm.guided = "off".into();
        App {
            config: Arc::new(config),
            ..bapp.clone()
        }
    };
    let (f_ok, f_calls, f_bytes, f_tokens, _) =
        one(&free, org, "invoice.txt", invoice, false).await?;
    report.push(
        Row::new("agent", "request bytes per proposed invoice", a_bytes as f64, "B")
            .baseline("before issue 11", b_bytes as f64)
            .target(Target::AtMost(b_bytes as f64 / 3.0))
            .note(format!(
                "offline model, one-page samples/invoice.txt, job defaults (guided); {a_calls} calls now, {b_calls} before (incl. run_extraction's own call); before = flag reproducing the old request shape"
            )),
    );
    report.push(
        Row::new("agent", "input tokens per proposed invoice", a_tokens as f64, "tokens")
            .baseline("before issue 11", b_tokens as f64)
            .target(Target::AtMost(b_tokens as f64 / 3.0))
            .note(format!(
                "o200k tokenizer over each request as sent; run totals as the provider reported: {a_run} now, {b_run} before"
            )),
    );
    report.push(
        Row::new("agent", "… free mode (llm.guided = off): request bytes", f_bytes as f64, "B")
            .baseline("before issue 11", b_bytes as f64)
            .note(format!(
                "every allowed tool each round; {f_calls} calls, {f_tokens} input tokens; proposed: {f_ok}"
            )),
    );
    let big = multi_page(65 * 1024);
    let (ok, calls, bytes, tokens, run_tokens) = one(&bapp, org, "big.txt", &big, false).await?;
    let cap = bapp.spec("auto_create").agent.max_tokens;
    report.push(
        Row::new("agent", "65 KB multi-page document: run tokens", run_tokens as f64, "tokens")
            .target(Target::AtMost(cap as f64))
            .note(format!(
                "{} ({} bytes, {} pages); proposed: {ok}; {calls} calls, {bytes} request bytes, {tokens} input tokens by tokenizer; default caps (agent.max_tokens = {cap})",
                if ok { "proposed" } else { "NOT proposed" },
                big.len(),
                big.matches('\u{c}').count() + 1
            )),
    );
    pool.close().await;
    server.drop_db(DB).await?;
    Ok(())
}
