//! The SVG chart's geometry, read back from the rendered document: every text inside the
//! canvas, no two texts overlapping, the legend clear of the plots and of itself, and time
//! axes in the unit the span reads in. Text boxes are estimated here independently of the
//! renderer (0.62 em a character, DejaVu Sans' mean advance rounded up; 0.7 em in bold) from
//! each `<text>`'s position, size and anchor. (The browser test in the server crate measures
//! the same documents with Chromium's own font metrics.)

use floodgate_simulate::{build_report, render, Format, ScenarioName, Spec};

/// DejaVu Sans' advance widths in em of the characters ' ' (32) to '~' (126), regular and bold.
const REGULAR: [f64; 95] = [
    0.32, 0.40, 0.46, 0.84, 0.64, 0.95, 0.78, 0.27, 0.39, 0.39, 0.50, 0.84, 0.32, 0.36, 0.32, 0.34,
    0.64, 0.64, 0.64, 0.64, 0.64, 0.64, 0.64, 0.64, 0.64, 0.64, 0.34, 0.34, 0.84, 0.84, 0.84, 0.53,
    1.00, 0.68, 0.69, 0.70, 0.77, 0.63, 0.58, 0.77, 0.75, 0.29, 0.29, 0.66, 0.56, 0.86, 0.75, 0.79,
    0.60, 0.79, 0.69, 0.63, 0.61, 0.73, 0.68, 0.99, 0.69, 0.61, 0.69, 0.39, 0.34, 0.39, 0.84, 0.50,
    0.50, 0.61, 0.63, 0.55, 0.63, 0.62, 0.35, 0.63, 0.63, 0.28, 0.28, 0.58, 0.28, 0.97, 0.63, 0.61,
    0.63, 0.63, 0.41, 0.52, 0.39, 0.63, 0.59, 0.82, 0.59, 0.59, 0.52, 0.64, 0.34, 0.64, 0.84,
];
const BOLD: [f64; 95] = [
    0.35, 0.46, 0.52, 0.84, 0.70, 1.00, 0.87, 0.31, 0.46, 0.46, 0.52, 0.84, 0.38, 0.42, 0.38, 0.37,
    0.70, 0.70, 0.70, 0.70, 0.70, 0.70, 0.70, 0.70, 0.70, 0.70, 0.40, 0.40, 0.84, 0.84, 0.84, 0.58,
    1.00, 0.77, 0.76, 0.73, 0.83, 0.68, 0.68, 0.82, 0.84, 0.37, 0.37, 0.77, 0.64, 1.00, 0.84, 0.85,
    0.73, 0.85, 0.77, 0.72, 0.68, 0.81, 0.77, 1.10, 0.77, 0.72, 0.73, 0.46, 0.37, 0.46, 0.84, 0.50,
    0.50, 0.67, 0.72, 0.59, 0.72, 0.68, 0.44, 0.72, 0.71, 0.34, 0.34, 0.67, 0.34, 1.04, 0.71, 0.69,
    0.72, 0.72, 0.49, 0.60, 0.48, 0.71, 0.65, 0.92, 0.65, 0.65, 0.58, 0.71, 0.37, 0.71, 0.84,
];

fn advance(c: char, bold: bool) -> f64 {
    let table = if bold { &BOLD } else { &REGULAR };
    (c as usize)
        .checked_sub(32)
        .and_then(|i| table.get(i))
        .copied()
        .unwrap_or(1.0)
}

#[derive(Debug, Clone, Copy)]
struct Box {
    x0: f64,
    y0: f64,
    x1: f64,
    y1: f64,
}

impl Box {
    fn overlaps(&self, o: &Box) -> bool {
        self.x0 < o.x1 - 0.5 && o.x0 < self.x1 - 0.5 && self.y0 < o.y1 - 0.5 && o.y0 < self.y1 - 0.5
    }
}

fn attr(tag: &str, name: &str) -> Option<String> {
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let end = start + tag[start..].find('"')?;
    Some(tag[start..end].to_string())
}

fn num(tag: &str, name: &str) -> f64 {
    attr(tag, name)
        .unwrap_or_else(|| panic!("no {name} in {tag}"))
        .parse()
        .unwrap()
}

/// Every `<text>` of `svg`: (its estimated box, its content).
fn texts(svg: &str) -> Vec<(Box, String)> {
    let mut out = Vec::new();
    let mut rest = svg;
    while let Some(i) = rest.find("<text ") {
        let tail = &rest[i..];
        let open_end = tail.find('>').unwrap();
        let tag = &tail[..open_end];
        let close = tail.find("</text>").unwrap();
        let content = tail[open_end + 1..close]
            .replace("&quot;", "\"")
            .replace("&amp;", "&")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&apos;", "'");
        let size = attr(tag, "font-size").map_or(12.0, |s| s.parse().unwrap());
        let bold = tag.contains("bold");
        let width = content.chars().map(|c| advance(c, bold)).sum::<f64>() * size;
        let (x, y) = (num(tag, "x"), num(tag, "y"));
        let x0 = match attr(tag, "text-anchor").as_deref() {
            Some("end") => x - width,
            Some("middle") => x - width / 2.0,
            _ => x,
        };
        out.push((
            Box {
                x0,
                y0: y - 0.8 * size,
                x1: x0 + width,
                y1: y + 0.25 * size,
            },
            content,
        ));
        rest = &tail[close..];
    }
    out
}

