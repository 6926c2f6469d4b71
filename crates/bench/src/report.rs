//! Results as sections of rows, printed as aligned tables or as one JSON document, with the
//! machine they were measured on.

use std::fmt::Write as _;

use floodgate_core::{Clock, SystemClock};
use serde::Serialize;
use serde_json::Value;

/// Where and when a report was measured.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// Logical CPUs (`std::thread::available_parallelism`).
    pub cpus: usize,
    /// `model name` (with `cpu family` and `model`) from `/proc/cpuinfo`, or `unknown`.
    pub cpu_model: String,
    /// The 1-minute load average when the report started (`/proc/loadavg`), if readable.
    pub load_average: Option<f64>,
    /// UTC date and time, `YYYY-MM-DD HH:MM`.
    pub date_utc: String,
    /// The command line that produced the report.
    pub command: String,
    /// This binary's version.
    pub version: &'static str,
}

impl Machine {
    /// Reads the machine description now.
    pub fn detect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            cpuinfo
                .lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(k, _)| k.trim() == name)
                .map(|(_, v)| v.trim().to_string())
        };
        let cpu_model = match (field("model name"), field("cpu family"), field("model")) {
            (Some(name), Some(family), Some(model)) => {
                format!("{name}, family {family} model {model}")
            }
            (Some(name), _, _) => name,
            _ => "unknown".to_string(),
        };
        Self {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model,
            load_average: load_average(),
            date_utc: format_utc(SystemClock.now() / 1_000_000),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            version: env!("CARGO_PKG_VERSION"),
        }
    }
}

/// The 1-minute load average, on Linux.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `YYYY-MM-DD HH:MM` for seconds since the epoch (UTC), by the civil-from-days algorithm
/// (Howard Hinnant, "chrono-Compatible Low-Level Date Algorithms").
pub fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}",
        rem / 3_600,
        rem % 3_600 / 60
    )
}

/// One table: a title, column names, rows of JSON values (numbers stay numbers in JSON), and
/// notes printed under it.
#[derive(Debug, Clone, Serialize)]
pub struct Section {
    /// Short id (`cpu`, `memory`, ...).
    pub id: &'static str,
    /// Title line.
    pub title: String,
    /// Column names; each row has one value per column.
    pub columns: Vec<String>,
    /// Rows.
    pub rows: Vec<Vec<Value>>,
    /// Sentences printed after the table.
    pub notes: Vec<String>,
}

impl Section {
    /// An empty section.
    pub fn new(id: &'static str, title: impl Into<String>, columns: &[&str]) -> Self {
        Self {
            id,
            title: title.into(),
            columns: columns.iter().map(|c| (*c).to_string()).collect(),
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Appends a row (its length must match the columns).
    pub fn row(&mut self, values: Vec<Value>) {
        debug_assert_eq!(values.len(), self.columns.len());
        self.rows.push(values);
    }

    /// Appends a note.
    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }
}

/// A whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The machine.
    pub machine: Machine,
    /// The tables, in the order measured.
    pub sections: Vec<Section>,
}

/// A number rounded to `decimals` places for JSON and tables (`null` when not finite).
pub fn num(x: f64, decimals: i32) -> Value {
    let scale = 10f64.powi(decimals);
    serde_json::Number::from_f64((x * scale).round() / scale).map_or(Value::Null, Value::Number)
}

/// Formats a cell: integers with thousands separators, other numbers as given, `-` for null.
fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                group(&i.to_string())
            } else if let Some(f) = n.as_f64() {
                if f.fract() == 0.0 && f.abs() < 1e15 {
                    group(&format!("{f:.0}"))
                } else {
                    let s = f.to_string();
                    match s.split_once('.') {
                        Some((int, frac)) => format!("{}.{frac}", group(int)),
                        None => s,
                    }
                }
            } else {
                n.to_string()
            }
        }
        other => other.to_string(),
    }
}

