//! The harness of the port of envoyproxy/ratelimit's configuration suite
//! (`envoy_upstream_config`, `envoy_upstream_lookup`): upstream's YAML files, a running
//! floodgate with a gRPC client, and the loading-error checks.
#![allow(dead_code, unused_imports)]

pub use std::process::Command;

pub use crate::serve_support::{client, Floodgate};
pub use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
pub use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
pub use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
pub use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
pub use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus,
};
pub use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
pub use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
pub use tonic::transport::Channel;

pub type Client = RateLimitServiceClient<Channel>;

/// A descriptor's `(key, value)` entries.
pub type Entries<'a> = &'a [(&'a str, &'a str)];

pub const BASIC: &str = include_str!("../fixtures/envoyproxy-ratelimit/config/basic_config.yaml");
pub const WILDCARD: &str = include_str!("../fixtures/envoyproxy-ratelimit/config/wildcard.yaml");
pub const SHADOW: &str =
    include_str!("../fixtures/envoyproxy-ratelimit/config/shadowmode_config.yaml");
pub const SHARE: &str =
    include_str!("../fixtures/envoyproxy-ratelimit/config/share_threshold.yaml");
pub const METADATA: &str = include_str!("../fixtures/envoyproxy-ratelimit/config/metadata.yaml");
pub const MERGE1: &str =
    include_str!("../fixtures/envoyproxy-ratelimit/config/merge_domain_key1.yaml");
pub const MERGE2: &str =
    include_str!("../fixtures/envoyproxy-ratelimit/config/merge_domain_key2.yaml");

/// The fixture directory holding upstream's files.
pub fn fixtures() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/envoyproxy-ratelimit/config")
}

/// A running floodgate on `files` (the directory of them as its configuration) and a client.
pub struct Rls {
    pub fg: Floodgate,
    pub c: Client,
    pub http: reqwest::Client,
}

pub async fn start(files: &[(&str, &str)], args: &[&str]) -> Rls {
    let mut all = vec!["--grpc-listen", "127.0.0.1:0"];
    all.extend_from_slice(args);
    let fg = Floodgate::with_files(files, ".", &all);
    let c = RateLimitServiceClient::connect(fg.grpc.clone().unwrap())
        .await
        .unwrap();
    Rls {
        fg,
        c,
        http: client(),
    }
}

pub async fn one_file(text: &str) -> Rls {
    start(&[("config.yaml", text)], &[]).await
}

pub fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

pub fn with_limit(
    mut d: RateLimitDescriptor,
    requests: u32,
    unit: RateLimitUnit,
) -> RateLimitDescriptor {
    d.limit = Some(RateLimitOverride {
        requests_per_unit: requests,
        unit: unit as i32,
    });
    d
}

impl Rls {
    pub async fn call(&mut self, domain: &str, d: RateLimitDescriptor) -> RateLimitResponse {
        self.c
            .should_rate_limit(RateLimitRequest {
                domain: domain.into(),
                descriptors: vec![d],
                hits_addend: 0,
            })
            .await
            .unwrap_or_else(|e| panic!("{domain}: {e}"))
            .into_inner()
    }

    /// `GetLimit`: the status of one descriptor.
    pub async fn get(&mut self, domain: &str, entries: &[(&str, &str)]) -> DescriptorStatus {
        self.call(domain, desc(entries)).await.statuses.remove(0)
    }

    /// `GetLimit` that must find a limit: `(requests_per_unit, unit, name)`.
    pub async fn limit(&mut self, domain: &str, entries: &[(&str, &str)]) -> (u32, Unit, String) {
        let s = self.get(domain, entries).await;
        let l = s
            .current_limit
            .unwrap_or_else(|| panic!("{entries:?}: no limit found"));
        (l.requests_per_unit, Unit::try_from(l.unit).unwrap(), l.name)
    }

    /// `assert.Nil(GetLimit(...))`: `OK`, no limit, nothing counted.
    pub async fn none(&mut self, domain: &str, entries: &[(&str, &str)]) {
        let s = self.get(domain, entries).await;
        assert_eq!(s.current_limit, None, "{entries:?} should select no limit");
        assert_eq!(Code::try_from(s.code).unwrap(), Code::Ok, "{entries:?}");
    }

    pub async fn metrics(&self) -> String {
        self.http
            .get(self.fg.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// The sum of the samples of `name` carrying every `label="value"` of `labels`.
    pub async fn series(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let text = self.metrics().await;
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
            .filter(|l| {
                labels
                    .iter()
                    .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Decisions counted under the rule named `key` (upstream's `<key>.total_hits`).
    pub async fn rule_hits(&self, key: &str) -> f64 {
        self.series("floodgate_decisions_total", &[("rule", key)])
            .await
    }

    /// Decisions counted under the descriptor stats key `key` (`detailed_metric`,
    /// `value_to_metric`).
    pub async fn descriptor_hits(&self, key: &str) -> f64 {
        self.series(
            "floodgate_descriptor_decisions_total",
            &[("descriptor", key)],
        )
        .await
    }
}

/// `floodgate check-config <paths>` run in the fixture directory: its stderr, after checking
/// that it failed.
pub fn check_config_fails(paths: &[&str], args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .current_dir(fixtures())
        .arg("check-config")
        .args(args)
        .args(paths)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        !out.status.success(),
        "{paths:?} should be refused: {stderr}"
    );
    stderr
}

/// A loading error: `file:line: field: message` with `message` in it.
pub fn assert_load_error(stderr: &str, file: &str, line: usize, field: &str, message: &str) {
    let prefix = if field.is_empty() {
        format!("{file}:{line}: ")
    } else {
        format!("{file}:{line}: {field}: ")
    };
    assert!(
        stderr
            .lines()
            .any(|l| l.contains(&prefix) && l.contains(message)),
        "expected {prefix}...{message}... in:\n{stderr}"
    );
}
