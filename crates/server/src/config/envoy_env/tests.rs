//! Unit tests of the mapping of envoyproxy/ratelimit's environment.

use super::*;
use floodgate_store::redis::RedisTarget;

fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

#[test]
fn upstreams_defaults_map_to_its_listeners_runtime_folder_and_unix_socket_redis() {
    let env = from_vars(&BTreeMap::new()).unwrap();
    assert_eq!(env.http, "0.0.0.0:8080".parse().unwrap());
    assert_eq!(env.grpc, "0.0.0.0:8081".parse().unwrap());
    assert_eq!(env.debug, "0.0.0.0:6070".parse().unwrap());
    assert_eq!(env.prometheus, None);
    assert_eq!(
        env.config_dir,
        PathBuf::from("/srv/runtime_data/current/config")
    );
    assert_eq!(
        env.redis.target,
        RedisTarget::Standalone("redis+unix:///var/run/nutcracker/ratelimit.sock".into())
    );
    assert_eq!(env.redis.prefix, "fg:");
    assert_eq!(env.redis.timeout_ms, 50);
    assert_eq!(env.log_filter, "warn");
    assert!(!env.log_json);
    assert_eq!(env.grpc_max_connection_age, Duration::from_secs(24 * 3600));
    assert!(env.notes.is_empty());
}

#[test]
fn the_docker_compose_example_maps_to_tcp_redis_and_the_runtime_subdirectory() {
    let env = from_vars(&vars(&[
        ("USE_STATSD", "false"),
        ("LOG_LEVEL", "debug"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "redis:6379"),
        ("RUNTIME_ROOT", "/data"),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("RUNTIME_WATCH_ROOT", "false"),
        ("RUNTIME_IGNOREDOTFILES", "true"),
        ("PORT", "0"),
        ("GRPC_HOST", "127.0.0.1"),
        ("GRPC_PORT", "9000"),
        ("LOG_FORMAT", "json"),
        ("CACHE_KEY_PREFIX", "rl_"),
        ("REDIS_AUTH", "user:p@ss"),
        ("REDIS_TIMEOUT", "250ms"),
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", "127.0.0.1:9191"),
        ("PROMETHEUS_PATH", "/prom"),
        ("GRPC_MAX_CONNECTION_AGE", "1h30m"),
        ("REDIS_POOL_SIZE", "50"),
    ]))
    .unwrap();
    assert_eq!(env.config_dir, PathBuf::from("/data/ratelimit/config"));
    assert!(env.ignore_dot_files);
    assert_eq!(
        env.redis.target,
        RedisTarget::Standalone("redis://user:p%40ss@redis:6379".into())
    );
    assert_eq!(env.redis.prefix, "rl_");
    assert_eq!(env.redis.timeout_ms, 250);
    assert_eq!(env.log_filter, "debug");
    assert!(env.log_json);
    assert_eq!(env.http.port(), 0);
    assert_eq!(env.grpc, "127.0.0.1:9000".parse().unwrap());
    assert_eq!(
        env.prometheus,
        Some(("127.0.0.1:9191".parse().unwrap(), "/prom".to_string()))
    );
    assert_eq!(env.grpc_max_connection_age, Duration::from_secs(5400));
    assert_eq!(env.notes.len(), 1);
    assert!(env.notes[0].starts_with("REDIS_POOL_SIZE=50: accepted"));
}

