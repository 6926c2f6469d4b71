//! Asking Redis Sentinel for the master: over plain TCP (`redis://` sentinels) or over TLS
//! (`rediss://` sentinels, then the master too), with the store's TLS settings.
//!
//! With TLS, the sentinels and the master they name are both reached over TLS with the same
//! [`RedisTls`] as a standalone or cluster target: the CA that verifies them (else the
//! system's trust store), the client certificate for mutual TLS. The `redis` crate's
//! `SentinelClientBuilder` takes both; the master's name must match its certificate (the
//! address the sentinels announce, usually an IP: the certificate needs that IP as a subject
//! alternative name, as the sentinels' certificates need theirs).

use redis::sentinel::{Sentinel, SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{IntoConnectionInfo, RedisResult, TlsMode};

use super::config::RedisTls;
use super::MasterAuth;

/// The sentinels of a store.
pub(super) enum Sentinels {
    /// `redis://` sentinels; the master over plain TCP.
    Plain(Sentinel),
    /// `rediss://` sentinels; the master over TLS.
    Tls(Box<SentinelClient>),
}

impl Sentinels {
    /// The sentinels at `urls` (all `redis://`, or all `rediss://` with `tls`), asked for
    /// `master_name`, whose master needs `master_auth` when given.
    ///
    /// # Errors
    /// A URL that does not parse, or TLS settings the client refuses.
    pub(super) fn build(
        urls: &[String],
        master_name: &str,
        tls: Option<&RedisTls>,
        master_auth: Option<&MasterAuth>,
    ) -> RedisResult<Self> {
        let Some(tls) = tls else {
            return Ok(Self::Plain(Sentinel::build(urls.to_vec())?));
        };
        let infos = urls
            .iter()
            .map(|u| u.as_str().into_connection_info())
            .collect::<RedisResult<Vec<_>>>()?;
        let mut builder = SentinelClientBuilder::new(
            infos.iter().map(|i| i.addr().clone()),
            master_name,
            SentinelServerType::Master,
        )?
        .set_client_to_sentinel_tls_mode(TlsMode::Secure)
        .set_client_to_redis_tls_mode(TlsMode::Secure);
        // The builder takes one set of credentials for every sentinel: the first URL's.
        if let Some(info) = infos
            .iter()
            .map(redis::ConnectionInfo::redis_settings)
            .find(|i| i.password().is_some())
        {
            if let Some(user) = info.username() {
                builder = builder.set_client_to_sentinel_username(user);
            }
            if let Some(password) = info.password() {
                builder = builder.set_client_to_sentinel_password(password);
            }
        }
        if let Some(auth) = master_auth {
            if let Some(user) = &auth.username {
                builder = builder.set_client_to_redis_username(user);
            }
            builder = builder.set_client_to_redis_password(&auth.password);
        }
        if !tls.is_empty() {
            builder = builder
                .set_client_to_sentinel_certificates(tls.certificates())
                .set_client_to_redis_certificates(tls.certificates());
        }
        Ok(Self::Tls(Box::new(builder.build()?)))
    }

    /// A client for the master the sentinels name now (checked to answer `ROLE` as a master).
    ///
    /// # Errors
    /// No sentinel answers, none names a live master, or the master cannot be reached.
    pub(super) async fn master(
        &mut self,
        master_name: &str,
        node_info: Option<&redis::sentinel::SentinelNodeConnectionInfo>,
    ) -> RedisResult<redis::Client> {
        match self {
            // Over TLS the master's credentials were given to the builder.
            Self::Plain(sentinel) => sentinel.async_master_for(master_name, node_info).await,
            Self::Tls(client) => client.async_get_client().await,
        }
    }
}
