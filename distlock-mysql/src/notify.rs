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
//! Two refinements keep a hot key cheap:
//!
//! - **Targeted.** A fair waiter registers with its token; when a release hands the key
//!   to the oldest queued waiter, only the listeners registered for that token (or for
//!   any release) are interrupted, and in this process only that waiter wakes: the
//!   others stay asleep instead of all checking the key again.
//! - **Local first.** A release whose waiters are in the same store wakes them in
//!   memory, without `KILL QUERY`; interrupts of other stores' listeners are sent by the
//!   store's *waker*, a task on a connection of its own, one after the other and each
//!   listener once however many releases asked for it meanwhile. Concurrent `KILL
//!   QUERY`s of one connection are slow on MariaDB (each waits for the others to let go
//!   of the victim's state, up to seconds), and must not hold the pool's connections.
//!
//! Nothing here is needed for correctness: a wake-up that is missed (the listener was
//! between two sleeps, reconnecting, or belongs to a user the releaser may not `KILL`)
//! only means the waiter sleeps until its retry interval ends, as without notifications.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use distlock_sql::HandedTokens;
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::{ConnectOptions, Connection};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

/// How long one listener sleep lasts before it starts the next (seconds).
const SLEEP_SECONDS: i64 = 30;
/// How long the listener waits before connecting again after a failure.
const RECONNECT_DELAY: Duration = Duration::from_millis(500);
/// How often the listener deletes registrations that ended.
const PURGE_EVERY: Duration = Duration::from_secs(30);

/// What the waker task has to do, and its connection between two runs.
#[derive(Debug, Default)]
struct Waker {
    /// Listeners to interrupt (not yet sent).
    pending: BTreeSet<i64>,
    /// Whether the waker task runs.
    running: bool,
    /// The waker's connection, kept while no task runs.
    conn: Option<MySqlConnection>,
}

/// A waiter of this process, registered in memory for a key or group name.
#[derive(Debug)]
struct LocalWaiter {
    id: u64,
    /// The fair waiter's token (`None`: woken by any release or change).
    token: Option<String>,
    notify: Arc<Notify>,
}

/// A waiter's in-memory registration; dropping it removes it.
#[derive(Debug)]
pub(crate) struct LocalWait {
    notifier: Arc<Notifier>,
    id: u64,
    names: Vec<String>,
    notify: Arc<Notify>,
}

impl LocalWait {
    /// Completes when a release in this process wakes the waiter; enable it before the
    /// registration in the database, so that no wake-up is missed.
    pub(crate) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }
}

impl Drop for LocalWait {
    fn drop(&mut self) {
        let mut local = self.notifier.local.lock().unwrap_or_else(PoisonError::into_inner);
        for name in &self.names {
            if let Some(waiters) = local.get_mut(name) {
                waiters.retain(|waiter| waiter.id != self.id);
                if waiters.is_empty() {
                    local.remove(name);
                }
            }
        }
    }
}

/// The listener of one store and the bell its waiters wait on.
#[derive(Debug)]
pub(crate) struct Notifier {
    options: Arc<MySqlConnectOptions>,
    listen_sql: String,
    bell: Notify,
    /// The listener's connection id while it sleeps (`None`: not connected).
    listener: watch::Sender<Option<u64>>,
    task: Mutex<Option<JoinHandle<()>>>,
    /// This process's waiters, per key or group name.
    local: Mutex<HashMap<String, Vec<LocalWaiter>>>,
    next_id: AtomicU64,
    /// The listeners to interrupt, and the waker's state.
    waker: Mutex<Waker>,
    purge_sql: String,
    /// Tokens of this store's fair waiters a release handed their key to, until their
    /// next queued attempt (see [`take_handed`](Self::take_handed)).
    handed: HandedTokens,
}

impl Notifier {
    pub(crate) fn new(options: &MySqlConnectOptions, listen_sql: String, purge_sql: String) -> Self {
        // The listener's sleep lasts 30 s by design: not a slow statement to warn about.
        let options = Arc::new(options.clone().disable_statement_logging());
        Self {
            options,
            listen_sql,
            bell: Notify::new(),
            listener: watch::Sender::new(None),
            task: Mutex::default(),
            local: Mutex::default(),
            next_id: AtomicU64::new(0),
            waker: Mutex::default(),
            purge_sql,
            handed: HandedTokens::default(),
        }
    }

    /// Registers a waiter of this process for `names` (a key, or a group's names), as
    /// the fair waiter `token` or (`None`) for any release.
    pub(crate) fn wait_locally(self: &Arc<Self>, names: &[&str], token: Option<&str>) -> LocalWait {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let notify = Arc::new(Notify::new());
        let mut local = self.local.lock().unwrap_or_else(PoisonError::into_inner);
        for name in names {
            local.entry((*name).to_owned()).or_default().push(LocalWaiter {
                id,
                token: token.map(str::to_owned),
                notify: Arc::clone(&notify),
            });
        }
        drop(local);
        LocalWait {
            notifier: Arc::clone(self),
            id,
            names: names.iter().map(|name| (*name).to_owned()).collect(),
            notify,
        }
    }

