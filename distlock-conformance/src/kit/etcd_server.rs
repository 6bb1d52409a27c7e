//! Private `etcd` servers on free ports: one node, or a cluster on loopback that a test
//! can kill, pause and restart member by member.
//!
//! Fault tests must never disturb the shared server behind `DISTLOCK_ETCD_URL`, so they
//! start their own: `etcd` child processes (Debian's `etcd-server` package) bound to
//! `127.0.0.1`, each with its own data directory (in `/dev/shm` when there is one, so a
//! write's `fsync` costs nothing), killed and removed on drop.
//!
//! The members use a 50 ms heartbeat and a 500 ms election timeout, so an election after
//! a crash takes about a second and the server's minimum lease TTL is one second.
//!
//! The fixture talks to its servers through etcd's JSON gateway (`/health`,
//! `/v3/maintenance/status`) with a tiny blocking HTTP client of its own, so it needs no
//! etcd driver and never hangs a test.
//!
//! ```no_run
//! use distlock_conformance::kit::etcd_server::EtcdCluster;
//!
//! let Some(mut cluster) = EtcdCluster::start_or_skip("my fault test", 3) else { return };
//! let url = cluster.url(); // etcd://127.0.0.1:<port>,127.0.0.1:<port>,127.0.0.1:<port>
//! let leader = cluster.wait_for_leader(std::time::Duration::from_secs(10));
//! cluster.kill(leader); // kill -9
//! let next = cluster.wait_for_leader(std::time::Duration::from_secs(10));
//! cluster.restart(leader); // same ports and data: rejoins as a follower
//! # let _ = (url, next);
//! ```

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a started cluster gets to report itself healthy.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);
/// Read/write timeout of the fixture's own requests.
const IO_TIMEOUT: Duration = Duration::from_secs(3);
/// How many sets of free ports `start` tries before giving up (another process may grab
/// a port between our probe and the server's bind).
const PORT_ATTEMPTS: usize = 4;
/// The members' heartbeat interval, in milliseconds.
pub const HEARTBEAT_MS: u64 = 50;
/// The members' election timeout, in milliseconds.
pub const ELECTION_TIMEOUT_MS: u64 = 500;

/// One member of an [`EtcdCluster`].
#[derive(Debug)]
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
    paused: bool,
}

/// A private etcd cluster of one or more members on loopback.
///
/// Dropping the fixture kills every member and removes the data directories.
#[derive(Debug)]
pub struct EtcdCluster {
    dir: PathBuf,
    token: String,
    members: Vec<Member>,
}

impl EtcdCluster {
    /// Whether an `etcd` binary can be run.
    pub fn binary_available() -> bool {
        Command::new("etcd")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }

