//! Raw sockets against `floodgate serve`: HTTP/2 frames written by hand (a client that
//! opens no flow-control window), waiting for the server to close a connection, and for a
//! metric to reach a value.

use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};

use super::{client, metric, Floodgate};

/// The client preface and a SETTINGS frame with `SETTINGS_INITIAL_WINDOW_SIZE` 0: the server
/// may send headers but no body byte.
pub const PREFACE_WINDOW_0: &[u8] =
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\x06\x04\0\0\0\0\0\0\x04\0\0\0\0";

/// A HEADERS frame (END_STREAM, END_HEADERS) on `stream` for `GET path`: HPACK with the
/// static table's `:method GET` and `:scheme http`, literal `:path` and `:authority`.
pub fn h2_get(stream: u32, path: &str) -> Vec<u8> {
    let mut block = vec![0x82, 0x86, 0x04, u8::try_from(path.len()).unwrap()];
    block.extend_from_slice(path.as_bytes());
    block.extend_from_slice(&[0x01, 9]);
    block.extend_from_slice(b"127.0.0.1");
    let len = block.len();
    let mut frame = vec![
        0,
        u8::try_from(len >> 8).unwrap(),
        u8::try_from(len & 0xff).unwrap(),
        0x1,
        0x5,
    ];
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(&block);
    frame
}

/// How long until the server closes `s` (EOF or a reset; whatever it sends is read and
/// dropped), bounded by `within`; `None` when it stays open that long.
pub async fn closed_after(s: &mut TcpStream, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = vec![0u8; 64 * 1024];
    timeout(within, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return started.elapsed(),
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
}

/// Waits (looking every 20 ms, at most `within`) until the metric `series` reaches `at_least`.
pub async fn until_metric(fg: &Floodgate, series: &str, at_least: f64, within: Duration) -> f64 {
    let c = client();
    let deadline = Instant::now() + within;
    loop {
        let v = metric(&c, fg, series).await.unwrap_or(0.0);
        if v >= at_least || Instant::now() > deadline {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reads HTTP/2 frames from `s` until one of `kind` arrives (returns its payload; a SETTINGS
/// acknowledgement is skipped) or the connection ends (`None`), bounded by `within`.
pub async fn h2_frame(s: &mut TcpStream, kind: u8, within: Duration) -> Option<Vec<u8>> {
    timeout(within, async {
        loop {
            let mut head = [0u8; 9];
            s.read_exact(&mut head).await.ok()?;
            let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
            let mut payload = vec![0u8; len];
            s.read_exact(&mut payload).await.ok()?;
            if head[3] == kind && head[4] & 1 == 0 {
                return Some(payload);
            }
        }
    })
    .await
    .ok()
    .flatten()
}
