//! A private `redis-server` on a free port that a test can stop, restart and flush.
//!
//! Fault tests must never disturb the shared server behind `DISTLOCK_REDIS_URL`, so they
//! start their own: a `redis-server` child process bound to `127.0.0.1` on a free port, in
//! its own temporary directory, killed (and its directory removed) on drop.
//!
//! The fixture talks to its server through a tiny blocking RESP client of its own, with
//! read and write timeouts, so it needs no Redis driver and never hangs a test.
//!
//! ```no_run
//! use distlock_conformance::kit::redis_server::RedisServer;
//!
//! let Some(mut server) = RedisServer::start_or_skip("my fault test") else { return };
//! let url = server.url(); // redis://127.0.0.1:<port>
//! server.script_flush();
//! server.client_kill_all_normal();
//! server.stop(); // clients now get connection errors
//! server.restart(); // same port, answers PING again
//! ```

use std::io::{self, BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a started server gets to answer `PING`.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(15);
/// Read/write timeout of the fixture's own commands.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// How many free ports `start` tries before giving up (another process may grab a port
/// between our probe and the server's bind).
const PORT_ATTEMPTS: usize = 5;

/// A reply of the fixture's small RESP2 client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK` and other simple strings.
    Status(String),
    /// `-ERR …`: the server refused the command.
    Error(String),
    /// `:42`.
    Int(i64),
    /// `$…`: a bulk string, `None` for the nil bulk.
    Bulk(Option<Vec<u8>>),
    /// `*…`: an array, `None` for the nil array.
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The reply as text (status, error or bulk string), if it is one.
    pub fn as_text(&self) -> Option<String> {
        match self {
            Self::Status(s) | Self::Error(s) => Some(s.clone()),
            Self::Bulk(Some(bytes)) => Some(String::from_utf8_lossy(bytes).into_owned()),
            _ => None,
        }
    }

    /// The reply as an integer, if it is one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Self::Int(n) => Some(*n),
            _ => None,
        }
    }
}

/// A `redis-server` child process on a free loopback port.
///
/// Persistence is off unless started with [`RedisServer::start_persistent`]. Dropping the
/// fixture kills the server and removes its directory.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    persistent: bool,
    child: Option<Child>,
}

impl RedisServer {
    /// Whether a `redis-server` binary can be run.
    pub fn binary_available() -> bool {
        Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }

    /// Starts a server without persistence (a restart loses every key).
    ///
    /// # Panics
    ///
    /// When `redis-server` cannot be started or does not answer `PING` in time.
    pub fn start() -> Self {
        Self::start_with(false)
    }

    /// Starts a server with an append-only file fsynced on every write, so keys survive
    /// [`stop`](Self::stop) (even though it is a `kill -9`) and [`restart`](Self::restart).
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_persistent() -> Self {
        Self::start_with(true)
    }

    /// [`start`](Self::start), or `None` after printing that `test` skipped when no
    /// `redis-server` binary is installed.
    ///
    /// # Panics
    ///
    /// When the binary is missing and `DISTLOCK_REQUIRE_SERVICES=1`, or when it cannot
    /// be started.
    pub fn start_or_skip(test: &str) -> Option<Self> {
        if Self::binary_available() {
            return Some(Self::start());
        }
        if super::services_required() {
            panic!("{test}: `redis-server` is not installed and DISTLOCK_REQUIRE_SERVICES=1 forbids skipping");
        }
        eprintln!("SKIPPED {test}: install `redis-server` to run it");
        None
    }

