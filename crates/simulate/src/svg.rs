//! `--format svg`: a chart to look at. One panel per algorithm, one column per chart column
//! (1 s by default): admitted requests in green at the bottom, rejected ones hatched red with an
//! x pattern on top, dashed lines at the window edges, and a shaded band over the window of
//! `period` that admitted the most (the true rate). Plain string formatting, no dependencies.
//!
//! The layout is computed from the text: every line is measured (`text_width`, an upper
//! estimate for DejaVu Sans, Helvetica and Arial) and wrapped to the canvas, the legend flows
//! onto further lines when it does not fit, and every block starts below the one before, so no
//! text is cut and nothing overlaps. Time axes read in the unit the span reads in (`19 h`, not
//! `68400 s`; [`span_unit`]).

use std::fmt::Write;

use floodgate_core::Micros;

use super::engine::Run;
use super::traffic::{format_duration, format_in_unit, format_readable, span_unit};
use super::Report;

const WIDTH: f64 = 900.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 16.0;
const PLOT_WIDTH: f64 = WIDTH - LEFT - RIGHT;
const PANEL_HEIGHT: f64 = 150.0;
/// Font sizes: the title, a panel's heading, body text, axis labels.
const TITLE: f64 = 18.0;
const HEADING: f64 = 14.0;
const BODY: f64 = 12.0;
const SMALL: f64 = 11.0;

/// An upper estimate of the width of `text` at `size` px in DejaVu Sans (the widest of the
/// fonts the chart names), bold when `bold`: per character, from the font's advance widths
/// rounded up (narrow punctuation and `i l j t f r`, wide `m w` and capitals, the rest).
pub(crate) fn text_width(text: &str, size: f64, bold: bool) -> f64 {
    let em: f64 = text
        .chars()
        .map(|c| match c {
            ' ' | '.' | ',' | ':' | ';' | '\'' | '|' | '!' | 'i' | 'l' | 'j' => 0.34,
            '(' | ')' | '[' | ']' | 'f' | 't' | 'r' | '-' | '/' | '"' => 0.45,
            'm' | 'w' | 'M' | 'W' | '%' | '@' => 0.98,
            '#' | '+' | '<' | '=' | '>' | '^' | '~' | '&' => 0.86,
            c if c.is_ascii_uppercase() => 0.8,
            c if c.is_ascii() => 0.66,
            // Symbols such as `µ` and `×`, and letters of other scripts: as wide as an `m`.
            _ => 1.0,
        })
        .sum();
    em * size * if bold { 1.12 } else { 1.0 }
}

/// `text` in lines of at most `width` px: words are kept whole, except a word wider than a
/// line (a long key), which is cut where the line is full.
fn wrap(text: &str, size: f64, bold: bool, width: f64) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    let mut words: Vec<String> = Vec::new();
    for word in text.split(' ') {
        let mut piece = String::new();
        for c in word.chars() {
            piece.push(c);
            if text_width(&piece, size, bold) > width {
                piece.pop();
                words.push(std::mem::take(&mut piece));
                piece.push(c);
            }
        }
        words.push(piece);
    }
    for word in words {
        let word = word.as_str();
        let candidate = if line.is_empty() {
            word.to_string()
        } else {
            format!("{line} {word}")
        };
        if !line.is_empty() && text_width(&candidate, size, bold) > width {
            lines.push(std::mem::replace(&mut line, word.to_string()));
        } else {
            line = candidate;
        }
    }
    lines.push(line);
    lines
}

/// Writes `text` wrapped to the canvas from baseline `y` on; returns the baseline after it.
fn paragraph(s: &mut String, text: &str, size: f64, attrs: &str, y: f64) -> f64 {
    let bold = attrs.contains("bold");
    let mut y = y;
    for line in wrap(text, size, bold, PLOT_WIDTH) {
        let _ = writeln!(
            s,
            r##"<text x="{LEFT}" y="{y:.1}" font-size="{size}" {attrs}>{}</text>"##,
            escape(&line)
        );
        y += size * 1.45;
    }
    y
}

