//! A run against a stored one: `agentd eval --save FILE` stores the report, `--baseline FILE`
//! compares a new run with it, split by split, and names every metric that fell by more than
//! the tolerance. A split is compared only when both runs scored the same documents in it (a
//! different set says nothing about a regression).

use super::labels::Split;
use super::report::{EvalReport, Totals};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A metric: its name and how to read it from the totals (value, numerator, denominator).
type Metric = (&'static str, fn(&Totals) -> (f64, usize, usize));

/// The metrics a run must not lose: `(name, value of totals, numerator, denominator)`.
const METRICS: [Metric; 3] = [
    ("field_recall", |t| {
        (t.field_recall, t.fields_found, t.fields_expected)
    }),
    ("field_precision", |t| {
        (
            t.field_precision,
            t.fields_found + t.fields_acceptable,
            t.fields_proposed,
        )
    }),
    ("value_accuracy", |t| {
        (t.value_accuracy, t.values_correct, t.fields_expected)
    }),
];

/// What a baseline keeps of a stored report: enough to compare, nothing that changes with the
/// report's other fields.
#[derive(Debug, Clone, Deserialize)]
pub struct Baseline {
    pub provider: String,
    pub by_split: BTreeMap<String, Totals>,
    pub documents: Vec<StoredDoc>,
}

/// A stored document: which split it was scored in.
#[derive(Debug, Clone, Deserialize)]
pub struct StoredDoc {
    pub sample: String,
    pub split: Split,
}

/// A baseline file that cannot be used; the message names the file.
#[derive(Debug, thiserror::Error)]
#[error("--baseline {file}: {message}")]
pub struct BaselineError {
    pub file: String,
    pub message: String,
}

/// Reads a report stored by `--save`.
pub fn load(path: &Path) -> Result<Baseline, BaselineError> {
    let e = |message: String| BaselineError {
        file: path.display().to_string(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|x| e(format!("cannot read: {x}")))?;
    serde_json::from_str(&text).map_err(|x| {
        e(format!(
            "not a stored eval report ({x}); write one with `agentd eval --save FILE`"
        ))
    })
}

/// One metric of one split that fell by more than the tolerance.
#[derive(Debug, Clone, PartialEq)]
pub struct Regression {
    pub split: String,
    pub metric: &'static str,
    pub baseline: (f64, usize, usize),
    pub now: (f64, usize, usize),
}

impl std::fmt::Display for Regression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (b, bn, bd) = self.baseline;
        let (n, nn, nd) = self.now;
        write!(
            f,
            "{} on the {} split fell from {:.1}% ({bn}/{bd}) to {:.1}% ({nn}/{nd})",
            self.metric,
            self.split,
            100.0 * b,
            100.0 * n
        )
    }
}

/// What comparing found.
#[derive(Debug, Clone, Default)]
pub struct Comparison {
    /// Splits compared.
    pub compared: Vec<String>,
    /// Splits not compared, with why.
    pub skipped: Vec<String>,
    pub regressions: Vec<Regression>,
}

fn names<'a>(docs: impl Iterator<Item = (&'a str, Split)>, split: &str) -> BTreeSet<&'a str> {
    docs.filter(|(_, s)| s.as_str() == split)
        .map(|(n, _)| n)
        .collect()
}

/// Compares `run` with `baseline`: every split of the run whose documents the baseline scored
/// too, on recall, precision and value accuracy; a drop of more than `tolerance` (absolute, a
/// share: 0.02 is two points) is a regression. Errors when no split could be compared.
pub fn compare(
    baseline: &Baseline,
    run: &EvalReport,
    tolerance: f64,
) -> Result<Comparison, String> {
    let mut c = Comparison::default();
    for (split, now) in &run.by_split {
        let Some(before) = baseline.by_split.get(split) else {
            c.skipped.push(format!(
                "{split}: the baseline has no document of this split"
            ));
            continue;
        };
        let ours = names(
            run.documents.iter().map(|d| (d.sample.as_str(), d.split)),
            split,
        );
        let theirs = names(
            baseline
                .documents
                .iter()
                .map(|d| (d.sample.as_str(), d.split)),
            split,
        );
        if ours != theirs {
            c.skipped.push(format!(
                "{split}: the baseline scored {} documents in it, this run {} (not the same set)",
                theirs.len(),
                ours.len()
            ));
            continue;
        }
        c.compared.push(split.clone());
        for (metric, of) in METRICS {
            let (b, n) = (of(before), of(now));
            if n.0 < b.0 - tolerance - 1e-9 {
                c.regressions.push(Regression {
                    split: split.clone(),
                    metric,
                    baseline: b,
                    now: n,
                });
            }
        }
    }
    if c.compared.is_empty() {
        return Err(format!(
            "no split of the baseline has this run's documents ({}): run the same split and \
             samples the baseline was saved with",
            c.skipped.join("; ")
        ));
    }
    Ok(c)
}

/// What each compared split's proposals cost against the baseline's, for people (not a
/// regression): tokens and dollars per proposed document, with the ratio to the baseline.
pub fn work_against(baseline: &Baseline, run: &EvalReport, compared: &[String]) -> Vec<String> {
    let ratio = |now: f64, before: f64| {
        if before > 0.0 {
            format!(", ×{:.2}", now / before)
        } else {
            String::new()
        }
    };
    compared
        .iter()
        .filter_map(|split| {
            let (b, n) = (baseline.by_split.get(split)?, run.by_split.get(split)?);
            let cost = match (n.cost_usd_per_proposed, b.cost_usd_per_proposed) {
                (Some(x), Some(y)) => format!(
                    "{} (baseline {}{})",
                    super::report::per_proposed_text(n),
                    super::report::per_proposed_text(b),
                    ratio(x, y)
                ),
                _ => format!(
                    "{} (baseline {})",
                    super::report::per_proposed_text(n),
                    super::report::per_proposed_text(b)
                ),
            };
            Some(format!(
                "{split}: {:.0} tokens per proposed document (baseline {:.0}{}); cost {cost} per \
                 proposed document",
                n.tokens_per_proposed,
                b.tokens_per_proposed,
                ratio(n.tokens_per_proposed, b.tokens_per_proposed)
            ))
        })
        .collect()
}