#[test]
fn cluster_and_sentinel_take_upstreams_url_lists() {
    let env = from_vars(&vars(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_TYPE", "cluster"),
        ("REDIS_URL", "10.0.0.1:7000, 10.0.0.2:7000"),
        ("REDIS_TLS", "true"),
        ("REDIS_AUTH", "secret"),
    ]))
    .unwrap();
    assert_eq!(
        env.redis.target,
        RedisTarget::Cluster(vec![
            "rediss://:secret@10.0.0.1:7000".into(),
            "rediss://:secret@10.0.0.2:7000".into()
        ])
    );
    let env = from_vars(&vars(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_TYPE", "SENTINEL"),
        ("REDIS_URL", "mymaster,10.0.0.1:26379,10.0.0.2:26379"),
        ("REDIS_SENTINEL_AUTH", "s3"),
    ]))
    .unwrap();
    assert_eq!(
        env.redis.target,
        RedisTarget::Sentinel {
            master_name: "mymaster".into(),
            sentinels: vec![
                "redis://:s3@10.0.0.1:26379".into(),
                "redis://:s3@10.0.0.2:26379".into()
            ],
        }
    );
    // REDIS_TLS: the sentinels (and the master they name) over TLS.
    let env = from_vars(&vars(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_TYPE", "sentinel"),
        ("REDIS_URL", "mymaster,10.0.0.1:26380"),
        ("REDIS_TLS", "true"),
    ]))
    .unwrap();
    assert!(
        matches!(&env.redis.target, RedisTarget::Sentinel { sentinels, .. }
            if sentinels == &["rediss://10.0.0.1:26380".to_string()]),
        "{:?}",
        env.redis.target
    );
}

#[test]
fn a_unix_socket_carries_its_password_in_the_query() {
    let env = from_vars(&vars(&[
        ("REDIS_URL", "/run/redis.sock"),
        ("REDIS_AUTH", "pw"),
    ]))
    .unwrap();
    assert_eq!(
        env.redis.target,
        RedisTarget::Standalone("redis+unix:///run/redis.sock?pass=pw".into())
    );
}

#[test]
fn every_refusal_names_its_variable_and_value_and_all_are_reported_at_once() {
    let err = from_vars(&vars(&[
        ("BACKEND_TYPE", "memcache"),
        ("SHADOW_MODE", "maybe"),
        ("QUOTA_MODE", "sometimes"),
        ("REDIS_PERSECOND", "true"),
        ("REDIS_PERSECOND_TYPE", "ring"),
        ("GRPC_SERVER_USE_TLS", "true"),
        ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
        ("LIMIT_RESET_HEADER", "bad header"),
        ("LOCAL_CACHE_SIZE_IN_BYTES", "100"),
        ("USE_STATSD", "true"),
        ("PORT", "http"),
        ("LOG_LEVEL", "loud"),
        ("REDIS_TYPE", "ring"),
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("GRPC_UDS", "/tmp/rl.sock"),
        ("NEAR_LIMIT_RATIO", "0.9"),
    ]))
    .unwrap_err();
    let text = err.to_string();
    for needle in [
        "BACKEND_TYPE=\"memcache\": Floodgate keeps shared limits in Redis only",
        "SHADOW_MODE=\"maybe\": expected true or false",
        "QUOTA_MODE=\"sometimes\": expected true or false",
        "REDIS_PERSECOND_TYPE=\"ring\": expected single, cluster or sentinel",
        "GRPC_SERVER_TLS_CERT=\"\": GRPC_SERVER_USE_TLS=true needs the server's certificate",
        "GRPC_SERVER_TLS_KEY=\"\": GRPC_SERVER_USE_TLS=true needs",
        "LIMIT_RESET_HEADER=\"bad header\": not a valid HTTP header name",
        "LOCAL_CACHE_SIZE_IN_BYTES=\"100\": too small for one key of Floodgate's deny cache \
         (512 bytes at least; 0: off)",
        "USE_STATSD=\"true\": Floodgate sends no statsd",
        "PORT=\"http\": expected a port number",
        "LOG_LEVEL=\"loud\"",
        "REDIS_TYPE=\"ring\": expected single, cluster or sentinel",
        "CONFIG_TYPE=\"GRPC_XDS_SOTW\"",
        "GRPC_UDS=\"/tmp/rl.sock\"",
        "NEAR_LIMIT_RATIO=\"0.9\"",
    ] {
        assert!(text.contains(needle), "{needle} in\n{text}");
    }
    assert_eq!(err.0.len(), 15, "{text}");
}

#[test]
fn upstreams_defaults_given_explicitly_are_accepted() {
    let env = from_vars(&vars(&[
        ("SHADOW_MODE", "false"),
        ("REDIS_PERSECOND", "False"),
        ("NEAR_LIMIT_RATIO", "0.8"),
        ("EXPIRATION_JITTER_MAX_SECONDS", "300"),
        ("GRPC_MAX_CONNECTION_AGE_GRACE", "60m"),
        ("CONFIG_TYPE", "file"),
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
        ("MEMCACHE_HOST_PORT", "memcached:11211"),
        ("REDIS_PERSECOND_URL", "redis-ps:6379"),
        ("LIMIT_REMAINING_HEADER", "X-Left"),
    ]));
    assert!(env.is_ok(), "{env:?}");
}

