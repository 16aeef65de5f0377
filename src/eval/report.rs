//! The eval's report: every document's result, totals over all of them and per split, language
//! and kind, and the table a person reads. `--json` prints [`EvalReport`]; `--save` stores it as
//! a baseline ([`super::baseline`]).

use super::score::{f1, ratio};
use super::{DocResult, EvalOptions, Work};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use uuid::Uuid;

/// Totals over a set of documents (micro averages: every field weighs the same).
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
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
    /// Top-level properties proposed, over all documents.
    pub fields_proposed: usize,
    /// `fields_found / fields_expected`.
    pub field_recall: f64,
    /// Proposed properties that matched an acceptable label.
    #[serde(default)]
    pub fields_acceptable: usize,
    /// Of those, the ones whose value matched.
    #[serde(default)]
    pub acceptable_values_correct: usize,
    /// `(fields_found + fields_acceptable) / fields_proposed`: proposed properties no label
    /// names, expected or acceptable, count against it.
    pub field_precision: f64,
    /// `fields_found / fields_proposed`: against the expected fields alone.
    #[serde(default)]
    pub strict_precision: f64,
    pub field_f1: f64,
    /// `values_correct / fields_expected`.
    pub value_accuracy: f64,
    /// Documents with a schema and an extraction to check against it.
    pub answers: usize,
    /// Of those, extractions valid for their schema.
    pub valid_answers: usize,
    /// `valid_answers / answers` (0 when there was no answer).
    pub valid_share: f64,
    /// Tokens per proposed document (0 when none was proposed).
    pub tokens_per_proposed: f64,
    /// Dollars per proposed document at `llm.prices` (null: a cost not known, or none
    /// proposed).
    #[serde(default)]
    pub cost_usd_per_proposed: Option<f64>,
}

/// Sums the documents' figures.
pub fn totals<'a>(docs: impl IntoIterator<Item = &'a DocResult>) -> Totals {
    let mut t = Totals::default();
    for d in docs {
        t.documents += 1;
        match d.status.as_str() {
            "proposed" => t.proposed += 1,
            "failed" => t.failed += 1,
            _ => t.other += 1,
        }
        t.work += d.work;
        t.fields_expected += d.score.fields_expected;
        t.fields_found += d.score.fields_found;
        t.values_correct += d.score.values_correct;
        t.fields_proposed += d.score.fields_proposed;
        t.fields_acceptable += d.score.fields_acceptable;
        t.acceptable_values_correct += d.score.acceptable_values_correct;
        if let Some(valid) = d.schema_valid {
            t.answers += 1;
            t.valid_answers += usize::from(valid);
        }
    }
    t.field_recall = ratio(t.fields_found, t.fields_expected);
    t.field_precision = ratio(t.fields_found + t.fields_acceptable, t.fields_proposed);
    t.strict_precision = ratio(t.fields_found, t.fields_proposed);
    t.field_f1 = f1(t.field_precision, t.field_recall);
    t.value_accuracy = ratio(t.values_correct, t.fields_expected);
    t.valid_share = ratio(t.valid_answers, t.answers);
    t.tokens_per_proposed = if t.proposed == 0 {
        0.0
    } else {
        t.work.tokens as f64 / t.proposed as f64
    };
    t.cost_usd_per_proposed = t
        .work
        .cost_nano_usd
        .filter(|_| t.proposed > 0)
        .map(|n| crate::config::NanoUsd(n / t.proposed as i64).dollars());
    t
}

/// A cost per proposed document as a person reads it.
pub fn per_proposed_text(t: &Totals) -> String {
    t.cost_usd_per_proposed.map_or_else(
        || "n/a".into(),
        |d| crate::config::format_usd((d * 1e9).round() as i64),
    )
}

/// Totals per value of `key` (sorted by that value).
fn grouped(docs: &[DocResult], key: impl Fn(&DocResult) -> String) -> BTreeMap<String, Totals> {
    let mut groups: BTreeMap<String, Vec<&DocResult>> = BTreeMap::new();
    for d in docs {
        groups.entry(key(d)).or_default().push(d);
    }
    groups.into_iter().map(|(k, ds)| (k, totals(ds))).collect()
}

/// The whole report (`--json` prints it, `--save` stores it).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvalReport {
    pub provider: String,
    pub model: String,
    pub guided: bool,
    pub constrained: bool,
    pub org_id: Uuid,
    pub wall_seconds: f64,
    pub documents: Vec<DocResult>,
    /// Over every document of the run.
    pub totals: Totals,
    /// Per split (`dev`, `test`): what a baseline compares.
    pub by_split: BTreeMap<String, Totals>,
    /// Per language (`en`, `de`, …).
    pub by_language: BTreeMap<String, Totals>,
    /// Per kind of document (`invoice`, `receipt`, …).
    pub by_kind: BTreeMap<String, Totals>,
    /// The org's nightly review after its auto-creates (`None`: not run, `--no-nightly`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nightly: Option<super::nightly::NightlyResult>,
}

