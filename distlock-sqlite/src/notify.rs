//! Waking waiters in other processes: each store that waits listens on one Unix datagram
//! socket; a release sends the name of what it freed (its *channel*) to the sockets
//! registered for it. Imports nothing from the rest of the crate; the registrations in
//! the database are the store's.
//!
//! The sockets live in Linux's abstract socket namespace (`\0distlock-<pid>-<random>`):
//! nothing is created in the file system, nothing is left behind by a killed process,
//! and a send to the socket of a process that is gone fails at once (`ECONNREFUSED`), so
//! the sender can forget that registration. The names are visible to every process of
//! the network namespace; a stray datagram only wakes a waiter early, which the contract
//! allows (the waiter looks again).

use std::collections::HashMap;
use std::io::ErrorKind;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram as StdDatagram};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use distlock_api::waiters::WaiterRegistry;
use distlock_api::Token;
use tokio::net::UnixDatagram;

/// The channel of a single lock's key: its releases and hand-overs.
pub(crate) fn lock_channel(key: &str) -> String {
    format!("l:{key}")
}

/// What separates a channel from a waiter's token in a [`turn_message`].
const TURN_SEPARATOR: char = '\t';

/// What a hand-over sends to the sockets registered for a key's `channel`, and what the
/// waiter the key was handed to waits for besides the channel: the channel and the
/// waiter's token joined by a tab (neither contains control characters). It wakes that
/// one waiter; the key's other waiters sleep on, as the key is not free for them.
pub(crate) fn turn_message(channel: &str, token: &str) -> String {
    format!("{channel}{TURN_SEPARATOR}{token}")
}

/// The channel a received message was sent for: the message itself, or a
/// [`turn_message`]'s channel.
pub(crate) fn channel_of(message: &str) -> &str {
    message.split_once(TURN_SEPARATOR).map_or(message, |(channel, _)| channel)
}

/// The channel of a lock group's name: releases, withdrawn places and permit changes.
pub(crate) fn group_channel(key: &str) -> String {
    format!("g:{key}")
}

/// The largest datagram a channel name needs: a 512-byte key and its prefix, with room.
const MAX_DATAGRAM: usize = 2048;

/// What became of a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sent {
    /// Delivered (or queued) to the socket.
    Delivered,
    /// No such socket: its process is gone, the registration can go.
    Gone,
    /// Not delivered for another reason (a full buffer): the waiter wakes at its next
    /// retry instead.
    Dropped,
}

/// This process's side of cross-process wake-ups for one store.
pub(crate) struct Notifier {
    registry: WaiterRegistry,
    name: String,
    interest: Mutex<HashMap<String, usize>>,
    sender: OnceLock<Option<StdDatagram>>,
    listener: Mutex<Option<tokio::task::AbortHandle>>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier").field("socket", &self.name).field("registry", &self.registry).finish()
    }
}

impl Default for Notifier {
    fn default() -> Self {
        Self::new()
    }
}

impl Notifier {
    /// A notifier with a fresh socket name; nothing is bound yet.
    pub(crate) fn new() -> Self {
        let name = format!("distlock-{}-{}", std::process::id(), Token::generate().short());
        Self {
            registry: WaiterRegistry::new(),
            name,
            interest: Mutex::default(),
            sender: OnceLock::new(),
            listener: Mutex::default(),
        }
    }

    /// The name of this store's socket, as registered in the waiters table.
    pub(crate) fn socket_name(&self) -> &str {
        &self.name
    }

    /// The in-process waiters.
    pub(crate) fn registry(&self) -> &WaiterRegistry {
        &self.registry
    }

    fn interest_map(&self) -> MutexGuard<'_, HashMap<String, usize>> {
        self.interest.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks `channel` as waited for by one more waiter of this process, until the guard
    /// is dropped.
    pub(crate) fn interest(self: &Arc<Self>, channel: String) -> Interest {
        *self.interest_map().entry(channel.clone()).or_insert(0) += 1;
        Interest { notifier: Arc::clone(self), channel }
    }

