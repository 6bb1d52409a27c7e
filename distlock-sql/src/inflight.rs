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
//! connection is in use, the connection goes to a small task that pings it — flushing the
//! buffered statement and waiting for its answer — and only then marks the token settled.
//! [`InFlight::settled`] (called by `release`) waits for that. The happy path costs one
//! map insert and remove.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use distlock_api::Token;
use sqlx::pool::PoolConnection;
use sqlx::{Connection, Database};
use tokio::sync::watch;

/// The acquisitions of one store whose statement may still be running.
#[derive(Debug, Default)]
pub struct InFlight {
    pending: Mutex<HashMap<Token, watch::Receiver<()>>>,
}

impl InFlight {
    /// Registers an acquisition attempt for `token`; hand it the connection the
    /// statement runs on with [`Attempt::hold`].
    pub fn begin<DB: Database>(self: &Arc<Self>, token: &Token) -> Attempt<DB> {
        let (done, receiver) = watch::channel(());
        self.lock().insert(token.clone(), receiver);
        Attempt { conn: None, marker: Some(Marker { registry: Arc::clone(self), token: token.clone(), _done: done }) }
    }

    /// Waits until no acquisition with `token` may still run on the server.
    pub async fn settled(&self, token: &Token) {
        let receiver = self.lock().get(token).cloned();
        if let Some(mut receiver) = receiver {
            // Nothing is ever sent: `changed` fails once the sender (the marker) is dropped.
            while receiver.changed().await.is_ok() {}
        }
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
    }
}

/// One acquisition attempt: owns the connection its statement runs on.
#[derive(Debug)]
pub struct Attempt<DB: Database> {
    conn: Option<PoolConnection<DB>>,
    marker: Option<Marker>,
}

impl<DB: Database> Attempt<DB> {
    /// Keeps `conn` for the statement; returns it to run the statement on.
    pub fn hold(&mut self, conn: PoolConnection<DB>) -> &mut PoolConnection<DB> {
        self.conn.insert(conn)
    }

    /// The statement answered (or failed): nothing can run late any more.
    pub fn finish(mut self) {
        self.conn = None;
        self.marker = None;
    }
}

impl<DB: Database> Drop for Attempt<DB> {
    fn drop(&mut self) {
        let (Some(mut conn), Some(marker)) = (self.conn.take(), self.marker.take()) else { return };
        // Dropped while the statement was in flight.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        runtime.spawn(async move {
            if let Err(error) = conn.ping().await {
                tracing::debug!(%error, "connection of a cancelled acquisition failed while settling");
            }
            drop(conn);
            drop(marker);
        });
    }
}
