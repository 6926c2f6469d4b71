//! `floodgate`: the rate-limit service (`serve`), the deterministic simulator (`simulate`) and
//! the configuration checker (`check-config`).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod audit_cli;
mod cli;
mod config;
mod grpc;
mod http;
mod proxy;
mod rules;
mod serve;
mod state;
mod ui;

/// Floodgate: a rate limiter that counts honestly and proves it.
#[derive(Debug, Parser)]
#[command(name = "floodgate", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay deterministic traffic through the algorithms on a simulated clock and chart what
    /// each admits.
    Simulate(cli::simulate::Args),
    /// Run the rate-limit service: decision API, forward-auth, reverse proxy, metrics.
    Serve(serve::ServeArgs),
    /// Measure this build on this machine: ns per check, bytes per key, Redis and HTTP
    /// throughput, with governor beside it where it applies.
    Bench(cli::bench::BenchArgs),
    /// Validate a configuration file: every error names the file, line and field.
    CheckConfig(config::check::CheckArgs),
    /// Probe a live rate limiter over HTTP, or audit the rate-limit keys of a Redis; exit
    /// status 1 when a danger is found.
    Audit(audit_cli::Args),
    /// Print the OpenAPI 3.1 document of the HTTP API (what `GET /v1/openapi.json` answers;
    /// `docs/openapi.json` holds it).
    Openapi(cli::openapi::Args),
}

fn main() -> ExitCode {
    // Called as envoyproxy/ratelimit's binary (`/bin/ratelimit`, which takes no arguments):
    // `floodgate serve --envoy-ratelimit-env`, so its manifests run unchanged.
    let mut argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv
        .first()
        .is_some_and(|a| serve::envoy_env::called_as_ratelimit(a))
    {
        argv.splice(1..1, ["serve".into(), "--envoy-ratelimit-env".into()]);
    }
    let cli = Cli::parse_from(argv);
    let result = match cli.command {
        Command::Simulate(args) => cli::simulate::run(args),
        Command::Serve(args) => serve::run(args),
        Command::CheckConfig(args) => config::check::run(args),
        Command::Bench(args) => cli::bench::run(args),
        Command::Audit(args) => audit_cli::run(args),
        Command::Openapi(args) => cli::openapi::run(&args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("floodgate: error: {err:#}");
            ExitCode::from(2)
        }
    }
}
