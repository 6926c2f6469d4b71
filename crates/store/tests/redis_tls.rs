//! `rediss://` against real TLS redis-servers started by each test, with certificates made at
//! test time (`openssl`): the server certificate is verified against the configured CA (an
//! unrelated CA, or the system's trust store, refuses it), mutual TLS needs the client
//! certificate, and a Redis Cluster works over TLS too.
#![cfg(feature = "testing")]

use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{AlgorithmKind, ManualClock, Policy, SystemClock};
use floodgate_store::redis::testing::{RedisCluster, RedisServer, TestCerts};
use floodgate_store::redis::{RedisStore, RedisStoreConfig, RedisTls, TimeSource};
use floodgate_store::{CheckItem, Store, StoreError};

fn policy() -> Policy {
    Policy::new(AlgorithmKind::Gcra, "3/h".parse().unwrap()).unwrap()
}

fn tls(certs: &TestCerts, ca: &str, client: bool) -> RedisTls {
    RedisTls {
        ca_pem: Some(certs.read(ca).unwrap()),
        client_cert_pem: client.then(|| certs.read("client.crt").unwrap()),
        client_key_pem: client.then(|| certs.read("client.key").unwrap()),
    }
}

fn store(config: RedisStoreConfig) -> RedisStore {
    let mut config = config;
    config.timeout = Duration::from_secs(2);
    config.connect_timeout = Duration::from_secs(2);
    RedisStore::new(config, Arc::new(SystemClock)).unwrap()
}

/// Three checks of a 3/h key admitted, the fourth denied: decided by Redis over TLS.
async fn decides(store: &RedisStore) -> Result<(), StoreError> {
    let p = policy();
    let item = CheckItem {
        rule: "tls",
        policy: &p,
        key: "k",
        cost: 1,
    };
    store.reset("tls", &p, "k").await?;
    for n in 0..4 {
        let d = store.check(&[item]).await?;
        assert_eq!(d.allowed, n < 3, "check #{n}");
    }
    Ok(())
}

/// No decision over this TLS connection, and the startup check names the cause (`expected` in
/// its error; the shared connection only times out while it retries).
async fn assert_refused(store: &RedisStore, why: &str, expected: &str) {
    let e = decides(store).await.expect_err(why);
    assert!(
        matches!(
            e,
            StoreError::Unavailable { .. } | StoreError::Timeout { .. }
        ),
        "{why}: {e}"
    );
    let e = store.startup_check().await.expect_err(why).to_string();
    assert!(e.contains(expected), "{why}: {e}");
}

#[tokio::test]
async fn rediss_verifies_the_server_certificate_against_the_ca_file() {
    let certs = TestCerts::generate().unwrap();
    let server = RedisServer::start_tls(&certs, false).unwrap();
    let url = server.tls_url();

    let mut config = RedisStoreConfig::standalone(&url);
    config.tls = tls(&certs, "ca.crt", false);
    let good = store(config);
    decides(&good).await.unwrap();
    let check = good.startup_check().await.unwrap();
    assert_eq!(check.maxmemory_policies, ["noeviction"]);

    // A CA that did not sign the server's certificate: refused.
    let mut config = RedisStoreConfig::standalone(&url);
    config.tls = tls(&certs, "other-ca.crt", false);
    assert_refused(&store(config), "an unrelated CA", "UnknownIssuer").await;
    // No CA file: the system's trust store, which does not know the test CA.
    assert_refused(
        &store(RedisStoreConfig::standalone(&url)),
        "the system roots",
        "UnknownIssuer",
    )
    .await;
    // The same server named by a host its certificate does not carry (it names 127.0.0.1).
    let other_name = url.replace("127.0.0.1", "localhost");
    let mut config = RedisStoreConfig::standalone(other_name);
    config.tls = tls(&certs, "ca.crt", false);
    assert_refused(
        &store(config),
        "a name not in the certificate",
        "not valid for name",
    )
    .await;
}

#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() {
    let certs = TestCerts::generate().unwrap();
    let server = RedisServer::start_tls(&certs, true).unwrap();
    let url = server.tls_url();

    let mut config = RedisStoreConfig::standalone(&url);
    config.tls = tls(&certs, "ca.crt", false);
    assert_refused(
        &store(config),
        "no client certificate",
        "CertificateRequired",
    )
    .await;

    let mut config = RedisStoreConfig::standalone(&url);
    config.tls = tls(&certs, "ca.crt", true);
    decides(&store(config)).await.unwrap();
}

