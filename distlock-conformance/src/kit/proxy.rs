//! A TCP proxy to put between a store and its server, to make real network faults.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use distlock_conformance::kit::proxy::FaultProxy;
//!
//! let proxy = FaultProxy::start("127.0.0.1:6379".parse().unwrap()).await?;
//! let url = format!("redis://{}", proxy.addr()); // connect the store here
//! proxy.pause();   // partition: bytes stop flowing both ways, connections stay open
//! proxy.resume();  // heal: held bytes flow again
//! proxy.cut();     // every open connection is reset; new ones are accepted
//! # let _ = url; Ok(()) }
//! ```

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// An in-process TCP proxy that a test can pause (blackhole), cut and restore.
///
/// It forwards every accepted connection to `upstream`. While paused it accepts
/// connections and reads nothing, forwards nothing and answers nothing — like a network
/// partition, where the peer's packets vanish and its calls hang until their own timeouts.
/// Dropping the proxy closes the listener and every connection.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    paused: watch::Sender<bool>,
    connections: Arc<Mutex<JoinSet<()>>>,
    acceptor: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port, forwarding to `upstream`.
    ///
    /// # Errors
    ///
    /// When no loopback port can be bound.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let paused = watch::channel(false).0;
        let connections = Arc::new(Mutex::new(JoinSet::new()));
        let acceptor = tokio::spawn({
            let (paused, connections) = (paused.clone(), Arc::clone(&connections));
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let paused = paused.subscribe();
                    connections.lock().unwrap().spawn(forward(client, upstream, paused));
                }
            }
        });
        Ok(Self { addr, paused, connections, acceptor })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Partitions: from now on no byte is forwarded in either direction (held, not lost).
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    /// Heals a [`pause`](Self::pause): held bytes flow again.
    pub fn resume(&self) {
        self.paused.send_replace(false);
    }

    /// Resets every open connection (as a crashed middlebox would); the proxy keeps
    /// accepting new ones.
    pub fn cut(&self) {
        self.connections.lock().unwrap().abort_all();
    }

    /// The number of connections currently proxied.
    pub fn open_connections(&self) -> usize {
        self.connections.lock().unwrap().len()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.acceptor.abort();
        self.cut();
    }
}

async fn forward(client: TcpStream, upstream: SocketAddr, paused: watch::Receiver<bool>) {
    let Ok(server) = TcpStream::connect(upstream).await else { return };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::select! {
        () = pump(client_read, server_write, paused.clone()) => {}
        () = pump(server_read, client_write, paused) => {}
    }
}

/// Copies bytes from `from` to `to`, holding them while paused.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut paused: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if paused.wait_for(|paused| !paused).await.is_err() {
            return;
        }
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            // Stop reading when paused, so the bytes wait in the socket buffers.
            _ = paused.wait_for(|paused| *paused) => continue,
        };
        if paused.wait_for(|paused| !paused).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = conn.read(&mut buf).await {
                        if n == 0 || conn.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn echo(conn: &mut TcpStream, msg: &[u8]) -> Option<Vec<u8>> {
        conn.write_all(msg).await.ok()?;
        let mut got = vec![0u8; msg.len()];
        tokio::time::timeout(Duration::from_millis(300), conn.read_exact(&mut got)).await.ok()?.ok()?;
        Some(got)
    }

    #[tokio::test]
    async fn forwards_pauses_resumes_and_cuts() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut conn = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(echo(&mut conn, b"hello").await.as_deref(), Some(&b"hello"[..]));

        proxy.pause();
        assert_eq!(echo(&mut conn, b"lost?").await, None, "bytes crossed a paused proxy");
        proxy.resume();
        let mut held = vec![0u8; 5];
        tokio::time::timeout(Duration::from_secs(5), conn.read_exact(&mut held)).await.unwrap().unwrap();
        assert_eq!(&held, b"lost?", "held bytes are delivered after resume");

        proxy.cut();
        let mut buf = [0u8; 8];
        let after_cut = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf)).await.unwrap();
        assert!(matches!(after_cut, Ok(0) | Err(_)), "the connection survived a cut");
        let mut fresh = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(echo(&mut fresh, b"again").await.as_deref(), Some(&b"again"[..]));
    }
}