    /// Wakes the waiters of `names` that `listeners` (the listeners registered for them)
    /// stand for: when this store's own listener is among them, its waiters in memory —
    /// with `handed`, the key went to that fair waiter, and only it (and waiters for any
    /// release) wake; without, all of them — and the other stores' listeners through the
    /// waker.
    pub(crate) fn wake(self: &Arc<Self>, mut listeners: Vec<i64>, names: &[&str], handed: Option<&str>) {
        let own = self.listener.borrow().and_then(|id| i64::try_from(id).ok());
        if listeners.iter().any(|listener| Some(*listener) == own) {
            listeners.retain(|listener| Some(*listener) != own);
            let local = self.local.lock().unwrap_or_else(PoisonError::into_inner);
            let woken: Vec<&LocalWaiter> = names
                .iter()
                .filter_map(|name| local.get(*name))
                .flatten()
                .filter(|waiter| match (handed, &waiter.token) {
                    (Some(handed), Some(token)) => handed == token,
                    _ => true,
                })
                .collect();
            // Noted before the waiter wakes, for the attempt it then makes.
            if let Some(handed) = handed.filter(|_| woken.iter().any(|waiter| waiter.token.is_some())) {
                self.mark_handed(handed);
            }
            for waiter in woken {
                waiter.notify.notify_one();
            }
        }
        self.interrupt(listeners);
    }

    /// Notes that a release handed `token`'s key to it (see
    /// [`take_handed`](Self::take_handed)).
    pub(crate) fn mark_handed(&self, token: &str) {
        self.handed.mark(token);
    }

    /// Whether a release handed `token`'s key to it since its last queued attempt
    /// (forgetting it): a hint that the attempt finds the lease its own.
    pub(crate) fn take_handed(&self, token: &str) -> bool {
        self.handed.take(token)
    }

    /// Ends the sleep of each of `listeners` with `KILL QUERY`, sent by the store's
    /// waker: one task on a connection of its own (not the pool's), which sends the
    /// interrupts one after the other, each listener once however many releases asked
    /// for it meanwhile. Errors are only logged: a waiter not woken polls.
    fn interrupt(self: &Arc<Self>, listeners: Vec<i64>) {
        if listeners.is_empty() {
            return;
        }
        let mut waker = self.waker.lock().unwrap_or_else(PoisonError::into_inner);
        waker.pending.extend(listeners);
        if !waker.running {
            waker.running = true;
            tokio::spawn(wake_listeners(Arc::downgrade(self)));
        }
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
        let (sql, purge) = (strong.listen_sql.clone(), strong.purge_sql.clone());
        drop(strong);
        let mut purged = Instant::now();
        loop {
            if purged.elapsed() >= PURGE_EVERY {
                purged = Instant::now();
                if let Err(error) = sqlx::query(&purge).execute(&mut conn).await {
                    // Perhaps interrupted by a release meant for the sleep.
                    tracing::debug!(%error, "could not delete ended waiter registrations");
                    if let Some(strong) = notifier.upgrade() {
                        strong.bell.notify_waiters();
                    }
                }
            }
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

/// The waker task: sends `KILL QUERY` to each pending listener on its own connection
/// until none is pending, then leaves the connection for the next run. Ends when the
/// store is gone.
async fn wake_listeners(notifier: Weak<Notifier>) {
    let Some(strong) = notifier.upgrade() else { return };
    let (mut conn, options) = {
        let mut waker = strong.waker.lock().unwrap_or_else(PoisonError::into_inner);
        (waker.conn.take(), Arc::clone(&strong.options))
    };
    drop(strong);
    loop {
        let Some(strong) = notifier.upgrade() else { return };
        let batch = {
            let mut waker = strong.waker.lock().unwrap_or_else(PoisonError::into_inner);
            let batch = std::mem::take(&mut waker.pending);
            if batch.is_empty() {
                waker.running = false;
                waker.conn = conn;
                return;
            }
            batch
        };
        drop(strong);
        if conn.is_none() {
            match MySqlConnection::connect_with(&options).await {
                Ok(opened) => conn = Some(opened),
                Err(error) => {
                    tracing::debug!(%error, "the waker could not connect; waiters poll meanwhile");
                    continue;
                }
            }
        }
        for listener in batch {
            let Some(open) = conn.as_mut() else { break };
            if let Err(error) = kill_query(open, listener).await {
                tracing::debug!(%error, listener, "could not wake a waiting listener");
                if !matches!(error, sqlx::Error::Database(_)) {
                    conn = None;
                }
            }
        }
    }
}

/// `KILL QUERY <listener>` on `conn`.
async fn kill_query(conn: &mut MySqlConnection, listener: i64) -> Result<(), sqlx::Error> {
    // The id is the server's own integer: nothing else is spliced into the text.
    let statement = format!("KILL QUERY {listener}");
    sqlx::query(&statement).execute(conn).await.map(drop)
}
