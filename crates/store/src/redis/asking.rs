//! The per-node connection of the cluster client: a multiplexed connection that sends a
//! redirected command in one write with its `ASKING`.
//!
//! # Why
//! While a slot migrates (`redis-cli --cluster reshard`, a rebalance), the source answers a
//! request for a key it no longer holds with `-ASK <slot> <node>`: the client must send
//! `ASKING` and then the command to that node. `ASKING` sets a *one-shot* flag on the
//! connection, consumed by the next command on it, whoever sent it. The cluster client of the
//! `redis` crate (1.8) sends `ASKING` as a request of its own, awaits its `OK`, then sends the
//! command, on the node's one multiplexed connection, which every concurrent caller shares.
//! Another caller's command sent in between consumes the flag; the redirected script then
//! gets `MOVED` (the target does not own the slot yet), goes back to the source, gets `ASK`
//! again, and fails once the retries are spent (issue 30: 60 to 84 % of checks on a
//! migrating hot slot failed with 24 concurrent clients, and `open` rules admitted them
//! uncounted). The same race exists in other clients (redis-plus-plus issue 281); skynet and
//! rueidis pipeline `ASKING` with the command.
//!
//! # How
//! [`AskingConnection`] wraps the node's [`MultiplexedConnection`]. The cluster client hands
//! the redirected request a clone of the node's connection, sends `ASKING` on that clone,
//! then the command on the same clone. The wrapper does not send that lone `ASKING`: it
//! remembers it on the clone and sends `ASKING` + the command as one pipeline, one write on
//! the socket, so no other command can come between them, and the redirect costs no extra
//! round trip. A clone made for any other request never carries the flag, so no `ASKING` is
//! ever sent except right before the command it was meant for (a lone `ASKING` left on a
//! shared connection could also make the target serve a stranger's command on a slot it is
//! only importing).

use futures_util::FutureExt;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::Connect;
use redis::{AsyncConnectionConfig, Cmd, IntoConnectionInfo, Pipeline, RedisFuture, Value};

use super::topology;

/// A cluster node's connection that pipelines `ASKING` with the command it redirects (see the
/// [module docs](self)).
pub(crate) struct AskingConnection {
    inner: MultiplexedConnection,
    /// The node's address (`host:port`): its `CLUSTER SLOTS` go through
    /// [`topology::refresh`].
    node: std::sync::Arc<str>,
    /// The cluster client sent `ASKING` on this clone: the next command goes with it.
    asking: bool,
}

impl Clone for AskingConnection {
    /// A clone for another request: never carries a pending `ASKING`.
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            node: self.node.clone(),
            asking: false,
        }
    }
}

/// `true` for the command `ASKING` alone.
fn is_asking(cmd: &Cmd) -> bool {
    let mut args = cmd.args_iter();
    matches!(
        (args.next(), args.next()),
        (Some(redis::Arg::Simple(name)), None) if name.eq_ignore_ascii_case(b"ASKING")
    )
}

/// `pipeline` (a transaction's `MULTI` and `EXEC` included) with `ASKING` first. The
/// replies are those of `pipeline`, one later.
fn with_asking(pipeline: &Pipeline) -> Pipeline {
    let mut asked = redis::pipe();
    asked.cmd("ASKING");
    if pipeline.is_transaction() {
        // One ASKING before MULTI covers the whole transaction.
        asked.cmd("MULTI");
    }
    for cmd in pipeline.cmd_iter() {
        asked.add_command(cmd.clone());
    }
    if pipeline.is_transaction() {
        asked.cmd("EXEC");
    }
    asked
}

impl ConnectionLike for AskingConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        if is_asking(cmd) {
            self.asking = true;
            return async { Ok(Value::Okay) }.boxed();
        }
        if topology::is_cluster_slots(cmd) {
            return self.cluster_slots(cmd);
        }
        if !std::mem::take(&mut self.asking) {
            return self.inner.req_packed_command(cmd);
        }
        async move {
            let mut asked = redis::pipe();
            asked.cmd("ASKING").add_command(cmd.clone());
            let mut replies = self.inner.req_packed_commands(&asked, 0, 2).await?;
            let reply = replies.pop();
            match (replies.pop(), reply) {
                // ASKING refused: that is the answer (the command ran without it).
                (Some(refused @ Value::ServerError(_)), _) => Ok(refused),
                (Some(_), Some(reply)) => Ok(reply),
                _ => Err(redis::RedisError::from((
                    redis::ErrorKind::Parse,
                    "ASKING pipeline: missing reply",
                ))),
            }
        }
        .boxed()
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        if !std::mem::take(&mut self.asking) {
            return self.inner.req_packed_commands(pipeline, offset, count);
        }
        async move {
            let asked = with_asking(pipeline);
            self.inner
                .req_packed_commands(&asked, offset + 1, count)
                .await
        }
        .boxed()
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

impl AskingConnection {
    /// `CLUSTER SLOTS`, at most once per [`topology::SLOT_REFRESH_INTERVAL`] on this node
    /// (else its last reply, see [`topology`]).
    fn cluster_slots<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        if let Some(reply) = topology::refresh(&self.node) {
            return async { Ok(reply) }.boxed();
        }
        async move {
            let reply = self.inner.req_packed_command(cmd).await?;
            topology::remember(&self.node, &reply);
            Ok(reply)
        }
        .boxed()
    }
}

impl Connect for AskingConnection {
    fn connect_with_config<'a, T>(info: T, config: AsyncConnectionConfig) -> RedisFuture<'a, Self>
    where
        T: IntoConnectionInfo + Send + 'a,
    {
        async move {
            let info = info.into_connection_info()?;
            let node = std::sync::Arc::from(info.addr().to_string());
            Ok(Self {
                inner: MultiplexedConnection::connect_with_config(info, config).await?,
                node,
                asking: false,
            })
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_lone_asking_is_held_back() {
        assert!(is_asking(&redis::cmd("ASKING")));
        assert!(is_asking(&redis::cmd("asking")));
        assert!(!is_asking(redis::cmd("ASKING").arg("x")));
        assert!(!is_asking(&redis::cmd("EVALSHA")));
    }

    #[test]
    fn a_transaction_keeps_multi_and_exec_after_asking() {
        let mut p = redis::pipe();
        p.atomic().cmd("GET").arg("k");
        let asked = with_asking(&p);
        let names: Vec<Vec<u8>> = asked
            .cmd_iter()
            .map(|c| match c.args_iter().next() {
                Some(redis::Arg::Simple(n)) => n.to_vec(),
                _ => Vec::new(),
            })
            .collect();
        assert_eq!(
            names,
            [&b"ASKING"[..], b"MULTI", b"GET", b"EXEC"].map(<[u8]>::to_vec)
        );
        assert!(!asked.is_transaction());
    }
}