    fn start_with(persistent: bool) -> Self {
        let dir = unique_dir();
        if let Err(err) = std::fs::create_dir_all(&dir) {
            panic!("create {}: {err}", dir.display());
        }
        let mut last_error = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            let mut server = Self { port, dir: dir.clone(), persistent, child: None };
            match server.spawn_and_wait() {
                Ok(()) => return server,
                Err(err) => {
                    last_error = err;
                    server.kill_child();
                    // Keep the directory for the next attempt: `server`'s drop must not remove it.
                    server.dir = PathBuf::new();
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        panic!("could not start redis-server after {PORT_ATTEMPTS} attempts: {last_error}");
    }

    /// The server's port on `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Whether the server process is running (it may still be starting).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Kills the server with SIGKILL and reaps it. Clients' connections drop and new
    /// connections are refused. Without persistence every key is lost.
    pub fn stop(&mut self) {
        self.kill_child();
    }

    /// Starts the server again on the same port (and directory) and waits until it
    /// answers `PING`. Stops it first if it is running.
    ///
    /// # Panics
    ///
    /// When it cannot be started again in time.
    pub fn restart(&mut self) {
        self.kill_child();
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            match self.spawn_and_wait() {
                Ok(()) => return,
                // The old socket may linger for a moment; the port is ours, so try again.
                Err(err) if Instant::now() < deadline => {
                    eprintln!("redis-server restart on port {} failed ({err}); retrying", self.port);
                    self.kill_child();
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(err) => panic!("could not restart redis-server on port {}: {err}", self.port),
            }
        }
    }

    /// Sends one command to any server on `127.0.0.1:port` (say a cluster node) and
    /// returns its reply (an error reply is `Ok(Reply::Error)`).
    ///
    /// # Errors
    ///
    /// When the server cannot be reached or does not answer within a few seconds.
    pub fn command_at(port: u16, args: &[&str]) -> io::Result<Reply> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let mut conn = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
        conn.set_read_timeout(Some(IO_TIMEOUT))?;
        conn.set_write_timeout(Some(IO_TIMEOUT))?;
        send(&mut conn, args)?;
        read_reply(&mut BufReader::new(conn))
    }

    /// Sends one command and returns its reply (an error reply is `Ok(Reply::Error)`).
    ///
    /// # Errors
    ///
    /// When the server cannot be reached or does not answer within a few seconds.
    pub fn try_command(&self, args: &[&str]) -> io::Result<Reply> {
        let mut conn = self.connect()?;
        send(&mut conn, args)?;
        read_reply(&mut BufReader::new(conn))
    }

    /// Sends one command and returns its reply.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached or answers with an error.
    pub fn command(&self, args: &[&str]) -> Reply {
        match self.try_command(args) {
            Ok(Reply::Error(err)) => panic!("redis-server on port {} refused {args:?}: {err}", self.port),
            Ok(reply) => reply,
            Err(err) => panic!("redis-server on port {} did not answer {args:?}: {err}", self.port),
        }
    }

    /// Whether the server answers `PING` with `PONG`.
    pub fn ping(&self) -> bool {
        matches!(self.try_command(&["PING"]), Ok(Reply::Status(s)) if s == "PONG")
    }

    /// `SCRIPT FLUSH`: forgets every cached Lua script, so the next `EVALSHA` gets `NOSCRIPT`.
    pub fn script_flush(&self) {
        self.command(&["SCRIPT", "FLUSH"]);
    }

    /// `CLIENT KILL TYPE normal`: drops every ordinary client connection (not the
    /// fixture's own, not `MONITOR`s). Returns how many were killed.
    pub fn client_kill_all_normal(&self) -> i64 {
        self.command(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]).as_int().unwrap_or(0)
    }

    /// `CLIENT KILL TYPE pubsub`: drops every connection in subscribed mode (the stores'
    /// release subscribers). Returns how many were killed.
    pub fn client_kill_pubsub(&self) -> i64 {
        self.command(&["CLIENT", "KILL", "TYPE", "pubsub"]).as_int().unwrap_or(0)
    }

    /// `PUBSUB NUMSUB <channel>`: how many connections are subscribed to `channel`.
    pub fn subscribers(&self, channel: &str) -> i64 {
        match self.command(&["PUBSUB", "NUMSUB", channel]) {
            Reply::Array(Some(parts)) => parts.get(1).and_then(Reply::as_int).unwrap_or(0),
            other => panic!("unexpected PUBSUB NUMSUB reply {other:?}"),
        }
    }

