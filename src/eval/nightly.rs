//! The nightly review beside auto_create (issue 28): after the eval's documents are proposed, the
//! eval's org holds untagged documents and proposals waiting. A person makes the org's first tag
//! (as `agentd demo` does, so untagged documents become a signal), and the org's
//! `proactive_suggestion` job runs with the same provider on a worker that claims only that
//! org's jobs. Reported: the job's end and attempts, its run's status and work (model calls,
//! tokens, seconds), the signals the org's overview showed, the suggestions written, and how many
//! of them are **grounded** — about a document the overview listed under a signal, or about the
//! org as a whole with a kind whose signal it showed.

use super::Work;
use crate::app::{App, WorkerArgs};
use crate::kinds::{self, JobKind};
use crate::queue::{self, JobState};
use crate::store::api_reads::{self, SuggestionItem};
use crate::store::runs;
use crate::store::suggestions::{self, Overview};
use crate::tools::suggestions::{SuggestionKind, WAITING_AFTER_DAYS};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// The tag a person makes before the night (the org's first).
pub const TAG: &str = "reviewed";

/// What the org's overview showed when the night began.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
pub struct Signals {
    pub waiting_proposals: usize,
    pub failed_auto_creates: usize,
    pub untagged_documents: i64,
    pub outdated_extractions: usize,
}

/// The nightly review's outcome.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NightlyResult {
    pub job_id: i64,
    /// The job's state at the end (`succeeded`, `dead`, …), or `timeout`.
    pub state: String,
    /// Attempts the job took; every one after the first was lost to an error.
    pub attempts: i32,
    /// The error of the last failed attempt, if any.
    pub last_error: Option<String>,
    /// The run's status and stop reason (no run: the worker skipped the org, no model called).
    pub run_status: Option<String>,
    pub stop_reason: Option<String>,
    #[serde(flatten)]
    pub work: Work,
    pub signals: Signals,
    /// Suggestions the run wrote, by kind.
    pub suggestions: usize,
    pub by_kind: BTreeMap<String, usize>,
    /// Of them, about what the overview showed (see the module).
    pub grounded: usize,
    /// The suggestions' titles, in the order they were written.
    pub titles: Vec<String>,
}

/// What an overview showed: the kinds of suggestion its signals ask for, and the documents
/// they list.
pub struct Signalled {
    kinds: HashSet<&'static str>,
    docs: HashSet<Uuid>,
}

/// The signals of `o`.
pub fn signalled(o: &Overview) -> Signalled {
    let mut kinds = HashSet::new();
    let mut docs = HashSet::new();
    if !o.waiting_proposals.is_empty() {
        kinds.insert(SuggestionKind::ReviewProposal.as_str());
        docs.extend(o.waiting_proposals.iter().map(|d| d.id));
    }
    if !o.failed_auto_creates.is_empty() {
        kinds.insert(SuggestionKind::RetryFailed.as_str());
        docs.extend(o.failed_auto_creates.iter().map(|d| d.id));
    }
    if o.untagged_total > 0 {
        kinds.insert(SuggestionKind::TagDocuments.as_str());
        docs.extend(o.untagged_documents.iter().map(|d| d.id));
    }
    if !o.outdated_extractions.is_empty() {
        kinds.insert(SuggestionKind::RerunExtraction.as_str());
        docs.extend(o.outdated_extractions.iter().map(|d| d.document_id));
    }
    Signalled { kinds, docs }
}

impl Signalled {
    /// Whether `s` is about what the overview showed: a document listed under a signal, or the
    /// org as a whole with a kind one of its signals asks for.
    pub fn grounds(&self, s: &suggestions::SuggestionFields) -> bool {
        let doc = s
            .document_id
            .or_else(|| Uuid::parse_str(s.subject.trim()).ok());
        match doc {
            Some(id) => self.docs.contains(&id),
            None => self.kinds.contains(s.kind.as_str()),
        }
    }
}

