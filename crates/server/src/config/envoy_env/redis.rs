//! The Redis variables of envoyproxy/ratelimit's environment: `REDIS_*` for the store of every
//! limit and, with `REDIS_PERSECOND=true`, `REDIS_PERSECOND_*` for a second Redis holding the
//! limits whose unit is a second (as upstream's `perSecondPool`). The TLS files
//! (`REDIS_TLS_CACERT`, `REDIS_TLS_CLIENT_CERT`, `REDIS_TLS_CLIENT_KEY`) and `CACHE_KEY_PREFIX`
//! apply to both, as upstream's one `RedisTlsConfig` and key prefix do.

use floodgate_store::redis::{MasterAuth, RedisTarget, RedisTls};

use super::reader::Reader;
use super::MAX_REDIS_TIMEOUT;
use super::{RedisConfig, DEFAULT_BREAKER_WINDOW_MS, DEFAULT_REDIS_TIMEOUT_MS};

/// `REDIS_*` as a Redis store, with `REDIS_PERSECOND_*` as its
/// [`per_second`](RedisConfig::per_second) store when `REDIS_PERSECOND=true`.
pub(super) fn redis_config(r: &mut Reader<'_>) -> RedisConfig {
    let per_second = r.bool("REDIS_PERSECOND", false);
    let tls_main = r.bool("REDIS_TLS", false);
    let tls_fast = per_second && r.bool("REDIS_PERSECOND_TLS", false);
    let files = tls_files(r, tls_main || tls_fast);
    let prefix = prefix(r);
    let mut main = one(r, "REDIS", "/var/run/nutcracker/ratelimit.sock", tls_main);
    if per_second {
        let url = "/var/run/nutcracker/ratelimitpersecond.sock";
        let mut fast = one(r, "REDIS_PERSECOND", url, tls_fast);
        fast.prefix.clone_from(&prefix);
        if tls_fast {
            fast.tls = files.clone();
        }
        main.per_second = Some(Box::new(fast));
    }
    main.prefix = prefix;
    if tls_main {
        main.tls = files;
    }
    local_cache(r, &mut main);
    main
}

/// `LOCAL_CACHE_SIZE_IN_BYTES` (upstream's over-limit cache, default 0: off) as the Redis
/// store's deny cache (`[store] deny_cache`), holding as many keys as fit in that many bytes at
/// [`ENTRY_BYTES`](floodgate_store::redis::deny_cache::ENTRY_BYTES) each (at most
/// [`CAPACITY`](floodgate_store::redis::deny_cache::CAPACITY)); with `REDIS_PERSECOND` the
/// two stores' caches share the bytes. Never on a cluster (`REDIS_TYPE=cluster`): an error.
fn local_cache(r: &mut Reader<'_>, main: &mut RedisConfig) {
    use floodgate_store::redis::deny_cache::{CAPACITY, ENTRY_BYTES};
    const NAME: &str = "LOCAL_CACHE_SIZE_IN_BYTES";
    let text = r.text(NAME, "0");
    let bytes = match text.trim().parse::<u64>() {
        Ok(0) => return,
        Ok(n) => n,
        Err(_) => {
            r.fail(NAME, &text, "expected a whole number of bytes (0: off)");
            return;
        }
    };
    let stores = 1 + u64::from(main.per_second.is_some());
    let keys = bytes / stores / ENTRY_BYTES as u64;
    if keys == 0 {
        let least = stores * ENTRY_BYTES as u64;
        r.fail(
            NAME,
            &text,
            format!(
                "too small for one key of Floodgate's deny cache ({least} bytes at least; 0: off)"
            ),
        );
        return;
    }
    let keys = usize::try_from(keys).unwrap_or(CAPACITY).min(CAPACITY);
    let cluster = |c: &RedisConfig| matches!(c.target, RedisTarget::Cluster(_));
    if cluster(main) || main.per_second.as_deref().is_some_and(cluster) {
        r.fail(
            NAME,
            &text,
            "Floodgate's deny cache is not offered on a Redis Cluster (REDIS_TYPE=cluster): a \
             cross-slot refund gives units back from several shards, which its invalidations \
             do not cover; unset it",
        );
        return;
    }
    main.deny_cache = true;
    main.deny_cache_keys = keys;
    if let Some(fast) = main.per_second.as_deref_mut() {
        fast.deny_cache = true;
        fast.deny_cache_keys = keys;
    }
}

