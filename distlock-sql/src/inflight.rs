//! Cancel safety of acquisitions: a cancelled acquire statement is settled before a
//! release with the same token runs.
//!
//! When a sqlx query future is dropped mid-flight, the statement may still be in the
//! connection's write buffer; sqlx sends it when the connection is next used (its
//! return-to-pool ping). The manager releases a cancelled acquisition with the same token
//! at once, on another connection — so without care the late `INSERT` could run *after*
//! that release and leave a lease nobody owns until its TTL.
//!
//! So an acquisition holds its own pooled connection. If its future is dropped while the
//! connection is in use, the token is registered as unsettled and the connection goes to
//! a small task that pings it — flushing the buffered statement and waiting for its
//! answer — and only then marks the token settled. [`InFlight::settled`] (called by
//! `release`) waits for that. The happy path registers nothing: an attempt is two
//! borrowed references, and `settled` reads one counter.
//!
//! The registration happens in the attempt's `drop`, so before any release that follows
//! the cancellation: the manager releases a cancelled acquisition after its future is
//! dropped (from a task it spawns then), and a caller that drops an acquisition and then
//! releases its token does so after the drop returned.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use distlock_api::Token;
use sqlx::pool::PoolConnection;
use sqlx::{Connection, Database};
use tokio::sync::watch;

use crate::kept::Checkout;

/// The acquisitions of one store whose statement may still be running.
#[derive(Debug, Default)]
pub struct InFlight {
    pending: Mutex<HashMap<Token, watch::Receiver<()>>>,
    /// Registrations not yet removed: `settled` looks no further while it is zero.
    unsettled: AtomicUsize,
}

impl InFlight {
    /// Starts an acquisition attempt for `token`; hand it the connection the statement
    /// runs on with [`Attempt::hold`], and call [`Attempt::finish`] once it answered.
    pub fn begin<'a, DB: Database>(self: &'a Arc<Self>, token: &'a Token) -> Attempt<'a, DB> {
        Attempt { conn: None, registry: self, token }
    }

    /// Waits until no acquisition with `token` may still run on the server.
    pub async fn settled(&self, token: &Token) {
        if self.unsettled.load(Ordering::Acquire) == 0 {
            return;
        }
        let receiver = self.lock().get(token).cloned();
        if let Some(mut receiver) = receiver {
            // Nothing is ever sent: `changed` fails once the sender (the marker) is dropped.
            while receiver.changed().await.is_ok() {}
        }
    }

    /// Registers `token` as unsettled until the returned marker is dropped.
    fn register(self: &Arc<Self>, token: &Token) -> Marker {
        let (done, receiver) = watch::channel(());
        self.lock().insert(token.clone(), receiver);
        self.unsettled.fetch_add(1, Ordering::Release);
        Marker { registry: Arc::clone(self), token: token.clone(), _done: done }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Token, watch::Receiver<()>>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Removes its token from the registry when dropped, waking [`InFlight::settled`].
#[derive(Debug)]
struct Marker {
    registry: Arc<InFlight>,
    token: Token,
    _done: watch::Sender<()>,
}

impl Drop for Marker {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.token);
        self.registry.unsettled.fetch_sub(1, Ordering::Release);
    }
}

/// One acquisition attempt: owns the connection its statement runs on.
#[derive(Debug)]
pub struct Attempt<'a, DB: Database> {
    conn: Option<Checkout<DB>>,
    registry: &'a Arc<InFlight>,
    token: &'a Token,
}

impl<DB: Database> Attempt<'_, DB> {
    /// Keeps `conn` (from the pool, or a store's [`KeptConnections`](crate::KeptConnections))
    /// for the statement; returns it to run the statement on.
    pub fn hold(&mut self, conn: impl Into<Checkout<DB>>) -> &mut PoolConnection<DB> {
        self.conn.insert(conn.into())
    }

    /// The statement answered (or failed): nothing can run late any more. Returns the
    /// connection it ran on, to be kept when it answered.
    pub fn finish(mut self) -> Option<Checkout<DB>> {
        self.conn.take()
    }
}

impl<DB: Database> Drop for Attempt<'_, DB> {
    fn drop(&mut self) {
        // Dropped while the statement was in flight (or before `finish`).
        let Some(mut conn) = self.conn.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let marker = self.registry.register(self.token);
        runtime.spawn(async move {
            if let Err(error) = conn.ping().await {
                tracing::debug!(%error, "connection of a cancelled acquisition failed while settling");
            }
            drop(conn);
            drop(marker);
        });
    }
}
