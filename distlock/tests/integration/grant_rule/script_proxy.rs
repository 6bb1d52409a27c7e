//! A TCP proxy between a Redis store and its server that swaps one Lua script for another
//! text: `EVALSHA <the script's SHA-1> …` and `EVAL <the script> …` go to the server as
//! `EVAL <replacement> …`, with the store's own keys and arguments; every other command,
//! and every reply, passes unchanged. The store runs as it is, on a real server, with one
//! rule changed.
//!
//! Clients send commands as RESP arrays of bulk strings (inline commands are refused: no
//! client of this crate sends them).

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use distlock::redis::redis::Script;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// The script to swap and its replacement.
#[derive(Debug)]
struct Swap {
    script: &'static str,
    sha: String,
    replacement: String,
    /// Script runs swapped so far.
    count: AtomicU64,
}

impl Swap {
    /// `command`, with the script replaced when it runs it.
    fn apply(&self, mut command: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        if let [name, script, ..] = command.as_mut_slice() {
            let runs = (name.eq_ignore_ascii_case(b"EVALSHA") && script.eq_ignore_ascii_case(self.sha.as_bytes()))
                || (name.eq_ignore_ascii_case(b"EVAL") && *script == self.script.as_bytes());
            if runs {
                *name = b"EVAL".to_vec();
                *script = self.replacement.as_bytes().to_vec();
                self.count.fetch_add(1, Ordering::Relaxed);
            }
        }
        command
    }
}

/// A running proxy; dropping it closes the listener and every connection.
#[derive(Debug)]
pub(super) struct ScriptProxy {
    url: String,
    swap: Arc<Swap>,
    connections: Arc<Mutex<JoinSet<()>>>,
    acceptor: tokio::task::JoinHandle<()>,
}

impl ScriptProxy {
    /// A proxy on a free loopback port in front of the server of `url` (`redis://`),
    /// running `replacement` wherever a client runs `script`.
    pub(super) async fn start(url: &str, script: &'static str, replacement: String) -> io::Result<Self> {
        let rest = url.strip_prefix("redis://").unwrap_or_else(|| panic!("a plain redis:// URL, not {url}"));
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        let (userinfo, host) = authority.rsplit_once('@').unwrap_or(("", authority));
        let host = if host.contains(':') { host.to_owned() } else { format!("{host}:6379") };
        let upstream = tokio::net::lookup_host(&host).await?.next().ok_or(io::ErrorKind::AddrNotAvailable)?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let at = if userinfo.is_empty() { String::new() } else { format!("{userinfo}@") };
        let url = format!("redis://{at}{}{path}", listener.local_addr()?);
        let sha = Script::new(script).get_hash().to_owned();
        let swap = Arc::new(Swap { script, sha, replacement, count: AtomicU64::new(0) });
        let connections = Arc::new(Mutex::new(JoinSet::new()));
        let acceptor = tokio::spawn({
            let (swap, connections) = (Arc::clone(&swap), Arc::clone(&connections));
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    connections.lock().unwrap().spawn(forward(client, upstream, Arc::clone(&swap)));
                }
            }
        });
        Ok(Self { url, swap, connections, acceptor })
    }

    /// The URL to give the store: `url` with the proxy's address.
    pub(super) fn url(&self) -> &str {
        &self.url
    }

    /// How many runs of the script went to the server as the replacement.
    pub(super) fn swapped(&self) -> u64 {
        self.swap.count.load(Ordering::Relaxed)
    }
}

impl Drop for ScriptProxy {
    fn drop(&mut self) {
        self.acceptor.abort();
        self.connections.lock().unwrap().abort_all();
    }
}

async fn forward(client: TcpStream, upstream: SocketAddr, swap: Arc<Swap>) {
    let Ok(server) = TcpStream::connect(upstream).await else { return };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, mut client_write) = client.into_split();
    let (mut server_read, server_write) = server.into_split();
    tokio::select! {
        _ = commands(BufReader::new(client_read), BufWriter::new(server_write), &swap) => {}
        _ = tokio::io::copy(&mut server_read, &mut client_write) => {}
    }
}

/// Forwards the client's commands, swapped; writes out when it has read every command
/// that arrived (a pipeline goes on as one write).
async fn commands(
    mut from: BufReader<OwnedReadHalf>,
    mut to: BufWriter<OwnedWriteHalf>,
    swap: &Swap,
) -> io::Result<()> {
    while let Some(command) = read_command(&mut from).await? {
        let command = swap.apply(command);
        let mut encoded = format!("*{}\r\n", command.len()).into_bytes();
        for arg in &command {
            encoded.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            encoded.extend_from_slice(arg);
            encoded.extend_from_slice(b"\r\n");
        }
        to.write_all(&encoded).await?;
        if from.buffer().is_empty() {
            to.flush().await?;
        }
    }
    Ok(())
}

/// One command, `None` at the end of the stream.
async fn read_command(from: &mut BufReader<OwnedReadHalf>) -> io::Result<Option<Vec<Vec<u8>>>> {
    let Some(count) = read_header(from, b'*').await? else { return Ok(None) };
    let mut command = Vec::with_capacity(count);
    for _ in 0..count {
        let len = read_header(from, b'$').await?.ok_or(io::ErrorKind::UnexpectedEof)?;
        let mut arg = vec![0; len + 2];
        from.read_exact(&mut arg).await?;
        if !arg.ends_with(b"\r\n") {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "a bulk string without its CRLF"));
        }
        arg.truncate(len);
        command.push(arg);
    }
    Ok(Some(command))
}

/// A `<kind><number>\r\n` line's number, `None` at the end of the stream.
async fn read_header(from: &mut BufReader<OwnedReadHalf>, kind: u8) -> io::Result<Option<usize>> {
    let mut line = Vec::new();
    if from.read_until(b'\n', &mut line).await? == 0 {
        return Ok(None);
    }
    let number = line
        .strip_prefix(&[kind])
        .and_then(|rest| rest.strip_suffix(b"\r\n"))
        .and_then(|digits| std::str::from_utf8(digits).ok())
        .and_then(|digits| digits.parse().ok());
    match number {
        Some(number) => Ok(Some(number)),
        None => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("expected a RESP `{}` header, got {:?}", kind as char, String::from_utf8_lossy(&line)),
        )),
    }
}
