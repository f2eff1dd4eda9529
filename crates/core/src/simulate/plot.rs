//! The SVG plot of one or more simulated runs: three panels sharing the time axis (nodes
//! by type, pending work, cumulative cost), one polyline per series. Each polyline
//! carries `data-series` (its legend) and `data-panel`, and its panel's scale is in the
//! panel's `data-x-max`/`data-y-max`, so a reader (or a test) can recover the values.

use std::fmt::Write;

use super::Run;

const WIDTH: f64 = 960.0;
const PANEL_H: f64 = 230.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 220.0;
const TOP: f64 = 36.0;
const BOTTOM: f64 = 34.0;
const COLORS: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

/// One line of a panel.
struct Series {
    label: String,
    points: Vec<(f64, f64)>,
    dashed: bool,
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" upper bound for an axis (1, 2 or 5 times a power of ten).
fn nice(max: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|v| *v >= max)
        .unwrap_or(10.0 * p)
}

fn panel(out: &mut String, index: usize, title: &str, x_max: f64, series: &[Series]) {
    let y0 = TOP + index as f64 * (PANEL_H + TOP + BOTTOM);
    let plot_w = WIDTH - LEFT - RIGHT;
    let y_max = nice(
        series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .fold(0.0, f64::max),
    );
    let sx = |x: f64| LEFT + x / x_max * plot_w;
    let sy = |y: f64| y0 + PANEL_H - y / y_max * PANEL_H;
    let _ = writeln!(
        out,
        r#"<g class="panel" data-panel="{title}" data-x-max="{x_max}" data-y-max="{y_max}">"#
    );
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="{:.1}" font-size="14" font-weight="bold">{}</text>"#,
        y0 - 10.0,
        escape(title)
    );
    let _ = writeln!(
        out,
        r##"<rect x="{LEFT}" y="{y0}" width="{plot_w}" height="{PANEL_H}" fill="none" stroke="#999"/>"##
    );
    for k in 0..=4 {
        let v = y_max * k as f64 / 4.0;
        let y = sy(v);
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
            LEFT + plot_w,
            LEFT - 6.0,
            y + 4.0,
            fmt_num(v)
        );
        let x = x_max * k as f64 / 4.0;
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"#,
            sx(x),
            y0 + PANEL_H + 16.0,
            fmt_time(x)
        );
    }
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<String> = s
            .points
            .iter()
            .map(|(x, y)| format!("{:.2},{:.2}", sx(*x), sy(*y)))
            .collect();
        let dash = if s.dashed {
            r#" stroke-dasharray="6,3""#
        } else {
            ""
        };
        let _ = writeln!(
            out,
            r#"<polyline data-panel="{title}" data-series="{}" fill="none" stroke="{color}" stroke-width="1.6"{dash} points="{}"/>"#,
            escape(&s.label),
            pts.join(" ")
        );
        let ly = y0 + 14.0 + i as f64 * 16.0;
        let lx = LEFT + plot_w + 12.0;
        let _ = writeln!(
            out,
            r#"<line x1="{lx:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{color}" stroke-width="2"{dash}/><text x="{:.1}" y="{ly:.1}" font-size="11">{}</text>"#,
            ly - 4.0,
            lx + 18.0,
            ly - 4.0,
            lx + 24.0,
            escape(&s.label)
        );
    }
    out.push_str("</g>\n");
}

fn fmt_num(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn fmt_time(s: f64) -> String {
    if s >= 3600.0 {
        format!("{:.1} h", s / 3600.0)
    } else if s >= 60.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{s:.0} s")
    }
}

/// Steps: a value holds until the next sample.
fn steps(points: impl Iterator<Item = (f64, f64)>) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    for (x, y) in points {
        if let Some(&(_, last)) = out.last()
            && last != y
        {
            out.push((x, last));
        }
        out.push((x, y));
    }
    out
}

/// The SVG of `runs` (label, run), on one time axis.
pub fn svg(runs: &[(String, &Run)]) -> String {
    let x_max = nice(
        runs.iter()
            .flat_map(|(_, r)| r.series.last().map(|s| s.t_s))
            .fold(0.0, f64::max),
    );
    let many = runs.len() > 1;
    let name = |run: &str, what: &str| {
        if many {
            format!("{run}: {what}")
        } else {
            what.to_string()
        }
    };
    let mut nodes = Vec::new();
    let mut pending = Vec::new();
    let mut cost = Vec::new();
    for (ri, (label, run)) in runs.iter().enumerate() {
        let types: Vec<&String> = run
            .series
            .first()
            .map(|s| s.nodes.keys().collect())
            .unwrap_or_default();
        for t in types {
            nodes.push(Series {
                label: name(label, t),
                points: steps(
                    run.series
                        .iter()
                        .map(|s| (s.t_s, s.nodes.get(t).copied().unwrap_or(0) as f64)),
                ),
                dashed: ri % 2 == 1,
            });
        }
        pending.push(Series {
            label: name(label, "pending work"),
            points: steps(run.series.iter().map(|s| (s.t_s, s.pending as f64))),
            dashed: ri % 2 == 1,
        });
        cost.push(Series {
            label: name(label, "cost"),
            points: run.series.iter().map(|s| (s.t_s, s.cost)).collect(),
            dashed: ri % 2 == 1,
        });
    }
    let height = 3.0 * (PANEL_H + TOP + BOTTOM);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif">"#
    );
    out.push_str("<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
    panel(&mut out, 0, "nodes by type", x_max, &nodes);
    panel(&mut out, 1, "pending work (units)", x_max, &pending);
    panel(&mut out, 2, "cost (cumulative)", x_max, &cost);
    out.push_str("</svg>\n");
    out
}
