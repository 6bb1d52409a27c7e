//! What answers at an address: connect errors that name the server they found.
//!
//! A Redis URL pointed at PostgreSQL's port fails with the driver's "broken pipe"; a
//! PostgreSQL URL pointed at Redis with a pool timeout. When a store cannot connect, it
//! asks [`connect_error`] to look at the address (a few short probes, about a second at
//! most) and reports what it found as the error's cause, with the driver's error beneath:
//!
//! ```text
//! redis store failed to connect: 127.0.0.1:5432 is a PostgreSQL server, not a Redis server: broken pipe
//! postgres store failed to connect: connection to 127.0.0.1:1 refused: Connection refused (os error 111)
//! ```
//!
//! For store implementations; applications read the result through
//! [`LockError::report`] or their error reporter.

use std::fmt;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::{BoxError, LockError};

/// How long one probe waits for a connection or an answer.
const STEP: Duration = Duration::from_millis(250);

/// A kind of server, as the probes tell them apart.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerKind {
    /// Answers `PING` with `+PONG` (or an error such as `-NOAUTH`).
    Redis,
    /// Answers an `SSLRequest` with `N` or `S`.
    Postgres,
    /// Greets first with a protocol-10 handshake; its version as it gave it.
    Mysql {
        /// The version in the greeting, e.g. `10.11.6-MariaDB`.
        version: String,
    },
    /// Answers `GET /version` with an `etcdserver` version.
    Etcd,
    /// Answers HTTP, but is not etcd.
    Http,
}

impl ServerKind {
    /// The kind a store of `backend` ([`LockStore::backend`](crate::LockStore::backend))
    /// talks to, when it talks to one over TCP.
    pub fn of_backend(backend: &str) -> Option<Self> {
        match backend {
            "redis" | "redis-cluster" | "redis-sentinel" | "redlock" => Some(Self::Redis),
            "postgres" => Some(Self::Postgres),
            "mysql" => Some(Self::Mysql { version: String::new() }),
            "etcd" => Some(Self::Etcd),
            _ => None,
        }
    }

    fn same_kind(&self, other: &Self) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

impl fmt::Display for ServerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Redis => f.write_str("a Redis server"),
            Self::Postgres => f.write_str("a PostgreSQL server"),
            Self::Mysql { version } if version.is_empty() => f.write_str("a MySQL/MariaDB server"),
            Self::Mysql { version } => write!(f, "a MySQL/MariaDB server ({version})"),
            Self::Etcd => f.write_str("an etcd server"),
            Self::Http => f.write_str("an HTTP server"),
        }
    }
}

/// What was found at an address.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Answer {
    /// Nothing listens there: the connection was refused.
    Refused,
    /// The address could not be reached (no route, a name that does not resolve…).
    Unreachable(String),
    /// A connection was accepted (or not) but nothing answered within the probes' time.
    NoAnswer,
    /// A server of this kind answered.
    Server(ServerKind),
    /// Something answered, but not as any kind the probes know.
    Unknown,
}

/// Finds out what answers at `host:port`: whether anything listens, and if so whether it
/// speaks MySQL (it greets first), PostgreSQL, Redis or HTTP (etcd). Each probe is its own
/// short connection; the whole takes about a second at most.
pub async fn identify(host: &str, port: u16) -> Answer {
    let address = (host, port);
    let first = match tokio::time::timeout(STEP * 4, TcpStream::connect(address)).await {
        Err(_) => return Answer::NoAnswer,
        Ok(Err(error)) if error.kind() == std::io::ErrorKind::ConnectionRefused => return Answer::Refused,
        Ok(Err(error)) => return Answer::Unreachable(error.to_string()),
        Ok(Ok(stream)) => stream,
    };
    // MySQL and MariaDB speak first: a packet header, then protocol version 10.
    let greeting = exchange(first, b"").await;
    if greeting.len() > 5 && greeting[4] == 10 {
        let version = greeting[5..].iter().take_while(|&&b| b != 0).map(|&b| char::from(b)).collect();
        return Answer::Server(ServerKind::Mysql { version });
    }
    // PostgreSQL's SSLRequest: a server answers one byte, `S` or `N`.
    let ssl_request = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
    if let Some(reply) = probe(address, &ssl_request).await {
        if matches!(reply.as_slice(), [b'N'] | [b'S']) {
            return Answer::Server(ServerKind::Postgres);
        }
    }
    if let Some(reply) = probe(address, b"PING\r\n").await {
        if reply.starts_with(b"+PONG") || reply.starts_with(b"-NOAUTH") || reply.starts_with(b"-ERR") {
            return Answer::Server(ServerKind::Redis);
        }
    }
    let http = b"GET /version HTTP/1.1\r\nHost: distlock-probe\r\nConnection: close\r\n\r\n";
    match probe(address, http).await {
        Some(reply) if reply.starts_with(b"HTTP/") => {
            let text = String::from_utf8_lossy(&reply);
            Answer::Server(if text.contains("etcdserver") { ServerKind::Etcd } else { ServerKind::Http })
        }
        Some(reply) if !reply.is_empty() || !greeting.is_empty() => Answer::Unknown,
        _ => Answer::NoAnswer,
    }
}

/// One probe on a new connection: `None` when it could not connect.
async fn probe(address: (&str, u16), request: &[u8]) -> Option<Vec<u8>> {
    let stream = tokio::time::timeout(STEP, TcpStream::connect(address)).await.ok()?.ok()?;
    Some(exchange(stream, request).await)
}

