//! `agentd eval`: auto-create over a labelled set of documents, scored. Each sample goes into a
//! fresh org of the configured database as a document with its auto-create job, a worker that
//! claims only that org's jobs runs them with the chosen provider, and each document's proposal
//! is scored against its labels ([`score`]): field precision, recall and F1, value accuracy, and
//! whether the extraction is valid for the proposed schema, beside the run's status, model
//! calls, tool calls, tokens and time. Totals per split, language and kind ([`report`]); a
//! stored run can serve as a baseline that a new run must not fall below ([`baseline`]).

pub mod baseline;
pub mod html;
pub mod labels;
pub mod nightly;
pub mod report;
pub mod reuse;
pub mod score;

use crate::app::{App, WorkerArgs};
use crate::kinds::{self, JobKind};
use crate::store::runs::RunRow;
use crate::store::states::AutoCreateStatus;
use crate::store::{orgs, runs};
use chrono::{DateTime, Utc};
use labels::{Sample, Split};
pub use report::{EvalReport, Totals, render_table, totals};
use serde::{Deserialize, Serialize};
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
    /// Give up waiting when no document has finished for this long (and, with `nightly`, on
    /// the nightly job after this long); unfinished documents are reported `timeout`. Counted
    /// from the last document done, not from the start: a whole test part with a slow local
    /// model takes longer than any fixed limit fitting a stuck run.
    pub timeout: Duration,
    /// Guided mode was asked for (recorded in the report).
    pub guided: bool,
    /// Constrained calls were on (`llm.constrained_calls`; recorded in the report).
    pub constrained: bool,
    /// Run the org's nightly review after its auto-creates ([`nightly`]).
    pub nightly: bool,
}

/// One document's outcome.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DocResult {
    pub sample: String,
    pub split: Split,
    pub language: String,
    pub kind: String,
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
    /// Whether the extraction is valid JSON for the proposed schema; `None` when there is no
    /// schema or no extraction to check.
    pub schema_valid: Option<bool>,
    /// Why it is not (the first errors, or why it could not be checked).
    pub schema_error: Option<String>,
    #[serde(flatten)]
    pub score: score::Score,
}

/// What documents cost: summed over runs, then over documents.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Work {
    /// Model answers: one per round, and each of run_extraction's own.
    pub model_calls: i64,
    pub tool_calls: i64,
    pub tokens: i64,
    /// What the runs' model calls cost at `llm.prices`, in nano-dollars (shown and stored as
    /// `cost_usd`, dollars); `None`: not known (a model without a price), for this and every
    /// sum it is part of. The offline heuristic calls no provider and costs 0.
    #[serde(rename = "cost_usd", with = "usd", default)]
    pub cost_nano_usd: Option<i64>,
    /// Active run time.
    pub seconds: f64,
}

impl Default for Work {
    fn default() -> Self {
        Work {
            model_calls: 0,
            tool_calls: 0,
            tokens: 0,
            cost_nano_usd: Some(0),
            seconds: 0.0,
        }
    }
}

/// Nano-dollars as dollars (rounded to the micro-dollar) in the report's JSON.
mod usd {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(n) => s.serialize_f64(crate::config::NanoUsd(*n).dollars()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.map(|x| (x * 1e9).round() as i64))
    }
}

impl Work {
    /// A run's work, with `tool_answers` model answers its tools asked for (run_extraction's); a
    /// run still going counts until `now`.
    pub fn of_run(r: &RunRow, tool_answers: i64, now: DateTime<Utc>) -> Self {
        let end = r.finished_at.unwrap_or(now);
        Work {
            model_calls: i64::from(r.counters.rounds) + tool_answers,
            tool_calls: i64::from(r.counters.tool_calls),
            tokens: r.counters.tokens(),
            cost_nano_usd: r.counters.cost().ok().map(|c| c.0),
            seconds: (end - r.started_at).num_milliseconds() as f64 / 1000.0,
        }
    }

    /// The cost as a person reads it: `$0.004215`, or `n/a`.
    pub fn cost_text(&self) -> String {
        self.cost_nano_usd
            .map_or_else(|| "n/a".into(), crate::config::format_usd)
    }
}