#[test]
fn sentinel_limits_are_explained() {
    let err = from_vars(&vars(&[
        ("REDIS_TYPE", "sentinel"),
        ("REDIS_URL", "mymaster"),
        ("REDIS_AUTH", "pw"),
    ]))
    .unwrap_err()
    .to_string();
    assert!(err.contains("<master name>,<sentinel1>"), "{err}");
    assert!(err.contains("REDIS_SOCKET_TYPE=\"unix\": sentinels are reached over tcp"));
    assert!(!err.contains("pw"), "the password is not shown: {err}");
}

#[test]
fn sentinel_auth_goes_to_the_master_and_sentinel_auth_to_the_sentinels_as_upstream() {
    let env = from_vars(&vars(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_TYPE", "sentinel"),
        ("REDIS_URL", "mymaster,10.0.0.1:26379"),
        ("REDIS_AUTH", "app:pw"),
        ("REDIS_SENTINEL_AUTH", "s3"),
    ]))
    .unwrap();
    let auth = env.redis.master_auth.expect("the master's credentials");
    assert_eq!(
        (auth.username.as_deref(), auth.password.as_str()),
        (Some("app"), "pw")
    );
    assert_eq!(
        env.redis.target,
        RedisTarget::Sentinel {
            master_name: "mymaster".into(),
            sentinels: vec!["redis://:s3@10.0.0.1:26379".into()],
        }
    );
}

#[test]
fn redis_persecond_is_a_second_store_of_its_own_variables_sharing_prefix_and_tls_files() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, "ca").unwrap();
    let ca = ca.display().to_string();
    let per_second = [
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "redis:6379"),
        ("CACHE_KEY_PREFIX", "rl_"),
        ("REDIS_PERSECOND", "true"),
        ("REDIS_PERSECOND_SOCKET_TYPE", "tcp"),
        ("REDIS_PERSECOND_URL", "redis-ps:6379"),
        ("REDIS_PERSECOND_AUTH", "pw"),
        ("REDIS_PERSECOND_TLS", "true"),
        ("REDIS_PERSECOND_TIMEOUT", "2s"),
        ("REDIS_PERSECOND_POOL_SIZE", "20"),
        ("REDIS_TLS_CACERT", ca.as_str()),
    ];
    let env = from_vars(&vars(&per_second)).unwrap();
    assert_eq!(
        env.redis.target,
        RedisTarget::Standalone("redis://redis:6379".into())
    );
    assert!(
        env.redis.tls.is_empty(),
        "REDIS_TLS is off for the main store"
    );
    let fast = env.redis.per_second.expect("a per-second store");
    assert_eq!(
        fast.target,
        RedisTarget::Standalone("rediss://:pw@redis-ps:6379".into())
    );
    assert_eq!((fast.prefix.as_str(), fast.timeout_ms), ("rl_", 2000));
    assert_eq!(fast.tls.ca_pem.as_deref(), Some(&b"ca"[..]));
    assert!(fast.per_second.is_none());
    // Without REDIS_PERSECOND=true the REDIS_PERSECOND_* variables are unused, as upstream.
    let off: Vec<_> = per_second
        .iter()
        .filter(|(k, _)| *k != "REDIS_PERSECOND" && *k != "REDIS_TLS_CACERT")
        .copied()
        .collect();
    assert!(from_vars(&vars(&off)).unwrap().redis.per_second.is_none());
}

#[test]
fn shadow_mode_merge_domain_config_and_response_dynamic_metadata_set_the_envoy_flags() {
    let env = from_vars(&vars(&[
        ("SHADOW_MODE", "true"),
        ("MERGE_DOMAIN_CONFIG", "1"),
        ("RESPONSE_DYNAMIC_METADATA", "True"),
    ]))
    .unwrap();
    let mut flags = crate::config::envoy::EnvoyArgs::default();
    env.service.apply(&mut flags);
    let settings = flags.apply(crate::config::envoy::EnvoySettings::default());
    assert!(settings.shadow_mode && settings.merge_domain_config);
    assert!(settings.response_dynamic_metadata);
    let none = from_vars(&BTreeMap::new()).unwrap().service;
    assert_eq!(none, ServiceModes::default());
}

