//! `agentd bench … --html FILE`: a run's figures as one self-contained page
//! ([`agentd::charts`]). For the parts of [`Report`] (drain, enqueue, latency, …): one bar
//! chart per section and unit, agentd's bar beside each baseline measured in the same run,
//! then every row as a table. For the fairness bench: the quiet orgs' pickup and start, alone
//! and beside the noisy org (and the webhook deliveries beside a black-holed receiver).

use super::fairness::{FairnessReport, Pickup};
use super::{Report, Row, num};
use agentd::charts::{BarChart, Page, Scale, Series};

/// Writes a page to `path` (the message names the flag and the file).
pub fn write(path: &std::path::Path, page: &str) -> anyhow::Result<()> {
    std::fs::write(path, page)
        .map_err(|e| anyhow::anyhow!("--html {}: cannot write: {e}", path.display()))?;
    eprintln!("bench: page written to {}", path.display());
    Ok(())
}

/// The label of agentd's own bars.
const AGENTD: &str = "agentd";

/// The charts of `rows`: one per (section, unit) that has a figure, in the order they were
/// measured; agentd and every baseline a row of it names, each a series.
fn charts(rows: &[Row]) -> Vec<BarChart> {
    let mut groups: Vec<((String, String), Vec<&Row>)> = Vec::new();
    for r in rows.iter().filter(|r| r.value.is_some()) {
        let key = (r.section.clone(), r.unit.clone());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, g)) => g.push(r),
            None => groups.push((key, vec![r])),
        }
    }
    groups
        .into_iter()
        .enumerate()
        .map(|(i, ((section, unit), rows))| {
            let mut labels: Vec<String> = Vec::new();
            for r in &rows {
                for (l, _) in &r.baselines {
                    if !labels.contains(l) {
                        labels.push(l.clone());
                    }
                }
            }
            let mut series = vec![Series {
                name: AGENTD.into(),
                values: rows.iter().map(|r| r.value).collect(),
            }];
            series.extend(labels.iter().map(|l| {
                Series {
                    name: l.clone(),
                    values: rows
                        .iter()
                        .map(|r| r.baselines.iter().find(|(b, _)| b == l).map(|(_, v)| *v))
                        .collect(),
                }
            }));
            BarChart {
                id: format!("chart-{i}"),
                title: format!("{section} ({unit})"),
                // A chart's unit is a row's, which a bench names with a literal.
                scale: Scale::Quantity(unit_label(&unit)),
                categories: rows.iter().map(|r| r.metric.clone()).collect(),
                series,
            }
        })
        .collect()
}

/// The axis label of a unit: the known units by name, anything else as "value".
fn unit_label(unit: &str) -> &'static str {
    const KNOWN: [&str; 12] = [
        "jobs/s", "ms", "µs", "s", "MiB", "KiB", "B", "tokens", "calls", "%", "x", "rows",
    ];
    KNOWN
        .iter()
        .find(|u| **u == unit)
        .copied()
        .unwrap_or("value")
}

