//! Release notifications without server push: one listener connection per store sleeps
//! in `SELECT SLEEP(…)`, and a release that a waiter registered for interrupts it with
//! `KILL QUERY <listener>`.
//!
//! MySQL has no `LISTEN`/`NOTIFY`. What one session can do to another is end its running
//! statement (`KILL QUERY`, allowed on one's own user's connections). So each store opens
//! one extra connection, the *listener*, which does nothing but sleep; a waiter writes
//! `(key, listener id)` into the waiters table *before* it checks whether the key is still
//! held, and a release that sees such a row (one `EXISTS` in the release statement)
//! reads the listeners and interrupts their sleep. An interrupted listener wakes every
//! waiter of its store (each checks its own key again: spurious wake-ups are allowed).
//!
//! Nothing here is needed for correctness: a wake-up that is missed (the listener was
//! between two sleeps, reconnecting, or belongs to a user the releaser may not `KILL`)
//! only means the waiter sleeps until its retry interval ends, as without notifications.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::Connection;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

/// How long one listener sleep lasts before it starts the next (seconds).
const SLEEP_SECONDS: i64 = 30;
/// How long the listener waits before connecting again after a failure.
const RECONNECT_DELAY: Duration = Duration::from_millis(500);

/// The listener of one store and the bell its waiters wait on.
#[derive(Debug)]
pub(crate) struct Notifier {
    options: Arc<MySqlConnectOptions>,
    listen_sql: String,
    bell: Notify,
    /// The listener's connection id while it sleeps (`None`: not connected).
    listener: watch::Sender<Option<u64>>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Notifier {
    pub(crate) fn new(options: Arc<MySqlConnectOptions>, listen_sql: String) -> Self {
        Self { options, listen_sql, bell: Notify::new(), listener: watch::Sender::new(None), task: Mutex::default() }
    }

    /// The listener's connection id, starting the listener at the first call; `None`
    /// while it is not connected (the caller then polls).
    pub(crate) fn listener(self: &Arc<Self>) -> Option<u64> {
        let mut task = self.task.lock().unwrap_or_else(PoisonError::into_inner);
        if task.is_none() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                *task = Some(runtime.spawn(listen(Arc::downgrade(self))));
            }
        }
        *self.listener.borrow()
    }

    /// The bell: rung when the listener was interrupted (a release), or lost its
    /// connection (a release may have been missed).
    pub(crate) fn bell(&self) -> &Notify {
        &self.bell
    }

    /// Changes of the listener's connection id.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Option<u64>> {
        self.listener.subscribe()
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        if let Some(task) = self.task.get_mut().unwrap_or_else(PoisonError::into_inner).take() {
            task.abort();
        }
    }
}

/// The listener task: connects, sleeps, rings the bell when interrupted; reconnects after
/// a failure. Ends when the store is gone.
async fn listen(notifier: Weak<Notifier>) {
    loop {
        let Some(options) = notifier.upgrade().map(|n| Arc::clone(&n.options)) else { return };
        let connected = MySqlConnection::connect_with(&options).await;
        let mut conn = match connected {
            Ok(conn) => conn,
            Err(error) => {
                tracing::debug!(%error, "the release listener could not connect; waiters poll meanwhile");
                tokio::time::sleep(RECONNECT_DELAY).await;
                continue;
            }
        };
        let id: Result<u64, _> = sqlx::query_scalar("SELECT CONNECTION_ID()").fetch_one(&mut conn).await;
        let Ok(id) = id else {
            tokio::time::sleep(RECONNECT_DELAY).await;
            continue;
        };
        let Some(strong) = notifier.upgrade() else { return };
        strong.listener.send_replace(Some(id));
        let sql = strong.listen_sql.clone();
        drop(strong);
        loop {
            let slept: Result<i64, sqlx::Error> =
                sqlx::query_scalar(&sql).bind(SLEEP_SECONDS).fetch_one(&mut conn).await;
            let Some(strong) = notifier.upgrade() else { return };
            match slept {
                // 0: slept the whole time.
                Ok(0) => {}
                // 1 (MySQL) or error 1317 (MariaDB): interrupted by a release.
                Ok(_) => strong.bell.notify_waiters(),
                Err(sqlx::Error::Database(error))
                    if error
                        .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                        .is_some_and(|error| error.number() == 1317) =>
                {
                    strong.bell.notify_waiters();
                }
                Err(error) => {
                    tracing::debug!(%error, "the release listener lost its connection; reconnecting");
                    strong.listener.send_replace(None);
                    strong.bell.notify_waiters();
                    break;
                }
            }
        }
        tokio::time::sleep(RECONNECT_DELAY).await;
    }
}
