//! The HTTP report as a table (a person reads it in ten seconds) or an SVG chart.

use std::fmt::Write;

use super::report::{secs, HttpReport, COLUMN_US};
use crate::svg::escape;
use crate::Verdict;

/// The verdict table of `--format table`: a heading, one line per check, and the exit status.
pub fn table(report: &HttpReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "floodgate audit http {}", report.url);
    let _ = writeln!(
        s,
        "declared limit: {} ({})",
        report.declared.describe(),
        if report.limit_given {
            "given with --limit".to_string()
        } else {
            report.declared.source.clone()
        }
    );
    let _ = writeln!(
        s,
        "sent {} requests in {}: {} admitted, {} denied, {} errors",
        report.sent,
        secs(report.duration_us),
        report.admitted,
        report.denied,
        report.errors
    );
    s.push('\n');
    verdict_lines(&mut s, &report.verdicts);
    s
}

/// Columns a verdict table fills before a summary wraps.
const TABLE_WIDTH: usize = 110;

/// `text` in lines of at most `width` characters, broken at spaces (a longer word stands alone).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    lines
}

/// `check  verdict  summary` lines and the closing exit-status line, shared by both audits.
pub(crate) fn verdict_lines(s: &mut String, verdicts: &[Verdict]) {
    let w = verdicts
        .iter()
        .map(|v| v.check.len())
        .max()
        .unwrap_or(5)
        .max(5);
    let _ = writeln!(s, "{:<w$}  {:<12}  what it rests on", "check", "verdict");
    // The summary wraps under its column, so the check and its verdict stand alone at the left.
    let indent = w + 2 + 12 + 2;
    let width = TABLE_WIDTH.saturating_sub(indent).max(40);
    for v in verdicts {
        for (i, line) in wrap(&v.summary, width).iter().enumerate() {
            if i == 0 {
                let _ = writeln!(s, "{:<w$}  {:<12}  {line}", v.check, v.level.label());
            } else {
                let _ = writeln!(s, "{:indent$}{line}", "");
            }
        }
    }
    let dangers = verdicts.iter().filter(|v| v.is_danger()).count();
    s.push('\n');
    if dangers == 0 {
        let _ = writeln!(s, "no danger found (exit status 0)");
    } else {
        let _ = writeln!(
            s,
            "{dangers} danger{} found (exit status 1)",
            if dangers == 1 { "" } else { "s" }
        );
    }
}

const WIDTH: f64 = 900.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 150.0;
const HEIGHT: f64 = 240.0;

