//! `floodgate check-config FILE`: validate a configuration without starting anything.

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `floodgate check-config`.
#[derive(Debug, clap::Args)]
pub(crate) struct CheckArgs {
    /// The configuration to validate: a TOML file, or envoyproxy/ratelimit YAML (a
    /// `.yaml`/`.yml` file or a directory of them).
    pub(crate) file: PathBuf,
    #[command(flatten)]
    pub(crate) envoy: super::envoy::EnvoyArgs,
}

/// Validates the file: prints a summary of the rules and exits 0, or prints every error as
/// `FILE:LINE: FIELD: MESSAGE` on stderr and exits 1.
///
/// # Errors
/// A failure to write the summary to standard output (a closed pipe is not one).
pub(crate) fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
    match super::load_with(&args.file, &args.envoy) {
        Ok(config) => {
            use std::fmt::Write as _;
            let mut out = format!(
                "{}: ok: {} rule(s), {}\n",
                config.file,
                config.rules.len(),
                describe_store(&config.store)
            );
            if config.server.limits != super::listen::ConnectionLimits::default() {
                let _ = writeln!(out, "  {}", super::listen::describe(&config.server.limits));
            }
            let mut domains: Vec<&str> = config.descriptors.domains().collect();
            if !domains.is_empty() {
                domains.sort_unstable();
                let _ = writeln!(out, "  domains: {}", domains.join(", "));
            }
            for r in &config.rules {
                let d = super::describe::describe_rule(r);
                let [headline, details @ ..] = d.lines();
                let _ = writeln!(out, "  {headline}");
                for line in details {
                    let _ = writeln!(out, "      {line}");
                }
            }
            crate::cli::write_stdout(&out)?;
            if config.rules.is_empty() {
                eprintln!("{}: warning: 0 rules: nothing is limited", config.file);
            }
            if let Some(why) = connection_cap_warning(&config) {
                eprintln!("{}: warning: {why}; serve refuses to start so", config.file);
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(errors) => {
            eprintln!("{errors}");
            Ok(ExitCode::from(1))
        }
    }
}

/// Why `serve` would refuse this `[server] max_connections` under this process's open-file
/// limit (the hard one, to which `serve` raises the soft one), or `None`.
fn connection_cap_warning(config: &super::Config) -> Option<String> {
    use crate::serve::fd_limit::{connection_cap, FdLimit};
    let limits = &config.server.limits;
    let configured = limits.max_connections?;
    let hard = rlimit::Resource::NOFILE
        .get()
        .map_or(u64::MAX, |(_, hard)| hard);
    let upstream = if config.server.upstream.is_some() {
        limits.upstream_max_connections
    } else {
        0
    };
    connection_cap(Some(configured), FdLimit { soft: hard }, upstream).err()
}

/// One line saying which store the configuration selects, e.g. `store memory (max_keys
/// 100000, on_full reject)` or `store redis redis://127.0.0.1:6379 (timeout 50 ms, prefix
/// "fg:", fallback none)`.
fn describe_store(store: &super::schema::StoreConfig) -> String {
    use floodgate_store::redis::RedisTarget;
    match &store.redis {
        None => format!(
            "store memory (max_keys {}, on_full {})",
            store.max_keys,
            store.on_full.as_str()
        ),
        Some(r) => {
            let target = match &r.target {
                RedisTarget::Standalone(url) => format!("redis {}", redact(url)),
                RedisTarget::Cluster(nodes) => format!(
                    "redis cluster [{}]",
                    nodes
                        .iter()
                        .map(|n| redact(n))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                RedisTarget::Sentinel {
                    sentinels,
                    master_name,
                } => format!(
                    "redis sentinel {master_name:?} via [{}]",
                    sentinels
                        .iter()
                        .map(|n| redact(n))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            let fallback = match (r.local_fallback, r.local_fallback_instances) {
                (true, Some(n)) => format!("local, limits / {n}"),
                (true, None) => "local, limits / live instances (announced in Redis)".into(),
                (false, _) => "none".into(),
            };
            let deny_cache = if r.deny_cache {
                format!(", deny cache on, at most {} keys", r.deny_cache_keys)
            } else {
                String::new()
            };
            format!(
                "store {target} (timeout {} ms, prefix {:?}, fallback {fallback}{deny_cache})",
                r.timeout_ms, r.prefix
            )
        }
    }
}

/// `url` without its password (`redis://user:secret@host` prints as `redis://user:***@host`).
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = rest
        .split_once('/')
        .map_or((rest, None), |(a, p)| (a, Some(p)));
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => format!("{userinfo}@{host}"),
        },
        None => authority.to_string(),
    };
    match path {
        Some(p) => format!("{scheme}://{authority}/{p}"),
        None => format!("{scheme}://{authority}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_the_configured_store() {
        let memory = crate::config::StoreConfig::default();
        assert!(describe_store(&memory).starts_with("store memory (max_keys "));
        let mut redis = memory.clone();
        redis.redis = Some(crate::config::RedisConfig {
            target: floodgate_store::redis::RedisTarget::Standalone(
                "redis://app:pw@10.0.0.1:6379/2".into(),
            ),
            timeout_ms: 50,
            breaker_window_ms: 250,
            prefix: "fg:".into(),
            local_fallback: true,
            local_fallback_instances: Some(4),
            tls: Default::default(),
            master_auth: None,
            deny_cache: false,
            deny_cache_keys: 10_000,
            per_second: None,
        });
        assert_eq!(
            describe_store(&redis),
            "store redis redis://app:***@10.0.0.1:6379/2 (timeout 50 ms, prefix \"fg:\", \
             fallback local, limits / 4)"
        );
        redis.redis.as_mut().unwrap().target = floodgate_store::redis::RedisTarget::Cluster(vec![
            "redis://a:7000".into(),
            "redis://b:7000".into(),
        ]);
        redis.redis.as_mut().unwrap().local_fallback_instances = None;
        assert!(describe_store(&redis)
            .ends_with("fallback local, limits / live instances (announced in Redis))"));
        redis.redis.as_mut().unwrap().local_fallback = false;
        assert_eq!(
            describe_store(&redis),
            "store redis cluster [redis://a:7000, redis://b:7000] (timeout 50 ms, prefix \"fg:\", \
             fallback none)"
        );
        redis.redis.as_mut().unwrap().deny_cache = true;
        assert!(
            describe_store(&redis).ends_with("fallback none, deny cache on, at most 10000 keys)")
        );
    }
}