/// The page of a [`Report`].
pub fn report(r: &Report, title: &str) -> String {
    let mut page = Page::new(title);
    let head: Vec<Vec<String>> = r
        .header
        .iter()
        .map(|(k, v)| vec![k.clone(), v.clone()])
        .collect();
    page.table("The run", &["", "value"], &head);
    for chart in charts(&r.rows) {
        page.chart(&chart);
    }
    let rows: Vec<Vec<String>> = r
        .rows
        .iter()
        .map(|row| {
            vec![
                row.section.clone(),
                row.metric.clone(),
                row.value
                    .map(|v| format!("{} {}", num(v), row.unit))
                    .unwrap_or_default(),
                row.baselines
                    .iter()
                    .map(|(l, b)| match row.value {
                        Some(v) if *b > 0.0 => format!("{l} {} (×{:.2})", num(*b), v / b),
                        _ => format!("{l} {}", num(*b)),
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
                match (row.target, row.met()) {
                    (Some(t), Some(ok)) => {
                        format!("{} {}", t.text(), if ok { "met" } else { "MISSED" })
                    }
                    (Some(t), None) => t.text(),
                    _ => String::new(),
                },
                row.note.clone(),
            ]
        })
        .collect();
    page.table(
        "Every figure",
        &[
            "section",
            "measurement",
            "agentd",
            "baselines (same run)",
            "target",
            "note",
        ],
        &rows,
    );
    page.finish()
}

fn pickup_chart(id: &str, title: &str, series: [(&str, &Pickup); 2]) -> BarChart {
    BarChart {
        id: id.into(),
        title: title.into(),
        scale: Scale::Quantity("ms"),
        categories: vec!["p50".into(), "p95".into()],
        series: series
            .iter()
            .map(|(name, p)| Series {
                name: (*name).into(),
                values: vec![Some(p.p50_ms), Some(p.p95_ms)],
            })
            .collect(),
    }
}

/// The page of the fairness bench.
pub fn fairness(r: &FairnessReport) -> String {
    let mut page = Page::new("agentd bench fairness");
    let w = &r.with_noisy;
    page.paragraph(&format!(
        "{} auto_create jobs (offline provider): the noisy org {} at once, the quiet orgs one job \
         each per {} ms; {} of the noisy org's jobs still waiting when the last quiet job was \
         claimed.",
        r.jobs, w.noisy_jobs, r.interval_ms, w.noisy_waiting_at_last_quiet
    ));
    let pair = |a, b| [("quiet orgs alone", a), ("beside the noisy org", b)];
    page.chart(&pickup_chart(
        "quiet-pickup",
        "The quiet orgs' jobs, created → claimed",
        pair(&r.alone.quiet_all, &w.quiet_all),
    ));
    page.chart(&pickup_chart(
        "quiet-start",
        "The quiet orgs' jobs, created → their run starts",
        pair(&r.alone.quiet_start, &w.quiet_start),
    ));
    let rows: Vec<Vec<String>> = r
        .alone
        .quiet
        .iter()
        .zip(&w.quiet)
        .enumerate()
        .map(|(i, (a, n))| {
            vec![
                format!("quiet org {}", i + 1),
                n.jobs.to_string(),
                format!("{:.0}", a.p50_ms),
                format!("{:.0}", n.p50_ms),
                format!("{:.0}", a.p95_ms),
                format!("{:.0}", n.p95_ms),
            ]
        })
        .collect();
    page.table(
        "Per quiet org (ms)",
        &[
            "",
            "jobs",
            "p50 alone",
            "p50 beside",
            "p95 alone",
            "p95 beside",
        ],
        &rows,
    );
    if let Some(h) = &r.webhooks {
        page.chart(&pickup_chart(
            "webhook-delivery",
            "The quiet orgs' webhook deliveries, created → delivered",
            [
                ("alone", &h.alone.quiet),
                ("beside a black-holed receiver", &h.with_blackhole.quiet),
            ],
        ));
    }
    page.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_row_is_a_bar_beside_each_of_its_same_run_baselines() {
        let mut r = Report::default();
        r.rows.push(
            Row::new("drain", "20000 jobs, c=32", 15_525.0, "jobs/s")
                .baseline("graphile-worker", 13_069.0)
                .baseline("apalis", 2_000.0),
        );
        r.rows.push(
            Row::new("drain", "200000 jobs, c=32", 18_200.0, "jobs/s")
                .baseline("graphile-worker", 18_369.0),
        );
        r.rows.push(Row::new("latency", "pickup p50", 3.5, "ms"));
        r.rows
            .push(Row::text("peers", "graphile-worker", "not installed"));
        let html = report(&r, "agentd bench drain");
        let c = charts(&r.rows);
        assert_eq!(c.len(), 2, "one per section and unit with a figure");
        assert_eq!(c[0].categories, ["20000 jobs, c=32", "200000 jobs, c=32"]);
        let names: Vec<&str> = c[0].series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, [AGENTD, "graphile-worker", "apalis"]);
        // apalis ran at 20k only: no bar at 200k.
        assert_eq!(c[0].series[2].values, [Some(2_000.0), None]);
        // Three series by two rows in the drain chart, one bar in the latency chart.
        assert_eq!(html.matches(r#"<rect class="bar""#).count(), 3 * 2 + 1);
        assert!(html.contains(r#"data-series="graphile-worker" data-value="13069""#));
        assert!(html.contains("(×1.19)"), "the ratio to the peer");
        assert!(html.contains("not installed"));
        assert_eq!(unit_label("jobs/s"), "jobs/s");
        assert_eq!(unit_label("<b>"), "value");
    }
}