/// Renders the report as a standalone SVG document.
pub fn render(report: &Report) -> String {
    let mut body = String::new();
    let q = &report.quota;
    let title = match report.preset {
        Some(p) => format!(
            "floodgate simulate: {} (preset {})",
            report.traffic.name,
            p.as_str()
        ),
        None => format!("floodgate simulate: {}", report.traffic.name),
    };
    let mut y = paragraph(&mut body, &title, TITLE, r#"font-weight="bold""#, 26.0);
    let grey = r##"fill="#333""##;
    y = paragraph(&mut body, &report.traffic.description, BODY, grey, y - 4.0);
    let policy = format!(
        "limit {} ({}), burst {} for the bucket algorithms",
        q,
        q.describe(),
        q.burst()
    );
    y = paragraph(&mut body, &policy, BODY, grey, y);
    y = paragraph(&mut body, &report.setup.describe(), BODY, grey, y);
    if let Some(wait) = report.max_wait {
        let text = format!(
            "requests wait up to {} for a slot instead of a rejection",
            format_readable(wait)
        );
        y = paragraph(&mut body, &text, BODY, grey, y);
    }
    if let Some((zone, date)) = &report.calendar {
        let text = format!("calendar days of {zone}, from local midnight of {date}");
        y = paragraph(&mut body, &text, BODY, grey, y);
    }
    y = legend(&mut body, report, y - 8.0);
    let scale = report.chart_scale();
    for run in &report.runs {
        y = panel(&mut body, report, run, y + 14.0, scale);
    }
    let height = (y + 8.0).ceil();
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
    s.push_str(&body);
    s.push_str("</svg>\n");
    s
}

/// The legend from `top` on, its items flowing onto a further line when the canvas is full;
/// each item is a `<g class="legend-item">`. Returns the bottom of the last line.
fn legend(s: &mut String, report: &Report, top: f64) -> f64 {
    let items = [
        (
            r##"<rect x="{x}" y="{y}" width="12" height="12" fill="#2ca02c"/>"##,
            "admitted".to_string(),
        ),
        (
            r##"<rect x="{x}" y="{y}" width="12" height="12" fill="url(#rejected)" stroke="#d1352b"/>"##,
            "rejected (429)".to_string(),
        ),
        (
            r##"<rect x="{x}" y="{y}" width="12" height="12" fill="#fff3b0"/>"##,
            format!(
                "busiest window of {}",
                format_readable(report.quota.period())
            ),
        ),
        (
            r##"<line x1="{xm}" y1="{y}" x2="{xm}" y2="{y12}" stroke="#555" stroke-dasharray="3,3"/>"##,
            "window edge".to_string(),
        ),
    ];
    let line_height = 18.0;
    let (mut x, mut y) = (LEFT, top);
    for (swatch, label) in items {
        let width = 17.0 + text_width(&label, BODY, false);
        if x > LEFT && x + width > WIDTH - RIGHT {
            x = LEFT;
            y += line_height;
        }
        let swatch = swatch
            .replace("{xm}", &format!("{:.1}", x + 6.0))
            .replace("{x}", &format!("{x:.1}"))
            .replace("{y12}", &format!("{:.1}", y + 12.0))
            .replace("{y}", &format!("{y:.1}"));
        let _ = writeln!(
            s,
            r##"<g class="legend-item">{swatch}<text x="{:.1}" y="{:.1}">{}</text></g>"##,
            x + 17.0,
            y + 10.5,
            escape(&label)
        );
        x += width + 22.0;
    }
    y + line_height
}

/// One algorithm's panel, its heading's first baseline at `top`; returns the bottom of the
/// panel (below its time axis).
// Over 120 lines: one panel drawn section by section (heading, busiest window, grid, bars,
// window edges, axes) on one geometry (scales, x/y mappings) that every section reads.
fn panel(s: &mut String, report: &Report, run: &Run, top: f64, scale: u64) -> f64 {
    let sum = &run.summary;
    let q = &report.quota;
    let cols = &sum.columns;
    let col_width = PLOT_WIDTH / cols.len().max(1) as f64;
    let span_us = cols.len() as u64 * sum.column_us;
    let x_of = |t_us: f64| LEFT + t_us / (span_us.max(1) as f64) * PLOT_WIDTH;

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
            format_readable(q.period()),
            sum.over_admission
        );
    }
    if let Some((admitted, _)) = run.shared_reference {
        let _ = write!(heading, "; one shared counter: {admitted}");
    }
    let after = paragraph(s, &heading, HEADING, r#"font-weight="bold""#, top);
    // The busiest window's bracket (6 px) sits between the heading and the plot.
    let top = after - HEADING * 1.45 + 16.0;
    let bottom = top + PANEL_HEIGHT;
    let y_of = |count: f64| bottom - count / scale as f64 * PANEL_HEIGHT;
    let _ = writeln!(
        s,
        r##"<rect class="plot-area" x="{LEFT}" y="{top:.1}" width="{PLOT_WIDTH}" height="{PANEL_HEIGHT}" fill="none"/>"##
    );

    // The busiest window, behind the bars.
    if let Some(p) = peak {
        let x0 = x_of(p.start_us as f64);
        let x1 = x_of((p.start_us + q.period()) as f64).min(LEFT + PLOT_WIDTH);
        let _ = writeln!(
            s,
            r##"<rect x="{x0:.1}" y="{top:.1}" width="{:.1}" height="{PANEL_HEIGHT}" fill="#fff3b0"/><path d="M{x0:.1},{:.1} v-5 H{x1:.1} v5" fill="none" stroke="#c98a00" stroke-width="1.5"/>"##,
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
            LEFT + PLOT_WIDTH,
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
                escape(&format_readable(c.start_us)),
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
                escape(&format_readable(c.start_us)),
                rejected
            );
        }
    }
    // Window edges (where the fixed window resets), when there are few enough to read.
    let edges = span_us / q.period().max(1);
    if (1..=40).contains(&edges) {
        for k in 1..=edges {
            let x = x_of((k * q.period()) as f64);
            if x < LEFT + PLOT_WIDTH - 0.5 {
                let _ = writeln!(
                    s,
                    r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#555" stroke-dasharray="3,3"/>"##,
                    top - 2.0,
                    bottom + 4.0
                );
            }
        }
    }
    time_axis(s, span_us, bottom, &x_of);
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#777" font-size="{SMALL}">one column per {}</text>"##,
        LEFT + PLOT_WIDTH,
        bottom + 32.0,
        escape(&format_readable(sum.column_us))
    );
    bottom + 36.0
}

