//! `floodgate check-config FILE`: validate a configuration without starting anything.

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `floodgate check-config`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The TOML configuration file to validate.
    pub file: PathBuf,
}

/// Validates the file: prints a summary of the rules and exits 0, or prints every error as
/// `FILE:LINE: FIELD: MESSAGE` on stderr and exits 1.
///
/// # Errors
/// None today; the `Result` matches the other subcommands.
pub fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
    match super::load(&args.file) {
        Ok(config) => {
            println!(
                "{}: ok: {} rule(s), store memory (max_keys {}, on_full {})",
                config.file,
                config.rules.len(),
                config.store.max_keys,
                config.store.on_full.as_str()
            );
            for r in &config.rules {
                println!(
                    "  {}: {} {} ({}), key {}{}",
                    r.name,
                    r.policy.kind(),
                    r.policy.quota(),
                    r.policy.quota().describe(),
                    super::describe_key(&r.key),
                    if r.shadow { ", shadow" } else { "" }
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(errors) => {
            eprintln!("{errors}");
            Ok(ExitCode::from(1))
        }
    }
}
