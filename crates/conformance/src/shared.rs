//! What the plain and the calendar vectors share: the default key, where the files are, what a
//! step expects and why a file could not be used.

use std::path::{Path, PathBuf};

#[cfg(doc)]
use floodgate_core::CheckError;
use floodgate_core::Decision;

/// The key a step uses when it names none.
pub const DEFAULT_KEY: &str = "k";

/// The folder holding this crate's vector files (`<algorithm>.toml`).
pub fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("vectors")
}

/// What a step expects, resolved against the case's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    /// This exact decision (its `limit` is the policy's capacity).
    Decision(Decision),
    /// [`CheckError::InsufficientCapacity`].
    InsufficientCapacity,
}

/// Why a vector file could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a valid vector (TOML syntax, unknown field, wrong type).
    #[error("{path}: {message}")]
    Parse {
        /// The file, or `<text>` for [`Vector::parse`](crate::Vector::parse).
        path: PathBuf,
        /// The TOML error, with line and column.
        message: String,
    },
}
