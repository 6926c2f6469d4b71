//! The gRPC listener of `floodgate serve --grpc-listen ADDR`: Envoy's rate limit service
//! (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`, see [`rls`]), gRPC health
//! checking (`grpc.health.v1.Health`) and server reflection (`grpc.reflection.v1` and
//! `v1alpha`).
//!
//! Reflection lists the health and reflection services only: the `envoy-types` crate ships the
//! rate limit service's generated code but no encoded descriptor set, and Floodgate builds
//! without `protoc`. Tools such as `grpcurl` call `ShouldRateLimit` with the proto files
//! (`-proto rls.proto`) instead.
//!
//! Bounds: the connections share the process's budget (`[server] max_connections`, see
//! [`crate::serve::connections`]); a connection must send its first bytes within
//! `header_read_timeout`; HTTP/2 keep-alive pings every 60 s while calls are in flight (20 s
//! for the answer); at most `grpc_max_concurrent_streams` calls at once per connection; after
//! `grpc_max_connection_age` a connection gets GOAWAY (its calls in flight finish; clients
//! reconnect, which also spreads them over new instances). No forced close follows: tonic
//! 0.14 would then skip the GOAWAY, and rate limit calls are short. A call's request message
//! is at most 64 KiB, must be complete within `header_read_timeout` of the call's start, and
//! all calls together hold at most 16 MiB of request messages (see [`guard`]).
//!
//! TLS and mutual TLS: `[server.grpc_tls]` (see [`tls`]); certificates are reloaded when their
//! files change, without closing open connections.
//!
//! Metrics: `floodgate_grpc_requests_total{method, code}` (code: `ok`, `over_limit`, or the
//! gRPC status of an error, e.g. `invalid_argument`, `unavailable`) and
//! `floodgate_grpc_request_duration_seconds{method}`; decisions are counted by the limiter in
//! `floodgate_decisions_total{rule, outcome}` as on every other path.

mod descriptor;
mod guard;
mod held;
mod incoming;
pub(crate) mod labels;
mod limit_headers;
mod prescan;
mod reset;
pub(crate) mod rls;
pub(crate) mod tls;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::listen::GRPC_KEEPALIVE;
use crate::serve::connections::Connections;
use crate::state::AppState;

/// Serves the gRPC services on `listener` until `shutdown` turns true, then lets in-flight
/// calls finish. Health answers `NOT_SERVING` from the moment the process starts shutting
/// down (SIGTERM, before `--shutdown-delay` ends).
///
/// # Errors
/// The TLS certificate files (`[server.grpc_tls]`) do not load.
pub(crate) fn spawn(
    listener: TcpListener,
    state: Arc<AppState>,
    connections: Arc<Connections>,
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<tokio::task::JoinHandle<std::io::Result<()>>> {
    let tls = match &state.config().server.grpc_tls {
        None => None,
        Some(settings) => {
            let tls = tls::Acceptors::new(settings.clone())
                .map_err(|e| anyhow::anyhow!("gRPC TLS: {e}"))?;
            let tls = Arc::new(tls);
            tokio::spawn(Arc::clone(&tls).watch(shutdown.clone()));
            Some(tls)
        }
    };
    Ok(tokio::spawn(async move {
        let limits = state.config().server.limits.clone();
        let (reporter, health) = tonic_health::server::health_reporter();
        reporter
            .set_serving::<RateLimitServiceServer<rls::RateLimitService>>()
            .await;
        let reflection = |builder: tonic_reflection::server::Builder<'static>| {
            builder.register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        };
        let reflection_v1 = reflection(tonic_reflection::server::Builder::configure())
            .build_v1()
            .map_err(std::io::Error::other)?;
        let reflection_v1alpha = reflection(tonic_reflection::server::Builder::configure())
            .build_v1alpha()
            .map_err(std::io::Error::other)?;
        // Health follows readiness: NOT_SERVING as soon as shutdown begins.
        let watcher = {
            let (state, reporter, mut shutdown) =
                (Arc::clone(&state), reporter.clone(), shutdown.clone());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(100));
                loop {
                    tokio::select! {
                        _ = tick.tick() => {}
                        _ = shutdown.wait_for(|stop| *stop) => {}
                    }
                    if state.shutting_down.load(Ordering::SeqCst) {
                        reporter
                            .set_not_serving::<RateLimitServiceServer<rls::RateLimitService>>()
                            .await;
                        reporter
                            .set_service_status("", tonic_health::ServingStatus::NotServing)
                            .await;
                        return;
                    }
                }
            })
        };
        let service = RateLimitServiceServer::new(rls::RateLimitService::new(state))
            .max_decoding_message_size(guard::MAX_MESSAGE);
        let streams = limits.grpc_max_concurrent_streams;
        let registry = Arc::new(held::Registry::default());
        let budget = guard::Budget::new(guard::BUDGET, guard::CONNECTION_SHARE);
        let deadline = limits.header_read_timeout;
        let bodies =
            tower::util::MapRequestLayer::new(move |request: http::Request<tonic::body::Body>| {
                let budget = Arc::clone(&budget);
                let peer = request
                    .extensions()
                    .get::<tonic::transport::server::TcpConnectInfo>()
                    .and_then(|info| info.remote_addr());
                let rls = request.uri().path() == rls::PATH;
                request.map(|body| {
                    let body = guard::Guarded::new(body, budget, deadline).of_connection(peer);
                    tonic::body::Body::new(if rls { body.scanned() } else { body })
                })
            });
        let result = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(GRPC_KEEPALIVE.0))
            .http2_keepalive_timeout(Some(GRPC_KEEPALIVE.1))
            .max_concurrent_streams(streams)
            .concurrency_limit_per_connection(usize::try_from(streams).unwrap_or(usize::MAX))
            .max_connection_age(limits.grpc_max_connection_age)
            .layer(bodies)
            .layer(held::HeldLayer(Arc::clone(&registry)))
            .add_service(health)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(service)
            .serve_with_incoming_shutdown(
                incoming::accept(
                    listener,
                    connections,
                    registry,
                    limits.header_read_timeout,
                    tls,
                    shutdown.clone(),
                ),
                async move {
                    let _ = shutdown.wait_for(|stop| *stop).await;
                },
            )
            .await;
        watcher.abort();
        result.map_err(std::io::Error::other)
    }))
}

/// Registers the descriptions and zero values of the gRPC metrics.
pub(crate) fn describe_metrics() {
    use metrics::{describe_counter, describe_histogram, Unit};
    describe_counter!(
        "floodgate_grpc_requests_total",
        "gRPC calls by method and result code (ok, over_limit, or the gRPC status of an error)"
    );
    describe_histogram!(
        "floodgate_grpc_request_duration_seconds",
        Unit::Seconds,
        "Time to answer one gRPC call, from the decoded request to the encoded answer"
    );
    describe_counter!(
        "floodgate_grpc_unknown_domain_total",
        "Rate limit requests naming a domain no rule has (answered OK without a limit)"
    );
    metrics::counter!("floodgate_grpc_unknown_domain_total").increment(0);
    tls::describe_metrics();
    for code in ["ok", "over_limit", "invalid_argument", "unavailable"] {
        metrics::counter!("floodgate_grpc_requests_total", "method" => rls::METHOD, "code" => code)
            .increment(0);
    }
}
