//! `agentd documents add|list|show|accept|reject` and `agentd demo`.

use super::bad;
use crate::app::{App, WorkerArgs};
use crate::queue::{self, NewJob};
use crate::store::{auto_create, documents, extractions, orgs, prompts, runs, schemas};
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Document commands.
#[derive(Subcommand, Debug)]
pub enum DocumentsCmd {
    /// Insert a document (and, with --auto-create, enqueue its auto-create in the same transaction).
    Add {
        /// Org id or name (a new name creates the org).
        #[arg(long)]
        org: String,
        #[arg(long)]
        name: String,
        /// The document's text (UTF-8; invalid bytes are replaced, NUL bytes dropped).
        #[arg(long)]
        text_file: PathBuf,
        #[arg(long)]
        auto_create: bool,
        #[arg(long)]
        json: bool,
    },
    /// Documents of an org, newest first.
    List {
        #[arg(long)]
        org: String,
        #[arg(long, default_value_t = 50)]
        limit: i64,
        #[arg(long)]
        json: bool,
    },
    /// A document's auto-create status and proposal (schema fields, prompt, extracted values).
    Show {
        id: Uuid,
        #[arg(long)]
        json: bool,
        /// Instead: what agentd keeps about the document (text, extractions, transcripts,
        /// audit rows, redaction tokens).
        #[arg(long)]
        retention: bool,
    },
    /// Accept the proposal: schema and prompt become active, the extraction accepted.
    Accept { id: Uuid },
    /// Reject the proposal: its artifacts are removed (the audit trail stays).
    Reject { id: Uuid },
}

/// Options of `agentd demo`.
#[derive(Args, Debug)]
pub struct DemoCmd {
    /// Org name for the sample documents.
    #[arg(long, default_value = "demo")]
    pub org: String,
    /// Give up waiting after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_secs: u64,
    #[arg(long)]
    pub json: bool,
}

/// The sample documents shipped in `samples/` (compiled in so the binary runs anywhere).
pub const SAMPLES: [(&str, &str); 4] = [
    ("invoice.txt", include_str!("../../samples/invoice.txt")),
    ("receipt.txt", include_str!("../../samples/receipt.txt")),
    (
        "purchase_order.txt",
        include_str!("../../samples/purchase_order.txt"),
    ),
    (
        "lab_report.txt",
        include_str!("../../samples/lab_report.txt"),
    ),
];

/// Inserts a document and, if asked, its auto-create job, in one transaction.
pub async fn add_document(
    app: &App,
    org_id: Uuid,
    name: &str,
    text: &str,
    auto: bool,
) -> anyhow::Result<(Uuid, Option<i64>)> {
    let now = app.clock.now();
    let mut tx = app.pool.begin().await?;
    let id = documents::insert(&mut tx, org_id, name, Some(text), &json!({}), now).await?;
    let mut job = None;
    if auto {
        let q = &app.spec("auto_create").queue;
        job = queue::enqueue(
            &mut *tx,
            &NewJob::new("auto_create", json!({"org_id": org_id, "document_id": id}))
                .unique_key(format!("auto_create:{id}"))
                .priority(q.priority)
                .max_attempts(q.max_attempts),
        )
        .await?;
        auto_create::set_status(&mut *tx, org_id, id, "queued", None, None, now).await?;
    }
    tx.commit().await?;
    Ok((id, job))
}

