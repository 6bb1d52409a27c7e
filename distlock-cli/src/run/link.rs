//! distlock's side of the keeper: starting it, meeting it on a Unix socket, ordering it
//! about, and waiting for it.

use std::ffi::OsString;
use std::io;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

use super::protocol::{self, FromKeeper, ToKeeper};

/// How long distlock reads the keeper's last words after it exited.
const LAST_WORDS: Duration = Duration::from_secs(1);

/// A running keeper, and the command below it.
#[derive(Debug)]
pub(super) struct Keeper {
    process: tokio::process::Child,
    reports: Lines<BufReader<OwnedReadHalf>>,
    orders: mpsc::UnboundedSender<ToKeeper>,
}

impl Keeper {
    /// Starts the keeper for `command` with `env` added to its environment, waits until
    /// it is connected, and gives it its first `deadline` (the keeper starts the command
    /// only then). Dropping the handle (or distlock's death) makes it kill the command
    /// tree. Unless `interactive`, the command's standard input is empty.
    pub(super) async fn start(
        command: &[OsString],
        env: &[(&str, &str)],
        kill_grace: Duration,
        deadline: u64,
        interactive: bool,
    ) -> io::Result<Self> {
        let rendezvous = Rendezvous::open()?;
        let mut keeper = tokio::process::Command::new(protocol::self_exe()?);
        keeper
            .arg0("distlock")
            .arg(protocol::KEEPER)
            .arg(&rendezvous.name)
            .arg(kill_grace.as_millis().to_string())
            .arg("--")
            .args(command)
            .envs(env.iter().copied());
        if !interactive {
            keeper.stdin(std::process::Stdio::null());
        }
        let mut process = keeper.spawn()?;
        let pid = process.id();
        let stream = tokio::select! {
            stream = rendezvous.accept(pid) => stream?,
            status = process.wait() => {
                let status = status?;
                return Err(io::Error::other(format!("it ended before connecting ({status})")));
            }
        };
        drop(rendezvous);
        let (reports, mut writer) = stream.into_split();
        writer.write_all(ToKeeper::Deadline(deadline).line().as_bytes()).await?;
        let (orders, queue) = mpsc::unbounded_channel();
        // A keeper that stops reading (stopped itself) must never block distlock.
        tokio::spawn(send_orders(writer, queue));
        Ok(Self { process, reports: BufReader::new(reports).lines(), orders })
    }

    /// The keeper's first report: the command started (its pid) or could not be. `None`
    /// when the keeper ended without saying.
    pub(super) async fn started(&mut self) -> Option<FromKeeper> {
        let line = self.reports.next_line().await.ok().flatten()?;
        FromKeeper::parse(&line)
    }

    /// Sends `order`; an order to a keeper that is gone is moot.
    pub(super) fn order(&self, order: ToKeeper) {
        let _ = self.orders.send(order);
    }

    /// Waits for the keeper to exit: after the command and everything it started.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as `tokio::process::Child::wait`.
    pub(super) async fn wait(&mut self) -> io::Result<ExitStatus> {
        self.process.wait().await
    }

    /// After [`wait`](Self::wait): whether the keeper killed the tree on its own deadline.
    pub(super) async fn expired(&mut self) -> bool {
        let last_words = async {
            while let Ok(Some(line)) = self.reports.next_line().await {
                if FromKeeper::parse(&line) == Some(FromKeeper::Expired) {
                    return true;
                }
            }
            false
        };
        tokio::time::timeout(LAST_WORDS, last_words).await.unwrap_or(false)
    }
}

/// Writes orders as they come; when the handle is dropped (or after `kill`), shuts the
/// socket's sending side, which the keeper reads as "kill everything".
async fn send_orders(mut writer: OwnedWriteHalf, mut queue: mpsc::UnboundedReceiver<ToKeeper>) {
    while let Some(order) = queue.recv().await {
        if writer.write_all(order.line().as_bytes()).await.is_err() || order == ToKeeper::Kill {
            break;
        }
    }
    let _ = writer.shutdown().await;
}

/// Where distlock waits for its keeper to connect.
struct Rendezvous {
    name: String,
    listener: UnixListener,
}

impl Rendezvous {
    /// Linux: an abstract socket with a random name, so nothing is left on disk even if
    /// distlock is killed right now. Elsewhere: a socket file in a private directory.
    fn open() -> io::Result<Self> {
        let id = uuid::Uuid::new_v4().simple();
        let name = if cfg!(target_os = "linux") {
            format!("distlock-keeper-{id}")
        } else {
            let dir = std::env::temp_dir().join(format!("distlock-{id}"));
            std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700).create(&dir)?;
            dir.join("keeper.sock").to_string_lossy().into_owned()
        };
        let listener = std::os::unix::net::UnixListener::bind_addr(&protocol::address(&name)?)?;
        listener.set_nonblocking(true)?;
        Ok(Self { name, listener: UnixListener::from_std(listener)? })
    }

    /// The first connection from process `pid`; anyone else who connects is turned away.
    async fn accept(&self, pid: Option<u32>) -> io::Result<UnixStream> {
        loop {
            let (stream, _) = self.listener.accept().await?;
            let peer = stream.peer_cred()?.pid().and_then(|peer| u32::try_from(peer).ok());
            if peer.is_some() && peer == pid {
                return Ok(stream);
            }
            tracing::warn!(?peer, "a process other than distlock's keeper connected to its socket; turned away");
        }
    }
}

impl Drop for Rendezvous {
    fn drop(&mut self) {
        if !cfg!(target_os = "linux") {
            let path = std::path::Path::new(&self.name);
            let _ = std::fs::remove_file(path);
            if let Some(dir) = path.parent() {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }
}
