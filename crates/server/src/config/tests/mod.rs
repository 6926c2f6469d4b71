//! Unit tests of the TOML configuration, one file per subject.

use floodgate_core::AlgorithmKind;
use floodgate_store::OnFull;
use floodgate_tower::{FailureMode, KeySource};
use http::{HeaderName, Method};

use super::key::describe_key;
use super::schema::{ServerConfig, DEFAULT_MAX_CLAIMS, DEFAULT_RESERVATION_TTL};
use super::*;

mod errors;
mod leases;
mod max_rules;
mod path_params;
mod rules;
mod scope;
mod server;
mod store;

fn err(text: &str) -> String {
    parse("rules.toml", text).unwrap_err().to_string()
}