/// Runs a documents command.
pub async fn run(app: &App, cmd: DocumentsCmd) -> anyhow::Result<()> {
    match cmd {
        DocumentsCmd::Add {
            org,
            name,
            text_file,
            auto_create: auto,
            json: as_json,
        } => {
            let bytes = std::fs::read(&text_file).map_err(|e| {
                bad(format!(
                    "--text-file {}: cannot read: {e}",
                    text_file.display()
                ))
            })?;
            let text = documents::text_from_bytes(&bytes);
            if name.trim().is_empty() {
                return Err(bad("--name must not be empty"));
            }
            let org = match orgs::find(&app.pool, &org).await? {
                Some(o) => o,
                None if Uuid::parse_str(&org).is_ok() => {
                    return Err(bad(format!("--org: no org with id {org}")));
                }
                None => orgs::ensure(&app.pool, &org).await?,
            };
            let (id, job) = add_document(app, org.id, &name, &text, auto).await?;
            if as_json {
                println!(
                    "{}",
                    json!({"document_id": id, "org_id": org.id, "job_id": job})
                );
            } else {
                println!("document {id} added to org {} ({})", org.name, org.id);
                if let Some(j) = job {
                    println!("auto_create job {j} enqueued; run `agentd worker` to process it");
                }
            }
        }
        DocumentsCmd::List {
            org,
            limit,
            json: as_json,
        } => {
            let org = orgs::find(&app.pool, &org)
                .await?
                .ok_or_else(|| bad(format!("--org: no org {org:?}")))?;
            let rows = doc_rows(app, org.id, limit).await?;
            if as_json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                for r in rows {
                    println!(
                        "{}  {:<10} {}",
                        r["id"].as_str().unwrap_or(""),
                        r["auto_create_status"].as_str().unwrap_or(""),
                        r["name"].as_str().unwrap_or("")
                    );
                }
            }
        }
        DocumentsCmd::Show {
            id,
            json: as_json,
            retention: true,
        } => {
            let mut conn = app.pool.acquire().await?;
            let org = auto_create::state(&mut *conn, None, id)
                .await?
                .ok_or_else(|| bad(format!("no document with id {id}")))?
                .org_id;
            let k = crate::pii::retention::kept_for_document(&mut conn, org, id)
                .await?
                .ok_or_else(|| bad(format!("no document with id {id}")))?;
            if as_json {
                println!("{}", serde_json::to_string_pretty(&k)?);
            } else {
                println!("document {id}: what agentd keeps");
                println!("  text                {} characters", k.text_chars);
                println!("  extractions         {}", k.extractions);
                println!(
                    "  runs                {} ({} transcript steps, {} compacted: text removed)",
                    k.runs, k.transcript_steps, k.compacted_steps
                );
                println!(
                    "  audit rows          {} (redacted arguments, result summaries and SHA-256; append-only)",
                    k.audit_rows
                );
                println!("  redaction tokens    {}", k.pii_tokens);
                println!(
                    "Deleting the document removes its text, extractions, transcript text and tokens; audit rows keep their hashes."
                );
            }
        }
        DocumentsCmd::Show {
            id, json: as_json, ..
        } => {
            let report = document_report(app, id)
                .await?
                .ok_or_else(|| bad(format!("no document with id {id}")))?;
            if as_json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print_report(&report);
            }
        }
        DocumentsCmd::Accept { id } | DocumentsCmd::Reject { id } => {
            let accept = matches!(cmd, DocumentsCmd::Accept { .. });
            let mut tx = app.pool.begin().await?;
            let st = auto_create::state(&mut *tx, None, id)
                .await?
                .ok_or_else(|| bad(format!("no document with id {id}")))?;
            let st = auto_create::lock_state(&mut tx, st.org_id, id)
                .await?
                .expect("exists");
            if st.auto_create_status != "proposed" {
                return Err(bad(format!(
                    "document {id} has no proposal to decide (auto_create_status = {})",
                    st.auto_create_status
                )));
            }
            let run = st.auto_create_run_id.expect("a proposal has its run");
            if accept {
                auto_create::accept(&mut tx, st.org_id, id, run, app.clock.now()).await?;
                tx.commit().await?;
                println!(
                    "document {id}: proposal accepted (schema and prompt active, extraction accepted)"
                );
            } else {
                let n = auto_create::reject(&mut tx, st.org_id, id, run, app.clock.now()).await?;
                tx.commit().await?;
                println!(
                    "document {id}: proposal rejected ({n} proposed artifact(s) removed; audit kept)"
                );
            }
        }
    }
    Ok(())
}

async fn doc_rows(app: &App, org_id: Uuid, limit: i64) -> anyhow::Result<Vec<Value>> {
    let mut conn = app.pool.acquire().await?;
    let filter = documents::DocumentFilter {
        name_search: None,
        tag_ids: None,
        status: None,
        limit: limit.clamp(1, 100),
    };
    let rows = documents::list(&mut conn, org_id, &filter).await?;
    Ok(rows
        .into_iter()
        .map(|r| serde_json::to_value(r).unwrap_or_default())
        .collect())
}

