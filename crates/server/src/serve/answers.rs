//! The answers budget: what every HTTP connection holds of answers produced and not yet
//! delivered, bounded together.
//!
//! An answer is held from when its handler returns until its body is sent (or dropped): a
//! client that reads nothing (an HTTP/2 client that opens no flow-control window, an
//! HTTP/1 client that stops reading) holds it for as long as its connection lives, and
//! HTTP/2 multiplies that by the streams of a connection. An attacker's review measured it:
//! 190 HTTP/2 connections, each with 100 `GET /v1/openapi.json` streams at window 0, took
//! the process from 41 MB to 1.84 GB, unauthenticated.
//!
//! So each answer is charged its body's length plus [`STREAM_COST`] (what a held stream costs
//! beyond its body), to its connection and to one process-wide count; when the count passes
//! [`ANSWER_BUDGET`], the connection that holds the most answers (then the most bytes) is
//! closed at once, every answer it held freed ([`Connections::shed_heaviest`]). An answer
//! delivered as fast as the client reads never waits on it; the charge is two atomic adds
//! and two subtractions per request.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::connections::{Conn, Connections};

/// The answer bytes all HTTP connections may hold at once before the heaviest holder is
/// closed: 64 MiB (a thousand times a large decision answer; four times the largest
/// `/v1/simulate` answer).
pub(crate) const ANSWER_BUDGET: usize = 64 * 1024 * 1024;

/// What one held answer costs beyond its body, in bytes: a stream's state in the HTTP/2
/// connection, the response head and the request's own (measured: 18,000 held `/metrics`
/// streams of 7.6 KB cost 11 KB each).
pub(crate) const STREAM_COST: usize = 4 * 1024;

/// Answer bytes held now, by every HTTP connection.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Charges an answer of `body` bytes (its exact length, or its lower bound) to `conn`;
/// returns what was charged, for [`release`]. Past the budget, sheds the heaviest holder.
pub(crate) fn charge(conn: &Conn, connections: &Connections, body: u64) -> usize {
    let n = STREAM_COST.saturating_add(usize::try_from(body).unwrap_or(usize::MAX));
    conn.hold(n);
    let before = HELD.fetch_add(n, Ordering::AcqRel);
    if before.saturating_add(n) > ANSWER_BUDGET {
        connections.shed_heaviest();
    }
    n
}

/// Gives back what [`charge`] charged (the answer was sent or dropped).
pub(crate) fn release(conn: &Conn, n: usize) {
    conn.unhold(n);
    HELD.fetch_sub(n, Ordering::AcqRel);
}