    /// `CLIENT PAUSE <ms> WRITE`: the server holds every write (and script) command for
    /// `duration`, then runs them in order. Useful to make a client time out on a
    /// command that the server still runs later.
    pub fn pause_writes(&self, duration: Duration) {
        self.command(&["CLIENT", "PAUSE", &duration.as_millis().to_string(), "WRITE"]);
    }

    /// The keys matching `pattern` (`SCAN`, so it is safe on a big keyspace), sorted.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        let mut cursor = "0".to_owned();
        let mut keys = Vec::new();
        loop {
            let reply = self.command(&["SCAN", &cursor, "MATCH", pattern, "COUNT", "1000"]);
            let Reply::Array(Some(parts)) = reply else { panic!("unexpected SCAN reply {reply:?}") };
            let [next, Reply::Array(Some(batch))] = parts.as_slice() else { panic!("unexpected SCAN reply {parts:?}") };
            keys.extend(batch.iter().filter_map(Reply::as_text));
            cursor = next.as_text().unwrap_or_else(|| "0".to_owned());
            if cursor == "0" {
                keys.sort();
                return keys;
            }
        }
    }

    /// Starts a `MONITOR` session: every command the server runs from now on, one line
    /// each, e.g. `1700000000.123456 [0 127.0.0.1:50000] "SET" "k" "v"`.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached.
    pub fn monitor(&self) -> Monitor {
        let conn = match self.connect() {
            Ok(conn) => conn,
            Err(err) => panic!("MONITOR: cannot connect to port {}: {err}", self.port),
        };
        Monitor::start(conn)
    }

    fn connect(&self) -> io::Result<TcpStream> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let conn = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
        conn.set_read_timeout(Some(IO_TIMEOUT))?;
        conn.set_write_timeout(Some(IO_TIMEOUT))?;
        conn.set_nodelay(true)?;
        Ok(conn)
    }

    fn spawn_and_wait(&mut self) -> Result<(), String> {
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--protected-mode", "no"])
            .args(["--save", "", "--daemonize", "no", "--loglevel", "warning", "--logfile", ""])
            .arg("--dir")
            .arg(&self.dir);
        if self.persistent {
            command.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            command.args(["--appendonly", "no"]);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|err| format!("spawn redis-server: {err}"))?;
        super::reaper::reap_with_this_process(child.id(), &format!(":{}", self.port));
        self.child = Some(child);
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if self.ping() {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!("redis-server on port {} exited at start ({status})", self.port));
                }
            }
            if Instant::now() >= deadline {
                return Err(format!("redis-server on port {} did not answer PING in {STARTUP_TIMEOUT:?}", self.port));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn kill_child(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill_child();
        if !self.dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A `MONITOR` connection: lines are read on a background thread.
#[derive(Debug)]
pub struct Monitor {
    lines: mpsc::Receiver<String>,
    conn: TcpStream,
}

impl Monitor {
    fn start(mut conn: TcpStream) -> Self {
        if let Err(err) = send(&mut conn, &["MONITOR"]) {
            panic!("MONITOR: {err}");
        }
        let reader = match conn.try_clone() {
            Ok(reader) => reader,
            Err(err) => panic!("MONITOR: {err}"),
        };
        let mut reader = BufReader::new(reader);
        match read_reply(&mut reader) {
            Ok(Reply::Status(ok)) if ok == "OK" => {}
            other => panic!("MONITOR was refused: {other:?}"),
        }
        // The monitor may stay quiet for long; `next_line` and `lines_until` bound the waiting.
        let _ = reader.get_ref().set_read_timeout(None);
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            while let Ok(Reply::Status(line)) = read_reply(&mut reader) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { lines, conn }
    }

    /// The next command line, or `None` when none arrives within `timeout`.
    pub fn next_line(&self, timeout: Duration) -> Option<String> {
        self.lines.recv_timeout(timeout).ok()
    }

    /// Every line up to and including the first one containing `marker`.
    ///
    /// Send a marker command (e.g. `ECHO <uuid>`) after the commands of interest: the
    /// server runs commands one at a time, so everything before it is already here.
    ///
    /// # Panics
    ///
    /// When no line containing `marker` arrives within `timeout`.
    pub fn lines_until(&self, marker: &str, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        let mut lines = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let done = line.contains(marker);
                    lines.push(line);
                    if done {
                        return lines;
                    }
                }
                Err(_) => panic!("MONITOR: no line containing {marker:?} within {timeout:?}; got {lines:#?}"),
            }
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.conn.shutdown(std::net::Shutdown::Both);
    }
}

