//! The open-file limit and the connection cap it leaves.
//!
//! At start the soft `RLIMIT_NOFILE` is raised to the hard limit, and the connection budget
//! (`connections.rs`) is kept [`FD_RESERVE`] descriptors (plus the proxy's upstream
//! connections) below it, so that the process can still open its store connections, files
//! and upstream connections, and so that `accept` never fails with "Too many open files": at
//! the cap, accepting waits for a connection to close instead.

use crate::config::listen::DEFAULT_MAX_CONNECTIONS;

/// File descriptors kept free of client connections: the store's connections, the config
/// file, logs, the listeners themselves, the one accepted connection per listener that may
/// wait for room, and some slack.
pub(crate) const FD_RESERVE: u64 = 128;

/// The soft open-file limit after [`raise_nofile_limit`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct FdLimit {
    /// The soft limit now in force (`u64::MAX`: unlimited or unknown).
    pub(crate) soft: u64,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (logged), and returns what is in force.
/// A failure is logged and the limit left as it was.
pub(crate) fn raise_nofile_limit() -> FdLimit {
    use rlimit::Resource;
    let before = Resource::NOFILE.get();
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(soft) => {
            match before {
                Ok((old, hard)) if old < soft => tracing::info!(
                    from = old,
                    to = soft,
                    hard,
                    "raised the open-file limit (RLIMIT_NOFILE)"
                ),
                Ok((old, hard)) => {
                    tracing::info!(soft = old, hard, "open-file limit (RLIMIT_NOFILE)");
                }
                Err(_) => tracing::info!(soft, "open-file limit (RLIMIT_NOFILE)"),
            }
            FdLimit { soft }
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the open-file limit (RLIMIT_NOFILE)");
            FdLimit {
                soft: before.map_or(u64::MAX, |(soft, _)| soft),
            }
        }
    }
}

/// The connection cap: `configured`, or [`DEFAULT_MAX_CONNECTIONS`] lowered to what `fd`
/// leaves after [`FD_RESERVE`] and `upstream` descriptors (the proxy's connections).
///
/// # Errors
/// A configured cap the open-file limit cannot hold, or a limit too low for any connection:
/// the message says what to raise or lower.
pub(crate) fn connection_cap(
    configured: Option<usize>,
    fd: FdLimit,
    upstream: usize,
) -> Result<usize, String> {
    let reserve = FD_RESERVE.saturating_add(u64::try_from(upstream).unwrap_or(u64::MAX));
    let budget = usize::try_from(fd.soft.saturating_sub(reserve)).unwrap_or(usize::MAX);
    match configured {
        Some(n) if n > budget => Err(format!(
            "[server] max_connections = {n} needs {} open files with the {reserve} kept for the \
             store, files and upstream connections, but the open-file limit (RLIMIT_NOFILE) is \
             {}: raise it (ulimit -n, systemd LimitNOFILE=) or lower max_connections",
            u64::try_from(n).unwrap_or(u64::MAX).saturating_add(reserve),
            fd.soft
        )),
        Some(n) => Ok(n),
        None if budget == 0 => Err(format!(
            "the open-file limit (RLIMIT_NOFILE) is {}, which leaves no room for connections \
             after the {reserve} kept for the store, files and upstream connections: raise it \
             (ulimit -n, systemd LimitNOFILE=)",
            fd.soft
        )),
        None => Ok(DEFAULT_MAX_CONNECTIONS.min(budget)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cap_stays_below_the_open_file_limit() {
        let fd = |soft| FdLimit { soft };
        assert_eq!(
            connection_cap(None, fd(u64::MAX), 0),
            Ok(DEFAULT_MAX_CONNECTIONS)
        );
        assert_eq!(connection_cap(None, fd(1024), 0), Ok(1024 - 128));
        assert_eq!(connection_cap(None, fd(1024), 256), Ok(1024 - 128 - 256));
        assert_eq!(connection_cap(Some(500), fd(1024), 0), Ok(500));
        let e = connection_cap(Some(2000), fd(1024), 0).unwrap_err();
        assert!(e.contains("max_connections = 2000 needs 2128"), "{e}");
        assert!(connection_cap(None, fd(100), 0).is_err());
    }
}
