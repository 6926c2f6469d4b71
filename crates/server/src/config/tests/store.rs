//! `[store]`: the memory store's bounds and the Redis settings (URL, nodes, Sentinel, TLS).

use super::*;

#[test]
fn redis_store_settings_are_read_and_checked() {
    use floodgate_store::redis::RedisTarget;
    let c = parse(
        "rules.toml",
        "[store]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:6379/0\"\ntimeout_ms = 25\nprefix = \"app1:\"\n",
    )
    .unwrap();
    let r = c.store.redis.unwrap();
    assert_eq!(
        r.target,
        RedisTarget::Standalone("redis://127.0.0.1:6379/0".into())
    );
    assert_eq!((r.timeout_ms, r.prefix.as_str()), (25, "app1:"));
    let c = parse(
        "rules.toml",
        "[store]\nkind = \"redis\"\nnodes = [\"redis://10.0.0.1:7000\", \"redis://10.0.0.2:7000\"]\n",
    )
    .unwrap();
    let r = c.store.redis.unwrap();
    assert!(matches!(r.target, RedisTarget::Cluster(ref n) if n.len() == 2));
    assert_eq!((r.timeout_ms, r.prefix.as_str()), (50, "fg:"));
    assert_eq!(r.breaker_window_ms, 250);
    assert_eq!(r.local_fallback_instances, None);
    for (window, parsed) in [("0", 0), ("1000", 1000)] {
        let c = parse(
            "rules.toml",
            &format!(
                "[store]\nkind = \"redis\"\nurl = \"redis://a\"\nbreaker_window_ms = {window}\n"
            ),
        )
        .unwrap();
        assert_eq!(c.store.redis.unwrap().breaker_window_ms, parsed);
    }
    for bad in ["-1", "60001"] {
        assert_eq!(
            err(&format!(
                "[store]\nkind = \"redis\"\nurl = \"redis://a\"\nbreaker_window_ms = {bad}\n"
            )),
            format!(
                "rules.toml:4: store.breaker_window_ms: must be 0 to 60000 milliseconds, got {bad}"
            )
        );
    }
    assert_eq!(
        err("[store]\nbreaker_window_ms = 100\n"),
        "rules.toml:2: store.breaker_window_ms: only for kind = \"redis\""
    );
    let c = parse(
        "rules.toml",
        "[store]\nkind = \"redis\"\nurl = \"redis://a\"\nfallback = \"local\"\ninstances = 4\n",
    )
    .unwrap();
    assert_eq!(c.store.redis.unwrap().local_fallback_instances, Some(4));
    // No instances: the count is discovered in Redis.
    let c = parse(
        "rules.toml",
        "[store]\nkind = \"redis\"\nurl = \"redis://a\"\nfallback = \"local\"\n",
    )
    .unwrap();
    let r = c.store.redis.unwrap();
    assert!(r.local_fallback);
    assert_eq!(r.local_fallback_instances, None);
    assert!(
        err("[store]\nkind = \"redis\"\nurl = \"redis://a\"\ninstances = 4\n")
            .starts_with("rules.toml:4: store.instances: only with fallback")
    );

    assert_eq!(
        err("[store]\nkind = \"redis\"\n"),
        "rules.toml:2: store.url: kind = \"redis\" needs url = \"redis://host:port\", nodes = [...] \
         or sentinels = [...]"
    );
    assert!(err("[store]\nkind = \"redis\"\nurl = \"http://x\"\n")
        .starts_with("rules.toml:3: store.url: \"http://x\" is not a redis://"));
    assert!(
        err("[store]\nkind = \"redis\"\nurl = \"redis://a\"\ntimeout_ms = 0\n")
            .starts_with("rules.toml:4: store.timeout_ms: must be 1 to 60000")
    );
    assert!(
        err("[store]\nkind = \"redis\"\nurl = \"redis://a\"\nprefix = \"{x}\"\n")
            .starts_with("rules.toml:4: store.prefix: ")
    );
    assert_eq!(
        err("[store]\nkind = \"memory\"\nurl = \"redis://a\"\n"),
        "rules.toml:3: store.url: only for kind = \"redis\""
    );
}

