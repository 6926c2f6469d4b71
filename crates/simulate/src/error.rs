//! Why a simulation could not be built or run: [`Error`].

use floodgate_core::AlgorithmKind;

use crate::setup::SetupError;
use crate::trace::TraceError;

/// Why a simulation could not be built or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A part of the [`Spec`](crate::Spec) that is invalid or does not apply to the rest; `field` is the
    /// [`Spec`](crate::Spec) field at fault (`floodgate simulate` spells it as the flag `--field-name`).
    #[error("{message}")]
    Invalid {
        /// The [`Spec`](crate::Spec) field.
        field: &'static str,
        /// What is wrong, naming the flags involved.
        message: String,
    },
    /// The trace could not be read or has a bad line (the error names the file and line).
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The setup cannot be built for the quota (e.g. a split leaving an instance with 0).
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The counter store failed (a Redis server that does not answer): the run stopped.
    #[error("{0}")]
    Store(String),
    /// Running one algorithm failed.
    #[error("cannot run {kind}: {source}")]
    Run {
        /// The algorithm.
        kind: AlgorithmKind,
        /// Why.
        source: Box<Error>,
    },
}

impl Error {
    pub(crate) fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        Error::Invalid {
            field,
            message: message.into(),
        }
    }

    /// The [`Spec`](crate::Spec) field at fault, when one is: for [`Error::Invalid`], `"trace"` for a bad
    /// trace, `"instances"` for a setup the quota cannot be split over.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Error::Invalid { field, .. } => Some(field),
            Error::Trace(_) => Some("trace"),
            Error::Setup(_) => Some("instances"),
            Error::Store(_) => None,
            Error::Run { source, .. } => source.field(),
        }
    }
}
