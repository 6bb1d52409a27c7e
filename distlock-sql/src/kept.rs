//! Connections a store keeps between its hot statements, so that they skip the pool's
//! return trip.
//!
//! sqlx gives a dropped `PoolConnection` back to its pool from a task it spawns, and that
//! task first pings the connection: after every statement sent through `&Pool`, one more
//! round trip to the server and one more task on the client. On a machine whose CPU is
//! the limit, that costs a third of the statements per second. A store's hot statements
//! (acquire, release) instead check a connection out of its [`KeptConnections`] and,
//! once the statement has answered, hand it back with [`KeptConnections::keep`]: the next
//! hot statement takes it from there as it is.
//!
//! What keeps this safe:
//! - Only a connection whose statement answered is kept. A [`Checkout`] dropped
//!   otherwise (the statement failed or was cancelled) goes back to the pool, which pings
//!   it (flushing what a cancelled statement left behind) or discards it.
//! - A connection out of the pool for [`REFRESH`] goes back to it when it is next handed
//!   back, and one kept unused for [`IDLE`] goes back from a small task that runs while
//!   connections are kept. So the pool's other users (transactions, the listener) and its
//!   own limits (`max_lifetime`, `idle_timeout`) see every connection regularly, and a
//!   burst's connections return to the pool soon after it.
//! - A task that finds no kept connection takes an idle one of the pool, or opens one
//!   while the pool may; when the pool is at its size, it waits for a kept one handed back
//!   or one given back to the pool, whichever comes first: tasks that cannot get a kept
//!   connection never wait for a pool that the kept ones emptied.
//! - Once the pool is closed nothing is kept or handed out, and the task gives what was
//!   kept back to the closed pool, which closes it.

use std::ops::{Deref, DerefMut};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::{Database, Pool};
use tokio::sync::Notify;

/// How long a connection stays out of the pool before it goes back at its next hand-back.
pub const REFRESH: Duration = Duration::from_millis(250);

/// How long a kept connection may stay unused before it goes back to the pool.
pub const IDLE: Duration = Duration::from_millis(50);

/// A store's kept connections: see the [module documentation](self).
pub struct KeptConnections<DB: Database> {
    pool: Pool<DB>,
    kept: Mutex<Vec<Kept<DB>>>,
    /// Signalled when a connection is kept, for a task waiting in [`checkout`](Self::checkout).
    handed_back: Notify,
    /// Whether the task that gives back unused connections runs.
    sweeping: AtomicBool,
}

impl<DB: Database> std::fmt::Debug for KeptConnections<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptConnections").field("kept", &self.lock().len()).finish_non_exhaustive()
    }
}

/// A kept connection: out of the pool since `out_since`, unused since `idle_since`.
struct Kept<DB: Database> {
    conn: PoolConnection<DB>,
    out_since: Instant,
    idle_since: Instant,
}

/// A connection checked out for one statement. Hand it back with
/// [`KeptConnections::keep`] once the statement answered; dropped, it goes back to the
/// pool.
#[derive(Debug)]
pub struct Checkout<DB: Database> {
    conn: PoolConnection<DB>,
    out_since: Instant,
}

impl<DB: Database> From<PoolConnection<DB>> for Checkout<DB> {
    /// A connection just taken from the pool.
    fn from(conn: PoolConnection<DB>) -> Self {
        Self { conn, out_since: Instant::now() }
    }
}

impl<DB: Database> Deref for Checkout<DB> {
    type Target = PoolConnection<DB>;

    fn deref(&self) -> &Self::Target {
        &self.conn
    }
}

impl<DB: Database> DerefMut for Checkout<DB> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.conn
    }
}

impl<DB: Database> KeptConnections<DB> {
    /// Keeps connections of `pool`.
    pub fn new(pool: Pool<DB>) -> Self {
        Self { pool, kept: Mutex::default(), handed_back: Notify::new(), sweeping: AtomicBool::new(false) }
    }