/// `rediss://` is accepted; `tls_ca_file`, `tls_cert_file` and `tls_key_file` are read when the
/// file loads (relative to its folder) and checked, each problem naming file, line and field.
#[test]
fn redis_tls_files_are_read_and_checked() {
    let tls =
        |url: &str, files: &str| format!("[store]\nkind = \"redis\"\nurl = \"{url}\"\n{files}");
    let c = parse("rules.toml", &tls("rediss://a:6380", "")).unwrap();
    let redis = c.store.redis.unwrap();
    assert!(redis.tls.is_empty(), "system roots, no client certificate");
    assert_eq!(
        err(&tls("rediss://a:6380", "tls_ca_file = \"no-such.pem\"\n")),
        "rules.toml:4: store.tls_ca_file: cannot read \"no-such.pem\": No such file or \
         directory (os error 2)"
    );
    assert_eq!(
        err("[store]\nkind = \"memory\"\ntls_ca_file = \"ca.pem\"\n"),
        "rules.toml:3: store.tls_ca_file: only for kind = \"redis\""
    );

    let certs = floodgate_store::redis::testing::TestCerts::generate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for name in ["ca.crt", "client.crt", "client.key"] {
        std::fs::copy(certs.path(name), dir.path().join(name)).unwrap();
    }
    std::fs::write(dir.path().join("junk.pem"), "not PEM").unwrap();
    let load = |text: String| {
        let path = dir.path().join("floodgate.toml");
        std::fs::write(&path, text).unwrap();
        let shown = path.display().to_string();
        load(&path).map_err(|e| e.to_string().replace(&shown, "F"))
    };
    // Relative to the configuration file's folder.
    let all = "tls_ca_file = \"ca.crt\"\ntls_cert_file = \"client.crt\"\n\
               tls_key_file = \"client.key\"\n";
    let c = load(tls("rediss://a:6380", all)).unwrap();
    let got = c.store.redis.unwrap().tls;
    assert_eq!(got.ca_pem, Some(certs.read("ca.crt").unwrap()));
    assert_eq!(got.client_key_pem, Some(certs.read("client.key").unwrap()));
    assert_eq!(
        load(tls("redis://a:6379", all)).unwrap_err(),
        "F:4: store.tls_ca_file: TLS files need rediss:// URLs (url, or every one of nodes or sentinels)"
    );
    assert_eq!(
        load(tls("rediss://a:6380", "tls_cert_file = \"client.crt\"\n")).unwrap_err(),
        "F:4: store.tls_key_file: tls_cert_file needs tls_key_file (the client certificate's \
         private key)"
    );
    assert!(load(tls("rediss://a:6380", "tls_ca_file = \"junk.pem\"\n"))
        .unwrap_err()
        .starts_with("F:4: store.tls_ca_file: holds no PEM certificate"));
    let swapped = "tls_cert_file = \"client.key\"\ntls_key_file = \"client.key\"\n";
    assert!(load(tls("rediss://a:6380", swapped))
        .unwrap_err()
        .starts_with("F:4: store.tls_cert_file: holds no PEM certificate"));
}

