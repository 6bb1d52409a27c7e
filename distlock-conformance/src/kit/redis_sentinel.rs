//! A private Sentinel deployment: one master, one replica and three sentinels (quorum 2)
//! on free loopback ports, no persistence; the master can be killed to force a failover.
//!
//! ```no_run
//! use distlock_conformance::kit::redis_sentinel::RedisSentinels;
//!
//! let Some(mut set) = RedisSentinels::start_or_skip("my sentinel test") else { return };
//! let url = set.url(); // redis+sentinel://127.0.0.1:s1,127.0.0.1:s2,127.0.0.1:s3/distlock
//! set.kill_master(); // the sentinels promote the replica within a few seconds
//! ```

use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::redis_server::{RedisServer, Reply};

/// The name the sentinels monitor the master under.
pub const MASTER_NAME: &str = "distlock";
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// One master, one replica, three sentinels.
#[derive(Debug)]
pub struct RedisSentinels {
    dir: PathBuf,
    master: Proc,
    replica: Proc,
    sentinels: Vec<Proc>,
}

#[derive(Debug)]
struct Proc {
    port: u16,
    child: Option<Child>,
}

impl Proc {
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl RedisSentinels {
    /// Starts the deployment, or `None` after printing that `test` skipped when
    /// `redis-server` is not installed.
    ///
    /// # Panics
    ///
    /// When it is missing and `DISTLOCK_REQUIRE_SERVICES=1`, or when it does not come up.
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

    /// Starts the master, the replica (`replicaof` the master) and three sentinels
    /// (`down-after-milliseconds` 1000, `failover-timeout` 3000), and waits until the
    /// replica is in sync and every sentinel knows the master.
    ///
    /// # Panics
    ///
    /// When a process does not come up in time.
    pub fn start() -> Self {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let dir = super::shared::server_dir().join(format!(
            "distlock-redis-sentinel-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap_or_else(|err| panic!("create {}: {err}", dir.display()));
        let master_port = free_port();
        let master = spawn_server(&dir, "master", master_port, &[]);
        let replica_port = free_port();
        let replica =
            spawn_server(&dir, "replica", replica_port, &["--replicaof", "127.0.0.1", &master_port.to_string()]);
        let mut set = Self { dir, master, replica, sentinels: Vec::new() };
        for i in 0..3 {
            let port = free_port();
            let conf = set.dir.join(format!("sentinel-{i}.conf"));
            let text = format!(
                "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {}\n\
                 sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                 sentinel failover-timeout {MASTER_NAME} 3000\n\
                 sentinel parallel-syncs {MASTER_NAME} 1\n",
                set.dir.display()
            );
            std::fs::write(&conf, text).unwrap_or_else(|err| panic!("write {}: {err}", conf.display()));
            let child = Command::new("redis-server")
                .arg(&conf)
                .arg("--sentinel")
                .args(["--loglevel", "warning", "--logfile", ""])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|err| panic!("spawn redis-server --sentinel: {err}"));
            super::reaper::reap_with_this_process(child.id(), &format!(":{port}"));
            set.sentinels.push(Proc { port, child: Some(child) });
        }
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        for port in [set.master.port, set.replica.port].into_iter().chain(set.sentinel_ports()) {
            while !matches!(RedisServer::command_at(port, &["PING"]), Ok(Reply::Status(s)) if s == "PONG") {
                assert!(Instant::now() < deadline, "port {port} did not answer PING");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        loop {
            let info = RedisServer::command_at(replica_port, &["INFO", "replication"]).ok().and_then(|r| r.as_text());
            if info.is_some_and(|info| info.contains("master_link_status:up")) {
                break;
            }
            assert!(Instant::now() < deadline, "the replica did not sync");
            std::thread::sleep(Duration::from_millis(20));
        }
        set
    }

    /// The sentinels' ports.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|sentinel| sentinel.port).collect()
    }

    /// `redis+sentinel://127.0.0.1:s1,127.0.0.1:s2,127.0.0.1:s3/distlock`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.sentinel_ports().iter().map(|port| format!("127.0.0.1:{port}")).collect();
        format!("redis+sentinel://{}/{MASTER_NAME}", hosts.join(","))
    }

    /// The port of the master the sentinels currently report.
    pub fn current_master_port(&self) -> Option<u16> {
        for port in self.sentinel_ports() {
            let reply = RedisServer::command_at(port, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME]);
            if let Ok(Reply::Array(Some(parts))) = reply {
                if let Some(port) = parts.get(1).and_then(Reply::as_text).and_then(|p| p.parse().ok()) {
                    return Some(port);
                }
            }
        }
        None
    }

    /// The original master's port.
    pub fn master_port(&self) -> u16 {
        self.master.port
    }

    /// The replica's port.
    pub fn replica_port(&self) -> u16 {
        self.replica.port
    }

    /// Waits until every sentinel knows the replica and the two other sentinels (a
    /// failover needs both; sentinels learn them from the master's `INFO` and hello
    /// messages, within a few seconds of starting).
    ///
    /// # Panics
    ///
    /// When that does not happen within `timeout`.
    pub fn wait_until_monitored(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        for port in self.sentinel_ports() {
            loop {
                let reply = RedisServer::command_at(port, &["SENTINEL", "MASTER", MASTER_NAME]);
                let field = |name: &str| -> Option<i64> {
                    let Ok(Reply::Array(Some(parts))) = &reply else { return None };
                    let at = parts.iter().position(|part| part.as_text().as_deref() == Some(name))?;
                    parts.get(at + 1)?.as_text()?.parse().ok()
                };
                if field("num-slaves").unwrap_or(0) >= 1 && field("num-other-sentinels").unwrap_or(0) >= 2 {
                    break;
                }
                assert!(Instant::now() < deadline, "sentinel {port} does not know the replica and its peers yet");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// Kills the master (SIGKILL); the sentinels promote the replica after about
    /// `down-after-milliseconds` plus an election.
    pub fn kill_master(&mut self) {
        self.master.kill();
    }

    /// Waits until the sentinels report the replica as the master and it answers as one.
    ///
    /// # Panics
    ///
    /// When the failover does not happen within `timeout`.
    pub fn wait_for_failover(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let promoted = self.current_master_port() == Some(self.replica.port);
            let role = RedisServer::command_at(self.replica.port, &["ROLE"]);
            let is_master = matches!(&role, Ok(Reply::Array(Some(parts))) if parts.first().and_then(Reply::as_text).as_deref() == Some("master"));
            if promoted && is_master {
                return;
            }
            assert!(Instant::now() < deadline, "no failover within {timeout:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for RedisSentinels {
    fn drop(&mut self) {
        for sentinel in &mut self.sentinels {
            sentinel.kill();
        }
        self.master.kill();
        self.replica.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn spawn_server(dir: &std::path::Path, name: &str, port: u16, extra: &[&str]) -> Proc {
    let node_dir = dir.join(name);
    std::fs::create_dir_all(&node_dir).unwrap_or_else(|err| panic!("create {}: {err}", node_dir.display()));
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--protected-mode", "no"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning", "--logfile", ""])
        // A replica syncs at once (the default waits 5 s for more replicas to join).
        .args(["--repl-diskless-sync-delay", "0"])
        .args(extra)
        .arg("--dir")
        .arg(&node_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|err| panic!("spawn redis-server: {err}"));
    super::reaper::reap_with_this_process(child.id(), &format!(":{port}"));
    Proc { port, child: Some(child) }
}

fn free_port() -> u16 {
    match TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).and_then(|listener| listener.local_addr()) {
        Ok(addr) => addr.port(),
        Err(err) => panic!("find a free port: {err}"),
    }
}