/// Everything about a document's auto-create, as JSON.
pub async fn document_report(app: &App, id: Uuid) -> anyhow::Result<Option<Value>> {
    let mut conn = app.pool.acquire().await?;
    let Some(st) = auto_create::state(&mut *conn, None, id).await? else {
        return Ok(None);
    };
    let org = st.org_id;
    let schema = match (st.proposed_schema_id, st.proposed_schema_version) {
        (Some(s), Some(v)) => schemas::get(&mut conn, org, s, v).await?,
        _ => None,
    };
    let prompt = match (st.proposed_prompt_id, st.proposed_prompt_version) {
        (Some(p), Some(v)) => prompts::get(&mut conn, org, p, v).await?,
        _ => None,
    };
    let extraction = match st.proposed_extraction_id {
        Some(e) => extractions::get(&mut conn, org, e, false).await?,
        None => None,
    };
    let run = match st.auto_create_run_id {
        Some(r) => runs::get_run(&mut *conn, r).await?,
        None => None,
    };
    let fields: Vec<Value> = schema
        .as_ref()
        .and_then(|s| {
            s.response_format["json_schema"]["schema"]["properties"]
                .as_object()
                .cloned()
        })
        .map(|props| {
            props
                .iter()
                .map(
                    |(k, v)| json!({"name": k, "type": v["type"], "description": v["description"]}),
                )
                .collect()
        })
        .unwrap_or_default();
    Ok(Some(json!({
        "document_id": st.id, "org_id": st.org_id, "name": st.name,
        "auto_create_status": st.auto_create_status, "error": st.auto_create_error,
        "schema": schema.as_ref().map(|s| json!({"revid": format!("{}:{}", s.schema_id, s.version), "name": s.name, "status": s.status})),
        "fields": fields,
        "prompt": prompt.as_ref().map(|p| json!({"revid": format!("{}:{}", p.prompt_id, p.version), "name": p.name, "status": p.status, "content": p.content})),
        "extraction": extraction.as_ref().map(|e| json!({"id": e.id, "status": e.status, "result": e.result})),
        "run": run.as_ref().map(|r| json!({"id": r.id, "provider": r.provider, "status": r.status, "stop_reason": r.stop_reason,
            "rounds": r.rounds, "tool_calls": r.tool_calls, "tokens": r.input_tokens + r.output_tokens,
            "seconds": r.finished_at.map(|f| (f - r.started_at).num_milliseconds() as f64 / 1000.0)})),
    })))
}

fn print_report(r: &Value) {
    println!(
        "{} ({})",
        r["name"].as_str().unwrap_or(""),
        r["document_id"].as_str().unwrap_or("")
    );
    println!(
        "  auto-create: {}",
        r["auto_create_status"].as_str().unwrap_or("")
    );
    if let Some(e) = r["error"].as_str() {
        println!("  error: {e}");
    }
    if let Some(run) = r["run"].as_object() {
        println!(
            "  run {} [{}]: {} ({}), {} round(s), {} tool call(s), {} tokens, {}s",
            run["id"].as_str().unwrap_or(""),
            run["provider"].as_str().unwrap_or(""),
            run["status"].as_str().unwrap_or(""),
            run["stop_reason"].as_str().unwrap_or("-"),
            run["rounds"],
            run["tool_calls"],
            run["tokens"],
            run["seconds"]
                .as_f64()
                .map(|s| format!("{s:.2}"))
                .unwrap_or_else(|| "-".into())
        );
    }
    if let Some(s) = r["schema"].as_object() {
        println!(
            "  schema {} \"{}\" ({})",
            s["revid"].as_str().unwrap_or(""),
            s["name"].as_str().unwrap_or(""),
            s["status"].as_str().unwrap_or("")
        );
    }
    let values = &r["extraction"]["result"];
    for f in r["fields"].as_array().into_iter().flatten() {
        let name = f["name"].as_str().unwrap_or("");
        println!(
            "    {:<24} {:<18} = {}",
            name,
            f["type"].to_string(),
            values
                .get(name)
                .map(|v| v.to_string())
                .unwrap_or_else(|| "-".into())
        );
    }
    if let Some(p) = r["prompt"].as_object() {
        println!(
            "  prompt {} \"{}\" ({})",
            p["revid"].as_str().unwrap_or(""),
            p["name"].as_str().unwrap_or(""),
            p["status"].as_str().unwrap_or("")
        );
    }
}