#[test]
fn tls_files_need_tls_and_are_read() {
    let err = from_vars(&vars(&[("REDIS_TLS_CACERT", "/nonexistent/ca.pem")]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("REDIS_TLS_CACERT=\"/nonexistent/ca.pem\": needs REDIS_TLS=true"));
    let err = from_vars(&vars(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "r:6379"),
        ("REDIS_TLS", "true"),
        ("REDIS_TLS_CACERT", "/nonexistent/ca.pem"),
    ]))
    .unwrap_err()
    .to_string();
    assert!(err.contains("REDIS_TLS_CACERT=\"/nonexistent/ca.pem\": cannot read"));
}

/// A CA's certificate, and a server certificate and key it signed, written into `dir` as
/// `ca.crt`, `server.crt`, `server.key`; and a key of another certificate, `other.key`.
fn certificates(dir: &Path) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    std::fs::write(dir.join("ca.crt"), ca_cert.pem()).unwrap();
    std::fs::write(dir.join("server.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
    let other = rcgen::KeyPair::generate().unwrap();
    std::fs::write(dir.join("other.key"), other.serialize_pem()).unwrap();
}

#[test]
fn grpc_tls_variables_map_onto_the_listeners_tls_settings() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let file = |name: &str| dir.path().join(name).display().to_string();
    // Off by default, as upstream.
    assert_eq!(from_vars(&BTreeMap::new()).unwrap().grpc_tls, None);
    let env = from_vars(&vars(&[
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", &file("server.crt")),
        ("GRPC_SERVER_TLS_KEY", &file("server.key")),
    ]))
    .unwrap();
    assert_eq!(
        env.grpc_tls,
        Some(GrpcTlsSettings {
            cert_file: dir.path().join("server.crt"),
            key_file: dir.path().join("server.key"),
            client_ca_file: None,
            client_san: None,
        })
    );
    // Mutual TLS: the client CA and the SAN its certificates must carry.
    let env = from_vars(&vars(&[
        ("GRPC_SERVER_USE_TLS", "1"),
        ("GRPC_SERVER_TLS_CERT", &file("server.crt")),
        ("GRPC_SERVER_TLS_KEY", &file("server.key")),
        ("GRPC_CLIENT_TLS_CACERT", &file("ca.crt")),
        ("GRPC_CLIENT_TLS_SAN", "envoy.internal"),
    ]))
    .unwrap();
    let tls = env.grpc_tls.unwrap();
    assert_eq!(tls.client_ca_file, Some(dir.path().join("ca.crt")));
    assert_eq!(tls.client_san.as_deref(), Some("envoy.internal"));
    // GRPC_SERVER_USE_TLS=false given explicitly: plain, as upstream's default.
    let env = from_vars(&vars(&[("GRPC_SERVER_USE_TLS", "false")])).unwrap();
    assert_eq!(env.grpc_tls, None);
}

