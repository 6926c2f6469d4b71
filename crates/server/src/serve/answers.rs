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
//! closed at once, every answer it held freed (`Connections::shed_heaviest`). An answer
//! stays charged after its body ended until its connection's socket took its bytes
//! ([`Backlog`](backlog::Backlog)): HTTP/2 keeps frames a client does not read.

use std::sync::atomic::Ordering;

use super::backlog::{self, Freed};
use super::connections::Conn;

/// The answer bytes all HTTP connections may hold at once before the heaviest holder is
/// closed: 64 MiB (a thousand times a large decision answer; four times the largest
/// `/v1/simulate` answer).
pub(crate) const ANSWER_BUDGET: usize = 64 * 1024 * 1024;

/// What one held answer costs beyond its body, in bytes: a stream's state in the HTTP/2
/// connection, the response head and the request's own (measured: 18,000 held `/metrics`
/// streams of 7.6 KB cost 11 KB each).
pub(crate) const STREAM_COST: usize = 4 * 1024;

/// Marks a response whose body is streamed from elsewhere (the reverse proxy's upstream):
/// it holds a chunk at a time, never its length, so it is charged at most
/// [`STREAMED_CHARGE`]. Charged its `Content-Length`, one download of more than the budget
/// was always cut (an attacker's review: 7,986 of 80,000,000 bytes delivered, RSS 39 MB).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Streamed;

/// The most a [`Streamed`] answer is charged beyond [`STREAM_COST`]: one chunk of its body
/// in hand (hyper polls a body for its next chunk only once the last one was written). A
/// chunk is what the upstream connection read at once, usually 8 to 64 KiB; hyper's read
/// buffer bounds it at about 408 KiB, so what is not charged is at most that less 64 KiB per
/// upstream connection (`upstream_max_connections`, 256 by default: about 86 MiB).
pub(crate) const STREAMED_CHARGE: u64 = 64 * 1024;

/// Charges an answer of `body` bytes (its exact length, or its lower bound) to `conn`;
/// returns what was charged, for [`ended`]. Past the budget, sheds the heaviest holder.
pub(crate) fn charge(conn: &Conn, body: u64) -> usize {
    let n = STREAM_COST.saturating_add(usize::try_from(body).unwrap_or(usize::MAX));
    conn.hold(n);
    let held = backlog::HELD
        .fetch_add(n, Ordering::AcqRel)
        .saturating_add(n);
    if held > ANSWER_BUDGET {
        conn.connections().shed_heaviest(held, ANSWER_BUDGET);
    }
    n
}

/// The answer [`charge`] charged `n` for ended (its body sent to the connection, or
/// dropped) after `body` bytes: given back once the socket took them (see [`Backlog`](backlog::Backlog)).
pub(crate) fn ended(conn: &Conn, body: u64, n: usize) {
    let freed = conn
        .backlog()
        .ended(body.saturating_add(backlog::ANSWER_FRAMING), n);
    release_freed(conn, freed);
}

/// Gives back what `freed` counts of `conn`'s answers.
pub(crate) fn release_freed(conn: &Conn, freed: Freed) {
    if freed.answers > 0 {
        conn.unhold_many(freed.answers, freed.bytes);
        backlog::HELD.fetch_sub(freed.bytes, Ordering::AcqRel);
    }
}
