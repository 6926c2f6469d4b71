//! `floodgate audit redis` names the service's reservation claims (`fg:claim:*`) and says the
//! eviction policy in one readable line, against a real redis-server (issue 23, item 7).

use floodgate_audit::redis::{audit, RedisOptions};
use floodgate_audit::Level;
use floodgate_store::redis::testing::{current_thread_runtime, RedisServer};

#[test]
fn claims_are_named_as_reservation_claims_and_the_eviction_line_reads() {
    let server = RedisServer::start().unwrap();
    for i in 0..3 {
        let name = format!("fg:claim:q8Xb7Yk1m0o2r3s4t5u6v{i}");
        server.cli(&["SET", &name, "1", "PX", "60000"]).unwrap();
    }
    server
        .cli(&["SET", "fg:other", "1", "PX", "60000"])
        .unwrap();
    let rt = current_thread_runtime().unwrap();
    let report = rt
        .block_on(audit(&RedisOptions::new(server.url())))
        .unwrap();
    assert_eq!(report.inspected, 4);
    let verdict = |check: &str| {
        report
            .verdicts
            .iter()
            .find(|v| v.check == check)
            .unwrap_or_else(|| panic!("no {check} in {:?}", report.verdicts))
    };
    let claims = verdict("claims");
    assert_eq!(claims.level, Level::Ok);
    assert_eq!(
        claims.summary,
        "3 sampled keys are fg:claim:*: reservation claims (one per settled reservation token, \
         expiring with it), not counters of a rule"
    );
    let eviction = verdict("eviction");
    assert_eq!(
        eviction.summary,
        format!(
            "maxmemory-policy noeviction on {}: nothing is evicted",
            report.nodes[0].node
        )
    );
    let table = floodgate_audit::redis::table(&report);
    assert!(table.contains("reservation claims"), "{table}");
}
