//! `agentd eval --reuse`: how often an upload reuses the org's schema for its kind of document
//! (issue 28, item 4) instead of adding one more. The samples of each kind go into a new org of
//! their own **one after another** (each upload waits until the one before is proposed or
//! failed, as a person uploading a month of invoices), run by a worker that claims only that
//! org's jobs; with `--mixed` every kind goes into one org, kind after kind, so a schema can
//! also be reused for the wrong kind. Each document's proposed schema is then one of:
//!
//! - `new` — a schema no earlier document proposed: right for the first document of a kind,
//!   a **miss** for a later one;
//! - `reused` — the schema an earlier document of the same kind proposed (`extended` when the
//!   run added fields to it as a new version);
//! - `merged` — a schema an earlier document of **another** kind proposed: a wrong reuse.
//!
//! The reuse rate is reused ÷ documents that had an earlier document of their kind.
//!
//! **Across languages** (issue 48, item 3): within a kind, in upload order, a later upload is
//! *cross-language* when it is the first of its language in that kind after documents in
//! other languages only (`ticket_boulangerie_fr` after three English receipts): the schema it
//! meets has only names the other languages' documents gave, so reusing it shows the names
//! met across languages. Its rate is reused ÷ cross-language uploads; beside it, the fields
//! those uploads added to the schema they reused (a field named in the document's own
//! language where the schema has the canonical name adds one).

use super::labels::Sample;
use crate::app::{App, WorkerArgs};
use crate::kinds::{self, JobKind};
use crate::store::orgs;
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// One upload's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Upload {
    pub sample: String,
    pub kind: String,
    pub language: String,
    /// `new`, `reused`, `merged` (another kind's schema), `failed` (no schema) or `timeout`.
    pub outcome: String,
    /// Whether the run added fields to the schema it reused (a new version).
    pub extended: bool,
    /// Whether an earlier document of the same kind was uploaded before this one.
    pub had_earlier: bool,
    /// The first document of its language in its kind, after documents of other languages
    /// (see the module docs).
    pub cross_language: bool,
    /// Top-level fields its schema version has that the version seen before lacked (0 for a
    /// new schema).
    pub fields_added: usize,
    /// The proposed schema's revid.
    pub schema: Option<String>,
    /// Top-level fields of that schema version.
    pub fields: usize,
}

/// Counts of one kind, or of all.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Counts {
    pub documents: usize,
    /// Documents with an earlier document of their kind: the ones that should reuse.
    pub later: usize,
    pub reused: usize,
    pub extended: usize,
    /// Later documents that got a new schema.
    pub missed: usize,
    /// Documents that got another kind's schema.
    pub merged: usize,
    pub failed: usize,
    /// Fields the reusing uploads added to the schemas they reused.
    pub fields_added: usize,
}

impl Counts {
    fn add(&mut self, u: &Upload) {
        self.documents += 1;
        self.later += usize::from(u.had_earlier);
        match u.outcome.as_str() {
            "reused" => self.reused += 1,
            "new" if u.had_earlier => self.missed += 1,
            "merged" => self.merged += 1,
            "failed" | "timeout" => self.failed += 1,
            _ => {}
        }
        self.extended += usize::from(u.extended);
        if u.outcome == "reused" {
            self.fields_added += u.fields_added;
        }
    }

    /// reused ÷ later, or `None` with no later document.
    pub fn rate(&self) -> Option<f64> {
        (self.later > 0).then(|| self.reused as f64 / self.later as f64)
    }
}

/// The report of `agentd eval --reuse`.
#[derive(Debug, Clone, Serialize)]
pub struct ReuseReport {
    pub provider: String,
    /// Every kind in one org (else one org per kind).
    pub mixed: bool,
    pub uploads: Vec<Upload>,
    pub per_kind: BTreeMap<String, Counts>,
    pub total: Counts,
    /// The cross-language uploads alone (see the module docs): `later` counts them.
    pub cross_language: Counts,
    /// Schemas the org holds at the end.
    pub schemas: usize,
    pub wall_seconds: f64,
}

