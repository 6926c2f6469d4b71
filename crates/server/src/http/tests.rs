//! Router-level tests of the decision API with arbitrary input: never a 5xx, never a panic,
//! and nothing is consumed by a rejected request.

use std::sync::Arc;

use axum::body::Body;
use floodgate_core::ManualClock;
use floodgate_store::{MemoryStore, MemoryStoreConfig};
use http::{Request, StatusCode};
use proptest::prelude::*;
use tower::ServiceExt;

use crate::state::AppState;

fn state() -> Arc<AppState> {
    let config = crate::config::embedded_default();
    let clock = ManualClock::new(1_800_000_000_000_000);
    let store = floodgate_store::AnyStore::Memory(Arc::new(MemoryStore::new(
        MemoryStoreConfig::default(),
        Arc::new(clock.clone()),
    )));
    let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new()
        .build_recorder()
        .handle();
    Arc::new(AppState::new(
        config,
        None,
        None,
        store,
        Arc::new(clock.clone()),
        Some(clock),
        prometheus,
        None,
    ))
}

fn post(path: &str, body: Vec<u8>) -> Request<Body> {
    Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap()
}

async fn remaining(state: &Arc<AppState>) -> u64 {
    let r = super::router(Arc::clone(state))
        .oneshot(post(
            "/v1/peek",
            br#"{"rule": "per-client-ip", "key": "alice", "cost": 0}"#.to_vec(),
        ))
        .await
        .unwrap();
    let bytes = axum::body::to_bytes(r.into_body(), usize::MAX)
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    v["remaining"].as_u64().unwrap()
}

fn json_like() -> impl Strategy<Value = Vec<u8>> {
    let field = prop_oneof![
        Just("\"rule\"".to_string()),
        Just("\"key\"".to_string()),
        Just("\"cost\"".to_string()),
        Just("\"descriptors\"".to_string()),
        "\"[a-z]{0,4}\"",
    ];
    let value = prop_oneof![
        Just("\"per-client-ip\"".to_string()),
        Just("\"alice\"".to_string()),
        Just("-1".to_string()),
        Just("1e400".to_string()),
        Just("18446744073709551616".to_string()),
        Just("[]".to_string()),
        Just("[{\"rule\": \"per-client-ip\", \"key\": \"alice\", \"cost\": 99}]".to_string()),
        Just("null".to_string()),
        "-?[0-9]{1,8}",
        "\"\\PC{0,12}\"",
    ];
    prop_oneof![
        proptest::collection::vec((field, value), 0..5).prop_map(|pairs| {
            let inner: Vec<String> = pairs.iter().map(|(f, v)| format!("{f}: {v}")).collect();
            format!("{{{}}}", inner.join(", ")).into_bytes()
        }),
        proptest::collection::vec(any::<u8>(), 0..64),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// Any body: a 2xx, 400, 413 or 429 answer, never a 5xx, and a rejected (4xx other than
    /// 429) request consumes nothing.
    #[test]
    fn arbitrary_bodies_get_clean_answers(body in json_like()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        rt.block_on(async {
            let state = state();
            let before = remaining(&state).await;
            let r = super::router(Arc::clone(&state))
                .oneshot(post("/v1/check", body.clone()))
                .await
                .unwrap();
            let status = r.status();
            prop_assert!(
                status.is_success()
                    || status == StatusCode::BAD_REQUEST
                    || status == StatusCode::TOO_MANY_REQUESTS,
                "{status} for {:?}",
                String::from_utf8_lossy(&body)
            );
            if status == StatusCode::BAD_REQUEST {
                prop_assert_eq!(
                    r.headers()["content-type"].to_str().unwrap(),
                    "application/problem+json"
                );
                prop_assert_eq!(remaining(&state).await, before);
            }
            Ok(())
        })?;
    }
}
