//! The metrics recorder of `floodgate serve`: its histogram buckets, and the description of
//! every series the service exports (docs/metrics.md).

use anyhow::Context as _;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Installs the Prometheus recorder and describes every series.
///
/// # Errors
/// Invalid histogram buckets, or a recorder already installed.
pub(super) fn install() -> anyhow::Result<PrometheusHandle> {
    let prometheus = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("floodgate_decision_duration_seconds".into()),
            &[
                0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001,
                0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
            ],
        )
        .context("invalid histogram buckets")?
        .set_buckets_for_metric(
            Matcher::Full("floodgate_grpc_request_duration_seconds".into()),
            &[
                0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01,
                0.025, 0.05, 0.1, 0.25,
            ],
        )
        .context("invalid histogram buckets")?
        .install_recorder()
        .context("cannot install the metrics recorder")?;
    describe_metrics();
    start_at_zero();
    crate::grpc::describe_metrics();
    Ok(prometheus)
}

/// Describes every series the service exports.
fn describe_metrics() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    // Every outcome the limiter counts, from the one list it counts with.
    let outcomes: Vec<&str> = floodgate_tower::Outcome::ALL
        .iter()
        .map(|o| o.as_str())
        .collect();
    describe_counter!(
        "floodgate_decisions_total",
        format!(
            "Rate-limit decisions by rule and outcome ({}); see docs/metrics.md",
            outcomes.join(", ")
        )
    );
    describe_histogram!(
        "floodgate_decision_duration_seconds",
        Unit::Seconds,
        "Time to decide one request against the store"
    );
    describe_gauge!("floodgate_store_keys", "Keys held by the memory store");
    describe_counter!(
        "floodgate_lease_takes_total",
        "Quota leases taken from the store, by rule; see docs/spec/leases.md"
    );
    describe_counter!(
        "floodgate_lease_units_total",
        "Quota lease units by rule and state (leased, used, returned)"
    );
    describe_counter!(
        "floodgate_requests_delayed_total",
        "Requests of the delay mode that needed a wait, by outcome (passed, cancelled, \
         queue_full); see docs/reservations.md"
    );
    describe_gauge!(
        "floodgate_requests_waiting",
        "Requests held in the delay mode now, waiting for their slot"
    );
    describe_counter!(
        "floodgate_store_evictions_total",
        "Expired keys dropped to make room in a full store shard"
    );
    describe_counter!(
        "floodgate_store_expirations_total",
        "Expired keys dropped by sweeps or when touched"
    );
    describe_counter!(
        "floodgate_store_full_total",
        "New keys that met a full store, by action (reject, admit_untracked), rule and cap (rule: the rule's own max_keys, store: [store] max_keys)"
    );
    describe_counter!(
        "floodgate_store_errors_total",
        "Store failures by kind (unavailable, timeout, other)"
    );
    describe_counter!(
        "floodgate_store_redis_errors_total",
        "Redis store calls that failed, by reason (timeout, unavailable, circuit_open)"
    );
    describe_gauge!(
        "floodgate_store_breaker_open",
        "Redis circuit breakers failing calls fast (0 or 1; on a cluster one per master)"
    );
    describe_counter!(
        "floodgate_store_redis_refunds_total",
        "Redis Cluster slot groups refunded because another group of the batch denied"
    );
    describe_counter!(
        "floodgate_store_redis_out_of_memory_answers_total",
        "Batches still answered while Redis refused writes for maxmemory (noeviction): denials and peeks"
    );
    describe_counter!(
        "floodgate_store_redis_script_reloads_total",
        "Scripts resent in full after NOSCRIPT (Redis restart, failover, SCRIPT FLUSH)"
    );
    describe_counter!(
        "floodgate_store_degraded_total",
        "Decisions made by the local fallback while Redis failed, by mode"
    );
    describe_counter!(
        "floodgate_config_reloads_total",
        "Configuration reloads by result (ok, error)"
    );
    describe_counter!(
        "floodgate_requests_rejected_total",
        "API requests rejected before any state was touched, by reason"
    );
    describe_counter!(
        "floodgate_settles_total",
        "Reserved items settled, by rule and outcome (refunded, exact, charged, replayed, error)"
    );
    describe_counter!(
        "floodgate_settled_units_total",
        "Units given back (refunded) or charged by settles, by rule and direction"
    );
    describe_gauge!(
        "floodgate_connections",
        "Connections open on all listeners (API, proxy, admin, gRPC)"
    );
    describe_gauge!(
        "floodgate_connections_max",
        "The connection cap ([server] max_connections, or the default the open-file limit allows)"
    );
    describe_counter!(
        "floodgate_connections_closed_total",
        "Connections the server closed, by reason (header_timeout, idle_timeout, evicted: an \
         idle one closed to make room at the cap, answers_held: past the answers budget, \
         stalled: its client took nothing of an answer for idle_timeout, or at the cap)"
    );
    describe_counter!(
        "floodgate_proxy_upstream_errors_total",
        "Proxied requests the upstream failed, by reason (connect_timeout, connect_error, \
         response_timeout, response_body_timeout, client_body_timeout, upstream_error)"
    );
    describe_gauge!(
        "floodgate_proxy_upstream_connections",
        "Connections open to the upstream (busy and pooled)"
    );
}

/// Sets the series that must be present from the start, so dashboards and tests see 0 rather
/// than nothing.
fn start_at_zero() {
    for result in ["ok", "error"] {
        metrics::counter!("floodgate_config_reloads_total", "result" => result).increment(0);
    }
    metrics::counter!("floodgate_store_evictions_total").increment(0);
    metrics::counter!("floodgate_store_expirations_total").increment(0);
    for action in ["reject", "admit_untracked"] {
        metrics::counter!("floodgate_store_full_total", "action" => action).increment(0);
    }
    for kind in ["unavailable", "timeout", "other"] {
        metrics::counter!("floodgate_store_errors_total", "kind" => kind).increment(0);
    }
    for reason in crate::http::REJECTION_REASONS {
        metrics::counter!("floodgate_requests_rejected_total", "reason" => *reason).increment(0);
    }
    metrics::gauge!("floodgate_store_keys").set(0.0);
    for outcome in ["passed", "cancelled", "queue_full"] {
        metrics::counter!("floodgate_requests_delayed_total", "outcome" => outcome).increment(0);
    }
    metrics::gauge!("floodgate_requests_waiting").set(0.0);
}