    /// Starts a cluster of `size` members (1 for a single node) and waits until every
    /// member reports itself healthy (a leader is elected).
    ///
    /// # Panics
    ///
    /// When `etcd` cannot be started or the cluster does not become healthy in time.
    pub fn start(size: usize) -> Self {
        assert!(size >= 1, "a cluster has at least one member");
        let mut last_error = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let dir = unique_dir();
            if let Err(err) = std::fs::create_dir_all(&dir) {
                panic!("create {}: {err}", dir.display());
            }
            let token = dir.file_name().map_or_else(|| "distlock".to_owned(), |n| n.to_string_lossy().into_owned());
            let members = (0..size)
                .map(|i| Member {
                    name: format!("m{i}"),
                    client_port: free_port(),
                    peer_port: free_port(),
                    child: None,
                    paused: false,
                })
                .collect();
            let mut cluster = Self { dir, token, members };
            let spawned = (0..size).try_for_each(|i| cluster.spawn(i, "new"));
            match spawned.and_then(|()| cluster.wait_healthy(STARTUP_TIMEOUT)) {
                Ok(()) => return cluster,
                Err(err) => last_error = format!("{err}\n{}", cluster.logs()),
            }
        }
        panic!("could not start an etcd cluster after {PORT_ATTEMPTS} attempts: {last_error}");
    }

    /// [`start`](Self::start), or `None` after printing that `test` skipped when no `etcd`
    /// binary is installed.
    ///
    /// # Panics
    ///
    /// When the binary is missing and `DISTLOCK_REQUIRE_SERVICES=1`, or when it cannot
    /// be started.
    pub fn start_or_skip(test: &str, size: usize) -> Option<Self> {
        if Self::binary_available() {
            return Some(Self::start(size));
        }
        if super::services_required() {
            panic!("{test}: `etcd` is not installed (Debian: etcd-server) and DISTLOCK_REQUIRE_SERVICES=1 forbids skipping");
        }
        eprintln!("SKIPPED {test}: install `etcd` (Debian package etcd-server) to run it");
        None
    }

    /// The number of members.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// The client address of member `i`.
    pub fn client_addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.members[i].client_port))
    }

    /// The store URL naming every member: `etcd://127.0.0.1:<port>,…`.
    pub fn url(&self) -> String {
        let endpoints: Vec<String> = (0..self.size()).map(|i| self.client_addr(i).to_string()).collect();
        format!("etcd://{}", endpoints.join(","))
    }

    /// Whether member `i` runs (it may be paused).
    pub fn is_running(&self, i: usize) -> bool {
        self.members[i].child.is_some()
    }

    /// Kills member `i` with SIGKILL and reaps it.
    pub fn kill(&mut self, i: usize) {
        let member = &mut self.members[i];
        if let Some(mut child) = member.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        member.paused = false;
    }

    /// Stops member `i` with SIGSTOP: it keeps its sockets but answers nothing, as a
    /// machine stalled by a long pause would.
    pub fn pause(&mut self, i: usize) {
        self.signal(i, "STOP");
        self.members[i].paused = true;
    }

    /// Resumes a member stopped with [`pause`](Self::pause) (SIGCONT).
    pub fn resume(&mut self, i: usize) {
        self.signal(i, "CONT");
        self.members[i].paused = false;
    }

    fn signal(&self, i: usize, signal: &str) {
        let Some(child) = &self.members[i].child else { panic!("member {i} is not running") };
        let status = Command::new("kill").arg(format!("-{signal}")).arg(child.id().to_string()).status();
        assert!(status.is_ok_and(|s| s.success()), "kill -{signal} of etcd member {i} failed");
    }

    /// Starts member `i` again (killed by [`kill`](Self::kill)) on the same ports with the
    /// same data, and waits until it reports itself healthy.
    ///
    /// # Panics
    ///
    /// When it cannot be started again in time.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            let outcome = self.spawn(i, "existing").and_then(|()| self.wait_member_healthy(i, deadline));
            match outcome {
                Ok(()) => return,
                // The old sockets may linger for a moment; the ports are ours, so try again.
                Err(err) if Instant::now() < deadline => {
                    eprintln!("etcd member {i} restart failed ({err}); retrying");
                    self.kill(i);
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(err) => panic!("could not restart etcd member {i}: {err}\n{}", self.logs()),
            }
        }
    }

    /// The index of the member that member `asked` believes is the leader, if it answers
    /// and knows one.
    pub fn leader_seen_by(&self, asked: usize) -> Option<usize> {
        if !self.is_running(asked) || self.members[asked].paused {
            return None;
        }
        let status = http(self.client_addr(asked), "POST", "/v3/maintenance/status", "{}").ok()?;
        let leader = json_field(&status, "leader")?;
        let own = json_field(&status, "member_id")?;
        // Member ids are only known by asking each member for its own.
        if leader == own {
            return Some(asked);
        }
        (0..self.size()).filter(|&i| i != asked).find(|&i| {
            self.is_running(i)
                && !self.members[i].paused
                && http(self.client_addr(i), "POST", "/v3/maintenance/status", "{}")
                    .ok()
                    .and_then(|s| json_field(&s, "member_id"))
                    .is_some_and(|id| id == leader)
        })
    }

    /// Waits until a running, unpaused member is leader according to itself, and returns
    /// its index.
    ///
    /// # Panics
    ///
    /// When no leader emerges within `timeout`.
    pub fn wait_for_leader(&self, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            for i in 0..self.size() {
                if self.leader_seen_by(i) == Some(i) {
                    return i;
                }
            }
            assert!(Instant::now() < deadline, "no etcd leader within {timeout:?}\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether member `i` answers `/health` with `"health":"true"` (it is up and sees a
    /// leader).
    pub fn healthy(&self, i: usize) -> bool {
        self.is_running(i)
            && http(self.client_addr(i), "GET", "/health", "").is_ok_and(|body| body.contains("\"health\":\"true\""))
    }

    fn wait_healthy(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        (0..self.size()).try_for_each(|i| self.wait_member_healthy(i, deadline))
    }

    fn wait_member_healthy(&mut self, i: usize, deadline: Instant) -> Result<(), String> {
        loop {
            if let Some(child) = self.members[i].child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.members[i].child = None;
                    return Err(format!("etcd member {i} exited ({status})"));
                }
            }
            if self.healthy(i) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("etcd member {i} not healthy in time"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn spawn(&mut self, i: usize, state: &str) -> Result<(), String> {
        let initial_cluster: Vec<String> =
            self.members.iter().map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port)).collect();
        let member = &self.members[i];
        let data = self.dir.join(&member.name);
        let log_path = self.dir.join(format!("{}.log", member.name));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|err| format!("open {}: {err}", log_path.display()))?;
        let log_err = log.try_clone().map_err(|err| err.to_string())?;
        let client = format!("http://127.0.0.1:{}", member.client_port);
        let peer = format!("http://127.0.0.1:{}", member.peer_port);
        let child = Command::new("etcd")
            .args(["--name", &member.name])
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &initial_cluster.join(",")])
            .args(["--initial-cluster-state", state, "--initial-cluster-token", &self.token])
            .args(["--heartbeat-interval", &HEARTBEAT_MS.to_string()])
            .args(["--election-timeout", &ELECTION_TIMEOUT_MS.to_string()])
            .args(["--logger", "zap", "--log-level", "warn", "--log-outputs", "stderr"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|err| format!("spawn etcd: {err}"))?;
        super::reaper::reap_with_this_process(child.id(), &format!("127.0.0.1:{}", member.client_port));
        self.members[i].child = Some(child);
        Ok(())
    }

    /// The tail of every member's log, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for member in &self.members {
            let path = self.dir.join(format!("{}.log", member.name));
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            out.push_str(&format!("--- {} (last lines)\n", path.display()));
            for line in tail.into_iter().rev() {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            if self.members[i].paused {
                self.resume(i);
            }
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One HTTP/1.1 request with `Connection: close`; returns the body.
fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> io::Result<String> {
    let mut conn = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
    conn.set_read_timeout(Some(IO_TIMEOUT))?;
    conn.set_write_timeout(Some(IO_TIMEOUT))?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes())?;
    let mut response = String::new();
    conn.read_to_string(&mut response)?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    if !head.starts_with("HTTP/1.1 200") {
        return Err(io::Error::other(format!("{method} {path}: {}", head.lines().next().unwrap_or(""))));
    }
    Ok(body.to_owned())
}