/// The boxes of the elements of class `class`: a `<rect>` each (the plot areas) or, for the
/// legend items, the swatch's left and top to the end of the label.
fn plot_areas(svg: &str) -> Vec<Box> {
    svg.lines()
        .filter(|l| l.contains(r#"class="plot-area""#))
        .map(|l| {
            let (x, y) = (num(l, "x"), num(l, "y"));
            Box {
                x0: x,
                y0: y,
                x1: x + num(l, "width"),
                y1: y + num(l, "height"),
            }
        })
        .collect()
}

fn legend_items(svg: &str) -> Vec<Box> {
    svg.lines()
        .filter(|l| l.starts_with(r#"<g class="legend-item">"#))
        .map(|l| {
            let label = &texts(l)[0].0;
            let y = label.y1 - 14.0;
            Box {
                x0: label.x0 - 17.0,
                y0: y.min(label.y0),
                x1: label.x1,
                y1: label.y1,
            }
        })
        .collect()
}

fn check_layout(name: &str, svg: &str) -> Vec<String> {
    let head = svg.lines().next().unwrap();
    let (width, height) = (num(head, "width"), num(head, "height"));
    let texts = texts(svg);
    assert!(!texts.is_empty());
    for (b, t) in &texts {
        assert!(
            b.x0 >= 0.0 && b.x1 <= width && b.y0 >= 0.0 && b.y1 <= height,
            "{name}: {t:?} at {b:?} leaves the {width}x{height} canvas"
        );
    }
    for (i, (a, ta)) in texts.iter().enumerate() {
        for (b, tb) in &texts[i + 1..] {
            assert!(!a.overlaps(b), "{name}: {ta:?} {a:?} overlaps {tb:?} {b:?}");
        }
    }
    let plots = plot_areas(svg);
    let legend = legend_items(svg);
    assert_eq!(legend.len(), 4, "{name}");
    for (i, a) in legend.iter().enumerate() {
        for b in &legend[i + 1..] {
            assert!(
                !a.overlaps(b),
                "{name}: legend items {a:?} and {b:?} overlap"
            );
        }
        for p in &plots {
            assert!(
                !a.overlaps(p),
                "{name}: legend item {a:?} overlaps the plot {p:?}"
            );
        }
    }
    for (b, t) in &texts {
        for p in &plots {
            assert!(
                !b.overlaps(p),
                "{name}: {t:?} {b:?} overlaps the plot {p:?}"
            );
        }
    }
    texts.into_iter().map(|(_, t)| t).collect()
}

fn svg(spec: Spec) -> String {
    render(&build_report(&spec).unwrap(), Format::Svg)
}

#[test]
fn daily_jobs_fits_the_canvas_and_reads_in_hours() {
    let doc = svg(Spec {
        scenario: ScenarioName::DailyJobs,
        ..Spec::default()
    });
    let texts = check_layout("daily-jobs", &doc);
    // The subtitle is wrapped, not cut: every word of the description is on the canvas.
    let all = texts.join(" ");
    assert!(
        all.contains("each calling every 10 min for 24 h"),
        "{texts:?}"
    );
    assert!(all.contains("list calls (1 unit) otherwise"), "{texts:?}");
    // The time axis counts hours: 0 h .. 24 h, never seconds.
    let ticks: Vec<&String> = texts.iter().filter(|t| t.ends_with(" h")).collect();
    assert!(ticks.len() >= 6, "{texts:?}");
    assert!(texts.iter().any(|t| t == "24 h"), "{texts:?}");
    assert!(!all.contains("86400 s") && !all.contains("3600 s"), "{all}");
    assert!(all.contains("busiest window of 24 h"), "{all}");
    assert_eq!(doc.matches(r#"class="plot-area""#).count(), 6);
}

#[test]
fn other_scenarios_and_a_narrow_legend_fit_too() {
    for (name, spec) in [
        ("boundary", Spec::default()),
        (
            "calm-spike waiting",
            Spec {
                scenario: ScenarioName::CalmSpike,
                max_wait: Some(2_000_000),
                ..Spec::default()
            },
        ),
        (
            "flood on 3 instances",
            Spec {
                scenario: ScenarioName::Flood,
                instances: 3,
                ..Spec::default()
            },
        ),
        (
            "a long key",
            Spec {
                scenario: ScenarioName::Flood,
                key: "k".repeat(300),
                ..Spec::default()
            },
        ),
    ] {
        let texts = check_layout(name, &svg(spec));
        // Seconds read as seconds below two minutes.
        assert!(texts.iter().any(|t| t == "0 s"), "{name}: {texts:?}");
    }
}
