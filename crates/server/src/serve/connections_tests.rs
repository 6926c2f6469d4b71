//! Unit tests of `connections.rs`.

use super::*;

/// An attacker's review: a request still open when its connection was closed ended
/// afterwards and listed the closed connection as idle again, for ever.
#[tokio::test]
async fn a_closed_connection_is_never_listed_idle_again() {
    let connections = Connections::new(2);
    let _slot = connections.reserve().await;
    let second = Duration::from_secs(1);
    let conn = connections.track(second, second, false);
    let _ = conn.start();
    conn.close();
    conn.finish();
    assert!(connections.idle.lock().is_empty());
}

#[tokio::test]
async fn at_the_cap_the_longest_idle_connection_is_asked_to_close() {
    let connections = Connections::new(2);
    let a = connections.reserve().await;
    let second = Duration::from_secs(1);
    let conn_a = connections.track(second, second, false);
    let b = connections.reserve().await;
    let conn_b = connections.track(second, second, false);
    // b is busy: only a may be evicted.
    let _ = conn_b.start();
    let waiting = tokio::spawn({
        let connections = Arc::clone(&connections);
        async move { connections.reserve().await }
    });
    conn_a.changed().await;
    assert_eq!(conn_a.phase(), Phase::Evicted);
    assert_eq!(conn_b.phase(), Phase::Busy);
    assert!(!waiting.is_finished());
    drop(a);
    let c = waiting.await.unwrap();
    drop((b, c));
}

#[tokio::test]
async fn a_full_bulk_share_asks_the_longest_idle_bulk_connection_to_close() {
    // A budget of 8: a bulk share of 7 (8 less a sixteenth, at least 1).
    assert_eq!(bulk_share(8), 7);
    assert_eq!(bulk_share(4_096), 3_840);
    let connections = Connections::new(8);
    let hour = Duration::from_secs(3_600);
    // The longest idle is an API connection: not one of the bulk share's.
    let api = connections.track(hour, hour, false);
    let mut places = Vec::new();
    let mut bulk = Vec::new();
    for _ in 0..7 {
        places.push(connections.reserve_bulk().await);
        bulk.push(connections.track(hour, hour, true));
    }
    let _ = bulk[0].start();
    let waiting = tokio::spawn({
        let connections = Arc::clone(&connections);
        async move { connections.reserve_bulk().await }
    });
    // bulk[0] is busy: the next bulk connection in idle order is asked to close.
    bulk[1].changed().await;
    assert_eq!(bulk[1].phase(), Phase::Evicted);
    assert_eq!(api.phase(), Phase::Header, "not asked to close");
    assert_eq!(bulk[0].phase(), Phase::Busy);
    assert!(!waiting.is_finished());
    drop(places.remove(1));
    let place = waiting.await.unwrap();
    drop((places, place));
}

#[test]
fn eviction_takes_the_longest_idle_connection_by_when_it_last_fell_idle() {
    let connections = Connections::new(8);
    let hour = Duration::from_secs(3600);
    let (a, b, c) = (
        connections.track(hour, hour, false),
        connections.track(hour, hour, false),
        connections.track(hour, hour, false),
    );
    // a served a request since b and c fell idle: it is the most recently idle one.
    let _ = a.start();
    a.finish();
    // c is busy: never asked to close while a request is in flight.
    let _ = c.start();
    connections.evict_one();
    assert_eq!(b.phase(), Phase::Evicted);
    assert_eq!((a.phase(), c.phase()), (Phase::Idle, Phase::Busy));
    connections.evict_one();
    assert_eq!(a.phase(), Phase::Evicted);
    assert_eq!(c.phase(), Phase::Busy);
    // Nothing idle is left: c is asked once its request has ended.
    connections.evict_one();
    assert_eq!(c.phase(), Phase::Busy);
    c.finish();
    connections.evict_one();
    assert_eq!(c.phase(), Phase::Evicted);
    for conn in [a, b, c] {
        conn.close();
    }
    assert!(connections.idle.lock().is_empty());
}

#[test]
fn a_head_in_one_read_counts_from_that_read_and_any_other_from_a_new_reading() {
    let connections = Connections::new(4);
    let hour = Duration::from_secs(3600);
    let conn = connections.track(hour, hour, false);
    // A head whole in the read that began it: the time of that read.
    let before = monotonic_us();
    conn.received();
    let after = monotonic_us();
    let head = conn.start().expect("the head came in one read");
    assert!((before..=after).contains(&head), "{before} {head} {after}");
    // Bytes while it is in flight (a pipelined head, or its body): no reading for the next.
    conn.received();
    conn.finish();
    assert_eq!(conn.start(), None);
    conn.finish();
    // A head that took two reads: not known without a new reading.
    conn.received();
    conn.received();
    assert_eq!(conn.start(), None);
    conn.finish();
    // A reading serves one head only.
    conn.received();
    assert!(conn.start().is_some());
    conn.finish();
    assert_eq!(conn.start(), None);
    conn.close();
}

