//! Counts the descriptors and entries of a `RateLimitRequest` from its protobuf bytes as they
//! arrive, before tonic decodes the message: a descriptor entry takes 2 bytes on the wire
//! (an empty `entries` field) but about 48 once decoded, so a 64 KiB message of empty entries
//! decoded to about 1.5 MiB before the request's bounds were checked. Over the bounds
//! (64 descriptors, 32 entries each) the call ends `INVALID_ARGUMENT`, with the message the
//! decoded check gives, before the message is complete.
//!
//! Only the two levels that hold the bounds are followed (the request's field 2,
//! `descriptors`, and a descriptor's field 1, `entries`); everything else is skipped by its
//! wire type. Bytes that are no protobuf (a varint of more than 10 bytes, a group, a field
//! running past its descriptor) end the call the same way: tonic would refuse them anyway.

use tonic::Status;

use super::rls::{MAX_ENTRIES, MAX_RLS_DESCRIPTORS};

/// `RateLimitRequest.descriptors`.
const DESCRIPTORS: u64 = 2;
/// `RateLimitDescriptor.entries`.
const ENTRIES: u64 = 1;

/// What the scanner reads next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// A field's tag (a varint).
    Tag,
    /// A varint value to skip.
    Varint,
    /// The length of a length-delimited field `field`.
    Length { field: u64 },
    /// Bytes to skip.
    Skip(usize),
}

/// The scan of one message.
#[derive(Debug)]
pub(super) struct Prescan {
    next: Next,
    /// The varint being read: its value so far and how many bytes it took.
    value: u64,
    shift: u32,
    descriptors: usize,
    /// Inside a descriptor: its bytes still to come and the entries seen in it.
    descriptor: Option<(usize, usize)>,
}

impl Prescan {
    /// The scan of a new message.
    pub(super) fn new() -> Self {
        Self {
            next: Next::Tag,
            value: 0,
            shift: 0,
            descriptors: 0,
            descriptor: None,
        }
    }

    /// Reads the next bytes of the message.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` when the message holds more descriptors or entries than a request
    /// may, or is no protobuf.
    pub(super) fn feed(&mut self, mut data: &[u8]) -> Result<(), Status> {
        while !data.is_empty() {
            // Within a descriptor, never read past its end.
            let room = self
                .descriptor
                .map_or(data.len(), |(left, _)| left.min(data.len()));
            if room == 0 {
                self.descriptor = None;
                continue;
            }
            let used = match self.next {
                Next::Skip(total) => {
                    let n = total.min(room);
                    self.next = skip(total - n);
                    n
                }
                Next::Tag | Next::Varint | Next::Length { .. } => {
                    let byte = data[0];
                    if self.shift >= 64 {
                        return Err(malformed());
                    }
                    self.value |= u64::from(byte & 0x7f) << self.shift;
                    self.shift += 7;
                    if byte & 0x80 == 0 {
                        let value = std::mem::take(&mut self.value);
                        self.shift = 0;
                        self.read(value)?;
                    }
                    1
                }
            };
            data = &data[used..];
            if let Some((left, entries)) = self.descriptor {
                self.descriptor = Some((left - used, entries));
            }
            if self.descriptor.is_some_and(|(left, _)| left == 0) {
                if self.next != Next::Tag {
                    return Err(malformed());
                }
                self.descriptor = None;
            }
        }
        Ok(())
    }

    /// A complete varint `value` in the state `self.next`.
    fn read(&mut self, value: u64) -> Result<(), Status> {
        self.next = match self.next {
            Next::Tag => {
                let field = value >> 3;
                match value & 7 {
                    _ if field == 0 => return Err(malformed()),
                    0 => Next::Varint,
                    1 => Next::Skip(8),
                    2 => Next::Length { field },
                    5 => Next::Skip(4),
                    _ => return Err(malformed()),
                }
            }
            Next::Varint => Next::Tag,
            Next::Length { field } => {
                let len = usize::try_from(value).map_err(|_| malformed())?;
                match &mut self.descriptor {
                    None if field == DESCRIPTORS => {
                        self.descriptors += 1;
                        if self.descriptors > MAX_RLS_DESCRIPTORS {
                            return Err(Status::invalid_argument(format!(
                                "descriptors: must hold between 1 and {MAX_RLS_DESCRIPTORS} \
                                 descriptors"
                            )));
                        }
                        // The descriptor's own fields follow; its length counts from the
                        // next byte (`feed` subtracts the length byte just read first).
                        self.descriptor = Some((len.saturating_add(1), 0));
                        Next::Tag
                    }
                    Some((left, entries)) => {
                        // `left` still counts the length byte just read.
                        if len > *left - 1 {
                            return Err(malformed());
                        }
                        if field == ENTRIES {
                            *entries += 1;
                            if *entries > MAX_ENTRIES {
                                return Err(Status::invalid_argument(format!(
                                    "descriptors[{}].entries: must hold at most {MAX_ENTRIES} \
                                     entries",
                                    self.descriptors - 1
                                )));
                            }
                        }
                        skip(len)
                    }
                    None => skip(len),
                }
            }
            Next::Skip(_) => unreachable!("a skip reads no varint"),
        };
        Ok(())
    }