/// Runs the nightly review of `org` (the eval's, its auto-creates done) with `app`'s provider:
/// makes the org's first tag, enqueues the org's job for tonight, runs a worker claiming only
/// that org's nightly jobs until the job ends or `timeout`, and reports.
pub async fn run(app: &App, org: Uuid, timeout: Duration) -> anyhow::Result<NightlyResult> {
    let now = app.clock.now();
    let mut conn = app.pool.acquire().await?;
    crate::store::tags::create(&mut conn, org, TAG, "#4a90d9", None, now).await?;
    let night = crate::jobs::proactive_suggestion::night_of(&app.pool, org, now)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the eval's org {org} is gone"))?;
    // What the run's own `org_overview` will show (the same lists, the tool's cap).
    let overview =
        suggestions::overview(&mut conn, org, now, night, WAITING_AFTER_DAYS, 1_000).await?;
    drop(conn);
    let q = &app.spec(kinds::ProactiveSuggestion::NAME).queue;
    let job = crate::jobs::proactive_suggestion::nightly_job(q, org, night);
    let job_id = queue::enqueue(&app.pool, &job)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the nightly job of {night} for org {org} exists"))?;
    let stop = CancellationToken::new();
    let args = WorkerArgs::serving(&[kinds::ProactiveSuggestion::NAME], Some(1)).for_org(org);
    let worker = app
        .start_worker(args, stop.clone())
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    let started = Instant::now();
    let row = loop {
        let row = queue::store::get(&app.pool, job_id).await?;
        let finished = row.as_ref().is_none_or(|r| r.state.is_finished());
        if finished || started.elapsed() > timeout {
            break row;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    stop.cancel();
    worker.join().await;
    let state = match &row {
        Some(r) if r.state.is_finished() => r.state.to_string(),
        Some(_) => "timeout".to_string(),
        // Deleted on success (a kind with `delete_on_success`).
        None => JobState::Succeeded.to_string(),
    };
    let run = runs::run_for_job(&app.pool, job_id).await?;
    let work = match &run {
        Some(r) => {
            let answers = runs::tool_model_answers(&app.pool, &[r.id]).await?;
            let extra = answers.get(&r.id).copied().unwrap_or(0);
            Work::of_run(r, extra, app.clock.now())
        }
        None => Work::default(),
    };
    let written: Vec<SuggestionItem> =
        api_reads::page(&app.pool, org, None, None, None, 1_000).await?;
    let run_id = run.as_ref().map(|r| r.id);
    let mine: Vec<&SuggestionItem> = written
        .iter()
        .rev()
        .filter(|s| run_id.is_some() && s.row.run_id == run_id)
        .collect();
    let signals = signalled(&overview);
    let mut by_kind = BTreeMap::new();
    for s in &mine {
        *by_kind.entry(s.row.fields.kind.clone()).or_insert(0) += 1;
    }
    Ok(NightlyResult {
        job_id,
        state,
        attempts: row.as_ref().map_or(1, |r| r.attempt),
        last_error: row.as_ref().and_then(|r| r.last_error.clone()),
        run_status: run.as_ref().map(|r| r.status.to_string()),
        stop_reason: run.as_ref().and_then(|r| r.stop_reason.clone()),
        work,
        signals: Signals {
            waiting_proposals: overview.waiting_proposals.len(),
            failed_auto_creates: overview.failed_auto_creates.len(),
            untagged_documents: overview.untagged_total,
            outdated_extractions: overview.outdated_extractions.len(),
        },
        suggestions: mine.len(),
        by_kind,
        grounded: mine
            .iter()
            .filter(|s| signals.grounds(&s.row.fields))
            .count(),
        titles: mine.iter().map(|s| s.row.fields.title.clone()).collect(),
    })
}

/// The nightly section of the eval's table.
pub fn render(n: &NightlyResult) -> String {
    let s = &n.signals;
    let kinds: Vec<String> = n.by_kind.iter().map(|(k, c)| format!("{k} {c}")).collect();
    let mut out = format!(
        "\nnightly review (proactive_suggestion, job #{}): {} after {} attempt(s); run {} ({})\n\
         \x20 signals: {} proposal(s) waiting > {} days, {} failed auto-create(s), {} untagged \
         document(s), {} outdated extraction(s)\n\
         \x20 suggestions: {} written, {} grounded in the overview{}\n\
         \x20 work: {} model call(s), {} tool call(s), {} tokens, cost {}, {:.1} s\n",
        n.job_id,
        n.state,
        n.attempts,
        n.run_status.as_deref().unwrap_or("none: no model run"),
        n.stop_reason.as_deref().unwrap_or("-"),
        s.waiting_proposals,
        WAITING_AFTER_DAYS,
        s.failed_auto_creates,
        s.untagged_documents,
        s.outdated_extractions,
        n.suggestions,
        n.grounded,
        if kinds.is_empty() {
            String::new()
        } else {
            format!(" ({})", kinds.join(", "))
        },
        n.work.model_calls,
        n.work.tool_calls,
        n.work.tokens,
        n.work.cost_text(),
        n.work.seconds,
    );
    if let Some(e) = &n.last_error {
        let e: String = e.chars().take(160).collect();
        out.push_str(&format!("  last error: {e}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::signalled;
    use crate::store::suggestions::{DocumentRef, FailedDocument, Overview, SuggestionFields};
    use chrono::NaiveDate;
    use uuid::Uuid;

    fn suggestion(kind: &str, subject: &str, document_id: Option<Uuid>) -> SuggestionFields {
        SuggestionFields {
            kind: kind.into(),
            subject: subject.into(),
            night: NaiveDate::from_ymd_opt(2026, 11, 27).unwrap_or_default(),
            title: "t".into(),
            message: "m".into(),
            document_id,
            proposed_action: None,
        }
    }

    #[test]
    fn grounded_means_about_a_document_or_a_signal_the_overview_showed() {
        let (untagged, failed, other) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let o = Overview {
            documents_total: 3,
            documents_by_status: Default::default(),
            tags: 1,
            schemas: 0,
            prompts: 0,
            waiting_proposals: vec![],
            failed_auto_creates: vec![FailedDocument {
                id: failed,
                name: "b".into(),
                error: None,
            }],
            untagged_total: 1,
            untagged_documents: vec![DocumentRef {
                id: untagged,
                name: "a".into(),
            }],
            outdated_extractions: vec![],
            suggestions_this_night: 0,
        };
        let signals = signalled(&o);
        // A document listed under a signal, named by its id or by the subject.
        assert!(signals.grounds(&suggestion("tag_documents", "", Some(untagged))));
        assert!(signals.grounds(&suggestion("retry_failed", &failed.to_string(), None)));
        // A document the overview did not list, and an org-wide kind with no signal.
        assert!(!signals.grounds(&suggestion("tag_documents", "", Some(other))));
        assert!(!signals.grounds(&suggestion("review_proposal", "", None)));
        assert!(!signals.grounds(&suggestion("other", "", None)));
        // The org as a whole, with a kind one of its signals asks for.
        assert!(signals.grounds(&suggestion("tag_documents", "", None)));
        assert!(signals.grounds(&suggestion("retry_failed", "  ", None)));
    }
}