impl EvalReport {
    /// The report of a run: the documents' results and their totals.
    pub fn new(
        provider: String,
        model: String,
        opts: &EvalOptions,
        org_id: Uuid,
        wall_seconds: f64,
        documents: Vec<DocResult>,
    ) -> Self {
        EvalReport {
            provider,
            model,
            guided: opts.guided,
            constrained: opts.constrained,
            org_id,
            wall_seconds,
            totals: totals(&documents),
            by_split: grouped(&documents, |d| d.split.to_string()),
            by_language: grouped(&documents, |d| d.language.clone()),
            by_kind: grouped(&documents, |d| d.kind.clone()),
            nightly: None,
            documents,
        }
    }
}

fn pct(x: f64) -> String {
    format!("{:.1}", 100.0 * x)
}

/// The report as tables a person reads: one row per document, then the totals per split,
/// language and kind.
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
        "{:<28} {:<4} {:<2} {:<9} {:<16} {:>4} {:>5} {:>5} {:>7} {:>9} {:>6} {:>7} {:>7} {:>5} {:>7} {:>5}",
        "document",
        "part",
        "la",
        "status",
        "stop",
        "runs",
        "model",
        "tools",
        "tokens",
        "cost",
        "secs",
        "prec",
        "recall",
        "F1",
        "values",
        "valid"
    );
    for d in &r.documents {
        let s = &d.score;
        let _ = writeln!(
            out,
            "{:<28} {:<4} {:<2} {:<9} {:<16} {:>4} {:>5} {:>5} {:>7} {:>9} {:>6.1} {:>3}/{:<3} {:>3}/{:<3} {:>5} {:>3}/{:<3} {:>5}",
            d.sample,
            d.split.as_str(),
            d.language,
            d.status,
            d.stop_reason.as_deref().unwrap_or("-"),
            d.runs,
            d.work.model_calls,
            d.work.tool_calls,
            d.work.tokens,
            d.work.cost_text(),
            d.work.seconds,
            s.fields_found + s.fields_acceptable,
            s.fields_proposed,
            s.fields_found,
            s.fields_expected,
            pct(s.field_f1),
            s.values_correct,
            s.fields_expected,
            match d.schema_valid {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            }
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<22} {:>5} {:>8} {:>7} {:>7} {:>7} {:>6} {:>7} {:>7} {:>9} {:>9} {:>7} {:>7}",
        "totals",
        "docs",
        "proposed",
        "prec%",
        "strict%",
        "recall%",
        "F1%",
        "values%",
        "valid%",
        "tok/prop",
        "$/prop",
        "calls/d",
        "secs/d"
    );
    let row = |out: &mut String, name: &str, t: &Totals| {
        let per_doc = |x: f64| {
            if t.documents == 0 {
                0.0
            } else {
                x / t.documents as f64
            }
        };
        let _ = writeln!(
            out,
            "{:<22} {:>5} {:>8} {:>7} {:>7} {:>7} {:>6} {:>7} {:>7} {:>9.0} {:>9} {:>7.1} {:>7.1}",
            name,
            t.documents,
            format!("{}/{}", t.proposed, t.documents),
            pct(t.field_precision),
            pct(t.strict_precision),
            pct(t.field_recall),
            pct(t.field_f1),
            pct(t.value_accuracy),
            pct(t.valid_share),
            t.tokens_per_proposed,
            per_proposed_text(t),
            per_doc(t.work.model_calls as f64),
            per_doc(t.work.seconds)
        );
    };
    row(&mut out, "ALL", &r.totals);
    for (title, groups) in [
        ("split", &r.by_split),
        ("language", &r.by_language),
        ("kind", &r.by_kind),
    ] {
        for (k, t) in groups {
            row(&mut out, &format!("{title} {k}"), t);
        }
    }
    let t = &r.totals;
    let _ = writeln!(
        out,
        "proposed {}/{} ({} failed, {} other); fields: precision {}/{} ({} expected + {} acceptable), \
         recall {}/{}; values {}/{} (acceptable fields' {}/{}); valid extractions {}/{}; \
         {:.0} tokens per proposed document; cost {} in all, {} per proposed document \
         (llm.prices{})",
        t.proposed,
        t.documents,
        t.failed,
        t.other,
        t.fields_found + t.fields_acceptable,
        t.fields_proposed,
        t.fields_found,
        t.fields_acceptable,
        t.fields_found,
        t.fields_expected,
        t.values_correct,
        t.fields_expected,
        t.acceptable_values_correct,
        t.fields_acceptable,
        t.valid_answers,
        t.answers,
        t.tokens_per_proposed,
        t.work.cost_text(),
        per_proposed_text(t),
        if t.work.cost_nano_usd.is_none() {
            format!(": no price for model {:?}", r.model)
        } else {
            String::new()
        }
    );
    for d in r.documents.iter().filter(|d| d.error.is_some()) {
        let e: String = d.error.as_deref().unwrap_or("").chars().take(160).collect();
        let _ = writeln!(out, "  {}: {e}", d.sample);
    }
    if let Some(n) = &r.nightly {
        out.push_str(&super::nightly::render(n));
    }
    out
}
