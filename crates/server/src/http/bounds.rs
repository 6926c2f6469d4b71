//! The bounds of what one API request may hold.

/// Largest accepted request body on the API, in bytes (64 KiB).
pub(crate) const MAX_BODY_BYTES: usize = 64 * 1024;

/// Longest accepted client key, in bytes.
pub(crate) const MAX_KEY_BYTES: usize = 256;

/// Most descriptors in one `/v1/check` request.
pub(crate) const MAX_CHECK_DESCRIPTORS: usize = 16;