/// Sends `request` (if any) and reads what comes back within [`STEP`] (at most 4 KiB).
async fn exchange(mut stream: TcpStream, request: &[u8]) -> Vec<u8> {
    if !request.is_empty() && stream.write_all(request).await.is_err() {
        return Vec::new();
    }
    let mut reply = vec![0; 4096];
    let mut filled = 0;
    let deadline = tokio::time::Instant::now() + STEP;
    while filled < reply.len() {
        match tokio::time::timeout_at(deadline, stream.read(&mut reply[filled..])).await {
            Ok(Ok(n)) if n > 0 => filled += n,
            _ => break,
        }
    }
    reply.truncate(filled);
    reply
}

/// Why a store could not connect to `address`: what answered there, with the driver's
/// error as its [`source()`](std::error::Error::source).
#[derive(Debug)]
pub struct ConnectFailure {
    address: String,
    expected: Option<ServerKind>,
    answer: Answer,
    cause: BoxError,
}

impl ConnectFailure {
    /// The address tried, `host:port`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// What the probes found there.
    pub fn answer(&self) -> &Answer {
        &self.answer
    }
}

impl fmt::Display for ConnectFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let address = &self.address;
        match (&self.answer, &self.expected) {
            (Answer::Refused, _) => write!(f, "connection to {address} refused"),
            (Answer::Unreachable(why), _) => write!(f, "{address} cannot be reached ({why})"),
            (Answer::NoAnswer, _) => write!(f, "no answer from {address}"),
            (Answer::Server(found), Some(expected)) if !found.same_kind(expected) => {
                write!(f, "{address} is {found}, not {expected}")
            }
            (Answer::Server(found), _) => write!(f, "{address} ({found})"),
            (Answer::Unknown, Some(expected)) => write!(f, "{address} answered, but is not {expected}"),
            (Answer::Unknown, None) => write!(f, "{address} answered in an unknown protocol"),
        }
    }
}

impl std::error::Error for ConnectFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.cause)
    }
}

/// The [`LockError::Store`] for a failed connect of a `backend` store to `host:port`, its
/// cause a [`ConnectFailure`] that says what answers there (see [`identify`]) over the
/// driver's error — or the driver's error alone when a server of the right kind answers
/// (it refused a password or a database, and says so itself).
pub async fn connect_error(backend: &'static str, host: &str, port: u16, cause: impl Into<BoxError>) -> LockError {
    let answer = identify(host, port).await;
    let expected = ServerKind::of_backend(backend);
    if let (Answer::Server(found), Some(expected)) = (&answer, &expected) {
        if found.same_kind(expected) {
            // The right kind of server refused (a password, a database): its own message says it.
            return LockError::store(backend, "connect", None, cause);
        }
    }
    let address = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
    LockError::store(backend, "connect", None, ConnectFailure { address, expected, answer, cause: cause.into() })
}

/// `(host, port)` of an endpoint written `host:port`, `[v6]:port` or
/// `scheme://[user@]host:port[/…]`; `None` without a port.
pub fn host_port(endpoint: &str) -> Option<(&str, u16)> {
    let rest = endpoint.split_once("://").map_or(endpoint, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let (host, port) = authority.rsplit_once(':')?;
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    Some((host, port.parse().ok()?))
}

/// As [`connect_error`], for an endpoint `host:port` or a URL (see [`host_port`]); without
/// a port to probe, the driver's error alone.
pub async fn connect_error_at(backend: &'static str, endpoint: &str, cause: impl Into<BoxError>) -> LockError {
    match host_port(endpoint) {
        Some((host, port)) => connect_error(backend, host, port, cause).await,
        None => LockError::store(backend, "connect", None, cause),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_closed_port_is_refused_and_named() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        assert_eq!(identify("127.0.0.1", port).await, Answer::Refused);
        let err = connect_error("redis", "127.0.0.1", port, "Connection refused").await;
        assert_eq!(
            err.report().to_string(),
            format!("redis store failed to connect: connection to 127.0.0.1:{port} refused: Connection refused")
        );
    }

    #[tokio::test]
    async fn a_silent_listener_is_no_answer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accept = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        assert_eq!(identify("127.0.0.1", port).await, Answer::NoAnswer);
        let err = connect_error("postgres", "127.0.0.1", port, "pool timed out").await;
        assert!(err.report().to_string().contains(&format!("no answer from 127.0.0.1:{port}")), "{}", err.report());
        accept.abort();
    }

    #[test]
    fn endpoints_give_their_host_and_port() {
        assert_eq!(host_port("127.0.0.1:2379"), Some(("127.0.0.1", 2379)));
        assert_eq!(host_port("http://etcd-1:2379"), Some(("etcd-1", 2379)));
        assert_eq!(host_port("redis://u:p@h:6380/2?x=1"), Some(("h", 6380)));
        assert_eq!(host_port("[::1]:5432"), Some(("::1", 5432)));
        assert_eq!(host_port("localhost"), None);
    }

    #[test]
    fn a_wrong_kind_is_named_beside_the_expected_one() {
        let failure = ConnectFailure {
            address: "127.0.0.1:5432".into(),
            expected: ServerKind::of_backend("redis"),
            answer: Answer::Server(ServerKind::Postgres),
            cause: "broken pipe".into(),
        };
        assert_eq!(failure.to_string(), "127.0.0.1:5432 is a PostgreSQL server, not a Redis server");
        let mysql = ServerKind::Mysql { version: "10.11.6-MariaDB".into() };
        assert!(mysql.same_kind(&ServerKind::of_backend("mysql").unwrap()));
        assert_eq!(mysql.to_string(), "a MySQL/MariaDB server (10.11.6-MariaDB)");
    }
}
