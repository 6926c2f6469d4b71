//! `--what http`: throughput and latency of `floodgate serve` on a loopback port.
//!
//! Not available yet in this build; the command says so instead of printing a made-up figure.

use anyhow::bail;
use floodgate_core::AlgorithmKind;

use super::report::Section;
use super::{BenchArgs, Progress};

/// Measures `floodgate serve`.
///
/// # Errors
/// Always, for now.
pub fn run(
    _kinds: &[AlgorithmKind],
    _args: &BenchArgs,
    _progress: &Progress,
) -> anyhow::Result<Section> {
    bail!("the http bench is not available in this build yet")
}
