//! Self-contained report pages: HTML with inline SVG bar charts and tables, for
//! `agentd eval --html` and `agentd bench … --html`. A page loads nothing (no script, no CDN,
//! no font, no image; its own CSP says so), so it can be attached to a CI run or mailed and
//! opens the same anywhere. Every text on it is escaped: sample names, model names and error
//! texts come from files and servers.
//!
//! Each bar is a `<rect class="bar">` carrying `data-category`, `data-series` and `data-value`
//! (the figure as a number, empty when not known), so a test reads a chart as data.

use std::fmt::Write;

/// Escapes `s` for HTML text and attribute values (`&`, `<`, `>`, `"`, `'`).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// How a chart's values read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scale {
    /// Shares in 0..=1, drawn on a 0–100 % axis.
    Share,
    /// Plain quantities (tokens, jobs/s, seconds) on an axis from 0 to a round number above
    /// the largest; the unit is named on the axis.
    Quantity(&'static str),
}

/// One series of a bar chart: a value per category (`None`: not measured, no bar drawn and
/// "n/a" in its tooltip).
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub values: Vec<Option<f64>>,
}

/// A grouped bar chart: one group per category, one bar per series in each.
#[derive(Debug, Clone)]
pub struct BarChart {
    /// The `id` of the `<svg>` (tests and links find the chart by it).
    pub id: String,
    pub title: String,
    pub scale: Scale,
    pub categories: Vec<String>,
    pub series: Vec<Series>,
}

/// Bar colours, in series order (repeat past six): distinguishable in print and for the common
/// colour-vision deficiencies (Okabe–Ito).
const PALETTE: [&str; 6] = [
    "#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00",
];

const BAR: f64 = 12.0;
const GROUP_GAP: f64 = 18.0;
const PLOT_HEIGHT: f64 = 180.0;
const LEFT: f64 = 56.0;
const TOP: f64 = 44.0;
const LABEL_SPACE: f64 = 96.0;

/// The axis' top for a quantity chart: the smallest of 1, 2, 2.5, 5 × 10^k at or above `max`.
fn round_up(max: f64) -> f64 {
    if !max.is_finite() || max <= 0.0 {
        return 1.0;
    }
    let magnitude = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|top| *top >= max)
        .unwrap_or(10.0 * magnitude)
}

/// A figure as a person reads it on this chart.
fn figure(scale: Scale, v: Option<f64>) -> String {
    match (scale, v.filter(|v| v.is_finite())) {
        (_, None) => "n/a".into(),
        (Scale::Share, Some(v)) => format!("{:.1} %", 100.0 * v),
        (Scale::Quantity(unit), Some(v)) if v.abs() >= 100.0 => format!("{v:.0} {unit}"),
        (Scale::Quantity(unit), Some(v)) => format!("{v:.2} {unit}"),
    }
}

