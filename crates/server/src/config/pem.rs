//! Reading a PEM file (a certificate, key or CA of the gRPC listener or of Redis) within
//! [`MAX_PEM_BYTES`], whatever the file is: a special file (`/dev/zero`, a FIFO) has no length
//! to check first, and a file may grow between a check and the read, so the read itself stops
//! one byte past the bound.

use std::io::Read as _;
use std::path::Path;

/// The largest PEM file read (1 MiB: a chain of certificates is a few kilobytes).
pub(crate) const MAX_PEM_BYTES: u64 = 1 << 20;

/// Why a PEM file was not read.
#[derive(Debug)]
pub(crate) enum PemError {
    /// It could not be opened or read.
    Io(std::io::Error),
    /// It holds more than [`MAX_PEM_BYTES`].
    TooLarge,
}

impl PemError {
    /// The error for the file shown as `shown` (a quoted path).
    pub(crate) fn message(&self, shown: &str) -> String {
        match self {
            PemError::Io(e) => format!("cannot read {shown}: {e}"),
            PemError::TooLarge => {
                format!("{shown} is above the {MAX_PEM_BYTES} bytes a PEM file may have")
            }
        }
    }
}

/// The bytes of the PEM file at `path`.
///
/// # Errors
/// [`PemError`]: the file cannot be opened or read, or holds more than [`MAX_PEM_BYTES`].
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, PemError> {
    let file = std::fs::File::open(path).map_err(PemError::Io)?;
    let mut bytes = Vec::new();
    file.take(MAX_PEM_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(PemError::Io)?;
    if bytes.len() as u64 > MAX_PEM_BYTES {
        return Err(PemError::TooLarge);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_special_file_without_an_end_is_read_only_to_the_bound() {
        let err = read(Path::new("/dev/zero"))
            .unwrap_err()
            .message("\"/dev/zero\"");
        assert!(err.contains("above the 1048576 bytes"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ca.pem");
        std::fs::write(&file, b"-----BEGIN CERTIFICATE-----\n").unwrap();
        assert_eq!(read(&file).unwrap().len(), 28);
        let missing = read(&dir.path().join("missing.pem"))
            .unwrap_err()
            .message("x");
        assert!(missing.starts_with("cannot read x: "), "{missing}");
    }
}
