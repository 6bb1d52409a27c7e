//! A private three-master Redis Cluster on free loopback ports (no replicas, no
//! persistence), started in a temporary directory and killed on drop.
//!
//! ```no_run
//! use distlock_conformance::kit::redis_cluster::RedisCluster;
//!
//! let Some(cluster) = RedisCluster::start_or_skip("my cluster test") else { return };
//! let url = cluster.url(); // redis+cluster://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3
//! ```

use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::redis_server::{RedisServer, Reply};

/// How long the cluster gets to agree on its slots.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// Three cluster-enabled `redis-server`s that own all 16384 slots between them.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<Node>,
    dir: PathBuf,
}

#[derive(Debug)]
struct Node {
    port: u16,
    child: Option<Child>,
}

impl RedisCluster {
    /// Starts the cluster, or returns `None` after printing that `test` skipped when
    /// `redis-server` is not installed.
    ///
    /// # Panics
    ///
    /// When they are missing and `DISTLOCK_REQUIRE_SERVICES=1`, or when the cluster does
    /// not come up.
    pub fn start_or_skip(test: &str) -> Option<Self> {
        if RedisServer::binary_available() {
            return Some(Self::start());
        }
        if super::services_required() {
            panic!("{test}: `redis-server` is not installed and DISTLOCK_REQUIRE_SERVICES=1 forbids skipping");
        }
        eprintln!("SKIPPED {test}: install `redis-server` to run it");
        None
    }

