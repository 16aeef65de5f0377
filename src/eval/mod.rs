//! `agentd eval`: auto-create over a labelled set of documents, scored. Each sample goes into a
//! fresh org of the configured database as a document with its auto-create job, the real queue
//! and worker run the jobs with the chosen provider, and each document's proposal is scored
//! against its labels ([`score`]): field recall and value accuracy, beside the run's status,
//! rounds, tool calls, tokens and time. Figures, not assertions.

pub mod labels;
pub mod score;

use crate::app::{App, WorkerArgs};
use crate::store::runs::RunRow;
use crate::store::states::AutoCreateStatus;
use crate::store::{orgs, runs};
use chrono::{DateTime, Utc};
use labels::Sample;
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// What to run.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// The org the documents go into (a fresh name per eval unless given).
    pub org_name: String,
    /// Worker concurrency for auto_create (None: the job file's).
    pub concurrency: Option<usize>,
    /// Give up waiting for documents after this long; unfinished ones are reported `timeout`.
    pub timeout: Duration,
    /// Guided mode was asked for (recorded in the report).
    pub guided: bool,
    /// Constrained calls were on (`llm.constrained_calls`; recorded in the report).
    pub constrained: bool,
}

/// One document's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct DocResult {
    pub sample: String,
    pub document_id: Uuid,
    /// The document's auto-create status: proposed, failed, skipped — or `timeout`, or
    /// `foreign` when a run of another provider (another worker on the database) did it.
    pub status: String,
    /// The last run's status and stop reason.
    pub run_status: Option<String>,
    pub stop_reason: Option<String>,
    /// Runs (attempts) made for the document.
    pub runs: usize,
    /// Summed over the document's runs.
    #[serde(flatten)]
    pub work: Work,
    pub error: Option<String>,
    /// The proposed schema's top-level properties.
    pub proposed_fields: Vec<String>,
    #[serde(flatten)]
    pub score: score::Score,
}

/// What documents cost: summed over runs, then over documents.
#[derive(Debug, Clone, Copy, Serialize, Default, PartialEq)]
pub struct Work {
    pub rounds: i64,
    pub tool_calls: i64,
    pub tokens: i64,
    /// Active run time.
    pub seconds: f64,
}

impl Work {
    /// A run's work; a run still going counts until `now`.
    pub fn of_run(r: &RunRow, now: DateTime<Utc>) -> Self {
        let end = r.finished_at.unwrap_or(now);
        Work {
            rounds: i64::from(r.counters.rounds),
            tool_calls: i64::from(r.counters.tool_calls),
            tokens: r.counters.tokens(),
            seconds: (end - r.started_at).num_milliseconds() as f64 / 1000.0,
        }
    }
}

impl std::ops::AddAssign for Work {
    fn add_assign(&mut self, o: Work) {
        self.rounds += o.rounds;
        self.tool_calls += o.tool_calls;
        self.tokens += o.tokens;
        self.seconds += o.seconds;
    }
}

/// Totals over all documents.
#[derive(Debug, Clone, Serialize, Default, PartialEq)]
pub struct Totals {
    pub documents: usize,
    pub proposed: usize,
    pub failed: usize,
    pub other: usize,
    #[serde(flatten)]
    pub work: Work,
    pub fields_expected: usize,
    pub fields_found: usize,
    pub values_correct: usize,
    /// Over all expected fields of all documents (micro average).
    pub field_recall: f64,
    pub value_accuracy: f64,
    /// Tokens per proposed document (0 when none was proposed).
    pub tokens_per_proposed: f64,
}

/// The whole report (`--json` prints it).
#[derive(Debug, Clone, Serialize)]
pub struct EvalReport {
    pub provider: String,
    pub model: String,
    pub guided: bool,
    pub constrained: bool,
    pub org_id: Uuid,
    pub wall_seconds: f64,
    pub documents: Vec<DocResult>,
    pub totals: Totals,
}