/// `sentinels = [...]` with `master_name`: a Redis Sentinel target; errors name the field.
#[test]
fn redis_sentinel_target() {
    use floodgate_store::redis::RedisTarget;
    let c = parse(
        "rules.toml",
        "[store]\nkind = \"redis\"\nsentinels = [\"redis://s1:26379\", \"redis://s2:26379\"]\n\
         master_name = \"mymaster\"\n",
    )
    .unwrap();
    assert_eq!(
        c.store.redis.unwrap().target,
        RedisTarget::Sentinel {
            sentinels: vec!["redis://s1:26379".into(), "redis://s2:26379".into()],
            master_name: "mymaster".into(),
        }
    );
    assert_eq!(
        err("[store]\nkind = \"redis\"\nsentinels = [\"redis://s1:26379\"]\n"),
        "rules.toml:3: store.master_name: sentinels need master_name = \"...\" (the name the \
         sentinels monitor)"
    );
    assert_eq!(
        err("[store]\nkind = \"redis\"\nurl = \"redis://a\"\nmaster_name = \"m\"\n"),
        "rules.toml:4: store.master_name: only with sentinels = [...]"
    );
    assert!(err(
        "[store]\nkind = \"redis\"\nurl = \"redis://a\"\nsentinels = [\"redis://s\"]\n\
         master_name = \"m\"\n"
    )
    .starts_with("rules.toml:3: store.url: give one of url (one server), nodes (a cluster) or"));
    assert!(
        err("[store]\nkind = \"redis\"\nsentinels = [\"http://s\"]\nmaster_name = \"m\"\n")
            .starts_with(
                "rules.toml:3: store.sentinels: \"http://s\" is not a redis:// or rediss:// URL"
            )
    );
    assert_eq!(
        err(
            "[store]\nkind = \"redis\"\nsentinels = [\"rediss://a:1\", \"redis://b:1\"]\n\
             master_name = \"m\"\n"
        ),
        "rules.toml:3: store.sentinels: \"redis://b:1\": sentinels mix rediss:// (TLS) and \
         redis:// URLs; give one"
    );
    assert_eq!(
        err("[store]\nsentinels = [\"redis://s\"]\n"),
        "rules.toml:2: store.sentinels: only for kind = \"redis\""
    );
}

#[test]
fn max_claims_is_read_and_bad_values_name_file_line_and_field() {
    let c = parse("f.toml", "[store]\nmax_claims = 20\n").unwrap();
    assert_eq!(c.store.max_claims, 20);
    assert_eq!(
        parse("f.toml", "").unwrap().store.max_claims,
        DEFAULT_MAX_CLAIMS
    );
    assert_eq!(
        err("[store]\n\nmax_claims = 0\n"),
        "rules.toml:3: store.max_claims: must be a whole number between 1 and 100000000, got 0"
    );
    assert!(
        err("[store]\nkind = \"redis\"\nurl = \"redis://127.0.0.1\"\nmax_claims = 5\n")
            .starts_with("rules.toml:4: store.max_claims: only for kind = \"memory\""),
    );
}

#[test]
fn deny_cache_is_read_and_bad_uses_name_file_line_and_field() {
    let redis = "[store]\nkind = \"redis\"\nurl = \"redis://a\"\n";
    let r = parse("rules.toml", redis).unwrap().store.redis.unwrap();
    assert!(!r.deny_cache, "off unless asked");
    for (text, on) in [("true", true), ("false", false)] {
        let c = parse("rules.toml", &format!("{redis}deny_cache = {text}\n")).unwrap();
        let r = c.store.redis.unwrap();
        assert_eq!(r.deny_cache, on);
        assert_eq!(r.deny_cache_keys, 10_000);
    }
    assert_eq!(
        err("[store]\ndeny_cache = true\n"),
        "rules.toml:2: store.deny_cache: only for kind = \"redis\""
    );
    let cluster = "[store]\nkind = \"redis\"\nnodes = [\"redis://a:7000\"]\ndeny_cache = true\n";
    assert!(err(cluster)
        .starts_with("rules.toml:4: store.deny_cache: not on a Redis Cluster (nodes = [...])"));
    // One sentence: the source's line breaks left runs of 18 spaces in it.
    assert!(!err(cluster).contains("  "), "{}", err(cluster));
    let sentinel = "[store]\nkind = \"redis\"\nsentinels = [\"redis://s:26379\"]\n\
                    master_name = \"m\"\ndeny_cache = true\n";
    assert!(
        parse("rules.toml", sentinel)
            .unwrap()
            .store
            .redis
            .unwrap()
            .deny_cache
    );
    let wrong = err(&format!("{redis}deny_cache = \"yes\"\n"));
    assert!(wrong.starts_with("rules.toml:4"), "{wrong}");
    assert!(wrong.contains("deny_cache"), "{wrong}");
}
