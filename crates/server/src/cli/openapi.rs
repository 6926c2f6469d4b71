//! `floodgate openapi [--config FILE]`: the OpenAPI document, or the one narrowed to a
//! configuration.

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `floodgate openapi`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Narrow the document to this configuration (a TOML file, or envoyproxy/ratelimit YAML):
    /// `rule` is one of its decision rules and `cost` at most that rule's capacity, for
    /// contract tests and fuzzers of a deployment. Without it: the document every
    /// configuration shares (what `GET /v1/openapi.json` answers and `docs/openapi.json`
    /// holds).
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) envoy: crate::config::envoy::EnvoyArgs,
}

/// Prints the document; a configuration that does not load is reported as `check-config`
/// reports it (exit status 1).
///
/// # Errors
/// A failure to write to standard output (a closed pipe is not one).
pub(crate) fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let text = match &args.config {
        None => crate::http::openapi::document(),
        Some(file) => match crate::config::load_with(file, &args.envoy) {
            Ok(config) => crate::http::openapi::document_for(&config),
            Err(errors) => {
                eprintln!("{errors}");
                return Ok(ExitCode::from(1));
            }
        },
    };
    super::write_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}
