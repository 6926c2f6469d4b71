//! `--format svg`: a chart to look at. One panel per algorithm, one column per chart column
//! (1 s by default): admitted requests in green at the bottom, rejected ones hatched red with an
//! x pattern on top, dashed lines at the window edges, and a shaded band over the window of
//! `period` that admitted the most (the true rate). Plain string formatting, no dependencies.

use std::fmt::Write;

use super::engine::Run;
use super::traffic::format_duration;
use super::Report;

const WIDTH: f64 = 900.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 16.0;
const PANEL_HEIGHT: f64 = 150.0;
const PANEL_GAP: f64 = 78.0;
const TOP: f64 = 122.0;

/// Renders the report as a standalone SVG document.
pub fn render(report: &Report) -> String {
    let runs = &report.runs;
    let height = TOP + runs.len() as f64 * (PANEL_HEIGHT + PANEL_GAP) + 8.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">"##
    );
    s.push_str(
        r##"<defs><pattern id="rejected" width="8" height="8" patternUnits="userSpaceOnUse"><rect width="8" height="8" fill="#fbe3e1"/><path d="M0,0 L8,8 M8,0 L0,8" stroke="#d1352b" stroke-width="1.2"/></pattern></defs>
<rect width="100%" height="100%" fill="#ffffff"/>
"##,
    );
    let q = &report.quota;
    let title = match report.preset {
        Some(p) => format!(
            "floodgate simulate: {} (preset {})",
            report.traffic.name,
            p.as_str()
        ),
        None => format!("floodgate simulate: {}", report.traffic.name),
    };
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="26" font-size="18" font-weight="bold">{}</text>"##,
        escape(&title)
    );
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="46" fill="#333">{}</text>"##,
        escape(&report.traffic.description)
    );
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="64" fill="#333">limit {} ({}), burst {} for the bucket algorithms</text>"##,
        escape(&q.to_string()),
        escape(&q.describe()),
        q.burst(),
    );
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="82" fill="#333">{}</text>"##,
        escape(&report.setup.describe())
    );
    // Legend.
    let y = 96.0;
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="{y}" width="12" height="12" fill="#2ca02c"/><text x="{}" y="{}">admitted</text><rect x="{}" y="{y}" width="12" height="12" fill="url(#rejected)" stroke="#d1352b"/><text x="{}" y="{}">rejected (429)</text><rect x="{}" y="{y}" width="12" height="12" fill="#fff3b0"/><text x="{}" y="{}">busiest window of {}</text><line x1="{}" y1="{y}" x2="{}" y2="{}" stroke="#555" stroke-dasharray="3,3"/><text x="{}" y="{}">window edge</text>"##,
        LEFT + 17.0,
        y + 10.5,
        LEFT + 90.0,
        LEFT + 107.0,
        y + 10.5,
        LEFT + 215.0,
        LEFT + 232.0,
        y + 10.5,
        escape(&format_duration(q.period())),
        LEFT + 385.0,
        LEFT + 385.0,
        y + 12.0,
        LEFT + 392.0,
        y + 10.5,
    );
    let scale = report.chart_scale();
    for (i, run) in runs.iter().enumerate() {
        let top = TOP + i as f64 * (PANEL_HEIGHT + PANEL_GAP) + 22.0;
        panel(&mut s, report, run, top, scale);
    }
    s.push_str("</svg>\n");
    s
}