#[test]
fn grpc_tls_errors_name_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let file = |name: &str| dir.path().join(name).display().to_string();
    let err = |pairs: &[(&str, &str)]| from_vars(&vars(pairs)).unwrap_err().to_string();

    // A file without TLS on is refused, not ignored.
    let e = err(&[("GRPC_SERVER_TLS_CERT", &file("server.crt"))]);
    assert!(
        e.contains("GRPC_SERVER_TLS_CERT=") && e.contains("needs GRPC_SERVER_USE_TLS=true"),
        "{e}"
    );
    // TLS on without a key.
    let e = err(&[
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", &file("server.crt")),
    ]);
    assert!(
        e.contains("GRPC_SERVER_TLS_KEY=\"\": GRPC_SERVER_USE_TLS=true needs"),
        "{e}"
    );
    assert!(!e.contains("GRPC_SERVER_TLS_CERT="), "{e}");
    // An unreadable file, a key of another certificate, a CA file that is no certificate.
    let base = [
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", "/nonexistent/server.crt"),
        ("GRPC_SERVER_TLS_KEY", "/nonexistent/server.key"),
    ];
    let e = err(&base);
    assert!(
        e.contains("GRPC_SERVER_TLS_CERT=\"/nonexistent/server.crt\": ")
            && e.contains("cannot read"),
        "{e}"
    );
    let (crt, other, key) = (file("server.crt"), file("other.key"), file("server.key"));
    let e = err(&[
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", &crt),
        ("GRPC_SERVER_TLS_KEY", &other),
    ]);
    assert!(
        e.contains(&format!("GRPC_SERVER_TLS_KEY={other:?}: "))
            && e.contains("does not go with the certificate"),
        "{e}"
    );
    let e = err(&[
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", &crt),
        ("GRPC_SERVER_TLS_KEY", &key),
        ("GRPC_CLIENT_TLS_CACERT", &key),
    ]);
    assert!(
        e.contains(&format!("GRPC_CLIENT_TLS_CACERT={key:?}: ")),
        "{e}"
    );
    // A SAN without a client CA, and a SAN that is no name.
    let e = err(&[
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", &crt),
        ("GRPC_SERVER_TLS_KEY", &key),
        ("GRPC_CLIENT_TLS_SAN", "envoy.internal"),
    ]);
    assert!(
        e.contains("GRPC_CLIENT_TLS_SAN=\"envoy.internal\": needs GRPC_CLIENT_TLS_CACERT"),
        "{e}"
    );
    let e = err(&[
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", &crt),
        ("GRPC_SERVER_TLS_KEY", &key),
        ("GRPC_CLIENT_TLS_CACERT", &file("ca.crt")),
        ("GRPC_CLIENT_TLS_SAN", "not a name!"),
    ]);
    assert!(e.contains("GRPC_CLIENT_TLS_SAN=\"not a name!\": "), "{e}");
}

#[test]
fn go_durations() {
    assert_eq!(go_duration("0"), Ok(Duration::ZERO));
    assert_eq!(go_duration("24h"), Ok(Duration::from_secs(86_400)));
    assert_eq!(go_duration("1m30s"), Ok(Duration::from_secs(90)));
    assert_eq!(go_duration("500ms"), Ok(Duration::from_millis(500)));
    assert_eq!(go_duration("1.5s"), Ok(Duration::from_millis(1500)));
    assert!(go_duration("10").is_err());
    assert!(go_duration("-1s").is_err());
    assert!(go_duration("1d").is_err());
    assert!(go_duration("").is_err());
}

