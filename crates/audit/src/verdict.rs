//! One finding of an audit.

use serde::Serialize;

/// How bad a finding is. The order is severity: `Ok < Note < Inconclusive < Danger`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// Checked, and nothing wrong.
    Ok,
    /// Worth knowing, not a failure (a bucket's designed burst, a `Retry-After` a little late).
    Note,
    /// The check could not tell (budget too small, window too long, no denial seen).
    Inconclusive,
    /// A failure the source documents warn about: the exit status is non-zero.
    Danger,
}

impl Level {
    /// `ok`, `note`, `inconclusive` or `DANGER` (upper case so it stands out in a table).
    pub fn label(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Note => "note",
            Level::Inconclusive => "inconclusive",
            Level::Danger => "DANGER",
        }
    }
}

/// One check's result: what was checked, how it came out, and the numbers it rests on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// The check, e.g. `multiplication`, `window_edge`, `retry_after`, `no_ttl`.
    pub check: String,
    /// How it came out.
    pub level: Level,
    /// One line a person reads in seconds, with the numbers ("400 admitted of a declared
    /// 100/10s: about 4x the limit").
    pub summary: String,
    /// The measurements behind it, by name (counts, seconds, ratios), for `--format json`.
    pub numbers: serde_json::Map<String, serde_json::Value>,
}

impl Verdict {
    /// A verdict without numbers (add them with [`Verdict::with`]).
    pub fn new(check: &str, level: Level, summary: impl Into<String>) -> Self {
        Self {
            check: check.to_string(),
            level,
            summary: summary.into(),
            numbers: serde_json::Map::new(),
        }
    }

    /// Adds one number (or any JSON value) it rests on.
    #[must_use]
    pub fn with(mut self, name: &str, value: impl Into<serde_json::Value>) -> Self {
        self.numbers.insert(name.to_string(), value.into());
        self
    }

    /// `true` for [`Level::Danger`].
    pub fn is_danger(&self) -> bool {
        self.level == Level::Danger
    }
}
