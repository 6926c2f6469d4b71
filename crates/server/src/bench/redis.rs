//! `--what redis`: decisions per second through the Redis store.
//!
//! Not available yet: this build has no Redis store to measure. The command says so instead of
//! printing a made-up figure.

use anyhow::bail;
use floodgate_core::AlgorithmKind;

use super::report::Section;
use super::{BenchArgs, Progress};

/// Measures the Redis store.
///
/// # Errors
/// Always, for now: the Redis store is not part of this build.
pub fn run(
    _kinds: &[AlgorithmKind],
    args: &BenchArgs,
    _progress: &Progress,
) -> anyhow::Result<Section> {
    let target = args.store.as_deref().unwrap_or("(no --store given)");
    bail!(
        "the redis bench needs the Redis store (floodgate-store feature \"redis\"), which this \
         build of floodgate does not include yet; cannot measure {target}"
    )
}
