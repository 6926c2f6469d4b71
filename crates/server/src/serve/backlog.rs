//! Answers whose bodies ended but whose bytes their socket has not taken yet, per connection
//! ([`Backlog`]), and the count of answer bytes every HTTP connection holds (`answers.rs`
//! charges it; a connection gone gives back what its backlog still held).

use std::sync::atomic::{AtomicUsize, Ordering};

/// Answer bytes held now, by every HTTP connection (see `answers.rs`).
pub(crate) static HELD: AtomicUsize = AtomicUsize::new(0);

/// The fewest bytes an answer adds to its socket beyond its body: one frame header (HTTP/2;
/// an HTTP/1 status line is longer).
pub(crate) const ANSWER_FRAMING: u64 = 9;

/// Answers whose bodies ended but whose bytes the socket has not taken yet.
///
/// A body that ended is not delivered: HTTP/2 keeps the stream and its frames until they are
/// written, and a client that does not read its socket (while it sends flow-control window
/// updates blindly) holds them there. So an ended answer's charge is kept until the
/// connection has written at least as many bytes as every answer ended so far adds to it,
/// counted as a lower bound (its body and [`ANSWER_FRAMING`]): a connection that writes
/// everything it is given is never held up.
#[derive(Debug, Default)]
pub(crate) struct Backlog {
    /// The lower bound of the bytes of every answer ended so far.
    answered: std::sync::atomic::AtomicU64,
    /// The bytes written to the socket so far.
    written: std::sync::atomic::AtomicU64,
    /// Each ended answer not yet written out: the `answered` total it needs `written` to
    /// reach, and its charge.
    marks: parking_lot::Mutex<std::collections::VecDeque<(u64, usize)>>,
    /// `marks`' length.
    unwritten: AtomicUsize,
}

/// Charges a [`Backlog`] call gave back: how many, and their total.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Freed {
    pub(crate) answers: usize,
    pub(crate) bytes: usize,
}

impl Backlog {
    /// An answer of `bytes` (its lower bound) ended, charged `charge`: given back now when
    /// the socket already took that much, else kept.
    pub(crate) fn ended(&self, bytes: u64, charge: usize) -> Freed {
        let mark = self
            .answered
            .fetch_add(bytes, Ordering::AcqRel)
            .saturating_add(bytes);
        if self.written.load(Ordering::Acquire) >= mark {
            return Freed {
                answers: 1,
                bytes: charge,
            };
        }
        self.marks.lock().push_back((mark, charge));
        self.unwritten.fetch_add(1, Ordering::AcqRel);
        // The socket may have taken them meanwhile.
        self.wrote(0)
    }

    /// The socket took `n` more bytes: the answers they complete are given back.
    pub(crate) fn wrote(&self, n: usize) -> Freed {
        let written = self
            .written
            .fetch_add(n as u64, Ordering::AcqRel)
            .saturating_add(n as u64);
        let mut freed = Freed::default();
        if self.unwritten.load(Ordering::Acquire) == 0 {
            return freed;
        }
        let mut marks = self.marks.lock();
        while let Some(&(mark, charge)) = marks.front() {
            if mark > written {
                break;
            }
            marks.pop_front();
            self.unwritten.fetch_sub(1, Ordering::AcqRel);
            freed.answers += 1;
            freed.bytes += charge;
        }
        freed
    }

    /// Everything still kept (the connection is gone).
    pub(crate) fn drain(&mut self) -> Freed {
        let marks = std::mem::take(self.marks.get_mut());
        *self.unwritten.get_mut() = 0;
        Freed {
            answers: marks.len(),
            bytes: marks.iter().map(|&(_, c)| c).sum(),
        }
    }
}

/// Gives back what a gone connection's answers still held (see [`Backlog::drain`]).
pub(crate) fn release_gone(freed: Freed) {
    HELD.fetch_sub(freed.bytes, Ordering::AcqRel);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ended_answer_is_held_until_the_socket_took_its_bytes() {
        let backlog = Backlog::default();
        assert_eq!(backlog.ended(100, 7), Freed::default());
        assert_eq!(backlog.ended(50, 8), Freed::default());
        assert_eq!(backlog.wrote(99), Freed::default());
        assert_eq!(
            backlog.wrote(1),
            Freed {
                answers: 1,
                bytes: 7
            }
        );
        assert_eq!(
            backlog.wrote(60),
            Freed {
                answers: 1,
                bytes: 8
            }
        );
        // Written ahead (the socket took more than the lower bounds): given back at once.
        assert_eq!(
            backlog.ended(5, 9),
            Freed {
                answers: 1,
                bytes: 9
            }
        );
        let mut backlog = Backlog::default();
        backlog.ended(10, 3);
        assert_eq!(
            backlog.drain(),
            Freed {
                answers: 1,
                bytes: 3
            }
        );
    }
}