    /// Starts three masters, assigns them a third of the slots each and introduces them
    /// to each other (as `redis-cli --cluster create` does), then waits for
    /// `cluster_state:ok` on every node.
    ///
    /// # Panics
    ///
    /// When the cluster does not come up in time.
    pub fn start() -> Self {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let dir = super::shared::server_dir().join(format!(
            "distlock-redis-cluster-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap_or_else(|err| panic!("create {}: {err}", dir.display()));
        let mut cluster = Self { nodes: Vec::new(), dir };
        for i in 0..3 {
            let port = free_port();
            let node_dir = cluster.dir.join(i.to_string());
            std::fs::create_dir_all(&node_dir).unwrap_or_else(|err| panic!("create {}: {err}", node_dir.display()));
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--protected-mode", "no"])
                .args(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])
                .args(["--cluster-node-timeout", "2000", "--save", "", "--appendonly", "no"])
                .args(["--daemonize", "no", "--loglevel", "warning", "--logfile", ""])
                .arg("--dir")
                .arg(&node_dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|err| panic!("spawn redis-server: {err}"));
            super::reaper::reap_with_this_process(child.id(), &format!(":{port}"));
            cluster.nodes.push(Node { port, child: Some(child) });
        }
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        for port in cluster.ports() {
            while !matches!(cluster.command_on(port, &["PING"]), Some(Reply::Status(s)) if s == "PONG") {
                assert!(Instant::now() < deadline, "cluster node {port} did not answer PING");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        // What `redis-cli --cluster create` does, without its one-second pauses: a third
        // of the slots to each master, then every node meets the first.
        let ports = cluster.ports();
        let ranges = [(0, 5460), (5461, 10922), (10923, 16383)];
        for (port, (start, end)) in ports.iter().zip(ranges) {
            let reply = cluster.command_on(*port, &["CLUSTER", "ADDSLOTSRANGE", &start.to_string(), &end.to_string()]);
            assert!(matches!(&reply, Some(Reply::Status(ok)) if ok == "OK"), "ADDSLOTSRANGE on {port}: {reply:?}");
        }
        for port in &ports[1..] {
            let reply = cluster.command_on(*port, &["CLUSTER", "MEET", "127.0.0.1", &ports[0].to_string()]);
            assert!(matches!(&reply, Some(Reply::Status(ok)) if ok == "OK"), "CLUSTER MEET from {port}: {reply:?}");
        }
        for port in cluster.ports() {
            loop {
                let info = cluster.command_on(port, &["CLUSTER", "INFO"]).and_then(|reply| reply.as_text());
                if info.is_some_and(|info| info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384"))
                {
                    break;
                }
                assert!(Instant::now() < deadline, "cluster node {port} did not reach cluster_state:ok");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        cluster
    }

    /// The masters' ports.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|node| node.port).collect()
    }

    /// `redis+cluster://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.ports().iter().map(|port| format!("127.0.0.1:{port}")).collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// One command on the node at `port` (the fixture's own small client), `None` when
    /// the node does not answer.
    pub fn command_on(&self, port: u16, args: &[&str]) -> Option<Reply> {
        RedisServer::command_at(port, args).ok()
    }

    /// The port of the master that serves `key`'s slot.
    ///
    /// # Panics
    ///
    /// When no node answers.
    pub fn owner_of(&self, key: &str) -> u16 {
        let slot = self.slot_of(key);
        for port in self.ports() {
            let Some(Reply::Array(Some(ranges))) = self.command_on(port, &["CLUSTER", "SLOTS"]) else { continue };
            for range in ranges {
                let Reply::Array(Some(parts)) = range else { continue };
                let (Some(start), Some(end)) =
                    (parts.first().and_then(Reply::as_int), parts.get(1).and_then(Reply::as_int))
                else {
                    continue;
                };
                if (start..=end).contains(&slot) {
                    if let Some(Reply::Array(Some(node))) = parts.get(2) {
                        if let Some(port) = node.get(1).and_then(Reply::as_int) {
                            return u16::try_from(port).expect("port");
                        }
                    }
                }
            }
        }
        panic!("no node serves the slot of {key}");
    }

    /// `CLUSTER KEYSLOT key`.
    ///
    /// # Panics
    ///
    /// When no node answers.
    pub fn slot_of(&self, key: &str) -> i64 {
        self.ports()
            .into_iter()
            .find_map(|port| self.command_on(port, &["CLUSTER", "KEYSLOT", key]).and_then(|reply| reply.as_int()))
            .expect("CLUSTER KEYSLOT")
    }

    /// Moves `slot` (and its keys) from the master at `from` to the master at `to`, the
    /// way `redis-cli --cluster reshard` does: `IMPORTING`/`MIGRATING`, `MIGRATE` of the
    /// keys in batches, then `SETSLOT … NODE` on every master. Clients meanwhile get
    /// `ASK` and then `MOVED` redirections.
    ///
    /// # Panics
    ///
    /// When a step is refused.
    pub fn migrate_slot(&self, slot: i64, from: u16, to: u16) {
        let id = |port: u16| {
            self.command_on(port, &["CLUSTER", "MYID"]).and_then(|reply| reply.as_text()).expect("CLUSTER MYID")
        };
        let (from_id, to_id) = (id(from), id(to));
        let slot_s = slot.to_string();
        let ok = |reply: Option<Reply>, what: &str| match reply {
            Some(Reply::Error(err)) | Some(Reply::Status(err)) if err != "OK" && err != "NOKEY" => {
                panic!("{what}: {err}")
            }
            None => panic!("{what}: no answer"),
            _ => {}
        };
        ok(self.command_on(to, &["CLUSTER", "SETSLOT", &slot_s, "IMPORTING", &from_id]), "IMPORTING");
        ok(self.command_on(from, &["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", &to_id]), "MIGRATING");
        loop {
            let Some(Reply::Array(Some(keys))) = self.command_on(from, &["CLUSTER", "GETKEYSINSLOT", &slot_s, "100"])
            else {
                panic!("GETKEYSINSLOT")
            };
            if keys.is_empty() {
                break;
            }
            let keys: Vec<String> = keys.iter().filter_map(Reply::as_text).collect();
            let to_port = to.to_string();
            let mut migrate = vec!["MIGRATE", "127.0.0.1", &to_port, "", "0", "5000", "KEYS"];
            migrate.extend(keys.iter().map(String::as_str));
            ok(self.command_on(from, &migrate), "MIGRATE");
        }
        for port in [to, from] {
            ok(self.command_on(port, &["CLUSTER", "SETSLOT", &slot_s, "NODE", &to_id]), "SETSLOT NODE");
        }
        for port in self.ports() {
            if port != to && port != from {
                ok(self.command_on(port, &["CLUSTER", "SETSLOT", &slot_s, "NODE", &to_id]), "SETSLOT NODE");
            }
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    // Cluster nodes also listen on port + 10000 (the bus): pick a port whose bus port is free too.
    for _ in 0..100 {
        let port = match TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).and_then(|listener| listener.local_addr()) {
            Ok(addr) => addr.port(),
            Err(err) => panic!("find a free port: {err}"),
        };
        if port < 55_000 && TcpListener::bind((Ipv4Addr::LOCALHOST, port + 10_000)).is_ok() {
            return port;
        }
    }
    panic!("no free port pair (port, port + 10000)");
}
