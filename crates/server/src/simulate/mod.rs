//! `floodgate simulate` (being written).

use std::process::ExitCode;

/// Flags of `floodgate simulate`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the simulation.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not yet implemented")
}