    /// Whether a waiter of this process waits on `channel` now.
    pub(crate) fn wanted(&self, channel: &str) -> bool {
        self.interest_map().contains_key(channel)
    }

    /// Binds this store's socket and starts `run`, its receiving loop, once; later calls
    /// do nothing. The registry listens from here on: datagrams that arrive before the
    /// loop first polls wait in the socket's buffer.
    pub(crate) fn listen_with(
        &self,
        run: impl FnOnce(UnixDatagram) -> tokio::task::JoinHandle<()>,
    ) -> Result<(), std::io::Error> {
        let mut listener = self.listener.lock().unwrap_or_else(PoisonError::into_inner);
        if listener.is_some() {
            return Ok(());
        }
        let address = SocketAddr::from_abstract_name(self.name.as_bytes())?;
        let socket = StdDatagram::bind_addr(&address)?;
        socket.set_nonblocking(true)?;
        let socket = UnixDatagram::from_std(socket)?;
        *listener = Some(run(socket).abort_handle());
        self.registry.set_listening(true);
        Ok(())
    }

    /// Sends `channel` to the socket named `socket`, without blocking.
    pub(crate) fn send(&self, socket: &str, channel: &str) -> Sent {
        let Some(sender) = self.sender.get_or_init(|| {
            let sender = StdDatagram::unbound().ok()?;
            sender.set_nonblocking(true).ok()?;
            Some(sender)
        }) else {
            return Sent::Dropped;
        };
        let Ok(address) = SocketAddr::from_abstract_name(socket.as_bytes()) else { return Sent::Gone };
        match sender.send_to_addr(channel.as_bytes(), &address) {
            Ok(_) => Sent::Delivered,
            Err(error) if matches!(error.kind(), ErrorKind::ConnectionRefused | ErrorKind::NotFound) => Sent::Gone,
            Err(error) => {
                tracing::debug!(%error, "a release notification was not delivered");
                Sent::Dropped
            }
        }
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        if let Some(task) = self.listener.get_mut().unwrap_or_else(PoisonError::into_inner).take() {
            task.abort();
        }
    }
}

/// Receives one datagram: the channel it names, or `None` for one that names none.
pub(crate) async fn receive(socket: &UnixDatagram) -> Result<Option<String>, std::io::Error> {
    let mut buffer = [0u8; MAX_DATAGRAM];
    let read = socket.recv(&mut buffer).await?;
    Ok(std::str::from_utf8(&buffer[..read]).ok().map(str::to_owned))
}

/// One waiter's interest in a channel (see [`Notifier::interest`]).
#[derive(Debug)]
pub(crate) struct Interest {
    notifier: Arc<Notifier>,
    channel: String,
}

impl Drop for Interest {
    fn drop(&mut self) {
        let mut interest = self.notifier.interest_map();
        if let Some(count) = interest.get_mut(&self.channel) {
            *count -= 1;
            if *count == 0 {
                interest.remove(&self.channel);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_datagram_reaches_the_bound_socket_and_a_missing_one_is_gone() {
        let receiver = Notifier::new();
        let (tx, rx) = tokio::sync::oneshot::channel();
        receiver
            .listen_with(|socket| {
                tokio::spawn(async move {
                    let _ = tx.send(receive(&socket).await.unwrap());
                })
            })
            .unwrap();
        assert!(receiver.registry().is_listening());
        let sender = Notifier::new();
        assert_eq!(sender.send(receiver.socket_name(), "l:lock:a"), Sent::Delivered);
        assert_eq!(rx.await.unwrap().as_deref(), Some("l:lock:a"));
        assert_eq!(sender.send(sender.socket_name(), "l:lock:a"), Sent::Gone, "never bound");
    }

    #[test]
    fn interest_lasts_as_long_as_its_guards() {
        let notifier = Arc::new(Notifier::new());
        let a = notifier.interest(lock_channel("k"));
        let b = notifier.interest(lock_channel("k"));
        drop(a);
        assert!(notifier.wanted("l:k"));
        drop(b);
        assert!(!notifier.wanted("l:k"));
    }
}