#[test]
fn every_variable_of_upstreams_settings_is_known_once() {
    // `envconfig:"..."` of envoyproxy/ratelimit's src/settings/settings.go (commit
    // f2fb15770f7fd1c88ca6c3a1b58ee513917ace96).
    let upstream = "HOST PORT DEBUG_HOST DEBUG_PORT GRPC_UDS GRPC_HOST GRPC_PORT \
        GRPC_MAX_CONNECTION_AGE GRPC_MAX_CONNECTION_AGE_GRACE GRPC_SERVER_USE_TLS \
        GRPC_SERVER_TLS_CERT GRPC_SERVER_TLS_KEY GRPC_CLIENT_TLS_CACERT GRPC_CLIENT_TLS_SAN \
        LOG_LEVEL LOG_FORMAT CONFIG_TYPE FORCE_START_WITHOUT_INITIAL_CONFIG \
        CONFIG_GRPC_XDS_NODE_ID CONFIG_GRPC_XDS_NODE_METADATA CONFIG_GRPC_XDS_SERVER_URL \
        CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS \
        CONFIG_GRPC_XDS_SERVER_USE_TLS CONFIG_GRPC_XDS_CLIENT_TLS_CERT \
        CONFIG_GRPC_XDS_CLIENT_TLS_KEY CONFIG_GRPC_XDS_SERVER_TLS_CACERT \
        CONFIG_GRPC_XDS_SERVER_TLS_SAN XDS_CLIENT_BACKOFF_INITIAL_INTERVAL \
        XDS_CLIENT_BACKOFF_MAX_INTERVAL XDS_CLIENT_BACKOFF_RANDOM_FACTOR \
        XDS_CLIENT_BACKOFF_JITTER XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES USE_DOG_STATSD \
        USE_DOG_STATSD_MOGRIFIERS USE_STATSD STATSD_HOST STATSD_PORT EXTRA_TAGS \
        STATS_FLUSH_INTERVAL DISABLE_STATS USE_PROMETHEUS PROMETHEUS_ADDR PROMETHEUS_PATH \
        PROMETHEUS_MAPPER_YAML PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS RUNTIME_ROOT \
        RUNTIME_SUBDIRECTORY RUNTIME_APPDIRECTORY RUNTIME_IGNOREDOTFILES RUNTIME_WATCH_ROOT \
        EXPIRATION_JITTER_MAX_SECONDS LOCAL_CACHE_SIZE_IN_BYTES NEAR_LIMIT_RATIO \
        CACHE_KEY_PREFIX BACKEND_TYPE STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT \
        LIMIT_RESPONSE_HEADERS_ENABLED LIMIT_LIMIT_HEADER LIMIT_REMAINING_HEADER \
        LIMIT_RESET_HEADER HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED REDIS_SOCKET_TYPE \
        REDIS_TYPE REDIS_URL REDIS_POOL_SIZE REDIS_AUTH REDIS_TLS REDIS_TLS_CLIENT_CERT \
        REDIS_TLS_CLIENT_KEY REDIS_TLS_CACERT REDIS_TLS_SKIP_HOSTNAME_VERIFICATION \
        REDIS_PIPELINE_WINDOW REDIS_PIPELINE_LIMIT REDIS_CLUSTER_PIPELINE_PARALLELISM \
        REDIS_PERSECOND REDIS_PERSECOND_SOCKET_TYPE REDIS_PERSECOND_TYPE REDIS_PERSECOND_URL \
        REDIS_PERSECOND_POOL_SIZE REDIS_PERSECOND_AUTH REDIS_PERSECOND_TLS \
        REDIS_SENTINEL_AUTH REDIS_PERSECOND_SENTINEL_AUTH REDIS_PERSECOND_PIPELINE_WINDOW \
        REDIS_PERSECOND_PIPELINE_LIMIT REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM \
        REDIS_HEALTH_CHECK_ACTIVE_CONNECTION REDIS_TIMEOUT REDIS_PERSECOND_TIMEOUT \
        REDIS_POOL_ON_EMPTY_BEHAVIOR REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR \
        REDIS_STARTUP_INITIAL_INTERVAL REDIS_STARTUP_MAX_INTERVAL \
        REDIS_STARTUP_MAX_ELAPSED_TIME MEMCACHE_HOST_PORT MEMCACHE_MAX_IDLE_CONNS \
        MEMCACHE_SRV MEMCACHE_SRV_REFRESH MEMCACHE_TLS MEMCACHE_TLS_CLIENT_CERT \
        MEMCACHE_TLS_CLIENT_KEY MEMCACHE_TLS_CACERT MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION \
        SHADOW_MODE QUOTA_MODE RESPONSE_DYNAMIC_METADATA MERGE_DOMAIN_CONFIG \
        TRACING_ENABLED TRACING_SERVICE_NAME TRACING_SERVICE_NAMESPACE \
        TRACING_SERVICE_INSTANCE_ID TRACING_EXPORTER_PROTOCOL TRACING_SAMPLING_RATE";
    let known: Vec<&str> = MAPPED
        .iter()
        .copied()
        .chain(DEFAULT_ONLY.iter().map(|(n, _, _)| *n))
        .chain(POOL_TUNING.iter().copied())
        .chain(INERT_WITHOUT_THEIR_MODE.iter().copied())
        .collect();
    for name in upstream.split_whitespace() {
        let n = known.iter().filter(|k| **k == name).count();
        assert_eq!(n, 1, "{name} is known {n} times");
    }
    assert_eq!(known.len(), upstream.split_whitespace().count());
}

#[test]
fn dot_files_are_left_out_only_when_asked() {
    assert!(is_dot_file(Path::new("/x/.hidden.yaml")));
    assert!(!is_dot_file(Path::new("/x.d/visible.yaml")));
    // Off unless RUNTIME_IGNOREDOTFILES turned it on (never in this test process).
    assert!(!ignored(Path::new("/x/.hidden.yaml")));
}