    /// The pool the connections come from.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// How many connections are kept now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no connection is kept now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A kept connection, else an idle one of the pool, else a new one while the pool may
    /// open more, else the first of: one handed back meanwhile, one given back to the pool.
    /// (A connection being opened is never raced: dropped halfway, it would cost the
    /// server a session for nothing.)
    ///
    /// # Errors
    ///
    /// The pool's error: it timed out, is closed, or could not connect.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a connection is taken only when the future returns it.
    pub async fn checkout(&self) -> Result<Checkout<DB>, sqlx::Error> {
        loop {
            if let Some(conn) = self.take() {
                return Ok(conn);
            }
            if let Some(conn) = self.pool.try_acquire() {
                return Ok(conn.into());
            }
            if self.pool.size() < self.pool.options().get_max_connections() {
                return self.pool.acquire().await.map(Checkout::from);
            }
            let mut handed_back = pin!(self.handed_back.notified());
            handed_back.as_mut().enable();
            // A connection kept before the registration above has sent its signal already.
            if let Some(conn) = self.take() {
                return Ok(conn);
            }
            tokio::select! {
                biased;
                () = handed_back.as_mut() => {}
                conn = self.pool.acquire() => {
                    // A signal meant for this task goes to another waiter.
                    if futures_ready(handed_back.as_mut()) {
                        self.handed_back.notify_one();
                    }
                    return conn.map(Checkout::from);
                }
            }
        }
    }

    /// Hands `conn` back after its statement answered: kept for the next checkout, or given
    /// back to the pool when it has been out of it for [`REFRESH`], the pool is closed,
    /// or no Tokio runtime runs here (to give unused connections back).
    pub fn keep(self: &Arc<Self>, conn: Checkout<DB>) {
        if self.pool.is_closed() || conn.out_since.elapsed() >= REFRESH {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let Checkout { conn, out_since } = conn;
        self.lock().push(Kept { conn, out_since, idle_since: Instant::now() });
        self.handed_back.notify_one();
        if !self.sweeping.swap(true, Ordering::AcqRel) {
            runtime.spawn(sweep(Arc::downgrade(self)));
        }
    }

    fn take(&self) -> Option<Checkout<DB>> {
        if self.pool.is_closed() {
            return None;
        }
        let Kept { conn, out_since, .. } = self.lock().pop()?;
        Some(Checkout { conn, out_since })
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Kept<DB>>> {
        // Every update is a single push, pop or retain: a poisoned list is still whole.
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<DB: Database> Drop for KeptConnections<DB> {
    fn drop(&mut self) {
        // A dropped `PoolConnection` goes back to its pool from a spawned task, which needs
        // a runtime; without one, the connections leave the pool and close (detaching
        // spawns a replacement too when the pool keeps a minimum: then they are left open).
        if tokio::runtime::Handle::try_current().is_err() {
            let detach = self.pool.options().get_min_connections() == 0;
            for kept in std::mem::take(&mut *self.lock()) {
                if detach {
                    drop(kept.conn.detach());
                } else {
                    std::mem::forget(kept.conn);
                }
            }
        }
    }
}

/// Whether `future` is ready now (polled once, with a waker that does nothing).
fn futures_ready<F: std::future::Future>(future: std::pin::Pin<&mut F>) -> bool {
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    future.poll(&mut context).is_ready()
}

/// Gives kept connections back to the pool once unused for [`IDLE`] (all of them once the
/// pool is closed), until none is kept; a later [`KeptConnections::keep`] starts it again.
async fn sweep<DB: Database>(connections: Weak<KeptConnections<DB>>) {
    loop {
        tokio::time::sleep(IDLE).await;
        let Some(connections) = connections.upgrade() else { return };
        let closed = connections.pool.is_closed();
        let mut kept = connections.lock();
        let mut stale = Vec::new();
        let mut index = 0;
        while index < kept.len() {
            let entry = &kept[index];
            if closed || entry.idle_since.elapsed() >= IDLE || entry.out_since.elapsed() >= REFRESH {
                stale.push(kept.swap_remove(index));
            } else {
                index += 1;
            }
        }
        // Stops under the lock: a connection kept after this sees the flag down and starts
        // another sweeper.
        let done = kept.is_empty();
        if done {
            connections.sweeping.store(false, Ordering::Release);
        }
        drop(kept);
        // Back to the pool, outside the lock.
        drop(stale);
        if done {
            return;
        }
    }
}
