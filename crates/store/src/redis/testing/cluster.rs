//! [`RedisCluster`]: three cluster-enabled [`RedisServer`]s joined into one cluster.

use std::io;

use super::certs::TestCerts;
use super::process::{cli, raw_command, wait_until};
use super::server::{Flavor, RedisServer};

/// A 3-master Redis Cluster (no replicas) of [`RedisServer`]s, all killed on drop.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three cluster-enabled servers, joins them with
    /// `redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes`, and waits until every
    /// node reports `cluster_state:ok`.
    ///
    /// # Errors
    /// As [`RedisServer::start`], or when the cluster does not form within 10 s.
    pub fn start() -> io::Result<Self> {
        Self::start_flavor(Flavor::Redis)
    }

    /// Like [`RedisCluster::start`] with nodes of `flavor`.
    ///
    /// # Errors
    /// As [`RedisCluster::start`].
    pub fn start_flavor(flavor: Flavor) -> io::Result<Self> {
        let nodes = (0..3)
            .map(|_| RedisServer::start_with(flavor, true, &[]))
            .collect::<io::Result<Vec<_>>>()?;
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let mut args = vec!["--cluster", "create"];
        args.extend(addrs.iter().map(String::as_str));
        args.extend(["--cluster-replicas", "0", "--cluster-yes"]);
        cli(nodes[0].port, &args)?;
        Self::await_ok(nodes)
    }

    /// Six cluster-enabled servers joined as 3 masters with one replica each
    /// (`--cluster-replicas 1`); waits until every node reports `cluster_state:ok` and every
    /// replica's link to its master is up. Which nodes are replicas is `redis-cli`'s choice
    /// (ask each node's `INFO replication`).
    ///
    /// # Errors
    /// As [`RedisCluster::start`], or when a replica does not sync within 10 s.
    pub fn start_with_replicas() -> io::Result<Self> {
        Self::start_with_replicas_args(&[])
    }

    /// Like [`RedisCluster::start_with_replicas`] with `--cluster-node-timeout <node_timeout_ms>`
    /// instead of the harness's 5 s: a killed master's replica is promoted about two node
    /// timeouts later (the failure is agreed on, then the replica waits 0.5 to 1 s and is
    /// elected).
    ///
    /// # Errors
    /// As [`RedisCluster::start_with_replicas`].
    pub fn start_with_replicas_and_node_timeout(node_timeout_ms: u64) -> io::Result<Self> {
        let timeout = node_timeout_ms.to_string();
        Self::start_with_replicas_args(&["--cluster-node-timeout", &timeout])
    }

    fn start_with_replicas_args(args: &[&str]) -> io::Result<Self> {
        let nodes = (0..6)
            .map(|_| RedisServer::start_with(Flavor::Redis, true, args))
            .collect::<io::Result<Vec<_>>>()?;
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let mut args = vec!["--cluster", "create"];
        args.extend(addrs.iter().map(String::as_str));
        args.extend(["--cluster-replicas", "1", "--cluster-yes"]);
        cli(nodes[0].port, &args)?;
        let cluster = Self::await_ok(nodes)?;
        for n in &cluster.nodes {
            let p = n.port;
            wait_until(&format!("cluster node {p} synced"), || {
                raw_command(p, "INFO replication")
                    .is_ok_and(|r| r.contains("role:master") || r.contains("master_link_status:up"))
            })?;
        }
        Ok(cluster)
    }

    /// Kills node `i` (SIGKILL, see [`RedisServer::kill`]).
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Starts node `i` again after [`kill`](Self::kill), on the same port and with its
    /// `nodes.conf`: it rejoins the cluster with the role and slots it had, and no keys
    /// (persistence is off).
    ///
    /// # Errors
    /// As [`RedisServer::restart`].
    pub fn restart(&mut self, i: usize) -> io::Result<()> {
        self.nodes[i].restart()
    }

    /// Sets `cluster-require-full-coverage no` on every live node: the other masters' slots
    /// keep answering while one master is down.
    ///
    /// # Errors
    /// When `redis-cli` fails on a node.
    pub fn partial_coverage(&self) -> io::Result<()> {
        for n in &self.nodes {
            n.cli(&["CONFIG", "SET", "cluster-require-full-coverage", "no"])?;
        }
        Ok(())
    }

    /// A 3-master cluster whose nodes also listen with TLS (`--tls-cluster yes`: the cluster
    /// bus too), with the server certificate of `certs` and no client certificates required;
    /// formed over TLS (`redis-cli --tls`). A TLS client is told the nodes' TLS ports.
    ///
    /// # Errors
    /// As [`RedisCluster::start`].
    pub fn start_tls(certs: &TestCerts) -> io::Result<Self> {
        let nodes = (0..3)
            .map(|_| RedisServer::start_tls_node(certs, false, true))
            .collect::<io::Result<Vec<_>>>()?;
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.tls_port.unwrap_or(n.port)))
            .collect();
        let ca = certs.path("ca.crt").to_string_lossy().into_owned();
        let mut args = vec!["--tls", "--cacert", &ca, "--cluster", "create"];
        args.extend(addrs.iter().map(String::as_str));
        args.extend(["--cluster-replicas", "0", "--cluster-yes"]);
        let port = nodes[0].tls_port.unwrap_or(nodes[0].port);
        cli(port, &args)?;
        Self::await_ok(nodes)
    }

    fn await_ok(nodes: Vec<RedisServer>) -> io::Result<Self> {
        for n in &nodes {
            let p = n.port;
            wait_until(&format!("cluster node {p}"), || {
                raw_command(p, "CLUSTER INFO").is_ok_and(|r| r.contains("cluster_state:ok"))
            })?;
        }
        Ok(Self { nodes })
    }

    /// The nodes' URLs, for [`RedisStoreConfig::cluster`](crate::redis::RedisStoreConfig::cluster).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The nodes' `rediss://` URLs, for a cluster started with [`RedisCluster::start_tls`].
    pub fn tls_urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::tls_url).collect()
    }

    /// The nodes.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Waits (bounded, 10 s) until every node reports `cluster_state:ok` (`ok`) or
    /// `cluster_state:fail`.
    ///
    /// # Errors
    /// When a node does not get there in time.
    pub fn await_state(&self, ok: bool) -> io::Result<()> {
        let want = if ok {
            "cluster_state:ok"
        } else {
            "cluster_state:fail"
        };
        for n in &self.nodes {
            let p = n.port;
            wait_until(&format!("{want} on cluster node {p}"), || {
                raw_command(p, "CLUSTER INFO").is_ok_and(|r| r.contains(want))
            })?;
        }
        Ok(())
    }

    /// Each node's cluster id (`CLUSTER MYID`), in the order of [`nodes`](Self::nodes).
    ///
    /// # Errors
    /// When `redis-cli` fails.
    pub fn node_ids(&self) -> io::Result<Vec<String>> {
        self.nodes
            .iter()
            .map(|n| n.cli(&["CLUSTER", "MYID"]))
            .collect()
    }

    /// The index (into [`nodes`](Self::nodes)) of the master that owns `slot`, as the first
    /// node's `CLUSTER NODES` says.
    ///
    /// # Errors
    /// When `redis-cli` fails or no node owns the slot.
    pub fn owner_of(&self, slot: u16) -> io::Result<usize> {
        let table = self.nodes[0].cli(&["CLUSTER", "NODES"])?;
        for line in table.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let Some(addr) = fields.get(1) else { continue };
            let owns = fields.iter().skip(8).any(|range| {
                let mut ends = range.split('-').map(|s| s.parse::<u16>());
                match (ends.next(), ends.next()) {
                    (Some(Ok(a)), None) => a == slot,
                    (Some(Ok(a)), Some(Ok(b))) => (a..=b).contains(&slot),
                    _ => false,
                }
            });
            if owns {
                let port: Option<u16> = addr
                    .split(['@', ','])
                    .next()
                    .and_then(|a| a.rsplit(':').next())
                    .and_then(|p| p.parse().ok());
                if let Some(i) = self.nodes.iter().position(|n| Some(n.port) == port) {
                    return Ok(i);
                }
            }
        }
        Err(io::Error::other(format!("no node owns slot {slot}")))
    }

    /// Starts moving `slot` from node `from` to node `to` the way `redis-cli --cluster
    /// reshard` does, and stops half-way: `to` is `IMPORTING`, `from` is `MIGRATING`, and the
    /// given keys are moved with `MIGRATE` (so requests for them get `ASK` from `from`).
    /// [`finish_migration`](Self::finish_migration) completes it.
    ///
    /// # Errors
    /// When a `redis-cli` command fails.
    pub fn start_migration(
        &self,
        slot: u16,
        from: usize,
        to: usize,
        keys: &[String],
    ) -> io::Result<()> {
        let ids = self.node_ids()?;
        let slot = slot.to_string();
        self.nodes[to].cli(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &ids[from]])?;
        self.nodes[from].cli(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &ids[to]])?;
        if !keys.is_empty() {
            let port = self.nodes[to].port.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().map(String::as_str));
            let out = self.nodes[from].cli(&args)?;
            if out != "OK" {
                return Err(io::Error::other(format!("MIGRATE answered {out:?}")));
            }
        }
        Ok(())
    }

    /// Completes a migration begun by [`start_migration`](Self::start_migration): moves the
    /// slot's remaining keys, then `CLUSTER SETSLOT <slot> NODE <to>` on every node.
    ///
    /// # Errors
    /// When a `redis-cli` command fails.
    pub fn finish_migration(&self, slot: u16, from: usize, to: usize) -> io::Result<()> {
        let ids = self.node_ids()?;
        let slot_arg = slot.to_string();
        let port = self.nodes[to].port.to_string();
        loop {
            let left = self.nodes[from].cli(&["CLUSTER", "GETKEYSINSLOT", &slot_arg, "1000"])?;
            let keys: Vec<&str> = left.lines().filter(|l| !l.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(keys);
            self.nodes[from].cli(&args)?;
        }
        for i in [to, from] {
            self.nodes[i].cli(&["CLUSTER", "SETSLOT", &slot_arg, "NODE", &ids[to]])?;
        }
        let others: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| i != to && i != from)
            .collect();
        for i in others {
            self.nodes[i].cli(&["CLUSTER", "SETSLOT", &slot_arg, "NODE", &ids[to]])?;
        }
        Ok(())
    }
}