#[test]
fn the_kubernetes_deployment_of_docs_envoy_md_is_accepted_as_it_is() {
    use saphyr::{LoadableYamlNode as _, Yaml};
    // docs/envoy.md, "The image, and Kubernetes": the ```yaml block of `kind: Deployment`.
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/envoy.md"))
        .unwrap();
    let block = doc
        .split("```yaml\n")
        .skip(1)
        .filter_map(|rest| rest.split_once("\n```").map(|(block, _)| block))
        .find(|block| block.contains("kind: Deployment"))
        .expect("a Deployment in docs/envoy.md");
    let yaml = Yaml::load_from_str(block).unwrap();
    let container = &yaml[0]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["command"][0].as_str(), Some("/bin/ratelimit"));
    let env: BTreeMap<String, String> = container["env"]
        .as_sequence()
        .expect("an env list")
        .iter()
        .map(|e| {
            let text = |k: &str| {
                let v = &e[k];
                v.as_str()
                    .map(str::to_string)
                    .or_else(|| v.as_integer().map(|n| n.to_string()))
                    .unwrap_or_else(|| panic!("{k} of {e:?} is a string"))
            };
            (text("name"), text("value"))
        })
        .collect();
    assert!(env.len() >= 8, "{env:?}");
    let mapped = from_vars(&env).unwrap_or_else(|e| panic!("{e}"));
    let mount = container["volumeMounts"][0]["mountPath"].as_str().unwrap();
    assert_eq!(
        mapped.config_dir,
        PathBuf::from(mount),
        "the ConfigMap's folder"
    );
    assert_eq!(mapped.http.port(), 8080);
    assert_eq!(mapped.grpc.port(), 8081);
    assert_eq!(mapped.debug.port(), 6070);
}

#[test]
fn local_cache_size_in_bytes_turns_on_the_deny_cache_holding_what_fits() {
    let tcp = [("REDIS_SOCKET_TYPE", "tcp"), ("REDIS_URL", "redis:6379")];
    let env = from_vars(&vars(&tcp)).unwrap();
    assert!(!env.redis.deny_cache, "upstream's default 0: off");
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut all = tcp.to_vec();
        all.extend_from_slice(extra);
        from_vars(&vars(&all))
    };
    let env = with(&[("LOCAL_CACHE_SIZE_IN_BYTES", "1048576")]).unwrap();
    assert!(env.redis.deny_cache);
    assert_eq!(env.redis.deny_cache_keys, 1_048_576 / 256);
    // Never more than the cache's own bound; with a per-second Redis the bytes are shared.
    let env = with(&[("LOCAL_CACHE_SIZE_IN_BYTES", "1000000000")]).unwrap();
    assert_eq!(env.redis.deny_cache_keys, 10_000);
    let env = with(&[
        ("LOCAL_CACHE_SIZE_IN_BYTES", "1048576"),
        ("REDIS_PERSECOND", "true"),
        ("REDIS_PERSECOND_SOCKET_TYPE", "tcp"),
        ("REDIS_PERSECOND_URL", "fast:6379"),
    ])
    .unwrap();
    let fast = env.redis.per_second.as_ref().unwrap();
    assert!(env.redis.deny_cache && fast.deny_cache);
    assert_eq!(
        env.redis.deny_cache_keys + fast.deny_cache_keys,
        1_048_576 / 256
    );
    let err = with(&[("LOCAL_CACHE_SIZE_IN_BYTES", "lots")]).unwrap_err();
    assert!(err
        .to_string()
        .contains("LOCAL_CACHE_SIZE_IN_BYTES=\"lots\": expected a whole number of bytes"));
    let err = with(&[
        ("LOCAL_CACHE_SIZE_IN_BYTES", "1048576"),
        ("REDIS_TYPE", "cluster"),
    ])
    .unwrap_err();
    assert!(err.to_string().contains(
        "LOCAL_CACHE_SIZE_IN_BYTES=\"1048576\": Floodgate's deny cache is not offered on a Redis \
         Cluster"
    ));
}