impl BarChart {
    /// The chart as an `<svg>` element.
    pub fn svg(&self) -> String {
        let n_series = self.series.len().max(1) as f64;
        let group = n_series * BAR + GROUP_GAP;
        let width = LEFT + group * self.categories.len().max(1) as f64 + 16.0;
        let height = TOP + PLOT_HEIGHT + LABEL_SPACE;
        let top = match self.scale {
            Scale::Share => 1.0,
            Scale::Quantity(_) => round_up(
                self.series
                    .iter()
                    .flat_map(|s| s.values.iter().flatten())
                    .copied()
                    .filter(|v| v.is_finite())
                    .fold(0.0, f64::max),
            ),
        };
        let y = |v: f64| TOP + PLOT_HEIGHT - PLOT_HEIGHT * (v / top).clamp(0.0, 1.0);
        let mut s = String::new();
        let _ = write!(
            s,
            r#"<svg id="{id}" class="chart" xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" role="img" aria-labelledby="{id}-title"><title id="{id}-title">{title}</title>"#,
            id = escape(&self.id),
            title = escape(&self.title),
        );
        // Its own style, so the chart reads the same inside a page and as a file of its own.
        // and on a white ground (a viewer's dark theme would hide its text otherwise).
        let _ = write!(
            s,
            r##"<style>{CHART_STYLE}</style><rect width="100%" height="100%" fill="#fff"/>"##
        );
        let _ = write!(
            s,
            r#"<text x="{LEFT}" y="16" class="chart-title">{}</text>"#,
            escape(&self.title)
        );
        // The legend: one swatch per series.
        let mut x = LEFT;
        for (i, series) in self.series.iter().enumerate() {
            let colour = PALETTE[i % PALETTE.len()];
            let _ = write!(
                s,
                r#"<rect x="{x:.0}" y="24" width="10" height="10" fill="{colour}"/><text x="{:.0}" y="33" class="legend">{}</text>"#,
                x + 14.0,
                escape(&series.name)
            );
            x += 24.0 + 7.0 * series.name.chars().count() as f64;
        }
        // Gridlines and the axis' figures at 0, ¼, ½, ¾ and the top.
        for q in 0..=4 {
            let v = top * f64::from(q) / 4.0;
            let gy = y(v);
            let label = match self.scale {
                Scale::Share => format!("{:.0} %", 100.0 * v),
                Scale::Quantity(_) if top >= 10.0 => format!("{v:.0}"),
                Scale::Quantity(_) => format!("{v:.2}"),
            };
            let _ = write!(
                s,
                r#"<line x1="{LEFT}" x2="{:.0}" y1="{gy:.1}" y2="{gy:.1}" class="grid"/><text x="{:.0}" y="{:.1}" class="axis" text-anchor="end">{label}</text>"#,
                width - 16.0,
                LEFT - 6.0,
                gy + 4.0
            );
        }
        if let Scale::Quantity(unit) = self.scale {
            let _ = write!(
                s,
                r#"<text x="4" y="{:.0}" class="axis">{}</text>"#,
                TOP - 6.0,
                escape(unit)
            );
        }
        for (c, category) in self.categories.iter().enumerate() {
            let gx = LEFT + 8.0 + group * c as f64;
            for (i, series) in self.series.iter().enumerate() {
                let v = series.values.get(c).copied().flatten();
                let bx = gx + BAR * i as f64;
                let (by, bh) = match v {
                    Some(v) if v.is_finite() => (y(v), TOP + PLOT_HEIGHT - y(v)),
                    _ => (TOP + PLOT_HEIGHT, 0.0),
                };
                let _ = write!(
                    s,
                    r#"<rect class="bar" data-category="{cat}" data-series="{ser}" data-value="{val}" x="{bx:.1}" y="{by:.1}" width="{w:.0}" height="{bh:.1}" fill="{colour}"><title>{cat}, {ser}: {fig}</title></rect>"#,
                    cat = escape(category),
                    ser = escape(&series.name),
                    val = v
                        .filter(|v| v.is_finite())
                        .map_or(String::new(), |v| format!("{v}")),
                    w = BAR - 2.0,
                    colour = PALETTE[i % PALETTE.len()],
                    fig = figure(self.scale, v),
                );
            }
            // The category's name under its group, turned so long names fit.
            let lx = gx + n_series * BAR / 2.0;
            let ly = TOP + PLOT_HEIGHT + 12.0;
            let _ = write!(
                s,
                r#"<text x="{lx:.1}" y="{ly:.0}" class="axis" text-anchor="end" transform="rotate(-35 {lx:.1} {ly:.0})">{}</text>"#,
                escape(category)
            );
        }
        s.push_str("</svg>");
        s
    }
}

/// A page being written: headings, paragraphs, charts and tables in order.
pub struct Page {
    body: String,
    title: String,
}

impl Page {
    pub fn new(title: &str) -> Self {
        Page {
            body: String::new(),
            title: title.to_string(),
        }
    }

    pub fn heading(&mut self, text: &str) -> &mut Self {
        let _ = write!(self.body, "<h2>{}</h2>", escape(text));
        self
    }

    pub fn paragraph(&mut self, text: &str) -> &mut Self {
        let _ = write!(self.body, "<p>{}</p>", escape(text));
        self
    }