/// The SVG of `--format svg`: admitted (green) and denied (hatched red) answers per 100 ms,
/// errors in grey, the phases marked along the top, and, when the window is known, the most
/// admitted in the trailing window (a line) against the declared limit (dashed).
// Over 120 lines: one SVG drawn section by section (legend, grid, phases, bars, the trailing
// window, axes) on one geometry (scales, x/y mappings, sizes) that every section reads.
pub fn svg(report: &HttpReport) -> String {
    let cols = &report.columns;
    let n = cols.len().max(1);
    let plot_w = WIDTH - LEFT - RIGHT;
    let col_w = plot_w / n as f64;
    // Trailing-window sums of admissions, in columns.
    let window_cols = report
        .declared
        .window_us
        .map(|w| ((w / COLUMN_US).max(1)) as usize);
    let rolling: Vec<u64> = match window_cols {
        Some(k) => (0..cols.len())
            .map(|i| {
                cols[i.saturating_sub(k - 1)..=i]
                    .iter()
                    .map(|c| c.admitted)
                    .sum()
            })
            .collect(),
        None => Vec::new(),
    };
    let bar_max = cols
        .iter()
        .map(|c| c.admitted + c.denied + c.errors)
        .max()
        .unwrap_or(0);
    let scale = (bar_max
        .max(rolling.iter().copied().max().unwrap_or(0))
        .max(report.declared.limit) as f64
        * 1.1)
        .max(1.0);
    let bottom = TOP + HEIGHT;
    let y_of = |v: f64| bottom - v / scale * HEIGHT;
    let height = bottom + 70.0;
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
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="26" font-size="18" font-weight="bold">floodgate audit http {}</text>"##,
        escape(&report.url)
    );
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="46" fill="#333">declared limit {} ({}); {} requests in {}: {} admitted, {} denied, {} errors</text>"##,
        escape(&report.declared.describe()),
        escape(if report.limit_given {
            "--limit"
        } else {
            &report.declared.source
        }),
        report.sent,
        secs(report.duration_us),
        report.admitted,
        report.denied,
        report.errors
    );
    let dangers: Vec<&str> = report
        .verdicts
        .iter()
        .filter(|v| v.is_danger())
        .map(|v| v.check.as_str())
        .collect();
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="64" fill="{}">{}</text>"##,
        if dangers.is_empty() {
            "#2c7a2c"
        } else {
            "#d1352b"
        },
        escape(&if dangers.is_empty() {
            "no danger found".to_string()
        } else {
            format!("dangers: {}", dangers.join(", "))
        })
    );
    // Legend.
    let y = 78.0;
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="{y}" width="12" height="12" fill="#2ca02c"/><text x="{}" y="{}">admitted</text><rect x="{}" y="{y}" width="12" height="12" fill="url(#rejected)" stroke="#d1352b"/><text x="{}" y="{}">denied</text><rect x="{}" y="{y}" width="12" height="12" fill="#999"/><text x="{}" y="{}">error</text><line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#1f5fbf" stroke-width="2"/><text x="{}" y="{}">admitted in the trailing window</text><line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#c98a00" stroke-width="2" stroke-dasharray="6,4"/><text x="{}" y="{}">declared limit</text>"##,
        LEFT + 17.0,
        y + 10.5,
        LEFT + 90.0,
        LEFT + 107.0,
        y + 10.5,
        LEFT + 165.0,
        LEFT + 182.0,
        y + 10.5,
        LEFT + 230.0,
        y + 6.0,
        LEFT + 250.0,
        y + 6.0,
        LEFT + 255.0,
        y + 10.5,
        LEFT + 470.0,
        y + 6.0,
        LEFT + 490.0,
        y + 6.0,
        LEFT + 495.0,
        y + 10.5,
    );
    // Grid.
    for frac in [0.0, 0.5, 1.0] {
        let value = (scale / 1.1 * frac).round();
        let yy = y_of(value);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#555">{value}</text>"##,
            LEFT + plot_w,
            LEFT - 6.0,
            yy + 4.0
        );
    }
    // Phases along the top; a label too close to the one before it goes one row up.
    let mut last_x = f64::MIN;
    let mut row = 0.0;
    for p in &report.phases {
        let x0 = LEFT + p.start_us as f64 / COLUMN_US as f64 * col_w;
        row = if x0 - last_x < 70.0 {
            (row + 1.0) % 3.0
        } else {
            0.0
        };
        last_x = x0;
        let y = TOP - 6.0 - row * 13.0;
        // Near the right edge the label ends at the line instead of starting there.
        let (tx, anchor) = if x0 > LEFT + plot_w - 100.0 {
            (x0 - 3.0, "end")
        } else {
            (x0 + 3.0, "start")
        };
        let _ = writeln!(
            s,
            r##"<line x1="{x0:.1}" y1="{y:.1}" x2="{x0:.1}" y2="{bottom}" stroke="#bbb" stroke-dasharray="2,3"/><text x="{tx:.1}" y="{y:.1}" text-anchor="{anchor}" fill="#777" font-size="10">{}</text>"##,
            p.phase
        );
    }
    // Bars.
    let gap = (col_w * 0.15).min(2.0);
    for (i, c) in cols.iter().enumerate() {
        let x = LEFT + i as f64 * col_w + gap / 2.0;
        let w = (col_w - gap).max(0.8);
        let t = secs(c.start_us);
        let mut base = 0u64;
        for (count, fill, what) in [
            (c.admitted, "#2ca02c", "admitted"),
            (c.denied, "url(#rejected)", "denied"),
            (c.errors, "#999", "errors"),
        ] {
            if count == 0 {
                continue;
            }
            let y0 = y_of(base as f64);
            let y1 = y_of((base + count) as f64);
            let _ = writeln!(
                s,
                r##"<rect x="{x:.1}" y="{y1:.1}" width="{w:.1}" height="{:.1}" fill="{fill}"><title>{t}: {count} {what}</title></rect>"##,
                (y0 - y1).max(0.8)
            );
            base += count;
        }
    }
    // Trailing-window line and the declared limit.
    if !rolling.is_empty() {
        let mut d = String::new();
        for (i, v) in rolling.iter().enumerate() {
            let x = LEFT + (i as f64 + 1.0) * col_w;
            let _ = write!(
                d,
                "{}{x:.1},{:.1} ",
                if i == 0 { "M" } else { "L" },
                y_of(*v as f64)
            );
        }
        let _ = writeln!(
            s,
            r##"<path d="{}" fill="none" stroke="#1f5fbf" stroke-width="2"/>"##,
            d.trim_end()
        );
    }
    let yl = y_of(report.declared.limit as f64);
    let _ = writeln!(
        s,
        r##"<line x1="{LEFT}" y1="{yl:.1}" x2="{:.1}" y2="{yl:.1}" stroke="#c98a00" stroke-width="2" stroke-dasharray="6,4"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#c98a00">limit {}</text>"##,
        LEFT + plot_w,
        LEFT + plot_w,
        yl - 4.0,
        escape(&report.declared.describe())
    );
    // Axis and time labels.
    let _ = writeln!(
        s,
        r##"<line x1="{LEFT}" y1="{bottom}" x2="{:.1}" y2="{bottom}" stroke="#333"/>"##,
        LEFT + plot_w
    );
    let step = (50.0 / col_w).ceil().max(1.0) as usize;
    let step = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
        .into_iter()
        .find(|k| *k >= step)
        .unwrap_or(step);
    for (i, c) in cols.iter().enumerate().step_by(step) {
        let x = LEFT + i as f64 * col_w;
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{bottom}" x2="{x:.1}" y2="{:.1}" stroke="#333"/><text x="{x:.1}" y="{:.1}" fill="#555" font-size="11">{}</text>"##,
            bottom + 4.0,
            bottom + 16.0,
            secs(c.start_us)
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#777" font-size="11">one column per 100 ms, by the time each answer came</text>"##,
        LEFT + plot_w,
        bottom + 32.0
    );
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn summaries_wrap_at_spaces() {
        assert_eq!(super::wrap("a bb ccc dddd", 6), vec!["a bb", "ccc", "dddd"]);
        assert_eq!(
            super::wrap("averyveryverylongword x", 5),
            vec!["averyveryverylongword", "x"]
        );
        assert_eq!(super::wrap("", 5), vec![""]);
    }
}