impl std::ops::AddAssign for Work {
    fn add_assign(&mut self, o: Work) {
        self.model_calls += o.model_calls;
        self.tool_calls += o.tool_calls;
        self.tokens += o.tokens;
        self.cost_nano_usd = self.cost_nano_usd.zip(o.cost_nano_usd).map(|(a, b)| a + b);
        self.seconds += o.seconds;
    }
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
    let descriptions: Vec<String> = report["fields"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|f| f["name"].is_string())
                .map(|f| f["description"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default();
    let extracted = &report["extraction"]["result"];
    let s = score::score_described(
        &sample.fields,
        &sample.acceptable,
        &proposed,
        &descriptions,
        extracted,
    );
    (proposed, s)
}

/// The auto-create status of a document report, when it is one a run ends in.
fn done(report: &Value) -> Option<AutoCreateStatus> {
    let status = report["auto_create_status"].as_str()?.parse().ok()?;
    AutoCreateStatus::DONE.contains(&status).then_some(status)
}

/// Runs the eval: inserts the samples with their auto-create jobs into a new org, runs an
/// auto_create worker that claims only that org's jobs on `app` until every document is done
/// (or the timeout), and scores them. The caller makes sure `opts.org_name` is new: the worker
/// runs whatever auto_create job of that org waits.
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
    // Only this org's jobs: another org's waiting auto_create job is not the eval's to run.
    let args = WorkerArgs::serving(&[kinds::AutoCreate::NAME], opts.concurrency).for_org(org.id);
    let worker = app
        .start_worker(args, stop.clone())
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    let mut last = usize::MAX;
    let mut last_done_at = Instant::now();
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
            last_done_at = Instant::now();
        }
        if done == ids.len() || last_done_at.elapsed() > opts.timeout {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.cancel();
    worker.join().await;
    let wall_seconds = started.elapsed().as_secs_f64();
    let all_runs = runs::list_runs(
        &app.pool,
        Some(org.id),
        Some(kinds::AutoCreate::NAME),
        10_000,
    )
    .await?;
    let run_ids: Vec<uuid::Uuid> = all_runs.iter().map(|r| r.id).collect();
    let tool_answers = runs::tool_model_answers(&app.pool, &run_ids).await?;
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
        let (schema_valid, schema_error) = match schema_check(app, org.id, report).await {
            Ok(v) => v,
            Err(e) => (None, Some(format!("the schema could not be read: {e}"))),
        };
        documents.push(DocResult {
            sample: sample.name.clone(),
            split: sample.split,
            language: sample.language.clone(),
            kind: sample.kind.clone(),
            document_id: *id,
            status,
            run_status: last_run.map(|r| r.status.to_string()),
            stop_reason: last_run.and_then(|r| r.stop_reason.clone()),
            runs: doc_runs.len(),
            work: doc_runs.iter().fold(Work::default(), |mut w, r| {
                let extra = tool_answers.get(&r.id).copied().unwrap_or(0);
                w += Work::of_run(r, extra, app.clock.now());
                w
            }),
            error,
            proposed_fields,
            schema_valid,
            schema_error,
            score,
        });
    }
    let mut report = EvalReport::new(
        app.provider.name().to_string(),
        app.model_for(app.spec(kinds::AutoCreate::NAME)),
        opts,
        org.id,
        wall_seconds,
        documents,
    );
    if opts.nightly {
        report.nightly = Some(nightly::run(app, org.id, opts.timeout).await?);
    }
    Ok(report)
}

/// Whether the document's extraction is valid for its proposed schema: `(None, why)` when
/// there is no schema or no extraction to check, `(Some(false), errors)` when it is not.
async fn schema_check(
    app: &App,
    org: Uuid,
    report: &Value,
) -> anyhow::Result<(Option<bool>, Option<String>)> {
    let Some(revid) = report["schema"]["revid"].as_str() else {
        return Ok((None, Some("no schema proposed".into())));
    };
    let result = &report["extraction"]["result"];
    if result.is_null() {
        return Ok((None, Some("no extraction".into())));
    }
    let parsed = revid
        .split_once(':')
        .and_then(|(id, v)| Some((Uuid::parse_str(id).ok()?, v.parse::<i32>().ok()?)));
    let Some((schema_id, version)) = parsed else {
        anyhow::bail!("the report's schema revid {revid:?} is not <uuid>:<version>");
    };
    let mut conn = app.pool.acquire().await?;
    let Some(row) = crate::store::schemas::get(&mut conn, org, schema_id, version).await? else {
        anyhow::bail!("schema {revid} is gone");
    };
    let schema = &row.response_format["json_schema"]["schema"];
    Ok(
        match crate::tools::schema_check::validate_instance(schema, result) {
            Ok(()) => (Some(true), None),
            Err(errors) => (
                Some(false),
                Some(errors.into_iter().take(3).collect::<Vec<_>>().join("; ")),
            ),
        },
    )
}