/// `1234567` -> `1,234,567` (keeps a leading `-`).
fn group(digits: &str) -> String {
    let (sign, digits) = digits.strip_prefix('-').map_or(("", digits), |d| ("-", d));
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    format!("{sign}{out}")
}

impl Report {
    /// Plain-text tables (Markdown-compatible pipes, aligned).
    pub fn to_table(&self) -> String {
        let m = &self.machine;
        let mut out = String::new();
        let load = m
            .load_average
            .map_or_else(|| "unknown".to_string(), |l| format!("{l:.2}"));
        let _ = writeln!(
            out,
            "floodgate {} bench, {} UTC, {} CPUs ({}), load average {load} at start",
            m.version, m.date_utc, m.cpus, m.cpu_model
        );
        let _ = writeln!(out, "command: {}", m.command);
        for s in &self.sections {
            let _ = writeln!(out, "\n## {}\n", s.title);
            let cells: Vec<Vec<String>> = s
                .rows
                .iter()
                .map(|r| r.iter().map(cell).collect())
                .collect();
            let widths: Vec<usize> = (0..s.columns.len())
                .map(|c| {
                    cells
                        .iter()
                        .map(|r| r[c].chars().count())
                        .chain([s.columns[c].chars().count()])
                        .max()
                        .unwrap_or(1)
                })
                .collect();
            let line = |vals: Vec<&str>, numeric: bool| {
                let mut l = String::from("|");
                for (c, v) in vals.iter().enumerate() {
                    let pad = widths[c] - v.chars().count();
                    if numeric && c > 0 {
                        let _ = write!(l, " {}{v} |", " ".repeat(pad));
                    } else {
                        let _ = write!(l, " {v}{} |", " ".repeat(pad));
                    }
                }
                l
            };
            let _ = writeln!(
                out,
                "{}",
                line(s.columns.iter().map(String::as_str).collect(), false)
            );
            let _ = writeln!(
                out,
                "|{}|",
                widths
                    .iter()
                    .enumerate()
                    .map(|(c, w)| if c == 0 {
                        "-".repeat(w + 2)
                    } else {
                        format!("{}:", "-".repeat(w + 1))
                    })
                    .collect::<Vec<_>>()
                    .join("|")
            );
            for r in &cells {
                let _ = writeln!(
                    out,
                    "{}",
                    line(r.iter().map(String::as_str).collect(), true)
                );
            }
            for n in &s.notes {
                let _ = writeln!(out, "\n{n}");
            }
        }
        out
    }

    /// Pretty JSON: `{ "machine": {...}, "sections": [{ "id", "title", "columns", "rows",
    /// "notes" }] }`.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(format_utc(0), "1970-01-01 00:00");
        // 2026-11-29T18:30:00Z
        assert_eq!(format_utc(1_795_977_000), "2026-11-29 18:30");
        // 2024-02-29T23:59:00Z, a leap day
        assert_eq!(format_utc(1_709_251_140), "2024-02-29 23:59");
    }

    #[test]
    fn cells_group_thousands_and_keep_decimals() {
        assert_eq!(cell(&num(1_234_567.0, 0)), "1,234,567");
        assert_eq!(cell(&num(12.345, 2)), "12.35");
        assert_eq!(cell(&num(87_913.5, 1)), "87,913.5");
        assert_eq!(cell(&Value::Null), "-");
        assert_eq!(group("-1000"), "-1,000");
    }

    #[test]
    fn table_aligns_numbers_right() {
        let mut s = Section::new("t", "T", &["name", "ns"]);
        s.row(vec!["a".into(), num(1.5, 1)]);
        s.row(vec!["bb".into(), num(12.0, 1)]);
        let r = Report {
            machine: Machine {
                cpus: 2,
                cpu_model: "X".into(),
                load_average: None,
                date_utc: "d".into(),
                command: "c".into(),
                version: "v",
            },
            sections: vec![s],
        };
        let t = r.to_table();
        assert!(t.contains("| a    | 1.5 |"), "{t}");
        assert!(t.contains("| bb   |  12 |"), "{t}");
    }
}