/// `agentd demo`: sample org and documents, workers until the work drains, a readable report.
pub async fn demo(app: &App, cmd: DemoCmd) -> anyhow::Result<()> {
    let org = orgs::ensure(&app.pool, &cmd.org).await?;
    let mut ids = Vec::new();
    for (name, text) in SAMPLES {
        let (id, _) = add_document(app, org.id, name, text, true).await?;
        ids.push(id);
    }
    let provider = app.provider.name().to_string();
    eprintln!(
        "agentd demo: org {} ({}), {} documents, provider {}{}",
        org.name,
        org.id,
        ids.len(),
        provider,
        if provider == "offline" {
            " (deterministic heuristic model, not an LLM; set OPENAI_API_KEY to use one)"
        } else {
            ""
        }
    );
    let mut demo_app = app.clone();
    let mut config = (*app.config).clone();
    config.http.addr = String::new();
    demo_app.config = std::sync::Arc::new(config);
    let stop = CancellationToken::new();
    let worker = demo_app
        .start_worker(
            WorkerArgs {
                kinds: vec!["auto_create".into()],
                concurrency: None,
                cron: false,
            },
            stop.clone(),
        )
        .await
        .map_err(bad)?;
    let started = Instant::now();
    let mut last_line = String::new();
    loop {
        let statuses: Vec<String> = statuses(app, &ids).await?;
        let done = statuses
            .iter()
            .filter(|s| {
                matches!(
                    s.as_str(),
                    "proposed" | "failed" | "skipped" | "accepted" | "rejected"
                )
            })
            .count();
        let line = format!(
            "\r  progress: {done}/{} done ({} proposed, {} failed), {:.1}s",
            ids.len(),
            statuses.iter().filter(|s| *s == "proposed").count(),
            statuses.iter().filter(|s| *s == "failed").count(),
            started.elapsed().as_secs_f64()
        );
        if line != last_line {
            eprint!("{line}");
            let _ = std::io::stderr().flush();
            last_line = line;
        }
        if done == ids.len() {
            break;
        }
        if started.elapsed() > Duration::from_secs(cmd.timeout_secs) {
            stop.cancel();
            worker.join().await;
            return Err(anyhow::anyhow!(
                "demo: documents still not done after {}s; see `agentd status`",
                cmd.timeout_secs
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!();
    stop.cancel();
    worker.join().await;
    let mut reports = Vec::new();
    for id in &ids {
        if let Some(r) = document_report(app, *id).await? {
            reports.push(r);
        }
    }
    if cmd.json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"org_id": org.id, "provider": provider, "documents": reports})
            )?
        );
        return Ok(());
    }
    println!(
        "\nagentd demo report — provider: {provider}, {:.1}s\n",
        started.elapsed().as_secs_f64()
    );
    for r in &reports {
        print_report(r);
        println!();
    }
    let first_run = reports
        .iter()
        .find_map(|r| r["run"]["id"].as_str())
        .unwrap_or("RUN_ID");
    println!("Where to look next:");
    println!("  agentd runs show {first_run}        # the transcript and audit trail of a run");
    println!(
        "  agentd documents show {}   # one document's proposal",
        ids[0]
    );
    println!(
        "  agentd documents accept {}  # accept it (artifacts become active)",
        ids[0]
    );
    println!("  agentd status                         # queue, runs, approvals at a glance");
    Ok(())
}

async fn statuses(app: &App, ids: &[Uuid]) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for id in ids {
        if let Some(s) = auto_create::state(&app.pool, None, *id).await? {
            out.push(s.auto_create_status);
        }
    }
    Ok(out)
}
