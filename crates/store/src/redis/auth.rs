//! [`MasterAuth`]: the credentials a store on [`RedisTarget::Sentinel`](super::RedisTarget)
//! gives the master the sentinels name (the sentinels' own password is in their URLs).
//!
//! envoyproxy/ratelimit does the same with `REDIS_AUTH` (the master and replicas) beside
//! `REDIS_SENTINEL_AUTH` (the sentinels): its `SentinelConfig` dials the sentinels with one
//! dialer and the master's pool with another.

use std::fmt;

use redis::sentinel::SentinelNodeConnectionInfo;
use redis::RedisConnectionInfo;

/// `AUTH [username] password` for the master of a Sentinel-monitored set: used when the store
/// asks the master for its `ROLE` and on every connection to it. Debug output never shows the
/// password.
#[derive(Clone, PartialEq, Eq)]
pub struct MasterAuth {
    /// The ACL user, or `None` for `requirepass` (the `default` user).
    pub username: Option<String>,
    /// The password.
    pub password: String,
}

impl MasterAuth {
    /// Reads upstream's `REDIS_AUTH` forms: `password`, or `user:password`.
    pub fn parse(text: &str) -> Self {
        match text.split_once(':') {
            Some((user, password)) => Self {
                username: Some(user.to_string()),
                password: password.to_string(),
            },
            None => Self {
                username: None,
                password: text.to_string(),
            },
        }
    }

    /// What the `redis` crate's Sentinel client connects to the master with.
    pub(super) fn node_info(&self) -> SentinelNodeConnectionInfo {
        let mut info = RedisConnectionInfo::default().set_password(&self.password);
        if let Some(user) = &self.username {
            info = info.set_username(user);
        }
        SentinelNodeConnectionInfo::default().set_redis_connection_info(info)
    }
}

impl fmt::Debug for MasterAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MasterAuth")
            .field("username", &self.username)
            .field("password", &"***")
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::MasterAuth;

    #[test]
    fn both_forms_of_redis_auth_are_read_and_the_password_is_never_shown() {
        let plain = MasterAuth::parse("s3cret");
        assert_eq!(
            (plain.username.as_deref(), plain.password.as_str()),
            (None, "s3cret")
        );
        let acl = MasterAuth::parse("app:pa:ss");
        assert_eq!(
            (acl.username.as_deref(), acl.password.as_str()),
            (Some("app"), "pa:ss")
        );
        let shown = format!("{acl:?}");
        assert!(!shown.contains("pa:ss") && shown.contains("***"), "{shown}");
    }
}