#[test]
fn bad_tls_settings_are_refused_when_the_store_is_built() {
    let certs = TestCerts::generate().unwrap();
    let rt = floodgate_store::redis::testing::current_thread_runtime().unwrap();
    let _guard = rt.enter();
    let build = |url: &str, tls: RedisTls| {
        let mut config = RedisStoreConfig::standalone(url);
        config.tls = tls;
        RedisStore::new(config, Arc::new(SystemClock)).map(|_| ())
    };
    let reason = |r: Result<(), StoreError>| r.unwrap_err().to_string();
    // TLS files with a plain URL would be silently unused.
    assert!(
        reason(build("redis://127.0.0.1:1", tls(&certs, "ca.crt", false)))
            .contains("not rediss://")
    );
    let no_key = RedisTls {
        client_key_pem: None,
        ..tls(&certs, "ca.crt", true)
    };
    assert!(reason(build("rediss://127.0.0.1:1", no_key)).contains("client_key_pem"));
    let not_pem = RedisTls {
        ca_pem: Some(b"not a certificate".to_vec()),
        ..RedisTls::default()
    };
    assert!(reason(build("rediss://127.0.0.1:1", not_pem)).contains("ca_pem"));
    // A key where the certificate should be.
    let swapped = RedisTls {
        client_cert_pem: Some(certs.read("client.key").unwrap()),
        ..tls(&certs, "ca.crt", true)
    };
    assert!(reason(build("rediss://127.0.0.1:1", swapped)).contains("client_cert_pem"));
    let mut mixed = RedisStoreConfig::cluster(["rediss://127.0.0.1:1", "redis://127.0.0.1:2"]);
    mixed.tls = tls(&certs, "ca.crt", false);
    let e = RedisStore::new(mixed, Arc::new(SystemClock)).unwrap_err();
    assert!(e.to_string().contains("mix"), "{e}");
    // The debug output never shows the key.
    let shown = format!("{:?}", tls(&certs, "ca.crt", true));
    assert!(!shown.contains("BEGIN"), "{shown}");
}

#[test]
fn a_cluster_over_tls_decides_across_slots() {
    let certs = TestCerts::generate().unwrap();
    let cluster = RedisCluster::start_tls(&certs).unwrap();
    let rt = floodgate_store::redis::testing::current_thread_runtime().unwrap();
    rt.block_on(async {
        let mut config = RedisStoreConfig::cluster(cluster.tls_urls());
        config.tls = tls(&certs, "ca.crt", false);
        config.time_source = TimeSource::Caller;
        config.ttl_extra = Duration::from_secs(3600);
        let store = {
            let mut c = config;
            c.timeout = Duration::from_secs(2);
            c.connect_timeout = Duration::from_secs(2);
            RedisStore::new(c, Arc::new(ManualClock::new(1_700_000_000_000_000))).unwrap()
        };
        assert_eq!(
            store.startup_check().await.unwrap().maxmemory_policies,
            ["noeviction"; 3]
        );
        let p = policy();
        // 30 rules: their keys lie in slots of all three masters; batches of two cross slots.
        let rules: Vec<String> = (0..30).map(|r| format!("rule{r}")).collect();
        for pair in rules.chunks(2) {
            let batch = [
                CheckItem {
                    rule: &pair[0],
                    policy: &p,
                    key: "k",
                    cost: 2,
                },
                CheckItem {
                    rule: &pair[1],
                    policy: &p,
                    key: "k",
                    cost: 3,
                },
            ];
            assert!(store.check(&batch).await.unwrap().allowed);
            // The second rule is used up: the whole batch is denied and refunds the first.
            let d = store.check(&batch).await.unwrap();
            assert!(!d.allowed);
            assert_eq!(store.inspect(&pair[0], &p, "k").await.unwrap().remaining, 1);
        }
        // Plain TCP to the cluster's TLS ports is no way in.
        let plain: Vec<String> = cluster
            .tls_urls()
            .iter()
            .map(|u| u.replace("rediss://", "redis://"))
            .collect();
        let mut config = RedisStoreConfig::cluster(plain);
        config.timeout = Duration::from_millis(500);
        let plain = RedisStore::new(config, Arc::new(SystemClock)).unwrap();
        assert!(plain.ping().await.is_err());
    });
}