    /// Whether the message may end here (not inside a field).
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` when the message ends inside a field or a descriptor.
    pub(super) fn finish(&self) -> Result<(), Status> {
        if self.next == Next::Tag && self.shift == 0 && self.descriptor.is_none() {
            Ok(())
        } else {
            Err(malformed())
        }
    }
}

/// Skipping `len` bytes (none: the next tag).
fn skip(len: usize) -> Next {
    if len == 0 {
        Next::Tag
    } else {
        Next::Skip(len)
    }
}

fn malformed() -> Status {
    Status::invalid_argument("the request message is not a valid RateLimitRequest")
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
        rate_limit_descriptor::Entry, RateLimitDescriptor,
    };
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
    use prost::Message as _;

    fn request(descriptors: usize, entries: usize) -> Vec<u8> {
        RateLimitRequest {
            domain: "edge".into(),
            descriptors: (0..descriptors)
                .map(|d| RateLimitDescriptor {
                    entries: (0..entries)
                        .map(|e| Entry {
                            key: format!("k{e}"),
                            value: format!("v{d}"),
                        })
                        .collect(),
                    ..RateLimitDescriptor::default()
                })
                .collect(),
            hits_addend: 3,
        }
        .encode_to_vec()
    }

    /// Feeds `bytes` in chunks of `chunk` (every split of fields across frames).
    fn scan(bytes: &[u8], chunk: usize) -> Result<(), Status> {
        let mut scan = Prescan::new();
        for part in bytes.chunks(chunk) {
            scan.feed(part)?;
        }
        scan.finish()
    }

    #[test]
    fn requests_within_the_bounds_pass_however_they_are_split() {
        for chunk in [1, 2, 3, 7, 1 << 20] {
            scan(&request(64, 32), chunk).unwrap();
            scan(&request(1, 0), chunk).unwrap();
            scan(&request(0, 0), chunk).unwrap();
        }
    }

    #[test]
    fn too_many_descriptors_or_entries_are_refused_before_the_end() {
        for chunk in [1, 5, 1 << 20] {
            let e = scan(&request(65, 1), chunk).unwrap_err();
            assert_eq!(
                e.message(),
                "descriptors: must hold between 1 and 64 descriptors"
            );
            let e = scan(&request(2, 33), chunk).unwrap_err();
            assert_eq!(
                e.message(),
                "descriptors[0].entries: must hold at most 32 entries"
            );
        }
        // The review's message: 64 KiB of empty entries in one descriptor.
        let mut empty = vec![0x12];
        let entries = [0x0a, 0x00].repeat(30_000);
        let mut len = Vec::new();
        let mut n = entries.len();
        while n >= 0x80 {
            len.push((n as u8) | 0x80);
            n >>= 7;
        }
        len.push(n as u8);
        empty.extend(len);
        empty.extend(entries);
        let mut prescan = Prescan::new();
        let e = prescan.feed(&empty[..100]).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
    }

    #[test]
    fn bytes_that_are_no_protobuf_are_refused() {
        for bytes in [
            &[0xff; 11][..],               // a varint of 11 bytes
            &[0x13][..],                   // a group
            &[0x12, 0x02, 0x0a, 0x05][..], // an entry longer than its descriptor
            &[0x12, 0x05, 0x0a][..],       // ends inside a descriptor
        ] {
            assert!(scan(bytes, 1).is_err(), "{bytes:?}");
        }
    }
}