/// The quoted arguments of a `MONITOR` line: `… "SET" "k" "v"` → `["SET", "k", "v"]`
/// (backslash escapes are kept as written).
pub fn monitor_args(line: &str) -> Vec<String> {
    let Some(start) = line.find("] ") else { return Vec::new() };
    let mut args = Vec::new();
    let mut chars = line[start + 2..].chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut arg = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    arg.push(c);
                    if let Some(escaped) = chars.next() {
                        arg.push(escaped);
                    }
                }
                '"' => break,
                _ => arg.push(c),
            }
        }
        args.push(arg);
    }
    args
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
    let name = format!("distlock-redis-{}-{}-{nanos}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
    super::shared::server_dir().join(name)
}

fn send(conn: &mut TcpStream, args: &[&str]) -> io::Result<()> {
    let mut packet = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        packet.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        packet.extend_from_slice(arg.as_bytes());
        packet.extend_from_slice(b"\r\n");
    }
    conn.write_all(&packet)?;
    conn.flush()
}

fn read_reply(reader: &mut impl BufRead) -> io::Result<Reply> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed"));
    }
    let line = line.trim_end_matches(['\r', '\n']);
    let (kind, rest) = line.split_at(line.len().min(1));
    let number = || rest.parse::<i64>().map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err));
    match kind {
        "+" => Ok(Reply::Status(rest.to_owned())),
        "-" => Ok(Reply::Error(rest.to_owned())),
        ":" => Ok(Reply::Int(number()?)),
        "$" => match usize::try_from(number()?) {
            Ok(len) => {
                let mut bytes = vec![0; len + 2];
                reader.read_exact(&mut bytes)?;
                bytes.truncate(len);
                Ok(Reply::Bulk(Some(bytes)))
            }
            Err(_) => Ok(Reply::Bulk(None)),
        },
        "*" => match usize::try_from(number()?) {
            Ok(len) => (0..len).map(|_| read_reply(reader)).collect::<io::Result<_>>().map(|v| Reply::Array(Some(v))),
            Err(_) => Ok(Reply::Array(None)),
        },
        _ => Err(io::Error::new(io::ErrorKind::InvalidData, format!("unexpected RESP line {line:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_monitor_lines() {
        let line = r#"1700000000.123456 [0 127.0.0.1:50000] "SET" "neton:lock:order:1" "a\"b" "NX""#;
        assert_eq!(monitor_args(line), ["SET", "neton:lock:order:1", "a\\\"b", "NX"]);
        assert!(monitor_args("OK").is_empty());
    }

    #[test]
    fn parses_nested_replies() {
        let mut input: &[u8] = b"*3\r\n$3\r\nabc\r\n:7\r\n*-1\r\n";
        assert_eq!(
            read_reply(&mut input).unwrap(),
            Reply::Array(Some(vec![Reply::Bulk(Some(b"abc".to_vec())), Reply::Int(7), Reply::Array(None)]))
        );
        let mut nil: &[u8] = b"$-1\r\n";
        assert_eq!(read_reply(&mut nil).unwrap(), Reply::Bulk(None));
    }

    #[test]
    fn server_starts_stops_and_restarts_on_the_same_port() {
        let Some(mut server) = RedisServer::start_or_skip("redis_server fixture") else { return };
        let port = server.port();
        assert!(server.ping());
        server.command(&["SET", "k", "v"]);
        assert_eq!(server.keys("*"), ["k"]);
        server.stop();
        assert!(!server.ping());
        server.restart();
        assert_eq!(server.port(), port);
        assert!(server.ping());
        assert!(server.keys("*").is_empty(), "no persistence: the restart dropped the key");
    }
}
