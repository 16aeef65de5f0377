//! `agentd runs list|show`: runs, their transcript and their audit trail.

use super::bad;
use super::output::{print_json, print_list};
use crate::app::App;
use crate::store::runs;
use clap::Subcommand;
use serde_json::json;
use uuid::Uuid;

/// Run commands.
#[derive(Subcommand, Debug)]
pub enum RunsCmd {
    /// Recent runs, newest first: the filters of `GET /v1/runs`, each optional.
    List {
        /// Only this org's runs (id or name; default: every org's).
        #[arg(long)]
        org: Option<String>,
        #[arg(long)]
        kind: Option<String>,
        /// running, succeeded, capped, failed or cancelled.
        #[arg(long)]
        status: Option<String>,
        /// Only runs of this subject: a document id, or the night of a nightly run.
        #[arg(long)]
        subject: Option<String>,
        /// Only runs with this model.
        #[arg(long)]
        model: Option<String>,
        /// At most this many (1–1000).
        #[arg(long, default_value_t = 20)]
        limit: i64,
        #[arg(long)]
        json: bool,
    },
    /// One run as a readable transcript, then its audit trail.
    Show {
        run: Uuid,
        #[arg(long)]
        json: bool,
    },
}

/// Runs a runs command.
pub async fn run(app: &App, cmd: RunsCmd) -> anyhow::Result<()> {
    match cmd {
        RunsCmd::List {
            org,
            kind,
            status,
            subject,
            model,
            limit,
            json: as_json,
        } => {
            if let Some(k) = &kind
                && !crate::kinds::NAMES.contains(&k.as_str())
            {
                let known = crate::kinds::NAMES.join(", ");
                return Err(bad(format!("--kind must be one of {known} (got {k:?})")));
            }
            let status = status
                .map(|s| s.parse::<runs::RunStatus>())
                .transpose()
                .map_err(|e| bad(format!("--status {e}")))?;
            for (option, v) in [("--subject", &subject), ("--model", &model)] {
                if v.as_ref().is_some_and(|v| v.is_empty() || v.contains('\0')) {
                    return Err(bad(format!("{option} must be some text without NUL")));
                }
            }
            if !(1..=1000).contains(&limit) {
                return Err(bad(format!(
                    "--limit must be between 1 and 1000 (got {limit})"
                )));
            }
            let filter = runs::RunFilter {
                org_id: super::output::org_id(app, org.as_deref()).await?,
                kind,
                status,
                subject,
                model,
            };
            let rows = runs::find_runs(&app.pool, &filter, limit).await?;
            print_list(&rows, as_json, None, None, |r| {
                format!(
                    "{}  {:<20} {:<9} {:<15} rounds {:>2} calls {:>2} tokens {:>6} {:>9}  [{}] {}",
                    r.id,
                    r.kind,
                    r.status,
                    r.stop_reason.as_deref().unwrap_or_default(),
                    r.counters.rounds,
                    r.counters.tool_calls,
                    r.counters.tokens(),
                    r.counters.cost_text(),
                    r.provider,
                    r.started_at.format("%Y-%m-%d %H:%M:%S")
                )
            })?;
        }
        RunsCmd::Show { run, json: as_json } => {
            let r = runs::get_run(&app.pool, run)
                .await?
                .ok_or_else(|| bad(format!("no run with id {run}")))?;
            let steps = runs::steps(&app.pool, run).await?;
            let audit = runs::audit_for_run(&app.pool, run).await?;
            if as_json {
                return print_json(&json!({"run": r, "steps": steps, "audit": audit}));
            }
            println!(
                "run {} — {} for {} (org {})",
                r.id, r.kind, r.subject, r.org_id
            );
            println!(
                "  provider {} model {}, {} ({}), {} round(s), {} tool call(s), {}+{} tokens",
                r.provider,
                r.model,
                r.status,
                r.stop_reason.as_deref().unwrap_or("-"),
                r.counters.rounds,
                r.counters.tool_calls,
                r.counters.input_tokens,
                r.counters.output_tokens
            );
            println!("  {}", cost_line(&r.counters));
            if let Some(e) = &r.error {
                println!("  error: {e}");
            }
            println!("\ntranscript:");
            for s in &steps {
                match s.step_kind() {
                    Some(crate::store::runs::StepKind::LlmResponse) => {
                        for b in s.payload["response"]["message"]["content"]
                            .as_array()
                            .into_iter()
                            .flatten()
                        {
                            match b["type"].as_str() {
                                Some("text") => println!(
                                    "  [{}] assistant: {}",
                                    s.seq,
                                    short(b["text"].as_str().unwrap_or(""), 400)
                                ),
                                Some("tool_use") => println!(
                                    "  [{}] assistant calls {}({}) id={}",
                                    s.seq,
                                    b["name"].as_str().unwrap_or(""),
                                    short(b["arguments"].as_str().unwrap_or(""), 300),
                                    b["id"].as_str().unwrap_or("")
                                ),
                                _ => {}
                            }
                        }
                    }
                    _ => println!(
                        "  [{}] {} {} → {}: {}",
                        s.seq,
                        s.payload["tool"].as_str().unwrap_or(""),
                        s.call_id.as_deref().unwrap_or(""),
                        s.payload["decision"].as_str().unwrap_or(""),
                        short(s.payload["content"].as_str().unwrap_or(""), 300)
                    ),
                }
            }
            println!("\naudit:");
            for a in &audit {
                println!("{}", super::output::audit_line(a));
            }
        }
    }
    Ok(())
}

/// `cost $0.004215 (1200 of the input from the prompt cache)`, or why the cost is not known.
fn cost_line(c: &runs::Counters) -> String {
    let cache = match (c.cache_read_tokens, c.cache_write_tokens) {
        (0, 0) => String::new(),
        (r, 0) => format!(" ({r} of the input read from the prompt cache)"),
        (r, w) => format!(" ({r} of the input read from the prompt cache, {w} written to it)"),
    };
    match c.cost() {
        Ok(cost) => format!("cost {cost} at llm.prices{cache}"),
        Err(why) => format!("cost n/a: {why}{cache}"),
    }
}

fn short(s: &str, max: usize) -> String {
    let one_line: String = s.replace('\n', " ");
    if one_line.chars().count() <= max {
        one_line
    } else {
        format!("{}…", one_line.chars().take(max).collect::<String>())
    }
}
