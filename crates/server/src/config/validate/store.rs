//! `[store]`: the memory store's bounds and the Redis settings (target, timeouts, TLS files).

use std::path::Path;

use floodgate_store::OnFull;
use toml::Spanned;

use super::validator::Validator;
use crate::config::raw::{self, RawConfig};
use crate::config::schema::{
    is_redis_url, RedisConfig, StoreConfig, DEFAULT_BREAKER_WINDOW_MS, DEFAULT_REDIS_TIMEOUT_MS,
    MAX_MAX_KEYS,
};

impl Validator<'_> {
    pub(super) fn store(&mut self, raw: &RawConfig) -> StoreConfig {
        let s = &raw.store;
        let mut out = StoreConfig::default();
        let mut redis = false;
        if let Some(kind) = &s.kind {
            match kind.get_ref().as_str() {
                "memory" => {}
                "redis" => redis = true,
                other => self.push(
                    kind,
                    "store.kind".into(),
                    format!("unknown store kind {other:?}; expected \"memory\" or \"redis\""),
                ),
            }
        }
        if redis {
            out.redis = self.redis_store(s);
        } else {
            let only_redis = [
                s.url.as_ref().map(|v| (v.span(), "url")),
                s.nodes.first().map(|v| (v.span(), "nodes")),
                s.timeout_ms.as_ref().map(|v| (v.span(), "timeout_ms")),
                s.breaker_window_ms
                    .as_ref()
                    .map(|v| (v.span(), "breaker_window_ms")),
                s.prefix.as_ref().map(|v| (v.span(), "prefix")),
                s.fallback.as_ref().map(|v| (v.span(), "fallback")),
                s.instances.as_ref().map(|v| (v.span(), "instances")),
                s.sentinels.first().map(|v| (v.span(), "sentinels")),
                s.master_name.as_ref().map(|v| (v.span(), "master_name")),
                s.tls_ca_file.as_ref().map(|v| (v.span(), "tls_ca_file")),
                s.tls_cert_file
                    .as_ref()
                    .map(|v| (v.span(), "tls_cert_file")),
                s.tls_key_file.as_ref().map(|v| (v.span(), "tls_key_file")),
                s.deny_cache.as_ref().map(|v| (v.span(), "deny_cache")),
            ];
            for (span, field) in only_redis.into_iter().flatten() {
                self.errors.push(self.src.error(
                    span,
                    format!("store.{field}"),
                    "only for kind = \"redis\"",
                ));
            }
        }
        if let Some(max) = &s.max_keys {
            let n = *max.get_ref();
            if n < 1 || n as u64 > MAX_MAX_KEYS {
                self.push(
                    max,
                    "store.max_keys".into(),
                    format!("must be a whole number between 1 and {MAX_MAX_KEYS}, got {n}"),
                );
            } else {
                out.max_keys = n as u64;
            }
        }
        if let Some(max) = &s.max_claims {
            let n = *max.get_ref();
            if n < 1 || n as u64 > MAX_MAX_KEYS {
                self.push(
                    max,
                    "store.max_claims".into(),
                    format!("must be a whole number between 1 and {MAX_MAX_KEYS}, got {n}"),
                );
            } else if redis {
                self.push(
                    max,
                    "store.max_claims".into(),
                    "only for kind = \"memory\" (a Redis store keeps each claim as a key with a \
                     TTL, bounded by Redis' maxmemory)"
                        .into(),
                );
            } else {
                out.max_claims = n as u64;
            }
        }
        if let Some(on_full) = &s.on_full {
            match on_full.get_ref().parse::<OnFull>() {
                Ok(v) => out.on_full = v,
                Err(msg) => self.push(on_full, "store.on_full".into(), msg),
            }
        }
        out
    }

    /// The `[store]` fields of `kind = "redis"`; `None` when they have errors (pushed).
    fn redis_store(&mut self, s: &raw::RawStore) -> Option<RedisConfig> {
        let before = self.errors.len();
        for url in s.url.iter().chain(&s.nodes) {
            if !is_redis_url(url.get_ref()) {
                let field = if s.url.as_ref() == Some(url) {
                    "store.url"
                } else {
                    "store.nodes"
                };
                let message = format!(
                    "{:?} is not a redis://, rediss://, redis+unix:// or unix:// URL",
                    url.get_ref()
                );
                self.push(url, field.into(), message);
            }
        }
        let target = if !s.sentinels.is_empty() {
            self.sentinel_target(s)
        } else {
            if let Some(m) = &s.master_name {
                self.push(
                    m,
                    "store.master_name".into(),
                    "only with sentinels = [...]".into(),
                );
            }
            self.url_target(s)
        };
        let timeout_ms = self.millis(
            &s.timeout_ms,
            "store.timeout_ms",
            1,
            DEFAULT_REDIS_TIMEOUT_MS,
        );
        let breaker_window_ms = self.millis(
            &s.breaker_window_ms,
            "store.breaker_window_ms",
            0,
            DEFAULT_BREAKER_WINDOW_MS,
        );
        let mut prefix = "fg:".to_string();
        if let Some(p) = &s.prefix {
            let text = p.get_ref();
            if text.len() > 64 || text.contains(['{', '}']) {
                self.push(
                    p,
                    "store.prefix".into(),
                    "at most 64 bytes, without '{' or '}' (braces would make a cluster hash tag, \
                     letting the prefix choose the slot of every key)"
                        .into(),
                );
            } else {
                prefix = text.clone();
            }
        }
        let mut local = false;
        if let Some(f) = &s.fallback {
            match f.get_ref().as_str() {
                "none" => {}
                "local" => local = true,
                other => self.push(
                    f,
                    "store.fallback".into(),
                    format!("unknown fallback {other:?}; expected \"none\" or \"local\""),
                ),
            }
        }
        let mut instances = None;
        match (&s.instances, local) {
            (Some(n), true) => match u64::try_from(*n.get_ref()) {
                Ok(v @ 1..=10_000) => instances = Some(v),
                _ => self.push(
                    n,
                    "store.instances".into(),
                    format!("must be 1 to 10000 processes, got {}", n.get_ref()),
                ),
            },
            (Some(n), false) => self.push(
                n,
                "store.instances".into(),
                "only with fallback = \"local\"".into(),
            ),
            // Discovered: every process announces itself in Redis.
            (None, true) | (None, false) => {}
        }
        let tls = self.redis_tls(s);
        let deny_cache = s.deny_cache.as_ref().is_some_and(|d| *d.get_ref());
        if let (Some(d), true) = (&s.deny_cache, deny_cache && !s.nodes.is_empty()) {
            self.push(
                d,
                "store.deny_cache".into(),
                "not on a Redis Cluster (nodes = [...]): a cross-slot refund gives units back \
                 from several shards, which the cache's invalidations do not cover; use it with \
                 url = \"...\" or sentinels = [...]"
                    .into(),
            );
        }
        (self.errors.len() == before).then(|| RedisConfig {
            target: target.expect("no error, so a target"),
            timeout_ms,
            breaker_window_ms,
            prefix,
            local_fallback: local,
            local_fallback_instances: instances,
            tls,
            master_auth: None,
            deny_cache,
            deny_cache_keys: floodgate_store::redis::deny_cache::CAPACITY,
            per_second: None,
        })
    }

    /// `url` (one server) or `nodes` (a cluster); `None` when they have errors (pushed).
    fn url_target(&mut self, s: &raw::RawStore) -> Option<floodgate_store::redis::RedisTarget> {
        use floodgate_store::redis::RedisTarget;
        match (&s.url, s.nodes.is_empty()) {
            (Some(url), true) => Some(RedisTarget::Standalone(url.get_ref().clone())),
            (None, false) => Some(RedisTarget::Cluster(
                s.nodes.iter().map(|n| n.get_ref().clone()).collect(),
            )),
            (Some(url), false) => {
                self.push(
                    url,
                    "store.url".into(),
                    "give url (one server) or nodes (a cluster), not both".into(),
                );
                None
            }
            (None, true) => {
                let kind = s.kind.as_ref().expect("kind = \"redis\" was given");
                self.push(
                    kind,
                    "store.url".into(),
                    "kind = \"redis\" needs url = \"redis://host:port\", nodes = [...] or \
                     sentinels = [...]"
                        .into(),
                );
                None
            }
        }
    }

    /// `sentinels` and `master_name` (Redis Sentinel); `None` when they have errors (pushed).
    fn sentinel_target(
        &mut self,
        s: &raw::RawStore,
    ) -> Option<floodgate_store::redis::RedisTarget> {
        let before = self.errors.len();
        // All redis:// or all rediss:// (TLS to the sentinels and to the master they name).
        let tls = s.sentinels[0].get_ref().starts_with("rediss://");
        for u in &s.sentinels {
            let url = u.get_ref();
            let problem = if !url.starts_with("redis://") && !url.starts_with("rediss://") {
                Some(format!("{url:?} is not a redis:// or rediss:// URL"))
            } else {
                (url.starts_with("rediss://") != tls).then(|| {
                    format!("{url:?}: sentinels mix rediss:// (TLS) and redis:// URLs; give one")
                })
            };
            if let Some(problem) = problem {
                self.push(u, "store.sentinels".into(), problem);
            }
        }
        for (v, field) in [
            (s.url.as_ref(), "store.url"),
            (s.nodes.first(), "store.nodes"),
        ] {
            if let Some(v) = v {
                self.push(
                    v,
                    field.into(),
                    "give one of url (one server), nodes (a cluster) or sentinels (Redis \
                     Sentinel)"
                        .into(),
                );
            }
        }
        let master_name = match &s.master_name {
            Some(m) if !m.get_ref().is_empty() => Some(m.get_ref().clone()),
            Some(m) => {
                self.push(m, "store.master_name".into(), "must not be empty".into());
                None
            }
            None => {
                self.push(
                    &s.sentinels[0],
                    "store.master_name".into(),
                    "sentinels need master_name = \"...\" (the name the sentinels monitor)".into(),
                );
                None
            }
        };
        let master_name = master_name.filter(|_| self.errors.len() == before)?;
        Some(floodgate_store::redis::RedisTarget::Sentinel {
            sentinels: s.sentinels.iter().map(|u| u.get_ref().clone()).collect(),
            master_name,
        })
    }

    /// `tls_ca_file`, `tls_cert_file`, `tls_key_file`: read and checked (PEM that parses, a
    /// certificate with its key, `rediss://` URLs); errors pushed naming the field.
    fn redis_tls(&mut self, s: &raw::RawStore) -> floodgate_store::redis::RedisTls {
        let dir = Path::new(self.src.file).parent();
        let mut read = |value: &Option<Spanned<String>>, field: &str| -> Option<Vec<u8>> {
            let v = value.as_ref()?;
            let path = dir.map_or_else(
                || Path::new(v.get_ref()).to_path_buf(),
                |d| d.join(v.get_ref()),
            );
            match crate::config::pem::read(&path) {
                Ok(bytes) => Some(bytes),
                Err(e) => {
                    self.push(
                        v,
                        format!("store.{field}"),
                        e.message(&format!("{:?}", path.display().to_string())),
                    );
                    None
                }
            }
        };
        let tls = floodgate_store::redis::RedisTls {
            ca_pem: read(&s.tls_ca_file, "tls_ca_file"),
            client_cert_pem: read(&s.tls_cert_file, "tls_cert_file"),
            client_key_pem: read(&s.tls_key_file, "tls_key_file"),
        };
        let given = [
            (&s.tls_ca_file, "tls_ca_file"),
            (&s.tls_cert_file, "tls_cert_file"),
            (&s.tls_key_file, "tls_key_file"),
        ];
        let all_tls = s
            .url
            .iter()
            .chain(&s.nodes)
            .chain(&s.sentinels)
            .all(|u| u.get_ref().starts_with("rediss://"));
        if let Some((v, field)) = given.iter().find_map(|(v, f)| v.as_ref().map(|v| (v, *f))) {
            if !all_tls {
                self.push(
                    v,
                    format!("store.{field}"),
                    "TLS files need rediss:// URLs (url, or every one of nodes or sentinels)"
                        .into(),
                );
            }
        }
        match (&s.tls_cert_file, &s.tls_key_file) {
            (Some(v), None) => self.push(
                v,
                "store.tls_key_file".into(),
                "tls_cert_file needs tls_key_file (the client certificate's private key)".into(),
            ),
            (None, Some(v)) => self.push(
                v,
                "store.tls_cert_file".into(),
                "tls_key_file needs tls_cert_file (the client certificate)".into(),
            ),
            _ => {
                if let Err((field, e)) = tls.check() {
                    let (value, name) = match field {
                        "ca_pem" => (&s.tls_ca_file, "tls_ca_file"),
                        "client_cert_pem" => (&s.tls_cert_file, "tls_cert_file"),
                        _ => (&s.tls_key_file, "tls_key_file"),
                    };
                    if let Some(v) = value {
                        self.push(v, format!("store.{name}"), e);
                    }
                }
            }
        }
        tls
    }
}