/// One store from the variables `<var>_SOCKET_TYPE`, `<var>_TYPE`, `<var>_URL`, `<var>_AUTH`,
/// `<var>_SENTINEL_AUTH` and `<var>_TIMEOUT` (`var` is `REDIS` or `REDIS_PERSECOND`).
fn one(r: &mut Reader<'_>, var: &str, default_url: &str, tls: bool) -> RedisConfig {
    let name = |field: &str| format!("{var}_{field}");
    let socket = r.text(&name("SOCKET_TYPE"), "unix");
    let kind = r.text(&name("TYPE"), "SINGLE");
    let url = r.text(&name("URL"), default_url);
    let auth = r.text(&name("AUTH"), "");
    let sentinel_auth = r.text(&name("SENTINEL_AUTH"), "");
    let unix = match socket.to_ascii_lowercase().as_str() {
        "unix" => true,
        "tcp" => false,
        _ => {
            r.fail(&name("SOCKET_TYPE"), &socket, "expected unix or tcp");
            false
        }
    };
    if unix && tls {
        r.fail(
            &name("TLS"),
            "true",
            format!(
                "TLS needs {}=tcp (a unix socket is local)",
                name("SOCKET_TYPE")
            ),
        );
    }
    let node = |addr: &str, auth: &str| node_url(unix, tls, addr, auth);
    let list: Vec<String> = url
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let mut master_auth = None;
    let target = match kind.to_ascii_lowercase().as_str() {
        "single" => {
            if list.len() != 1 {
                r.fail(
                    &name("URL"),
                    &url,
                    format!("{}=single takes one address", name("TYPE")),
                );
            }
            RedisTarget::Standalone(node(list.first().map_or("", String::as_str), &auth))
        }
        "cluster" => {
            if unix {
                r.fail(
                    &name("SOCKET_TYPE"),
                    &socket,
                    format!(
                        "a Redis Cluster is reached over tcp ({}=tcp)",
                        name("SOCKET_TYPE")
                    ),
                );
            }
            RedisTarget::Cluster(list.iter().map(|a| node(a, &auth)).collect())
        }
        "sentinel" => {
            if list.len() < 2 {
                r.fail(
                    &name("URL"),
                    &url,
                    format!(
                        "{}=sentinel expects <master name>,<sentinel1>,...,<sentinelN>",
                        name("TYPE")
                    ),
                );
            }
            if unix {
                r.fail(
                    &name("SOCKET_TYPE"),
                    &socket,
                    format!(
                        "sentinels are reached over tcp ({}=tcp)",
                        name("SOCKET_TYPE")
                    ),
                );
            }
            // As upstream: <var>_AUTH for the master, <var>_SENTINEL_AUTH for the sentinels.
            master_auth = (!auth.is_empty()).then(|| MasterAuth::parse(&auth));
            RedisTarget::Sentinel {
                master_name: list.first().cloned().unwrap_or_default(),
                sentinels: list
                    .iter()
                    .skip(1)
                    // <var>_TLS: the sentinels and the master over TLS.
                    .map(|a| {
                        let scheme = if tls { "rediss" } else { "redis" };
                        format!("{scheme}://{}{a}", userinfo(&sentinel_auth))
                    })
                    .collect(),
            }
        }
        _ => {
            r.fail(&name("TYPE"), &kind, "expected single, cluster or sentinel");
            RedisTarget::Standalone(String::new())
        }
    };
    RedisConfig {
        target,
        timeout_ms: timeout_ms(r, &name("TIMEOUT")),
        breaker_window_ms: DEFAULT_BREAKER_WINDOW_MS,
        prefix: String::new(),
        local_fallback: false,
        local_fallback_instances: None,
        tls: RedisTls::default(),
        master_auth,
        deny_cache: false,
        deny_cache_keys: floodgate_store::redis::deny_cache::CAPACITY,
        per_second: None,
    }
}

