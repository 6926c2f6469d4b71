//! The gRPC service of `floodgate serve --grpc-listen` around the decisions: a changed YAML
//! file reloaded, health and reflection, and health turning `NOT_SERVING` at shutdown.

mod grpc_support;
mod serve_support;

use grpc_support::{one, remaining, start, yaml, FIVE_PER_MINUTE};
use serve_support::{client, metric, write_atomically};
use tonic::transport::Channel;

#[tokio::test]
async fn a_changed_yaml_file_is_reloaded() {
    let (fg, mut c) = start(
        &[("a.yaml", FIVE_PER_MINUTE)],
        ".",
        &["--watch-interval", "100ms"],
    )
    .await;
    let r = one(&mut c, "rl", &[("generic_key", "five")]).await;
    assert_eq!(remaining(&r.statuses[0]), 4);
    // A second domain file and a changed limit.
    write_atomically(
        &fg.dir().join("b.yaml"),
        "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    write_atomically(
        &fg.dir().join("a.yaml"),
        &FIVE_PER_MINUTE.replace("requests_per_unit: 5", "requests_per_unit: 7"),
    );
    let http = client();
    let mut reloaded = false;
    for _ in 0..100 {
        let r = one(&mut c, "other", &[("k", "x")]).await;
        let a = one(&mut c, "rl", &[("generic_key", "five")]).await;
        if r.statuses[0].current_limit.is_some()
            && a.statuses[0]
                .current_limit
                .as_ref()
                .unwrap()
                .requests_per_unit
                == 7
        {
            reloaded = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(reloaded, "{}", fg.logs());
    // An invalid file keeps the configuration in force.
    write_atomically(&fg.dir().join("b.yaml"), "domain: other\nbogus: 1\n");
    let mut rejected = false;
    for _ in 0..100 {
        if metric(
            &http,
            &fg,
            "floodgate_config_reloads_total{result=\"error\"}",
        )
        .await
            >= Some(1.0)
        {
            rejected = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(rejected);
    assert!(
        fg.logs().contains("b.yaml:2: bogus: unknown field"),
        "{}",
        fg.logs()
    );
    let r = one(&mut c, "other", &[("k", "y")]).await;
    assert!(r.statuses[0].current_limit.is_some());
}

#[tokio::test]
async fn health_and_reflection_answer() {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    let (fg, _c) = yaml(FIVE_PER_MINUTE).await;
    let channel = Channel::from_shared(fg.grpc.clone().unwrap())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut h = HealthClient::new(channel.clone());
    for service in ["", "envoy.service.ratelimit.v3.RateLimitService"] {
        let r = h
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.status, 1, "SERVING for {service:?}");
    }
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    let mut r = ServerReflectionClient::new(channel);
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut stream = r
        .server_reflection_info(tokio_stream_once(req))
        .await
        .unwrap()
        .into_inner();
    let answer = stream.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
        panic!("{answer:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&"grpc.health.v1.Health".to_string()),
        "{names:?}"
    );
}

fn tokio_stream_once<T: Send + 'static>(item: T) -> impl futures_core_stream::Stream<Item = T> {
    futures_core_stream::once(item)
}

/// A one-item stream without another dependency.
mod futures_core_stream {
    pub use tonic::codegen::tokio_stream::{once, Stream};
}

/// Health follows readiness: NOT_SERVING from SIGTERM on, while --shutdown-delay still serves.
#[tokio::test]
async fn health_turns_not_serving_when_shutdown_begins() {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    let (fg, _c) = start(
        &[("ratelimit.yaml", FIVE_PER_MINUTE)],
        "ratelimit.yaml",
        &["--shutdown-delay", "10s"],
    )
    .await;
    let channel = Channel::from_shared(fg.grpc.clone().unwrap())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut h = HealthClient::new(channel);
    let status = |h: &mut HealthClient<Channel>| {
        let mut h = h.clone();
        async move {
            h.check(HealthCheckRequest {
                service: "envoy.service.ratelimit.v3.RateLimitService".into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status
        }
    };
    assert_eq!(status(&mut h).await, 1);
    fg.signal("TERM");
    let mut seen = Vec::new();
    for _ in 0..100 {
        let s = status(&mut h).await;
        seen.push(s);
        if s == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(seen.last(), Some(&2), "NOT_SERVING: {seen:?}");
}
