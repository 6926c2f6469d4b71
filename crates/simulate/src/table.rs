//! `--format table`: a header, a comparison of totals and the true rate, a per-column table, and
//! one terminal chart per algorithm (admitted `█`, rejected `x`).

use std::fmt::Write;

use floodgate_core::Micros;

use super::engine::{Column, Run};
use super::traffic::{format_duration, format_in_unit, format_readable, span_unit};
use super::Report;

/// Rows of the terminal chart.
const CHART_HEIGHT: u64 = 8;

/// Renders the whole report as text.
// Over 120 lines: the text report in output order (totals, queue vs reject, the per-column
// table, weighted costs, the charts), every section on the same runs and column widths.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let q = &report.quota;
    let period = format_readable(q.period());
    let preset = report
        .preset
        .map(|p| format!(" (preset {})", p.as_str()))
        .unwrap_or_default();
    let _ = writeln!(out, "scenario: {}{preset}", report.traffic.name);
    let _ = writeln!(out, "traffic:  {}", report.traffic.description);
    let _ = writeln!(
        out,
        "policy:   {} ({}), burst {} for the bucket algorithms",
        q,
        q.describe(),
        q.burst()
    );
    if let Some((zone, start)) = &report.calendar {
        let _ = writeln!(
            out,
            "calendar: the limit per calendar day of {zone}, the run from local midnight of {start}"
        );
    }
    let _ = writeln!(out, "setup:    {}", report.setup.describe());
    if let Some(max_wait) = report.max_wait {
        let _ = writeln!(
            out,
            "waiting:  up to {} for a slot (--max-wait), instead of a rejection",
            format_readable(max_wait)
        );
    }
    out.push('\n');

    // Totals and the true rate, one row per algorithm.
    let any_impossible = report.runs.iter().any(|r| r.summary.impossible > 0);
    let peak_header = format!("max in any {period}");
    let _ = write!(
        out,
        "{:<15}{:>10}{:>10}",
        "algorithm", "admitted", "rejected"
    );
    if any_impossible {
        let _ = write!(out, "{:>11}", "impossible");
    }
    let _ = write!(
        out,
        "{:>w$}{:>10}",
        peak_header,
        "vs limit",
        w = peak_header.len() + 2
    );
    let has_reference = report.runs.iter().any(|r| r.shared_reference.is_some());
    if has_reference {
        let _ = write!(out, "  one shared counter");
    }
    out.push('\n');
    for run in &report.runs {
        let s = &run.summary;
        let peak = s.max_in_period.as_ref().map_or(0, |p| p.units);
        let _ = write!(
            out,
            "{:<15}{:>9}{:>9}",
            run.kind.as_str(),
            s.admitted,
            s.rejected
        );
        if any_impossible {
            let _ = write!(out, "{:>11}", s.impossible);
        }
        let _ = write!(
            out,
            "{:>w$}{:>10}",
            peak,
            format!("{:.2}x", s.over_admission),
            w = peak_header.len() + 2
        );
        if let Some((admitted, peak)) = run.shared_reference {
            let _ = write!(out, "  {admitted} admitted, max {peak}");
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "(max in any {period}: the most units admitted for one key in any {period} window, sliding \
         over every decision time;\n vs limit: that max over the limit of {})",
        q.limit()
    );
    if report.runs.iter().any(|r| r.reject_reference.is_some()) {
        // Queue vs reject: the same traffic, waiting up to --max-wait or not at all.
        out.push('\n');
        let _ = writeln!(
            out,
            "{:<15}{:>24}{:>10}{:>14}{:>14}{:>26}",
            "queue vs reject",
            "waiting: admitted/rej",
            "queued",
            "longest wait",
            "mean wait",
            "not waiting: admitted/rej"
        );
        for run in &report.runs {
            let s = &run.summary;
            let mean = s.total_wait_us.checked_div(s.queued).unwrap_or(0);
            let reference = run
                .reject_reference
                .map_or_else(String::new, |r| format!("{}/{}", r.admitted, r.rejected));
            let _ = writeln!(
                out,
                "{:<15}{:>24}{:>10}{:>14}{:>14}{:>26}",
                run.kind.as_str(),
                format!("{}/{}", s.admitted, s.rejected + s.impossible),
                s.queued,
                format_wait(s.longest_wait_us),
                format_wait(mean),
                reference
            );
        }
        let _ = writeln!(
            out,
            "(queued: admitted after waiting for a slot; waits are from arrival to the slot; \
             an admitted request is counted below in the column it runs in)"
        );
    }
    if report.setup.instances > 1 {
        out.push('\n');
        for run in &report.runs {
            let per: Vec<String> = run
                .summary
                .admitted_per_instance
                .iter()
                .map(u64::to_string)
                .collect();
            let _ = writeln!(
                out,
                "{:<15}admitted per instance: {}",
                run.kind.as_str(),
                per.join(" + ")
            );
        }
    }
    let sources = &report.runs[0].summary.per_source;
    if sources.len() > 1 {
        out.push('\n');
        let _ = write!(out, "{:<15}", "by source");
        for s in sources {
            let _ = write!(out, "{:>16}", format!("{} adm/rej", s.source));
        }
        out.push('\n');
        for run in &report.runs {
            let _ = write!(out, "{:<15}", run.kind.as_str());
            for s in &run.summary.per_source {
                let _ = write!(
                    out,
                    "{:>16}",
                    format!("{}/{}", s.admitted, s.rejected + s.impossible)
                );
            }
            out.push('\n');
        }
    }

    // Per-column table: admitted/rejected of each algorithm.
    out.push('\n');
    let column_us = report.runs[0].summary.column_us;
    let _ = write!(out, "{:<12}", format!("per {}", format_readable(column_us)));
    for run in &report.runs {
        let _ = write!(out, "{:>16}", run.kind.as_str());
    }
    out.push('\n');
    let n_columns = report.runs[0].summary.columns.len();
    let span_us = n_columns as u64 * column_us;
    for i in 0..n_columns {
        let start = report.runs[0].summary.columns[i].start_us;
        let _ = write!(out, "{:<12}", time_label(start, span_us));
        for run in &report.runs {
            let c = &run.summary.columns[i];
            let _ = write!(
                out,
                "{:>16}",
                format!("{}/{}", c.admitted, c.rejected + c.impossible)
            );
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "(admitted/rejected requests in each {} from the time shown)",
        format_readable(column_us)
    );
    if report.traffic.requests.iter().any(|r| r.cost != 1) {
        // Weighted costs: what was spent, in units, per column and in all.
        out.push('\n');
        let _ = write!(out, "{:<12}", "units spent");
        for run in &report.runs {
            let _ = write!(out, "{:>16}", run.kind.as_str());
        }
        out.push('\n');
        for i in 0..n_columns {
            let start = report.runs[0].summary.columns[i].start_us;
            let _ = write!(out, "{:<12}", time_label(start, span_us));
            for run in &report.runs {
                let _ = write!(out, "{:>16}", run.summary.columns[i].units_admitted);
            }
            out.push('\n');
        }
        let _ = write!(out, "{:<12}", "total");
        for run in &report.runs {
            let _ = write!(out, "{:>16}", run.summary.units_admitted);
        }
        out.push('\n');
        let _ = writeln!(
            out,
            "(units admitted in each {}; the limit is {} per {period})",
            format_readable(column_us),
            q.limit()
        );
    }

    // One chart per algorithm, all on the same vertical scale.
    let scale = report.chart_scale();
    for run in &report.runs {
        out.push('\n');
        chart(&mut out, run, scale, report.quota.period());
    }
    out
}

/// Draws one run's columns: `█` admitted (bottom), `x` rejected (top), scaled so `scale`
/// requests fill [`CHART_HEIGHT`] rows; window edges (multiples of `period`) marked on the axis.
fn chart(out: &mut String, run: &Run, scale: u64, period: Micros) {
    let column_us = run.summary.column_us;
    let s = &run.summary;
    let _ = writeln!(
        out,
        "{}: {} admitted (█), {} rejected (x)",
        run.kind.as_str(),
        s.admitted,
        s.rejected + s.impossible
    );
    let cols = &s.columns;
    let width = match cols.len() {
        0..=26 => 3,
        27..=40 => 2,
        _ => 1,
    };
    let bars: Vec<(u64, u64)> = cols.iter().map(|c| bar_rows(c, scale)).collect();
    let label_width = scale.to_string().len();
    for row in (1..=CHART_HEIGHT).rev() {
        let label = if row == CHART_HEIGHT {
            scale.to_string()
        } else {
            String::new()
        };
        let _ = write!(out, "{label:>label_width$} |");
        for &(admitted, total) in &bars {
            let cell = if row <= admitted {
                '█'
            } else if row <= total {
                'x'
            } else {
                ' '
            };
            for _ in 0..width.min(2) {
                out.push(cell);
            }
            if width == 3 {
                out.push(' ');
            }
        }
        // Trim trailing spaces of the row.
        while out.ends_with(' ') {
            out.pop();
        }
        out.push('\n');
    }
    // The axis, with `|` where a window edge (a multiple of the period) starts a column.
    let mut axis = String::new();
    let mut edges = false;
    for c in cols {
        let edge = c.start_us > 0 && c.start_us % period == 0;
        edges |= edge;
        axis.push(if edge { '|' } else { '-' });
        axis.push_str(&"-".repeat(width - 1));
    }
    let _ = writeln!(out, "{:>label_width$} +{axis}", 0);
    // Time labels every few columns, where they fit.
    let mut labels = String::new();
    let step = (6usize).div_ceil(width).max(1);
    let step = [1, 2, 5, 10, 20, 50, 100]
        .into_iter()
        .find(|s| *s >= step)
        .unwrap_or(step);
    for (i, c) in cols.iter().enumerate().step_by(step) {
        let pos = i * width;
        if labels.chars().count() > pos {
            continue;
        }
        while labels.chars().count() < pos {
            labels.push(' ');
        }
        let span_us = cols.len() as u64 * column_us;
        labels.push_str(&time_label(c.start_us, span_us).replace(' ', ""));
    }
    let _ = writeln!(out, "{:>label_width$}  {labels}", "");
    let _ = writeln!(
        out,
        "{:>label_width$}  (one column per {}{})",
        "",
        format_readable(column_us),
        if edges { "; | marks a window edge" } else { "" }
    );
}

/// Rows `(admitted, admitted + rejected)` of one column's bar: proportional, rounded up so any
/// non-zero count shows at least one row, and rejections keep a row even beside a tall bar.
fn bar_rows(c: &Column, scale: u64) -> (u64, u64) {
    let rejected = c.rejected + c.impossible;
    let total = c.admitted + rejected;
    let mut total_rows = (total * CHART_HEIGHT).div_ceil(scale);
    let mut admitted_rows = (c.admitted * CHART_HEIGHT).div_ceil(scale);
    if rejected > 0 && admitted_rows == total_rows {
        if admitted_rows > 1 {
            admitted_rows -= 1;
        } else {
            total_rows += 1;
        }
    }
    (admitted_rows, total_rows)
}

/// A time from the start of traffic spanning `span_us`, in the span's unit (`19 h` in a day,
/// [`span_unit`]); exact seconds below two minutes.
fn time_label(t_us: u64, span_us: u64) -> String {
    match span_unit(span_us) {
        (1_000_000, _) => format_duration(t_us),
        unit => format_in_unit(t_us, unit),
    }
}

/// A wait for the queue table, to about three significant figures: `1.88 s` (where
/// [`format_duration`] gives every microsecond, `1.882352 s`), `2 s`, `12.5 ms`, `188 ms`,
/// `750 us`. Rounded to the nearest, halves up.
pub(crate) fn format_wait(us: Micros) -> String {
    /// `value / scale` with `decimals` decimals, rounded, trailing zeros cut.
    fn fixed(value: Micros, scale: Micros, decimals: u32, unit: &str) -> String {
        let step = scale / 10u64.pow(decimals);
        let n = (value + step / 2) / step;
        let (whole, frac) = (n / 10u64.pow(decimals), n % 10u64.pow(decimals));
        if frac == 0 {
            return format!("{whole} {unit}");
        }
        let frac = format!("{frac:0width$}", width = decimals as usize);
        format!("{whole}.{} {unit}", frac.trim_end_matches('0'))
    }
    match us {
        0 => "0 s".into(),
        1..1_000 => format!("{us} us"),
        1_000..10_000 => fixed(us, 1_000, 2, "ms"),
        10_000..100_000 => fixed(us, 1_000, 1, "ms"),
        100_000..999_500 => fixed(us, 1_000, 0, "ms"),
        _ => fixed(us, 1_000_000, 2, "s"),
    }
}

#[cfg(test)]
mod wait_tests {
    use super::format_wait;

    #[test]
    fn waits_read_to_about_three_figures() {
        for (us, text) in [
            (0, "0 s"),
            (750, "750 us"),
            (1_000, "1 ms"),
            (1_234, "1.23 ms"),
            (12_500, "12.5 ms"),
            (188_235, "188 ms"),
            (999_499, "999 ms"),
            (999_500, "1 s"),
            (1_882_352, "1.88 s"),
            (1_886_000, "1.89 s"),
            (2_000_000, "2 s"),
            (2_500_000, "2.5 s"),
            (86_400_000_000, "86400 s"),
        ] {
            assert_eq!(format_wait(us), text, "{us}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(admitted: u64, rejected: u64) -> Column {
        Column {
            start_us: 0,
            admitted,
            rejected,
            ..Column::default()
        }
    }

    #[test]
    fn bars_are_proportional_and_never_hide_a_count() {
        assert_eq!(bar_rows(&column(200, 0), 200), (8, 8));
        assert_eq!(bar_rows(&column(100, 100), 200), (4, 8));
        assert_eq!(bar_rows(&column(0, 0), 200), (0, 0));
        assert_eq!(bar_rows(&column(1, 0), 200), (1, 1));
        // 199 admitted and 1 rejected: the rejection still shows.
        assert_eq!(bar_rows(&column(199, 1), 200), (7, 8));
        assert_eq!(bar_rows(&column(0, 1), 200), (0, 1));
        assert_eq!(bar_rows(&column(1, 1), 200), (1, 2));
    }
}