/// The URL of the node at `addr` with `auth`: `redis+unix://<addr>?pass=...` for a unix
/// socket, else `redis://` (`rediss://` with `tls`) with the credentials as userinfo.
fn node_url(unix: bool, tls: bool, addr: &str, auth: &str) -> String {
    if unix {
        let query = match auth.split_once(':') {
            _ if auth.is_empty() => String::new(),
            Some((user, pass)) => format!("?user={}&pass={}", percent(user), percent(pass)),
            None => format!("?pass={}", percent(auth)),
        };
        format!("redis+unix://{addr}{query}")
    } else {
        let scheme = if tls { "rediss" } else { "redis" };
        format!("{scheme}://{}{addr}", userinfo(auth))
    }
}

/// `password` or `user:password` (upstream's `REDIS_AUTH` forms) as a URL's userinfo.
fn userinfo(auth: &str) -> String {
    if auth.is_empty() {
        return String::new();
    }
    match auth.split_once(':') {
        Some((user, pass)) => format!("{}:{}@", percent(user), percent(pass)),
        None => format!(":{}@", percent(auth)),
    }
}

/// `REDIS_TLS_CACERT`, `REDIS_TLS_CLIENT_CERT`, `REDIS_TLS_CLIENT_KEY`, read now; `tls`:
/// `REDIS_TLS` or `REDIS_PERSECOND_TLS` is on.
fn tls_files(r: &mut Reader<'_>, tls: bool) -> RedisTls {
    let mut read = |name: &str| -> Option<Vec<u8>> {
        let path = r.text(name, "");
        if path.is_empty() {
            return None;
        }
        if !tls {
            r.fail(
                name,
                &path,
                "needs REDIS_TLS=true (or REDIS_PERSECOND_TLS=true)",
            );
            return None;
        }
        match crate::config::pem::read(std::path::Path::new(&path)) {
            Ok(bytes) => Some(bytes),
            Err(e) => {
                let why = match e {
                    crate::config::pem::PemError::Io(e) => format!("cannot read: {e}"),
                    too_large => too_large.message("the file"),
                };
                r.fail(name, &path, why);
                None
            }
        }
    };
    let files = RedisTls {
        ca_pem: read("REDIS_TLS_CACERT"),
        client_cert_pem: read("REDIS_TLS_CLIENT_CERT"),
        client_key_pem: read("REDIS_TLS_CLIENT_KEY"),
    };
    if files.client_cert_pem.is_some() != files.client_key_pem.is_some() {
        r.fail(
            "REDIS_TLS_CLIENT_CERT",
            &r.text("REDIS_TLS_CLIENT_CERT", ""),
            "a client certificate needs its key (REDIS_TLS_CLIENT_KEY) and the reverse",
        );
    }
    files
}

/// `<var>_TIMEOUT` given: the per-call timeout (1 ms to 60 s); unset: Floodgate's default.
fn timeout_ms(r: &mut Reader<'_>, name: &str) -> u64 {
    if !r.vars.contains_key(name) {
        return DEFAULT_REDIS_TIMEOUT_MS;
    }
    let t = r.duration(name, "10s");
    if t.is_zero() || t > MAX_REDIS_TIMEOUT {
        let v = r.text(name, "");
        r.fail(name, &v, "must be between 1ms and 60s");
    }
    u64::try_from(t.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// `CACHE_KEY_PREFIX`, else Floodgate's `fg:`.
fn prefix(r: &mut Reader<'_>) -> String {
    match r.vars.get("CACHE_KEY_PREFIX") {
        Some(p) if !p.is_empty() => {
            if p.contains(['{', '}']) || p.len() > 64 {
                let p = p.clone();
                r.fail(
                    "CACHE_KEY_PREFIX",
                    &p,
                    "at most 64 bytes and no braces (a hash tag would put every key in one \
                     cluster slot)",
                );
            }
            p.clone()
        }
        _ => "fg:".to_string(),
    }
}

/// Percent-encodes what a URL's userinfo cannot hold as it is.
fn percent(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