    pub fn chart(&mut self, chart: &BarChart) -> &mut Self {
        let _ = write!(self.body, r#"<figure>{}</figure>"#, chart.svg());
        self
    }

    /// A table; every cell is text. Numeric-looking cells are right-aligned.
    pub fn table(&mut self, caption: &str, head: &[&str], rows: &[Vec<String>]) -> &mut Self {
        let _ = write!(
            self.body,
            r#"<div class="scroll" tabindex="0" role="region" aria-label="{c}"><table><caption>{c}</caption><thead><tr>"#,
            c = escape(caption)
        );
        for h in head {
            let _ = write!(self.body, r#"<th scope="col">{}</th>"#, escape(h));
        }
        self.body.push_str("</tr></thead><tbody>");
        for row in rows {
            self.body.push_str("<tr>");
            for cell in row {
                let numeric = cell
                    .trim_end_matches(['%', ' ', 's'])
                    .trim_start_matches('$')
                    .replace([',', '/', '.'], "")
                    .chars()
                    .all(|c| c.is_ascii_digit())
                    && !cell.is_empty();
                let _ = write!(
                    self.body,
                    "<td{}>{}</td>",
                    if numeric { r#" class="num""# } else { "" },
                    escape(cell)
                );
            }
            self.body.push_str("</tr>");
        }
        self.body.push_str("</tbody></table></div>");
        self
    }

    /// The whole document.
    pub fn finish(&self) -> String {
        format!(
            r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{STYLE}</style></head>
<body><main><h1>{title}</h1>
{body}
</main></body></html>
"#,
            title = escape(&self.title),
            body = self.body
        )
    }
}

/// The rules every chart carries in its `<svg>`.
const CHART_STYLE: &str = "text{font-family:system-ui,sans-serif}\
.chart-title{font-weight:600;font-size:13px;fill:#1b1f24}.legend,.axis{font-size:11px;fill:#374151}\
.grid{stroke:#d1d5db;stroke-width:1}";

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;color:#1b1f24;background:#fff;margin:0}\
main{max-width:1100px;margin:0 auto;padding:1em 1.5em}\
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.8em}\
figure{margin:.5em 0;overflow-x:auto}\
.scroll{overflow-x:auto}\
table{border-collapse:collapse;font-size:12px;margin:.5em 0}\
caption{text-align:left;font-weight:600;padding:.3em 0}\
th,td{border-bottom:1px solid #e5e7eb;padding:.25em .6em;text-align:left;white-space:nowrap}\
td.num{text-align:right;font-variant-numeric:tabular-nums}";

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(scale: Scale, values: Vec<Option<f64>>) -> BarChart {
        BarChart {
            id: "c".into(),
            title: "t".into(),
            scale,
            categories: (0..values.len()).map(|i| format!("k{i}")).collect(),
            series: vec![Series {
                name: "s".into(),
                values,
            }],
        }
    }

    /// The height attribute of the `n`th bar.
    fn bar_height(svg: &str, n: usize) -> f64 {
        let bar = svg
            .split(r#"<rect class="bar""#)
            .nth(n + 1)
            .expect("that bar");
        let h = bar.split(r#"height=""#).nth(1).expect("a height");
        h.split('"').next().unwrap_or("").parse().expect("a number")
    }

    #[test]
    fn a_share_is_drawn_against_a_full_axis_and_a_quantity_against_a_round_top() {
        let svg = chart(Scale::Share, vec![Some(0.5), Some(1.0), Some(0.0)]).svg();
        assert_eq!(bar_height(&svg, 0), PLOT_HEIGHT / 2.0);
        assert_eq!(bar_height(&svg, 1), PLOT_HEIGHT);
        assert_eq!(bar_height(&svg, 2), 0.0);
        // 1,700 tokens at most: the axis goes to 2,000, so 1,000 is half of it.
        let svg = chart(
            Scale::Quantity("tokens"),
            vec![Some(1000.0), Some(1700.0), None],
        )
        .svg();
        assert_eq!(bar_height(&svg, 0), PLOT_HEIGHT / 2.0);
        assert!(svg.contains(r#"data-value="" "#), "{svg}");
        assert!(svg.contains("k2, s: n/a"), "{svg}");
        assert!(svg.contains(">2000</text>"), "{svg}");
        assert_eq!(round_up(0.0), 1.0);
        assert_eq!(round_up(f64::NAN), 1.0);
        assert_eq!(round_up(2.4), 2.5);
        assert_eq!(round_up(26_000.0), 50_000.0);
        assert_eq!(round_up(100.0), 100.0);
    }

    #[test]
    fn every_text_is_escaped_and_the_page_loads_nothing() {
        let hostile = r#"<script>alert("x")</script> & 'q'"#;
        let mut p = Page::new(hostile);
        p.heading(hostile).paragraph(hostile).chart(&BarChart {
            id: hostile.into(),
            title: hostile.into(),
            scale: Scale::Share,
            categories: vec![hostile.into()],
            series: vec![Series {
                name: hostile.into(),
                values: vec![Some(f64::NAN)],
            }],
        });
        p.table(hostile, &[hostile], &[vec![hostile.into()]]);
        let html = p.finish();
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("NaN"), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;q&#39;")
        );
        assert!(html.contains("default-src 'none'"));
        for needle in ["src=", "href=", "@import", "url("] {
            assert!(!html.contains(needle), "{needle} in {html}");
        }
    }
}