/// Sums the documents' figures.
pub fn totals(docs: &[DocResult]) -> Totals {
    let mut t = Totals {
        documents: docs.len(),
        ..Totals::default()
    };
    for d in docs {
        match d.status.as_str() {
            "proposed" => t.proposed += 1,
            "failed" => t.failed += 1,
            _ => t.other += 1,
        }
        t.work += d.work;
        t.fields_expected += d.score.fields_expected;
        t.fields_found += d.score.fields_found;
        t.values_correct += d.score.values_correct;
    }
    let ratio = |k: usize| {
        if t.fields_expected == 0 {
            0.0
        } else {
            k as f64 / t.fields_expected as f64
        }
    };
    t.field_recall = ratio(t.fields_found);
    t.value_accuracy = ratio(t.values_correct);
    t.tokens_per_proposed = if t.proposed == 0 {
        0.0
    } else {
        t.work.tokens as f64 / t.proposed as f64
    };
    t
}

/// Scores a document report (as `agentd documents show --json` prints it) against a sample.
pub fn score_report(sample: &Sample, report: &Value) -> (Vec<String>, score::Score) {
    let proposed: Vec<String> = report["fields"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let extracted = &report["extraction"]["result"];
    let s = score::score(&sample.fields, &proposed, extracted);
    (proposed, s)
}

/// The auto-create status of a document report, when it is one a run ends in.
fn done(report: &Value) -> Option<AutoCreateStatus> {
    let status = report["auto_create_status"].as_str()?.parse().ok()?;
    AutoCreateStatus::DONE.contains(&status).then_some(status)
}

/// Runs the eval: inserts the samples with their auto-create jobs into a new org, runs an
/// auto_create worker on `app` until every document is done (or the timeout), and scores them.
/// `progress` is called with (done, total) whenever that changes.
pub async fn run(
    app: &App,
    samples: &[Sample],
    opts: &EvalOptions,
    mut progress: impl FnMut(usize, usize),
) -> anyhow::Result<EvalReport> {
    let org = orgs::ensure(&app.pool, &opts.org_name).await?;
    let mut ids = Vec::new();
    for s in samples {
        let name = s
            .document_path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or(&s.name)
            .to_string();
        let (id, _) = crate::documents::add_document(app, org.id, &name, &s.text, true).await?;
        ids.push(id);
    }
    let stop = CancellationToken::new();
    let started = Instant::now();
    let args = WorkerArgs::serving(&["auto_create"], opts.concurrency);
    let worker = app
        .start_worker(args, stop.clone())
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    let mut last = usize::MAX;
    let mut reports: Vec<Value>;
    loop {
        reports = Vec::new();
        for id in &ids {
            // A slow or busy database (a local model can starve the machine) is not the end of
            // an hour-long evaluation: a failed read counts as "not done yet".
            let r = match crate::documents::document_report(app, *id).await {
                Ok(r) => r.unwrap_or(Value::Null),
                Err(e) => {
                    tracing::warn!(error = %e, "eval: reading a document's state failed; retrying");
                    Value::Null
                }
            };
            reports.push(r);
        }
        let done = reports.iter().filter(|r| done(r).is_some()).count();
        if done != last {
            progress(done, ids.len());
            last = done;
        }
        if done == ids.len() || started.elapsed() > opts.timeout {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.cancel();
    worker.join().await;
    let wall_seconds = started.elapsed().as_secs_f64();
    let all_runs = runs::list_runs(&app.pool, Some(org.id), Some("auto_create"), 10_000).await?;
    let mut by_doc: HashMap<String, Vec<&runs::RunRow>> = HashMap::new();
    for r in &all_runs {
        by_doc.entry(r.subject.clone()).or_default().push(r);
    }
    let mut documents = Vec::new();
    for ((sample, id), report) in samples.iter().zip(&ids).zip(&reports) {
        let mut doc_runs = by_doc.remove(&id.to_string()).unwrap_or_default();
        doc_runs.sort_by_key(|r| r.started_at);
        let last_run = doc_runs.last();
        // Another worker on this database (another provider) may have taken the job: its
        // figures are not this eval's.
        let foreign: Vec<&str> = doc_runs
            .iter()
            .filter(|r| r.provider != app.provider.name())
            .map(|r| r.provider.as_str())
            .collect();
        let status = match done(report) {
            _ if !foreign.is_empty() => "foreign".to_string(),
            Some(status) => status.to_string(),
            None => "timeout".to_string(),
        };
        let error = if foreign.is_empty() {
            report["error"].as_str().map(str::to_string)
        } else {
            Some(format!(
                "run by provider {} instead of {}: another worker on this database took the \
                 job; run the eval on a database no worker serves (DATABASE_URL=…)",
                foreign.join(", "),
                app.provider.name()
            ))
        };
        let (proposed_fields, score) = score_report(sample, report);
        documents.push(DocResult {
            sample: sample.name.clone(),
            document_id: *id,
            status,
            run_status: last_run.map(|r| r.status.to_string()),
            stop_reason: last_run.and_then(|r| r.stop_reason.clone()),
            runs: doc_runs.len(),
            work: doc_runs.iter().fold(Work::default(), |mut w, r| {
                w += Work::of_run(r, app.clock.now());
                w
            }),
            error,
            proposed_fields,
            score,
        });
    }
    let totals = totals(&documents);
    Ok(EvalReport {
        provider: app.provider.name().to_string(),
        model: app.model_for(app.spec("auto_create")),
        guided: opts.guided,
        constrained: opts.constrained,
        org_id: org.id,
        wall_seconds,
        documents,
        totals,
    })
}

/// The report as a table a person reads.
pub fn render_table(r: &EvalReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "agentd eval — provider {}, model {}, {} mode{}, {} documents, {:.1}s wall",
        r.provider,
        r.model,
        if r.guided { "guided" } else { "free" },
        if r.constrained {
            ", constrained calls"
        } else {
            ""
        },
        r.documents.len(),
        r.wall_seconds
    );
    let _ = writeln!(
        out,
        "{:<24} {:<9} {:<18} {:>4} {:>6} {:>5} {:>7} {:>7} {:>7} {:>7}",
        "document",
        "status",
        "stop",
        "runs",
        "rounds",
        "calls",
        "tokens",
        "secs",
        "recall",
        "values"
    );
    for d in &r.documents {
        let _ = writeln!(
            out,
            "{:<24} {:<9} {:<18} {:>4} {:>6} {:>5} {:>7} {:>7.1} {:>3}/{:<3} {:>3}/{:<3}",
            d.sample,
            d.status,
            d.stop_reason.as_deref().unwrap_or("-"),
            d.runs,
            d.work.rounds,
            d.work.tool_calls,
            d.work.tokens,
            d.work.seconds,
            d.score.fields_found,
            d.score.fields_expected,
            d.score.values_correct,
            d.score.fields_expected
        );
    }
    let t = &r.totals;
    let _ = writeln!(
        out,
        "{:<24} {:<9} {:<18} {:>4} {:>6} {:>5} {:>7} {:>7.1} {:>3}/{:<3} {:>3}/{:<3}",
        "TOTAL",
        format!("{}/{}", t.proposed, t.documents),
        "",
        "",
        t.work.rounds,
        t.work.tool_calls,
        t.work.tokens,
        t.work.seconds,
        t.fields_found,
        t.fields_expected,
        t.values_correct,
        t.fields_expected
    );
    let _ = writeln!(
        out,
        "proposed {}/{} ({} failed, {} other); field recall {:.1}%, value accuracy {:.1}%; {:.0} tokens per proposed document",
        t.proposed,
        t.documents,
        t.failed,
        t.other,
        100.0 * t.field_recall,
        100.0 * t.value_accuracy,
        t.tokens_per_proposed
    );
    for d in r.documents.iter().filter(|d| d.error.is_some()) {
        let e: String = d.error.as_deref().unwrap_or("").chars().take(160).collect();
        let _ = writeln!(out, "  {}: {e}", d.sample);
    }
    out
}