/// Steps between time ticks, in microseconds: round numbers of milliseconds, seconds,
/// minutes, hours and days.
const TICK_STEPS_US: [Micros; 28] = [
    1_000,
    2_000,
    5_000,
    10_000,
    20_000,
    50_000,
    100_000,
    200_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    15_000_000,
    30_000_000,
    60_000_000,
    120_000_000,
    300_000_000,
    600_000_000,
    900_000_000,
    1_800_000_000,
    3_600_000_000,
    7_200_000_000,
    10_800_000_000,
    21_600_000_000,
    43_200_000_000,
    86_400_000_000,
    604_800_000_000,
];

/// The time axis under a plot spanning `span_us`: a tick at every multiple of a round step,
/// labelled in the span's unit (`0 h`, `2 h`, ... `24 h`), as many as fit without touching.
fn time_axis(s: &mut String, span_us: Micros, bottom: f64, x_of: &dyn Fn(f64) -> f64) {
    let _ = writeln!(
        s,
        r##"<line x1="{LEFT}" y1="{bottom:.1}" x2="{:.1}" y2="{bottom:.1}" stroke="#333"/>"##,
        LEFT + PLOT_WIDTH
    );
    let unit = span_unit(span_us);
    let label = |t: Micros| {
        if unit.1 == "s" && span_us < 2 * 1_000_000 {
            format_duration(t)
        } else {
            format_in_unit(t, unit)
        }
    };
    // The widest label, plus room: the step whose ticks are at least that far apart.
    let widest = text_width(&label(span_us), SMALL, false) + 14.0;
    let step = TICK_STEPS_US
        .into_iter()
        .find(|step| *step as f64 / span_us.max(1) as f64 * PLOT_WIDTH >= widest)
        .unwrap_or(span_us.max(1));
    let mut t: Micros = 0;
    while t <= span_us {
        let x = x_of(t as f64);
        let text = label(t);
        let w = text_width(&text, SMALL, false);
        // Centred under the tick, kept inside the canvas at either end.
        // The first starts at its tick, clear of the count axis' `0` to its left.
        let anchor = if t == 0 {
            "start"
        } else if x + w / 2.0 > WIDTH - 2.0 {
            "end"
        } else {
            "middle"
        };
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{bottom:.1}" x2="{x:.1}" y2="{:.1}" stroke="#333"/><text x="{x:.1}" y="{:.1}" text-anchor="{anchor}" fill="#555" font-size="{SMALL}">{}</text>"##,
            bottom + 4.0,
            bottom + 16.0,
            escape(&text)
        );
        t += step;
    }
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

    #[test]
    fn long_text_wraps_within_the_canvas_and_keeps_every_word() {
        let text = "8 job runners sharing one quota (key \"client\"), each calling every 10 min \
                    for 24 h: a search (100 units) every 10 calls, list calls (1 unit) otherwise \
                    and some more words to make it longer than one line";
        let lines = wrap(text, BODY, false, PLOT_WIDTH);
        assert!(lines.len() >= 2, "{lines:?}");
        for line in &lines {
            assert!(text_width(line, BODY, false) <= PLOT_WIDTH, "{line}");
        }
        assert_eq!(lines.join(" "), text);
    }
}
