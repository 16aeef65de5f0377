//! `agentd runs list|show`: runs, their transcript and their audit trail; `runs fork|adopt`:
//! a new run from a finished one's first N steps, and an auto_create fork's proposal made its
//! document's (`jobs::fork`); `runs export|replay`: a run as a transcript file, and a run (or
//! such a file) replayed against this build with its recorded model answers (`jobs::replay`).

use super::bad;
use super::output::{print_json, print_list};
use crate::app::App;
use crate::jobs::{fork, replay};
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
    /// Fork a finished run from step N: a new run of its kind and subject starts with its
    /// first N checkpoints (copied: no model call, no side effect again) and goes on live
    /// (a run_fork job, run by a worker) with another model or instructions. An auto_create
    /// fork leaves its document's proposal until `runs adopt`.
    Fork {
        run: Uuid,
        /// How many of the run's checkpoints the fork starts with (1 to its number of steps).
        #[arg(long)]
        from_step: i64,
        /// The model of the live part (default: the run's).
        #[arg(long)]
        model: Option<String>,
        /// What to do differently (1–2000 characters), fenced in the fork's system prompt.
        #[arg(long)]
        instructions: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Make a finished auto_create fork's proposal its document's (`proposed`, to accept or
    /// reject like any).
    Adopt {
        run: Uuid,
        #[arg(long)]
        json: bool,
    },
    /// Write a finished run as a transcript file `runs replay --file` reads: its checkpoints,
    /// audit rows, job, tool schema hashes and the rows of its org it found (documents' text
    /// included: keep the file as the data it holds).
    Export {
        run: Uuid,
        /// The file to write (default: stdout).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
    },
    /// Re-run a stored run against this build with its recorded model answers, in a scratch
    /// database made and dropped for it (the stored data is only read), and report the first
    /// step where a decision differs (exit 1) or that none does (exit 0).
    Replay {
        /// The run (of this database).
        run: Option<Uuid>,
        /// A transcript file (`runs export`, tests/fixtures/replay/) instead of a run.
        #[arg(long, conflicts_with = "run")]
        file: Option<std::path::PathBuf>,
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
        RunsCmd::Fork {
            run,
            from_step,
            model,
            instructions,
            json: as_json,
        } => {
            let org = runs::get_run(&app.pool, run)
                .await?
                .ok_or_else(|| bad(format!("no run with id {run}")))?
                .org_id;
            let ask = fork::ForkAsk {
                from_step,
                model: model.as_deref(),
                instructions: instructions.as_deref(),
            };
            let forked = fork::request(app, org, run, &ask, "cli")
                .await
                .map_err(fork_error)?;
            if as_json {
                return print_json(&forked);
            }
            println!(
                "fork {} of run {} from step {}: model {}, job {} (a worker runs it)",
                forked.run_id, run, forked.parent_step, forked.model, forked.job_id
            );
        }
        RunsCmd::Adopt { run, json: as_json } => {
            let org = runs::get_run(&app.pool, run)
                .await?
                .ok_or_else(|| bad(format!("no run with id {run}")))?
                .org_id;
            let adopted = fork::adopt(app, org, run, "cli")
                .await
                .map_err(fork_error)?;
            if as_json {
                return print_json(&adopted);
            }
            println!(
                "document {} now proposes fork {}'s proposal (accept or reject it)",
                adopted.document_id, run
            );
        }
        RunsCmd::Export { run, out } => {
            let rec = replay::export(app, run).await.map_err(replay_error)?;
            let text = serde_json::to_string_pretty(&rec)?;
            match out {
                Some(path) => std::fs::write(&path, format!("{text}\n"))
                    .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?,
                None => println!("{text}"),
            }
        }
        RunsCmd::Replay {
            run,
            file,
            json: as_json,
        } => {
            let rec = match (run, file) {
                (Some(run), None) => replay::export(app, run).await.map_err(replay_error)?,
                (None, Some(path)) => read_transcript(&path)?,
                _ => return Err(bad("give a run id or --file FILE")),
            };
            let report = replay::replay_in_scratch(app, &rec)
                .await
                .map_err(replay_error)?;
            if as_json {
                print_json(&report)?;
            } else {
                println!("{}", report.text());
            }
            if !report.same() {
                return Err(anyhow::anyhow!(
                    "the replay of run {} differs from its recording",
                    rec.run_id
                ));
            }
        }
    }
    Ok(())
}

/// Most bytes of a transcript file `runs replay --file` reads.
const MAX_TRANSCRIPT_BYTES: u64 = 64 * 1024 * 1024;

/// A transcript file (`runs export`), bounded, or why it cannot be read (exit 2).
fn read_transcript(path: &std::path::Path) -> anyhow::Result<replay::Recorded> {
    let size = std::fs::metadata(path)
        .map_err(|e| bad(format!("--file {}: {e}", path.display())))?
        .len();
    if size > MAX_TRANSCRIPT_BYTES {
        return Err(bad(format!(
            "--file {}: {size} bytes, at most {MAX_TRANSCRIPT_BYTES}",
            path.display()
        )));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("--file {}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| {
        bad(format!(
            "--file {}: not a transcript `agentd runs export` wrote: {e}",
            path.display()
        ))
    })
}

/// A refused fork or adopt: bad input (exit 2), naming the option at fault.
fn fork_error(e: fork::ForkError) -> anyhow::Error {
    use fork::ForkError as E;
    match e {
        E::Step { .. } => bad(format!("--from-step: {e}")),
        E::Model(m) => bad(format!("--model: {m}")),
        E::Instructions(m) => bad(format!("--instructions: {m}")),
        E::Db(e) => e.into(),
        E::Queue(e) => e.into(),
        other => bad(other.to_string()),
    }
}

/// A replay that could not be made: the run or file is at fault (exit 2), or the database.
fn replay_error(e: replay::ReplayError) -> anyhow::Error {
    use replay::ReplayError as E;
    match e {
        E::Db(e) => e.into(),
        E::Queue(e) => e.into(),
        E::Scratch(_) => anyhow::anyhow!(e),
        other => bad(other.to_string()),
    }
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