/// One algorithm's panel with its chart area starting at `top`.
// Over 120 lines: one panel drawn section by section (busiest window, grid, bars, window
// edges, axes) on one geometry (scales, x/y mappings) that every section reads.
fn panel(s: &mut String, report: &Report, run: &Run, top: f64, scale: u64) {
    let sum = &run.summary;
    let q = &report.quota;
    let cols = &sum.columns;
    let plot_width = WIDTH - LEFT - RIGHT;
    let col_width = plot_width / cols.len().max(1) as f64;
    let span_us = cols.len() as f64 * sum.column_us as f64;
    let x_of = |t_us: f64| LEFT + t_us / span_us * plot_width;
    let y_of = |count: f64| top + PANEL_HEIGHT - count / scale as f64 * PANEL_HEIGHT;
    let bottom = top + PANEL_HEIGHT;

    let peak = sum.max_in_period.as_ref();
    let mut heading = format!(
        "{}: {} admitted, {} rejected",
        run.kind.as_str(),
        sum.admitted,
        sum.rejected + sum.impossible
    );
    if let Some(p) = peak {
        let _ = write!(
            heading,
            "; at most {} in any {} ({:.2}x the limit)",
            p.units,
            format_duration(q.period()),
            sum.over_admission
        );
    }
    if let Some((admitted, _)) = run.shared_reference {
        let _ = write!(heading, "; one shared counter: {admitted}");
    }
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="{}" font-size="14" font-weight="bold">{}</text>"##,
        top - 12.0,
        escape(&heading)
    );

    // The busiest window, behind the bars.
    if let Some(p) = peak {
        let x0 = x_of(p.start_us as f64);
        let x1 = x_of((p.start_us + q.period()) as f64).min(LEFT + plot_width);
        let _ = writeln!(
            s,
            r##"<rect x="{x0:.1}" y="{top}" width="{:.1}" height="{PANEL_HEIGHT}" fill="#fff3b0"/><path d="M{x0:.1},{:.1} v-5 H{x1:.1} v5" fill="none" stroke="#c98a00" stroke-width="1.5"/>"##,
            (x1 - x0).max(1.0),
            top - 1.0
        );
    }
    // Horizontal grid and labels at 0, half and full scale.
    for frac in [0.0, 0.5, 1.0] {
        let value = (scale as f64 * frac).round();
        let y = y_of(value);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#555">{value}</text>"##,
            LEFT + plot_width,
            LEFT - 6.0,
            y + 4.0
        );
    }
    // Bars.
    let gap = (col_width * 0.15).min(4.0);
    for (i, c) in cols.iter().enumerate() {
        let x = LEFT + i as f64 * col_width + gap / 2.0;
        let w = (col_width - gap).max(1.0);
        let rejected = c.rejected + c.impossible;
        if c.admitted > 0 {
            let y = y_of(c.admitted as f64);
            let _ = writeln!(
                s,
                r##"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{:.1}" fill="#2ca02c"><title>{}: {} admitted</title></rect>"##,
                bottom - y,
                escape(&format_duration(c.start_us)),
                c.admitted
            );
        }
        if rejected > 0 {
            let y0 = y_of(c.admitted as f64);
            let y1 = y_of((c.admitted + rejected) as f64);
            let _ = writeln!(
                s,
                r##"<rect x="{x:.1}" y="{y1:.1}" width="{w:.1}" height="{:.1}" fill="url(#rejected)" stroke="#d1352b" stroke-width="0.8"><title>{}: {} rejected</title></rect>"##,
                (y0 - y1).max(1.0),
                escape(&format_duration(c.start_us)),
                rejected
            );
        }
    }
    // Window edges (where the fixed window resets), when there are few enough to read.
    let edges = (span_us / q.period() as f64).floor() as u64;
    if (1..=40).contains(&edges) {
        for k in 1..=edges {
            let x = x_of((k * q.period()) as f64);
            if x < LEFT + plot_width - 0.5 {
                let _ = writeln!(
                    s,
                    r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#555" stroke-dasharray="3,3"/>"##,
                    top - 2.0,
                    bottom + 4.0
                );
            }
        }
    }
    // Axis and time labels.
    let _ = writeln!(
        s,
        r##"<line x1="{LEFT}" y1="{bottom}" x2="{:.1}" y2="{bottom}" stroke="#333"/>"##,
        LEFT + plot_width
    );
    let step = (38.0 / col_width).ceil().max(1.0) as usize;
    let step = [1, 2, 5, 10, 20, 50, 100, 200]
        .into_iter()
        .find(|k| *k >= step)
        .unwrap_or(step);
    for (i, c) in cols.iter().enumerate().step_by(step) {
        let x = LEFT + i as f64 * col_width;
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{bottom}" x2="{x:.1}" y2="{:.1}" stroke="#333"/><text x="{x:.1}" y="{:.1}" fill="#555" font-size="11">{}</text>"##,
            bottom + 4.0,
            bottom + 16.0,
            escape(&format_duration(c.start_us))
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#777" font-size="11">one column per {}</text>"##,
        LEFT + plot_width,
        bottom + 30.0,
        escape(&format_duration(sum.column_us))
    );
}

/// Escapes text for SVG content and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            _ => out.push(ch),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(escape(r#"a<b>&"c'"#), "a&lt;b&gt;&amp;&quot;c&apos;");
    }
}
