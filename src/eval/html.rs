//! `agentd eval --html FILE`: the report as one self-contained page ([`crate::charts`]) — the
//! scores per kind and per language as bar charts (recall, strict precision, precision, value
//! accuracy), tokens per proposed document per kind, the comparison with a baseline split by
//! split, and every document's row. The same page for a stored report: `agentd eval --report
//! FILE --html OUT` (no run).

use super::baseline::Baseline;
use super::report::{EvalReport, Totals, per_proposed_text};
use crate::charts::{BarChart, Page, Scale, Series};
use std::collections::BTreeMap;

/// The `id` of the per-kind scores chart (the README's picture, `docs/eval-by-kind.svg`).
pub const BY_KIND: &str = "scores-by-kind";

/// A score: its name on the chart and how to read it from the totals.
type Score = (&'static str, fn(&Totals) -> f64);

/// The four scores a chart shows, in series order.
const SCORES: [Score; 4] = [
    ("recall", |t| t.field_recall),
    ("strict precision", |t| t.strict_precision),
    ("precision", |t| t.field_precision),
    ("value accuracy", |t| t.value_accuracy),
];

fn scores_chart(id: &str, title: &str, groups: &BTreeMap<String, Totals>) -> BarChart {
    BarChart {
        id: id.into(),
        title: title.into(),
        scale: Scale::Share,
        categories: groups.keys().cloned().collect(),
        series: SCORES
            .iter()
            .map(|(name, read)| Series {
                name: (*name).into(),
                values: groups.values().map(|t| Some(read(t))).collect(),
            })
            .collect(),
    }
}

/// The per-kind scores chart of a report.
pub fn by_kind_chart(r: &EvalReport) -> BarChart {
    scores_chart(
        BY_KIND,
        &format!(
            "Scores per kind of document — {} ({}), {} documents",
            r.provider,
            r.model,
            r.documents.len()
        ),
        &r.by_kind,
    )
}

fn pct(x: f64) -> String {
    format!("{:.1} %", 100.0 * x)
}

fn totals_row(name: &str, t: &Totals) -> Vec<String> {
    vec![
        name.to_string(),
        t.documents.to_string(),
        format!("{}/{}", t.proposed, t.documents),
        pct(t.field_recall),
        pct(t.strict_precision),
        pct(t.field_precision),
        pct(t.value_accuracy),
        format!("{}/{}", t.valid_answers, t.answers),
        format!("{:.0}", t.tokens_per_proposed),
        per_proposed_text(t),
    ]
}

const TOTALS_HEAD: [&str; 10] = [
    "",
    "documents",
    "proposed",
    "recall",
    "strict precision",
    "precision",
    "value accuracy",
    "valid extractions",
    "tokens per proposed",
    "cost per proposed",
];

/// The page of a report, compared with `baseline` when given.
pub fn render(r: &EvalReport, baseline: Option<(&str, &Baseline)>) -> String {
    let mut page = Page::new(&format!("agentd eval — {} ({})", r.provider, r.model));
    page.paragraph(&format!(
        "{} documents, {} mode{}, {:.1} s wall. Recall and value accuracy are over the labelled \
         key fields; strict precision counts only those, precision also the acceptable ones.",
        r.documents.len(),
        if r.guided { "guided" } else { "free" },
        if r.constrained {
            ", constrained calls"
        } else {
            ""
        },
        r.wall_seconds
    ));
    let mut rows = vec![totals_row("all", &r.totals)];
    rows.extend(
        r.by_split
            .iter()
            .map(|(k, t)| totals_row(&format!("split {k}"), t)),
    );
    page.table("Totals", &TOTALS_HEAD, &rows);

    page.heading("Per kind of document")
        .chart(&by_kind_chart(r));
    page.heading("Per language").chart(&scores_chart(
        "scores-by-language",
        "Scores per language",
        &r.by_language,
    ));
    page.heading("Tokens").chart(&BarChart {
        id: "tokens-by-kind".into(),
        title: "Tokens per proposed document, per kind".into(),
        scale: Scale::Quantity("tokens"),
        categories: r.by_kind.keys().cloned().collect(),
        series: vec![Series {
            name: "tokens per proposed document".into(),
            values: r
                .by_kind
                .values()
                .map(|t| (t.proposed > 0).then_some(t.tokens_per_proposed))
                .collect(),
        }],
    });

    if let Some((file, base)) = baseline {
        page.heading("Against the baseline");
        page.paragraph(&format!(
            "Baseline {file} (provider {}). A split is drawn when both runs scored it.",
            base.provider
        ));
        let splits: Vec<&String> = r
            .by_split
            .keys()
            .filter(|k| base.by_split.contains_key(*k))
            .collect();
        let mut series = Vec::new();
        for (name, read) in [SCORES[0], SCORES[2], SCORES[3]] {
            series.push(Series {
                name: format!("{name} (baseline)"),
                values: splits
                    .iter()
                    .map(|k| base.by_split.get(*k).map(read))
                    .collect(),
            });
            series.push(Series {
                name: name.into(),
                values: splits
                    .iter()
                    .map(|k| r.by_split.get(*k).map(read))
                    .collect(),
            });
        }
        page.chart(&BarChart {
            id: "against-baseline".into(),
            title: "This run beside the baseline, per split".into(),
            scale: Scale::Share,
            categories: splits.iter().map(|k| (*k).clone()).collect(),
            series,
        });
        let rows: Vec<Vec<String>> = splits
            .iter()
            .flat_map(|k| {
                [
                    base.by_split
                        .get(*k)
                        .map(|t| totals_row(&format!("{k}, baseline"), t)),
                    r.by_split
                        .get(*k)
                        .map(|t| totals_row(&format!("{k}, this run"), t)),
                ]
            })
            .flatten()
            .collect();
        page.table("Against the baseline", &TOTALS_HEAD, &rows);
    }

    page.heading("Documents");
    let rows: Vec<Vec<String>> = r
        .documents
        .iter()
        .map(|d| {
            let s = &d.score;
            vec![
                d.sample.clone(),
                d.split.as_str().to_string(),
                d.language.clone(),
                d.kind.clone(),
                d.status.clone(),
                d.stop_reason.clone().unwrap_or_default(),
                d.work.model_calls.to_string(),
                d.work.tokens.to_string(),
                d.work.cost_text(),
                format!("{}/{}", s.fields_found, s.fields_expected),
                format!(
                    "{}/{}",
                    s.fields_found + s.fields_acceptable,
                    s.fields_proposed
                ),
                format!("{}/{}", s.values_correct, s.fields_expected),
                match d.schema_valid {
                    Some(true) => "yes".into(),
                    Some(false) => "no".into(),
                    None => String::new(),
                },
                d.error
                    .as_deref()
                    .map(|e| e.chars().take(160).collect())
                    .unwrap_or_default(),
            ]
        })
        .collect();
    page.table(
        "Every document",
        &[
            "sample",
            "part",
            "language",
            "kind",
            "status",
            "stop",
            "model calls",
            "tokens",
            "cost",
            "fields found",
            "precision",
            "values right",
            "valid",
            "error",
        ],
        &rows,
    );
    if let Some(n) = &r.nightly {
        page.heading("The nightly review");
        page.paragraph(&format!(
            "Job {}: {}; {} suggestions ({} about what the overview showed), {} model calls, {} tokens.",
            n.job_id, n.state, n.suggestions, n.grounded, n.work.model_calls, n.work.tokens
        ));
        let rows: Vec<Vec<String>> = n.titles.iter().map(|t| vec![t.clone()]).collect();
        page.table("Suggestion titles", &["title"], &rows);
    }
    page.finish()
}
