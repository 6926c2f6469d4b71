//! RedisStore on Redis Sentinel over TLS (`rediss://` sentinels, issue 23 item 11): a real
//! TLS master and a TLS sentinel (`redis-server --sentinel`, `tls-replication yes`), both
//! requiring client certificates, with certificates made at test time (`openssl`). The store
//! reaches the sentinel and the master it names over TLS with the configured CA and client
//! certificate; an unrelated CA or a missing client certificate gets no decision.
#![cfg(feature = "testing")]

use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{AlgorithmKind, Policy, SystemClock};
use floodgate_store::redis::testing::{
    multi_thread_runtime, RedisSentinel, RedisServer, TestCerts,
};
use floodgate_store::redis::{RedisStore, RedisStoreConfig, RedisTarget, RedisTls};
use floodgate_store::{CheckItem, Store, StoreError};

fn tls(certs: &TestCerts, ca: &str, client: bool) -> RedisTls {
    RedisTls {
        ca_pem: Some(certs.read(ca).unwrap()),
        client_cert_pem: client.then(|| certs.read("client.crt").unwrap()),
        client_key_pem: client.then(|| certs.read("client.key").unwrap()),
    }
}

fn store(sentinels: Vec<String>, tls: RedisTls) -> Result<RedisStore, StoreError> {
    let mut config = RedisStoreConfig::with_target(RedisTarget::Sentinel {
        sentinels,
        master_name: RedisSentinel::MASTER_NAME.into(),
    });
    config.tls = tls;
    config.timeout = Duration::from_secs(2);
    config.connect_timeout = Duration::from_secs(2);
    RedisStore::new(config, Arc::new(SystemClock))
}

/// Three checks of a 3/h key admitted, the fourth denied (a fresh key per call).
async fn decides(store: &RedisStore, key: &str) -> Result<(), StoreError> {
    let p = Policy::new(AlgorithmKind::Gcra, "3/h".parse().unwrap()).unwrap();
    let item = CheckItem {
        rule: "sentinel-tls",
        policy: &p,
        key,
        cost: 1,
    };
    for n in 0..4 {
        let d = store.check(&[item]).await?;
        assert_eq!(d.allowed, n < 3, "check #{n}");
    }
    Ok(())
}

#[test]
fn a_store_decides_through_tls_sentinels_on_a_tls_master_and_refuses_a_wrong_ca() {
    let certs = TestCerts::generate().unwrap();
    let master = RedisServer::start_tls(&certs, true).unwrap();
    let tls_port = master.tls_port().unwrap();
    let sentinel = RedisSentinel::start_tls(tls_port, &certs, true).unwrap();
    // The sentinel reached the master over TLS (it monitors the TLS port only).
    let addr = sentinel
        .cli(&[
            "SENTINEL",
            "GET-MASTER-ADDR-BY-NAME",
            RedisSentinel::MASTER_NAME,
        ])
        .unwrap();
    assert!(addr.contains(&tls_port.to_string()), "{addr}");
    let rt = multi_thread_runtime(1).unwrap();
    rt.block_on(async {
        let ok = store(vec![sentinel.tls_url()], tls(&certs, "ca.crt", true)).unwrap();
        decides(&ok, "k").await.unwrap();
        // Decided on the master: its one key (read over its plain port).
        assert_eq!(master.cli(&["DBSIZE"]).unwrap(), "1");

        // A CA that did not sign the sentinel's certificate: no decision.
        let wrong = store(vec![sentinel.tls_url()], tls(&certs, "other-ca.crt", true)).unwrap();
        let e = decides(&wrong, "k2").await.expect_err("an unrelated CA");
        assert!(
            matches!(
                e,
                StoreError::Unavailable { .. } | StoreError::Timeout { .. }
            ),
            "{e}"
        );
        // No client certificate, where the sentinel requires one: no decision either.
        let anonymous = store(vec![sentinel.tls_url()], tls(&certs, "ca.crt", false)).unwrap();
        assert!(decides(&anonymous, "k3").await.is_err());
        assert_eq!(
            master.cli(&["DBSIZE"]).unwrap(),
            "1",
            "nothing else written"
        );
    });
}

#[test]
fn sentinels_mixing_tls_and_plain_urls_are_refused() {
    let rt = multi_thread_runtime(1).unwrap();
    rt.block_on(async {
        let Err(e) = store(
            vec!["rediss://127.0.0.1:1".into(), "redis://127.0.0.1:2".into()],
            RedisTls::default(),
        ) else {
            panic!("sentinels mixing schemes were accepted");
        };
        assert!(e.to_string().contains("mix rediss://"), "{e}");
    });
}
