//! The outcome of running vectors: a [`Report`] of [`Failure`]s.

use std::fmt;

/// One step (or case) that did not conform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// `<algorithm>/<backend>/<case>#<step>`, the step counted from 1 in file order; without
    /// `#<step>` when the whole case failed (bad quota, reset failed).
    pub label: String,
    /// What was expected and what came back.
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.label, self.message)
    }
}

/// The outcome of running vectors against one backend.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Cases run.
    pub cases: usize,
    /// Steps run.
    pub steps: usize,
    /// Every non-conforming step, in order.
    pub failures: Vec<Failure>,
}

impl Report {
    /// `true` when nothing failed.
    pub fn is_ok(&self) -> bool {
        self.failures.is_empty()
    }

    pub(crate) fn merge(&mut self, other: Report) {
        self.cases += other.cases;
        self.steps += other.steps;
        self.failures.extend(other.failures);
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} cases, {} steps, {} failures",
            self.cases,
            self.steps,
            self.failures.len()
        )?;
        for failure in &self.failures {
            write!(f, "\n  {failure}")?;
        }
        Ok(())
    }
}