/// The text of `"field":"…"` (the gateway prints 64-bit numbers as strings).
fn json_field(json: &str, field: &str) -> Option<String> {
    let start = json.find(&format!("\"{field}\":\""))? + field.len() + 4;
    let len = json[start..].find('"')?;
    Some(json[start..start + len].to_owned())
}

fn free_port() -> u16 {
    match TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).and_then(|listener| listener.local_addr()) {
        Ok(addr) => addr.port(),
        Err(err) => panic!("find a free port: {err}"),
    }
}

fn unique_dir() -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let name = format!("distlock-etcd-{}-{}-{nanos}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    base.join(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_gateway_fields() {
        let status =
            r#"{"header":{"cluster_id":"1","member_id":"42","revision":"1"},"version":"3.4.23","leader":"42"}"#;
        assert_eq!(json_field(status, "member_id").as_deref(), Some("42"));
        assert_eq!(json_field(status, "leader").as_deref(), Some("42"));
        assert_eq!(json_field(status, "raftIndex"), None);
    }

    #[test]
    fn a_three_member_cluster_elects_and_re_elects() {
        let Some(mut cluster) = EtcdCluster::start_or_skip("etcd_server fixture", 3) else { return };
        let leader = cluster.wait_for_leader(Duration::from_secs(10));
        cluster.kill(leader);
        let next = cluster.wait_for_leader(Duration::from_secs(10));
        assert_ne!(next, leader);
        cluster.restart(leader);
        assert!(cluster.healthy(leader));
    }
}