/// Runs the uploads of `samples` one after another (sorted by kind, then name) into new orgs
/// named after `org_name` (one per kind, or one for all when `mixed`); each waits at most
/// `timeout` for its proposal.
pub async fn run(
    app: &App,
    samples: &[Sample],
    org_name: &str,
    mixed: bool,
    timeout: Duration,
    mut progress: impl FnMut(usize, usize),
) -> anyhow::Result<ReuseReport> {
    let mut order: Vec<&Sample> = samples.iter().collect();
    order.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
    let started = Instant::now();
    // schema id → the kind of the document that first proposed it; last version seen.
    let mut first_kind: HashMap<String, String> = HashMap::new();
    let mut last_version: HashMap<String, String> = HashMap::new();
    // schema id → the top-level fields of the last version seen.
    let mut last_fields: HashMap<String, Vec<String>> = HashMap::new();
    let mut seen_kinds: Vec<String> = Vec::new();
    // (kind, language) of every upload so far.
    let mut seen_languages: Vec<(String, String)> = Vec::new();
    let mut uploads = Vec::new();
    let mut schemas = 0;
    let mut groups: Vec<(String, Vec<&Sample>)> = Vec::new();
    for s in order {
        let name = match mixed {
            true => org_name.to_string(),
            false => format!("{org_name}-{}", s.kind),
        };
        match groups.last_mut() {
            Some((n, g)) if *n == name => g.push(s),
            _ => groups.push((name, vec![s])),
        }
    }
    let total = samples.len();
    let mut done = 0;
    for (name, group) in groups {
        if orgs::find(&app.pool, &name).await?.is_some() {
            anyhow::bail!("org {name} exists already: the reuse eval makes its own orgs");
        }
        let org = orgs::ensure(&app.pool, &name).await?;
        let stop = CancellationToken::new();
        let args = WorkerArgs::serving(&[kinds::AutoCreate::NAME], Some(1)).for_org(org.id);
        let worker = app
            .start_worker(args, stop.clone())
            .await
            .map_err(|e| anyhow::anyhow!(e))?;
        let outcome = async {
            for s in &group {
                progress(done, total);
                done += 1;
                let (id, _) =
                    crate::documents::add_document(app, org.id, &s.name, &s.text, true).await?;
                let report = wait(app, id, timeout).await?;
                let had_earlier = seen_kinds.contains(&s.kind);
                seen_kinds.push(s.kind.clone());
                let same = |(k, l): &(String, String)| *k == s.kind && *l == s.language;
                let cross_language = had_earlier && !seen_languages.iter().any(same);
                seen_languages.push((s.kind.clone(), s.language.clone()));
                let revid = report
                    .as_ref()
                    .and_then(|r| r["schema"]["revid"].as_str())
                    .map(str::to_string);
                let names: Vec<String> = report
                    .as_ref()
                    .and_then(|r| r["fields"].as_array())
                    .map(|a| {
                        a.iter()
                            .filter_map(|f| f["name"].as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                let fields = names.len();
                let mut fields_added = 0;
                let proposed = report
                    .as_ref()
                    .is_some_and(|r| r["auto_create_status"] == "proposed");
                let (outcome, extended) = match (&report, &revid) {
                    (None, _) => ("timeout".to_string(), false),
                    (Some(_), Some(revid)) if proposed => {
                        let (schema_id, _) = revid.split_once(':').unwrap_or((revid.as_str(), ""));
                        let extended = last_version
                            .insert(schema_id.to_string(), revid.clone())
                            .is_some_and(|before| before != *revid);
                        if let Some(before) =
                            last_fields.insert(schema_id.to_string(), names.clone())
                        {
                            fields_added = names.iter().filter(|n| !before.contains(n)).count();
                        }
                        match first_kind.get(schema_id) {
                            None => {
                                first_kind.insert(schema_id.to_string(), s.kind.clone());
                                ("new".to_string(), false)
                            }
                            Some(k) if *k == s.kind => ("reused".to_string(), extended),
                            Some(_) => ("merged".to_string(), extended),
                        }
                    }
                    _ => ("failed".to_string(), false),
                };
                uploads.push(Upload {
                    sample: s.name.clone(),
                    kind: s.kind.clone(),
                    language: s.language.clone(),
                    outcome,
                    extended,
                    had_earlier,
                    cross_language,
                    fields_added,
                    schema: revid,
                    fields,
                });
            }
            anyhow::Ok(())
        }
        .await;
        stop.cancel();
        worker.join().await;
        outcome?;
        let mut conn = app.pool.acquire().await?;
        schemas += crate::store::versions::list_latest::<crate::store::schemas::SchemaRow>(
            &mut conn, org.id,
        )
        .await?
        .len();
    }
    progress(total, total);
    let mut per_kind: BTreeMap<String, Counts> = BTreeMap::new();
    let mut total = Counts::default();
    let mut cross_language = Counts::default();
    for u in &uploads {
        per_kind.entry(u.kind.clone()).or_default().add(u);
        total.add(u);
        if u.cross_language {
            cross_language.add(u);
        }
    }
    Ok(ReuseReport {
        provider: app.provider.name().to_string(),
        mixed,
        uploads,
        per_kind,
        total,
        cross_language,
        schemas,
        wall_seconds: started.elapsed().as_secs_f64(),
    })
}

/// The document's report once its auto-create is done, or `None` after `timeout`.
async fn wait(app: &App, id: Uuid, timeout: Duration) -> anyhow::Result<Option<Value>> {
    let started = Instant::now();
    loop {
        if let Some(r) = crate::documents::document_report(app, id).await?
            && r["auto_create_status"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .is_some_and(|s| crate::store::states::AutoCreateStatus::DONE.contains(&s))
        {
            return Ok(Some(r));
        }
        if started.elapsed() > timeout {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| "—".into(), |r| format!("{:.1} %", r * 100.0))
}

/// The report as a table: one row per kind, then the total.
pub fn render(r: &ReuseReport) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<18} {:>5} {:>6} {:>7} {:>9} {:>7} {:>7} {:>7} {:>11}\n",
        "kind", "docs", "later", "reused", "extended", "missed", "merged", "failed", "reuse rate"
    ));
    let row = |name: &str, c: &Counts| {
        format!(
            "{:<18} {:>5} {:>6} {:>7} {:>9} {:>7} {:>7} {:>7} {:>11}\n",
            name,
            c.documents,
            c.later,
            c.reused,
            c.extended,
            c.missed,
            c.merged,
            c.failed,
            pct(c.rate())
        )
    };
    for (k, c) in &r.per_kind {
        out.push_str(&row(k, c));
    }
    out.push_str(&row("total", &r.total));
    let c = &r.cross_language;
    out.push_str(&format!(
        "across languages: {} of {} first uploads of a language in their kind reused its schema \
         ({}), adding {} field(s); every reuse added {}\n",
        c.reused,
        c.later,
        pct(c.rate()),
        c.fields_added,
        r.total.fields_added
    ));
    out.push_str(&format!(
        "{} schemas for {} kinds ({}); provider {}, {:.1} s\n",
        r.schemas,
        r.per_kind.len(),
        match r.mixed {
            true => "one org for all",
            false => "one org per kind",
        },
        r.provider,
        r.wall_seconds
    ));
    out
}