#[test]
fn the_timer_reads_the_deadline_of_the_phase_it_fires_in() {
    let connections = Connections::new(4);
    let hour = Duration::from_secs(3600);
    // A header timer that has run out (0 s) on a new connection.
    let conn = connections.track(Duration::ZERO, hour, false);
    assert_eq!(conn.expiry(), Expiry::Header);
    // In flight: no timer, whatever the deadlines.
    let _ = conn.start();
    assert!(matches!(conn.expiry(), Expiry::Later(_)));
    // Idle, an hour to go: looked at again within the check interval (0 s: now).
    conn.finish();
    assert_eq!(conn.phase(), Phase::Idle);
    assert!(matches!(conn.expiry(), Expiry::Later(_)));
    // A header began: its timer (0 s) has run out.
    conn.received();
    assert_eq!(conn.expiry(), Expiry::Header);
    // An idle timer that has run out.
    let idle = connections.track(hour, Duration::ZERO, false);
    let _ = idle.start();
    idle.finish();
    assert_eq!(idle.expiry(), Expiry::Idle);
    // Neither ran out: looked at again no later than the shorter of the two from now.
    let calm = connections.track(hour, 2 * hour, false);
    let before = tokio::time::Instant::now();
    match calm.expiry() {
        Expiry::Later(at) => {
            assert!(
                at >= before && at <= tokio::time::Instant::now() + hour,
                "{at:?}"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// An attacker's review: HTTP/2 connections whose one `/healthz` stream had a window of 0,
/// and HTTP/1 connections that pipelined proxied downloads and read nothing, were busy for
/// ever (no timer in flight) and held every connection slot and the upstream pool.
#[test]
fn a_request_whose_client_takes_nothing_of_its_answer_is_stalled() {
    let connections = Connections::new(4);
    let hour = Duration::from_secs(3600);
    // An idle timeout of 0: a stall runs out at the first look that sees one.
    let conn = connections.track(hour, Duration::ZERO, false);
    let _ = conn.start();
    // Its handler runs: nothing is held, nothing to take.
    assert!(matches!(conn.expiry(), Expiry::Later(_)));
    // Its answer is produced and its body polled since the last look: not stalled.
    conn.hold(100);
    conn.progressed();
    assert!(matches!(conn.expiry(), Expiry::Later(_)));
    // Nothing polled or delivered since.
    assert_eq!(conn.expiry(), Expiry::Stalled);
    // A body waiting for its source (a proxied long poll) holds nothing its client refuses.
    conn.waits_for_source(true);
    assert!(matches!(conn.expiry(), Expiry::Later(_)));
    // A second answer, produced and never polled (a stream at window 0): stalled.
    conn.hold(100);
    assert_eq!(conn.expiry(), Expiry::Stalled);
    // Delivered: nothing held beyond the one that waits for its source.
    conn.unhold_many(1, 100);
    assert!(matches!(conn.expiry(), Expiry::Later(_)));
    conn.close();
}

#[test]
fn a_stall_runs_out_only_after_the_idle_timeout() {
    let connections = Connections::new(4);
    let hour = Duration::from_secs(3600);
    let conn = connections.track(hour, hour, false);
    let _ = conn.start();
    conn.hold(100);
    // Seen stalled (listed for eviction at the cap), not yet closed.
    assert!(matches!(conn.expiry(), Expiry::Later(_)));
    assert_ne!(conn.stalled_since_us.load(Ordering::Acquire), NO_DEADLINE);
    assert!(matches!(conn.expiry(), Expiry::Later(_)));
    // Its socket took a PING's answer: not an answer's bytes.
    conn.wrote_now(17);
    assert!(matches!(conn.expiry(), Expiry::Later(_)));
    assert_ne!(conn.stalled_since_us.load(Ordering::Acquire), NO_DEADLINE);
    // A write of body bytes (one large HTTP/2 frame sent as the window opens): no stall.
    conn.wrote_now(DATA_WRITE);
    assert!(matches!(conn.expiry(), Expiry::Later(_)));
    assert_eq!(conn.stalled_since_us.load(Ordering::Acquire), NO_DEADLINE);
    assert!(matches!(conn.expiry(), Expiry::Later(_)));
    // A poll since: the stall is over.
    conn.progressed();
    assert!(matches!(conn.expiry(), Expiry::Later(_)));
    assert_eq!(conn.stalled_since_us.load(Ordering::Acquire), NO_DEADLINE);
    conn.close();
}

/// At the cap a stalled connection is closed at once, before the longest-idle one.
#[tokio::test]
async fn at_the_cap_a_stalled_connection_makes_room_first() {
    let connections = Connections::new(2);
    let hour = Duration::from_secs(3600);
    let a = connections.reserve().await;
    let idle = connections.track(hour, hour, false);
    let b = connections.reserve().await;
    let stalled = connections.track(hour, hour, false);
    let _ = stalled.start();
    stalled.hold(100);
    assert!(matches!(stalled.expiry(), Expiry::Later(_)));
    let waiting = tokio::spawn({
        let connections = Arc::clone(&connections);
        async move { connections.reserve().await }
    });
    stalled.changed().await;
    assert_eq!(stalled.phase(), Phase::Evicted);
    assert_eq!(stalled.shed_reason(), Some("stalled"));
    assert_eq!(idle.phase(), Phase::Header, "not asked to close");
    drop(b);
    let c = waiting.await.unwrap();
    drop((a, c));
}

/// A connection waiting at the cap with none idle or stalled closes one once it is seen
/// stalled.
#[tokio::test]
async fn a_connection_seen_stalled_while_one_waits_at_the_cap_makes_room() {
    let connections = Connections::new(1);
    let hour = Duration::from_secs(3600);
    let a = connections.reserve().await;
    let conn = connections.track(hour, hour, false);
    let _ = conn.start();
    conn.hold(100);
    let waiting = tokio::spawn({
        let connections = Arc::clone(&connections);
        async move { connections.reserve().await }
    });
    while connections.waiting.load(Ordering::Acquire) == 0 {
        tokio::task::yield_now().await;
    }
    assert_eq!(conn.phase(), Phase::Busy, "busy, not yet seen stalled");
    assert!(matches!(conn.expiry(), Expiry::Later(_)));
    conn.changed().await;
    assert_eq!(conn.shed_reason(), Some("stalled"));
    drop(a);
    let b = waiting.await.unwrap();
    drop(b);
}
