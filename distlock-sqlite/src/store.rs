//! `SqliteLockStore`: the `LockStore` implementation over an `SqlitePool`.

use std::collections::HashSet;
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use distlock_api::waiters::{deadline_after, first_wake};
use distlock_api::{
    async_trait, Acquire, BoxError, Capabilities, GroupLockStore, HeldLock, KeyPattern, LeaseValueStore, ListCursor,
    ListPage, LockError, LockInfo, LockKey, LockMode, LockStore, QueueStore, QueuedAttempt, StoreKey, Token, Ttl,
    WaitingPlace, LOCK_NAMESPACE,
};
use sqlx::sqlite::{Sqlite, SqlitePool, SqliteSynchronous};
use sqlx::Connection as _;
use sqlx::{Row as _, SqliteConnection};

use distlock_sql::connect::explain_file;

use crate::clock::{self, boot_id, left, ms_after, now_ms};
use crate::config::Layout;
use crate::gate::{Gate, Turn};
use crate::notify::{channel_of, lock_channel, receive, turn_message, Notifier, Sent};
use crate::process::{self, any_exited, Exit, ExitWatch, ProcessId};
use crate::sql::{json_array, Statements};
use crate::write::Write;

/// The fences of one boot's epoch: each boot's first store raises the counter to
/// `epoch × 2^40`, so fences stay increasing across a power loss that undid the last
/// commits of the boot before (with `synchronous = NORMAL` a commit is durable only once
/// the OS writes it out), as long as one boot hands out fewer than 2^40.
const EPOCH_FENCES: i64 = 1 << 40;

/// The backend name in errors and [`LockStore::backend`].
pub(crate) const BACKEND: &str = "sqlite";

/// A [`LockStore`] keeping leases in an SQLite database file, shared by every process of
/// the host that opens the same file.
///
/// Writes are `BEGIN IMMEDIATE` transactions: writers of one store queue in the process,
/// writers of other processes wait for each other through SQLite's `busy_timeout`, never
/// failing with "database is locked" while it lasts. Leases are measured on the host's
/// `CLOCK_BOOTTIME` and tagged with the boot id, so wall-clock steps change no lease and
/// a lease written before a reboot is expired after it. A lease records its holder
/// process (id and start time), and one whose process is gone counts as free (see
/// [`liveness`](crate::SqliteLockStoreBuilder::liveness)). Fencing is always on: one
/// counter in the file numbers every grant.
///
/// Cloning is cheap and clones share the pool.
#[derive(Clone)]
pub struct SqliteLockStore {
    pub(crate) inner: Arc<Inner>,
}

/// What the clones of a store share.
pub(crate) struct Inner {
    pub(crate) pool: SqlitePool,
    pub(crate) sql: Statements,
    pub(crate) layout: Layout,
    /// Writers of this store take turns here, so that they never wait for each other in
    /// SQLite's busy handler (which sleeps in steps of milliseconds).
    gate: tokio::sync::Mutex<()>,
    pub(crate) notifier: Arc<Notifier>,
    /// The channels this process's socket is registered for in the waiters table.
    registered: tokio::sync::Mutex<HashSet<String>>,
    ready: tokio::sync::OnceCell<()>,
    /// The host-wide write gate beside the database file (`None` for a database without
    /// a file of its own, or once opening it failed).
    host_gate: std::sync::OnceLock<Option<Gate>>,
}

impl fmt::Debug for SqliteLockStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteLockStore")
            .field("table", &self.inner.layout.table)
            .field("notifications", &self.inner.layout.notifications)
            .field("fair_queue", &self.inner.layout.fair_queue)
            .field("liveness", &self.inner.layout.liveness)
            .field("pool_size", &self.inner.pool.size())
            .field("listening", &self.inner.notifier.registry().is_listening())
            .field("keys_waited_on", &self.inner.notifier.registry().waited_keys())
            .finish()
    }
}

/// A row's time and process columns: whether what it records is still in force.
#[derive(Debug, Clone)]
pub(crate) struct Stamp {
    pub(crate) boot: String,
    pub(crate) expires_ms: i64,
    pub(crate) process: ProcessId,
}

impl Stamp {
    /// Reads `boot`, `expires_ms`, `pid`, `pid_start` and `pid_ns` of `row`.
    pub(crate) fn of(row: &sqlx::sqlite::SqliteRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            boot: row.try_get("boot")?,
            expires_ms: row.try_get("expires_ms")?,
            process: ProcessId {
                pid: row.try_get("pid")?,
                start: row.try_get("pid_start")?,
                namespace: row.try_get("pid_ns")?,
            },
        })
    }

    /// Unexpired on this boot's clock at `now`.
    pub(crate) fn unexpired(&self, boot: &str, now: i64) -> bool {
        self.boot == boot && self.expires_ms > now
    }

    /// Unexpired, and (with `liveness`) its process not gone.
    pub(crate) fn in_force(&self, boot: &str, now: i64, liveness: bool) -> bool {
        self.unexpired(boot, now) && !(liveness && self.process.is_gone())
    }
}

/// A single lock's lease row.
#[derive(Debug, Clone)]
struct Lease {
    token: String,
    fence: i64,
    stamp: Stamp,
}

/// A place in a key's queue.
#[derive(Debug, Clone)]
struct Place {
    token: String,
    seq: i64,
    stamp: Stamp,
}

/// Whom a release wakes.
enum Wake {
    /// Nobody: the key did not change hands.
    Nobody,
    /// The sockets waiting on the key, space-separated, as the release read them; sent
    /// the key's channel, or the turn of the waiter the key was handed to.
    Sockets(String, Option<String>),
    /// The sockets of the key's waiters, still to be read, to wake the waiter of this
    /// turn (the key was handed over).
    Lookup(String),
}

/// What a waiter's check found.
pub(crate) enum Found {
    /// Nothing to wait for.
    Free,
    /// Held until `until` (at the latest) by these processes.
    Held { left: Duration, holders: Vec<ProcessId> },
}

impl SqliteLockStore {
    pub(crate) fn from_parts(pool: SqlitePool, layout: Layout) -> Self {
        let sql = Statements::new(&layout.table);
        let inner = Inner {
            pool,
            sql,
            layout,
            gate: tokio::sync::Mutex::new(()),
            notifier: Arc::new(Notifier::new()),
            registered: tokio::sync::Mutex::default(),
            ready: tokio::sync::OnceCell::new(),
            host_gate: std::sync::OnceLock::new(),
        };
        Self { inner: Arc::new(inner) }
    }

    /// The pool the store works on.
    pub fn pool(&self) -> &SqlitePool {
        &self.inner.pool
    }

    /// The statements of its acquire and release, exactly as it sends them.
    #[doc(hidden)] // Sent as-is by distlock's benchmarks' raw baselines; not part of the API.
    pub fn statements(&self) -> &Statements {
        &self.inner.sql
    }

    /// The lease table's name.
    pub fn table_name(&self) -> &str {
        self.inner.layout.table.as_str()
    }

    /// Whether a lease whose holder process is gone counts as free.
    pub fn liveness(&self) -> bool {
        self.inner.layout.liveness
    }

    /// The boot id leases are written with: this boot's
    /// `/proc/sys/kernel/random/boot_id`.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] when it cannot be read.
    pub fn boot_id() -> Result<&'static str, LockError> {
        boot_id().map_err(|error| LockError::store(BACKEND, "read the boot id", None, error))
    }

    /// The store's clock: the time since boot on `CLOCK_BOOTTIME`, which every process of
    /// the host shares and which no change of the wall clock moves.
    pub fn clock() -> Duration {
        clock::since_boot()
    }

    /// Makes sure the database is in WAL mode and the store's tables exist (once per store
    /// and its clones), and removes rows written under another boot.
    pub(crate) async fn ready(&self, operation: &'static str) -> Result<(), LockError> {
        if self.inner.ready.initialized() {
            return Ok(());
        }
        let boot = Self::boot_id()?;
        self.inner.ready.get_or_try_init(|| self.prepare(boot, operation)).await.map(|_| ())
    }

    async fn prepare(&self, boot: &'static str, operation: &'static str) -> Result<(), LockError> {
        let fail = |error: sqlx::Error| LockError::store(BACKEND, operation, None, error);
        // A connection of its own, fully synchronous: what it commits is on disk before
        // any fence of this boot is handed out.
        let options = (*self.inner.pool.connect_options()).clone().synchronous(SqliteSynchronous::Full);
        let mut conn = SqliteConnection::connect_with(&options).await.map_err(fail)?;
        let _turn = self.inner.gate.lock().await;
        let _host_turn = self.host_turn().await.map_err(fail)?;
        enable_wal(&mut conn).await.map_err(fail)?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.map_err(fail)?;
        let sql = &self.inner.sql;
        // One query, several statements: SQLite runs them in turn.
        sqlx::query(&sql.create).execute(&mut *tx).await.map_err(fail)?;
        // A database file made before places recorded when they were taken.
        for (probe, add) in
            [(&sql.queue_placed_probe, &sql.queue_placed_add), (&sql.intents_placed_probe, &sql.intents_placed_add)]
        {
            if sqlx::query(probe).execute(&mut *tx).await.is_err() {
                sqlx::query(add).execute(&mut *tx).await.map_err(fail)?;
            }
        }
        let last: Option<(String, i64)> = sqlx::query_as(&sql.boot).fetch_optional(&mut *tx).await.map_err(fail)?;
        if last.as_ref().is_none_or(|(last, _)| last != boot) {
            let epoch = last.map_or(1, |(_, epoch)| epoch.saturating_add(1));
            sqlx::query(&sql.new_boot).bind(boot).bind(epoch).execute(&mut *tx).await.map_err(fail)?;
            let floor = epoch.saturating_mul(EPOCH_FENCES);
            sqlx::query(&sql.raise_counter).bind(floor).execute(&mut *tx).await.map_err(fail)?;
            sqlx::query(&sql.purge_boots_leases).bind(boot).execute(&mut *tx).await.map_err(fail)?;
            sqlx::query(&sql.purge_boots_queue).bind(boot).execute(&mut *tx).await.map_err(fail)?;
            sqlx::query(&sql.purge_boots_holders).bind(boot).execute(&mut *tx).await.map_err(fail)?;
            sqlx::query(&sql.purge_boots_intents).bind(boot).execute(&mut *tx).await.map_err(fail)?;
            sqlx::query(&sql.purge_boots_values).execute(&mut *tx).await.map_err(fail)?;
        }
        tx.commit().await.map_err(fail)?;
        if let Err(error) = conn.close().await {
            tracing::debug!(%error, "closing the set-up connection failed");
        }
        Ok(())
    }

    /// This process's turn at the host-wide write gate, when the database has one.
    async fn host_turn(&self) -> Result<Option<Turn>, sqlx::Error> {
        let gate = self.inner.host_gate.get_or_init(|| {
            let options = self.inner.pool.connect_options();
            let database = options.get_filename();
            if database.as_os_str().is_empty() || database == std::path::Path::new(":memory:") {
                return None;
            }
            match Gate::open(database) {
                Ok(gate) => Some(gate),
                Err(error) => {
                    tracing::warn!(%error, "cannot open the write gate beside the database; writers of other processes wait in SQLite's busy handler");
                    None
                }
            }
        });
        match gate {
            Some(gate) => Ok(Some(gate.turn().await.map_err(sqlx::Error::Io)?)),
            None => Ok(None),
        }
    }

    /// `result`, an operation's outcome on the pool, with a pool timeout reported as
    /// [`NoConnection`](distlock_sql::NoConnection): the pool's connections all busy, or
    /// the database file not opening.
    pub(crate) async fn explained<T>(&self, result: Result<T, sqlx::Error>) -> Result<T, BoxError> {
        match result {
            Ok(value) => Ok(value),
            Err(error) => Err(explain_file(&self.inner.pool, error).await),
        }
    }

    /// Begins a write transaction (`BEGIN IMMEDIATE`) in this store's turn.
    pub(crate) async fn begin(&self) -> Result<Write<'_>, sqlx::Error> {
        let turn = self.inner.gate.lock().await;
        let host_turn = self.host_turn().await?;
        let conn = self.inner.pool.acquire().await?;
        Write::begin(conn, turn, host_turn).await
    }

    /// Runs one autocommit write statement in this store's turn.
    pub(crate) async fn write_one<'q>(
        &self,
        query: sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
    ) -> Result<u64, sqlx::Error> {
        let _turn = self.inner.gate.lock().await;
        let mut conn = self.inner.pool.acquire().await?;
        let _host_turn = self.host_turn().await?;
        Ok(query.execute(&mut *conn).await?.rows_affected())
    }

    /// The next number of the store's counter: fences and tickets.
    pub(crate) async fn next_number(&self, conn: &mut SqliteConnection) -> Result<u64, sqlx::Error> {
        let value: i64 = sqlx::query_scalar(&self.inner.sql.next_fence).fetch_one(conn).await?;
        Ok(u64::try_from(value).unwrap_or(0))
    }

    async fn lease(&self, conn: &mut SqliteConnection, key: &StoreKey) -> Result<Option<Lease>, sqlx::Error> {
        let row = sqlx::query(&self.inner.sql.lease_select).bind(key.as_str()).fetch_optional(conn).await?;
        row.map(|row| Ok(Lease { token: row.try_get("token")?, fence: row.try_get("fence")?, stamp: Stamp::of(&row)? }))
            .transpose()
    }

    #[allow(clippy::too_many_arguments)]
    async fn put_lease(
        &self,
        conn: &mut SqliteConnection,
        key: &StoreKey,
        token: &str,
        fence: u64,
        boot: &str,
        expires_ms: i64,
        process: ProcessId,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(&self.inner.sql.lease_put)
            .bind(key.as_str())
            .bind(token)
            .bind(i64::try_from(fence).unwrap_or(i64::MAX))
            .bind(boot)
            .bind(expires_ms)
            .bind(process.pid)
            .bind(process.start)
            .bind(process.namespace)
            .execute(conn)
            .await?;
        Ok(())
    }

    /// The key's places in force, oldest first; places that are over are removed.
    async fn places(
        &self,
        conn: &mut SqliteConnection,
        key: &StoreKey,
        boot: &str,
        now: i64,
    ) -> Result<Vec<Place>, sqlx::Error> {
        let rows = sqlx::query(&self.inner.sql.queue_select).bind(key.as_str()).fetch_all(&mut *conn).await?;
        let mut places = Vec::with_capacity(rows.len());
        let mut over = false;
        let mut gone = Vec::new();
        for row in rows {
            let place = Place { token: row.try_get("token")?, seq: row.try_get("seq")?, stamp: Stamp::of(&row)? };
            if !place.stamp.unexpired(boot, now) {
                over = true;
            } else if self.inner.layout.liveness && place.stamp.process.is_gone() {
                gone.push(place.token);
            } else {
                places.push(place);
            }
        }
        if over || !gone.is_empty() {
            sqlx::query(&self.inner.sql.queue_purge)
                .bind(key.as_str())
                .bind(boot)
                .bind(now)
                .bind(json_array(gone.iter().map(String::as_str)))
                .execute(conn)
                .await?;
        }
        Ok(places)
    }

    /// When the key is free and has places: hands it to the oldest one, held by its token
    /// until its place ends. Returns the message that wakes that waiter alone
    /// ([`turn_message`]), when it did.
    async fn hand_over(
        &self,
        conn: &mut SqliteConnection,
        key: &StoreKey,
        places: &[Place],
        lease_free: bool,
        boot: &str,
    ) -> Result<Option<String>, sqlx::Error> {
        let Some(head) = places.first() else { return Ok(None) };
        if !lease_free {
            return Ok(None);
        }
        let fence = self.next_number(conn).await?;
        self.put_lease(conn, key, &head.token, fence, boot, head.stamp.expires_ms, head.stamp.process).await?;
        Ok(Some(turn_message(&lock_channel(key.as_str()), &head.token)))
    }

    /// Wakes the waiter a key was handed to: `message` ([`turn_message`]) goes to the
    /// sockets registered for the key's `channel`, and only the waiter of that turn
    /// wakes. Failures are logged, as by [`wake`](Self::wake).
    async fn wake_turn(&self, channel: &str, message: &str) {
        if let Some(sockets) = self.sockets_of(std::slice::from_ref(&channel)).await {
            self.wake_sockets(sockets.iter().map(|(_, socket)| (message, socket.as_str()))).await;
        }
    }

    /// Wakes the waiters of `channels`, in this process and in others. Failures are
    /// logged: the release itself is done, and waiters fall back to their next retry.
    pub(crate) async fn wake(&self, channels: &[String]) {
        if let Some(sockets) = self.sockets_of(channels).await {
            self.wake_sockets(sockets.iter().map(|(channel, socket)| (channel.as_str(), socket.as_str()))).await;
        }
    }

    /// The `(channel, socket)` registrations for `channels`; `None` when there is nothing
    /// to wake (no notifications, no channels) or the read failed (logged: the waiters
    /// fall back to their next retry).
    async fn sockets_of(&self, channels: &[impl AsRef<str>]) -> Option<Vec<(String, String)>> {
        if !self.inner.layout.notifications || channels.is_empty() {
            return None;
        }
        let sockets = sqlx::query_as(&self.inner.sql.waiters_sockets)
            .bind(json_array(channels.iter().map(AsRef::as_ref)))
            .fetch_all(&self.inner.pool)
            .await;
        sockets.map_err(|error| tracing::debug!(%error, "reading the waiters to wake failed; they will retry")).ok()
    }

    /// Wakes each `(channel, socket)`: this process's waiters directly, other processes'
    /// through their sockets; forgets the sockets whose processes are gone.
    async fn wake_sockets<'a>(&self, targets: impl IntoIterator<Item = (&'a str, &'a str)>) {
        if !self.inner.layout.notifications {
            return;
        }
        let notifier = &self.inner.notifier;
        let mut gone = Vec::new();
        for (message, socket) in targets {
            if socket == notifier.socket_name() {
                notifier.registry().wake(message);
            } else if notifier.send(socket, message) == Sent::Gone {
                gone.push(socket);
            }
        }
        if !gone.is_empty() {
            gone.sort_unstable();
            gone.dedup();
            let forget = sqlx::query(&self.inner.sql.waiters_forget).bind(json_array(gone));
            if let Err(error) = self.write_one(forget).await {
                tracing::debug!(%error, "forgetting the sockets of processes that are gone failed");
            }
        }
    }

    /// Starts this store's listener once; `false` when it cannot listen (then waits
    /// poll).
    fn listen(&self) -> bool {
        let weak = Arc::downgrade(&self.inner);
        let started = self.inner.notifier.listen_with(|socket| tokio::spawn(listener(weak, socket)));
        match started {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(%error, "cannot listen for release notifications; waiters poll");
                false
            }
        }
    }

    /// Registers this process's socket for `channel` in the waiters table, if it is not.
    pub(crate) async fn register(&self, channel: &str) -> Result<(), sqlx::Error> {
        let mut registered = self.inner.registered.lock().await;
        if registered.contains(channel) {
            return Ok(());
        }
        let insert =
            sqlx::query(&self.inner.sql.waiters_register).bind(channel).bind(self.inner.notifier.socket_name());
        self.write_one(insert).await?;
        registered.insert(channel.to_owned());
        Ok(())
    }

    /// Removes this process's registration for `channel` unless a waiter of this process
    /// wants it again.
    async fn unregister(&self, channel: &str) -> Result<(), sqlx::Error> {
        let mut registered = self.inner.registered.lock().await;
        if self.inner.notifier.wanted(channel) || !registered.contains(channel) {
            return Ok(());
        }
        let delete =
            sqlx::query(&self.inner.sql.waiters_unregister).bind(channel).bind(self.inner.notifier.socket_name());
        self.write_one(delete).await?;
        registered.remove(channel);
        Ok(())
    }

    /// Waits at most `max` for a wake-up on any of `channels` (or on `turn`, a
    /// [`turn_message`] of one of them): registers this process for the channels, then
    /// runs `check`; returns at once when it finds nothing to wait for, else at a
    /// wake-up, the end of the time it reported, the exit of a holder process it named,
    /// or `max`.
    pub(crate) async fn wait_on<F, Fut>(
        &self,
        channels: &[String],
        turn: Option<&str>,
        max: Duration,
        check: F,
    ) -> Result<(), LockError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Found, LockError>>,
    {
        let deadline = deadline_after(max);
        if !self.inner.layout.notifications || !self.listen() {
            tokio::time::sleep_until(deadline).await;
            return Ok(());
        }
        let notifier = &self.inner.notifier;
        let _interest: Vec<_> = channels.iter().map(|channel| notifier.interest(channel.clone())).collect();
        let registrations: Vec<_> = channels
            .iter()
            .map(String::as_str)
            .chain(turn)
            .map(|channel| notifier.registry().register(channel))
            .collect();
        let mut released: Vec<Pin<Box<tokio::sync::futures::Notified<'_>>>> =
            registrations.iter().map(|registration| Box::pin(registration.notified())).collect();
        for release in &mut released {
            release.as_mut().enable();
        }
        let mut listening = notifier.registry().listening();
        let checked = async {
            for channel in channels {
                self.explained(self.register(channel).await)
                    .await
                    .map_err(|error| LockError::store(BACKEND, "wait for a release", None, error))?;
            }
            check().await
        };
        let found = match tokio::time::timeout_at(deadline, checked).await {
            Err(_) => return Ok(()),
            Ok(found) => found?,
        };
        let Found::Held { left, holders } = found else { return Ok(()) };
        let mut watches: Vec<ExitWatch> = Vec::new();
        if self.inner.layout.liveness {
            for holder in &holders {
                match holder.exit_watch() {
                    Exit::Watch(watch) => watches.push(watch),
                    // Died since the check: look again at once.
                    Exit::Gone => return Ok(()),
                    Exit::Unknown => {}
                }
            }
        }
        let wake_at = deadline.min(deadline_after(left + Duration::from_millis(1)));
        tokio::select! {
            _ = first_wake(&mut released, &mut listening, wake_at, deadline) => {}
            () = any_exited(&watches) => {}
        }
        Ok(())
    }

    /// For a waiter: whether `key` is free (or handed to `me`), else how long it is held
    /// and by which process.
    async fn lease_state(&self, key: &StoreKey, me: Option<&Token>) -> Result<Found, LockError> {
        let boot = Self::boot_id()?;
        let mut conn =
            self.explained(self.inner.pool.acquire().await).await.map_err(fail("wait for a release", key))?;
        let lease = self.lease(&mut conn, key).await.map_err(fail("wait for a release", key))?;
        let now = now_ms();
        Ok(match lease {
            Some(lease)
                if lease.stamp.in_force(boot, now, self.inner.layout.liveness)
                    && me.is_none_or(|me| me.as_str() != lease.token) =>
            {
                Found::Held { left: left(now, lease.stamp.expires_ms), holders: vec![lease.stamp.process] }
            }
            _ => Found::Free,
        })
    }

    async fn wait(&self, key: &StoreKey, me: Option<&Token>, max: Duration) -> Result<(), LockError> {
        self.ready("wait for a release").await?;
        let channel = lock_channel(key.as_str());
        let turn = me.map(|me| turn_message(&channel, me.as_str()));
        self.wait_on(&[channel], turn.as_deref(), max, || self.lease_state(key, me)).await
    }

    async fn try_acquire_inner(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<Acquire, sqlx::Error> {
        let boot = boot_id().map_err(sqlx::Error::Io)?;
        let mut write = self.begin().await?;
        let now = now_ms();
        let lease = self.lease(write.conn(), key).await?;
        if let Some(lease) = lease.filter(|lease| lease.stamp.in_force(boot, now, self.inner.layout.liveness)) {
            write.rollback().await;
            return Ok(Acquire::Held { ttl_left: Some(left(now, lease.stamp.expires_ms)) });
        }
        let fence = self.next_number(write.conn()).await?;
        let expires_ms = ms_after(now, ttl.as_duration());
        self.put_lease(write.conn(), key, token.as_str(), fence, boot, expires_ms, process::current()).await?;
        write.commit().await?;
        Ok(Acquire::Acquired { fence: Some(fence) })
    }

    /// Whether `token` held `key`, and whom to wake: the sockets waiting on `channel`
    /// (the key's) as the deleted lease brought them, or `Lookup` when the key was handed
    /// over without a lease of `token` to delete.
    async fn release_inner(&self, key: &StoreKey, token: &Token, channel: &str) -> Result<(bool, Wake), sqlx::Error> {
        let boot = boot_id().map_err(sqlx::Error::Io)?;
        let mut write = self.begin().await?;
        let now = now_ms();
        let deleted: Option<(String, i64, Option<String>)> = sqlx::query_as(&self.inner.sql.lease_delete)
            .bind(key.as_str())
            .bind(token.as_str())
            .bind(channel)
            .fetch_optional(write.conn())
            .await?;
        let held = deleted.as_ref().is_some_and(|(row_boot, expires_ms, _)| row_boot == boot && *expires_ms > now);
        let mut handed = None;
        if self.inner.layout.fair_queue {
            sqlx::query(&self.inner.sql.queue_leave)
                .bind(key.as_str())
                .bind(token.as_str())
                .execute(write.conn())
                .await?;
            let places = self.places(write.conn(), key, boot, now).await?;
            if !places.is_empty() {
                let lease = self.lease(write.conn(), key).await?;
                let free = lease.is_none_or(|lease| !lease.stamp.in_force(boot, now, self.inner.layout.liveness));
                handed = self.hand_over(write.conn(), key, &places, free, boot).await?;
            }
        }
        write.commit().await?;
        let wake = match (deleted, handed) {
            (Some((_, _, sockets)), turn) if held || turn.is_some() => Wake::Sockets(sockets.unwrap_or_default(), turn),
            (None, Some(turn)) => Wake::Lookup(turn),
            _ => Wake::Nobody,
        };
        Ok((held, wake))
    }

    async fn try_acquire_queued_inner(
        &self,
        key: &StoreKey,
        token: &Token,
        ttl: Ttl,
        place: Ttl,
    ) -> Result<(Acquire, Option<String>), sqlx::Error> {
        let boot = boot_id().map_err(sqlx::Error::Io)?;
        let me = process::current();
        let mut write = self.begin().await?;
        let now = now_ms();
        let lease = self.lease(write.conn(), key).await?;
        let places = self.places(write.conn(), key, boot, now).await?;
        let lease = lease.filter(|lease| lease.stamp.in_force(boot, now, self.inner.layout.liveness));
        let leave = sqlx::query(&self.inner.sql.queue_leave).bind(key.as_str()).bind(token.as_str());
        let expires_ms = ms_after(now, ttl.as_duration());
        let mut handed = None;
        let ttl_left = match lease {
            Some(lease) if lease.token == token.as_str() => {
                let fence = u64::try_from(lease.fence).unwrap_or(0);
                self.put_lease(write.conn(), key, token.as_str(), fence, boot, expires_ms, me).await?;
                leave.execute(write.conn()).await?;
                write.commit().await?;
                return Ok((Acquire::Acquired { fence: Some(fence) }, None));
            }
            Some(lease) => Some(left(now, lease.stamp.expires_ms)),
            None => {
                if places.first().is_none_or(|head| head.token == token.as_str()) {
                    let fence = self.next_number(write.conn()).await?;
                    self.put_lease(write.conn(), key, token.as_str(), fence, boot, expires_ms, me).await?;
                    leave.execute(write.conn()).await?;
                    write.commit().await?;
                    return Ok((Acquire::Acquired { fence: Some(fence) }, None));
                }
                // Free, but another waiter comes first: its turn.
                handed = self.hand_over(write.conn(), key, &places, true, boot).await?;
                places.first().map(|head| left(now, head.stamp.expires_ms))
            }
        };
        let seq = match places.iter().find(|place| place.token == token.as_str()) {
            Some(mine) => mine.seq,
            None => i64::try_from(self.next_number(write.conn()).await?).unwrap_or(i64::MAX),
        };
        sqlx::query(&self.inner.sql.queue_put)
            .bind(key.as_str())
            .bind(token.as_str())
            .bind(seq)
            .bind(boot)
            .bind(now)
            .bind(ms_after(now, place.as_duration()))
            .bind(me.pid)
            .bind(me.start)
            .bind(me.namespace)
            .execute(write.conn())
            .await?;
        write.commit().await?;
        Ok((Acquire::Held { ttl_left }, handed))
    }
}

/// The error of `operation` on `key` caused by `error`.
pub(crate) fn fail<'k, E: Into<BoxError>>(operation: &'static str, key: &'k StoreKey) -> impl Fn(E) -> LockError + 'k {
    move |error| LockError::store(BACKEND, operation, Some(key.lock_key()), error)
}

/// `PRAGMA journal_mode = WAL`, retried while another process holds the database
/// (switching needs a lock SQLite's busy handler does not wait for).
async fn enable_wal(conn: &mut SqliteConnection) -> Result<(), sqlx::Error> {
    let mut attempt = 0u32;
    loop {
        match sqlx::query_scalar::<_, String>("PRAGMA journal_mode = WAL").fetch_one(&mut *conn).await {
            Ok(mode) => {
                if !mode.eq_ignore_ascii_case("wal") {
                    tracing::warn!(
                        journal_mode = %mode,
                        "the SQLite database did not switch to WAL (a file system without shared memory?): \
                         readers and writers of other processes will block each other"
                    );
                }
                return Ok(());
            }
            Err(error) if is_busy(&error) && attempt < 500 => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// Whether `error` is SQLite's `SQLITE_BUSY` (or one of its extended codes).
fn is_busy(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(error) => {
            error.code().and_then(|code| code.parse::<i64>().ok()).is_some_and(|code| code & 0xff == 5)
        }
        _ => false,
    }
}

/// The receiving loop of a store's socket: wakes this process's waiters of each channel
/// named, and drops the registration of a channel nobody here waits for any more.
async fn listener(store: Weak<Inner>, socket: tokio::net::UnixDatagram) {
    loop {
        let channel = match receive(&socket).await {
            Ok(Some(channel)) => channel,
            Ok(None) => continue,
            Err(error) => {
                tracing::warn!(%error, "the release notification socket failed; waiters poll");
                break;
            }
        };
        let Some(inner) = store.upgrade() else { return };
        let registered = channel_of(&channel);
        if inner.notifier.wanted(registered) {
            inner.notifier.registry().wake(&channel);
        } else {
            let store = SqliteLockStore { inner };
            if let Err(error) = store.unregister(registered).await {
                tracing::debug!(%error, "dropping a waiter registration failed");
            }
        }
    }
    if let Some(inner) = store.upgrade() {
        inner.notifier.registry().set_listening(false);
    }
}

#[async_trait]
impl LockStore for SqliteLockStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE
            .with_fencing(true)
            .with_release_notifications(self.inner.layout.notifications)
            .with_fair_queue(self.inner.layout.fair_queue)
    }

    fn queue(&self) -> Option<&dyn QueueStore> {
        self.inner.layout.fair_queue.then_some(self as &dyn QueueStore)
    }

    fn groups(&self) -> Option<&dyn GroupLockStore> {
        Some(self)
    }

    fn values(&self) -> Option<&dyn LeaseValueStore> {
        Some(self)
    }

    async fn try_acquire(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<Acquire, LockError> {
        self.ready("acquire").await?;
        self.explained(self.try_acquire_inner(key, token, ttl).await).await.map_err(fail("acquire", key))
    }

    /// Frees the key if `token` holds it, removes `token`'s place in the key's queue, and
    /// hands a key left free to the oldest waiter; then wakes the key's waiters.
    async fn release(&self, key: &StoreKey, token: &Token) -> Result<bool, LockError> {
        self.ready("release").await?;
        let channel = lock_channel(key.as_str());
        let (held, wake) =
            self.explained(self.release_inner(key, token, &channel).await).await.map_err(fail("release", key))?;
        match wake {
            Wake::Nobody => {}
            Wake::Sockets(sockets, turn) => {
                let message = turn.as_deref().unwrap_or(&channel);
                self.wake_sockets(
                    sockets.split(' ').filter(|socket| !socket.is_empty()).map(|socket| (message, socket)),
                )
                .await;
            }
            Wake::Lookup(turn) => self.wake_turn(&channel, &turn).await,
        }
        Ok(held)
    }

    async fn extend(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<bool, LockError> {
        self.ready("extend").await?;
        let boot = Self::boot_id()?;
        let now = now_ms();
        let update = sqlx::query(&self.inner.sql.lease_extend)
            .bind(key.as_str())
            .bind(token.as_str())
            .bind(boot)
            .bind(ms_after(now, ttl.as_duration()))
            .bind(now);
        Ok(self.explained(self.write_one(update).await).await.map_err(fail("extend", key))? == 1)
    }

    async fn inspect(&self, key: &StoreKey) -> Result<Option<LockInfo>, LockError> {
        self.ready("inspect").await?;
        let boot = Self::boot_id()?;
        let mut conn = self.explained(self.inner.pool.acquire().await).await.map_err(fail("inspect", key))?;
        let lease = self.lease(&mut conn, key).await.map_err(fail("inspect", key))?;
        let now = now_ms();
        lease
            .filter(|lease| lease.stamp.in_force(boot, now, self.inner.layout.liveness))
            .map(|lease| {
                let token = Token::parse(&lease.token).map_err(|_| {
                    fail("inspect", key)(sqlx::Error::Protocol("a lease row holds a malformed token".to_owned()))
                })?;
                Ok(LockInfo::new(token, u64::try_from(lease.fence).ok(), left(now, lease.stamp.expires_ms)))
            })
            .transpose()
    }

    async fn wait_for_release(&self, key: &StoreKey, max: Duration) -> Result<(), LockError> {
        self.wait(key, None, max).await
    }

    /// Pages through the leases in force in key order; the cursor is the last key
    /// examined.
    async fn list(
        &self,
        pattern: &KeyPattern,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, LockError> {
        self.ready("list").await?;
        let after = distlock_sql::listing::page_start(cursor, "SQLite")?;
        let boot = Self::boot_id()?;
        let lowest = format!("{LOCK_NAMESPACE}{}", pattern.literal_prefix());
        let limit = limit.clamp(1, ListPage::MAX_LIMIT);
        let fail = |error: sqlx::Error| LockError::store(BACKEND, "list", None, error);
        let rows = sqlx::query(&self.inner.sql.lease_list)
            .bind(&lowest)
            .bind(after)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.inner.pool)
            .await;
        let rows = self.explained(rows).await.map_err(|error| LockError::store(BACKEND, "list", None, error))?;
        let now = now_ms();
        let full = rows.len() == limit;
        let mut locks = Vec::new();
        let mut last = None;
        let mut beyond = false;
        for row in rows {
            let store_key: String = row.try_get("key").map_err(fail)?;
            if !store_key.starts_with(&lowest) {
                beyond = true;
                break;
            }
            let stamp = Stamp::of(&row).map_err(fail)?;
            let token: String = row.try_get("token").map_err(fail)?;
            let fence: i64 = row.try_get("fence").map_err(fail)?;
            let key = store_key[LOCK_NAMESPACE.len()..].to_owned();
            last = Some(store_key.clone());
            if !stamp.in_force(boot, now, self.inner.layout.liveness) || !pattern.matches(&key) {
                continue;
            }
            let (Ok(key), Ok(token)) = (LockKey::new(key), Token::parse(&token)) else { continue };
            let info = LockInfo::new(token, u64::try_from(fence).ok(), left(now, stamp.expires_ms));
            locks.push(HeldLock::new(key, vec![info]));
        }
        let next = if full && !beyond { last.map(ListCursor::new) } else { None };
        Ok(ListPage::new(locks, next))
    }
}

#[async_trait]
impl QueueStore for SqliteLockStore {
    /// A queued attempt does more than a plain one: the manager queues after a plain
    /// attempt found the key held.
    fn queues_in_first_attempt(&self) -> bool {
        false
    }

    /// One `BEGIN IMMEDIATE` transaction: a key handed to `token` (or free with `token`
    /// first in line, or nobody waiting) is taken for `ttl`; otherwise `token`'s place is
    /// taken or refreshed.
    async fn try_acquire_queued(&self, attempt: QueuedAttempt<'_>) -> Result<Acquire, LockError> {
        let QueuedAttempt { key, token, ttl, place } = attempt;
        if !self.inner.layout.fair_queue {
            return self.try_acquire(key, token, ttl).await;
        }
        self.ready("acquire").await?;
        let (acquire, handed) = self
            .explained(self.try_acquire_queued_inner(key, token, ttl, place).await)
            .await
            .map_err(fail("acquire", key))?;
        if let Some(turn) = handed {
            self.wake_turn(&lock_channel(key.as_str()), &turn).await;
        }
        Ok(acquire)
    }

    async fn wait_for_turn(&self, key: &StoreKey, token: &Token, max: Duration) -> Result<(), LockError> {
        self.wait(key, Some(token), max).await
    }

    async fn queue_len(&self, key: &StoreKey) -> Result<usize, LockError> {
        if !self.inner.layout.fair_queue {
            return Ok(0);
        }
        self.ready("queue length").await?;
        let boot = Self::boot_id()?;
        let rows = sqlx::query(&self.inner.sql.queue_select).bind(key.as_str()).fetch_all(&self.inner.pool).await;
        let rows = self.explained(rows).await.map_err(fail("queue length", key))?;
        let now = now_ms();
        let mut live = 0;
        for row in rows {
            let stamp = Stamp::of(&row).map_err(fail("queue length", key))?;
            if stamp.in_force(boot, now, self.inner.layout.liveness) {
                live += 1;
            }
        }
        Ok(live)
    }

    /// One `SELECT` of the key's places; those in force, in arrival order, with the time
    /// waited since `placed_ms` on this boot's clock.
    async fn queue_places(&self, key: &StoreKey) -> Result<Vec<WaitingPlace>, LockError> {
        if !self.inner.layout.fair_queue {
            return Ok(Vec::new());
        }
        self.ready("queue places").await?;
        let boot = Self::boot_id()?;
        let rows = sqlx::query(&self.inner.sql.queue_select).bind(key.as_str()).fetch_all(&self.inner.pool).await;
        let rows = self.explained(rows).await.map_err(fail("queue places", key))?;
        let now = now_ms();
        let mut places = Vec::new();
        for row in rows {
            let stamp = Stamp::of(&row).map_err(fail("queue places", key))?;
            let placed_ms: i64 = row.try_get("placed_ms").map_err(fail("queue places", key))?;
            let token: String = row.try_get("token").map_err(fail("queue places", key))?;
            if !stamp.in_force(boot, now, self.inner.layout.liveness) {
                continue;
            }
            let Ok(token) = Token::parse(&token) else { continue };
            let waited = left(placed_ms, now);
            places.push(WaitingPlace::new(token, LockMode::Exclusive, Some(waited), left(now, stamp.expires_ms)));
        }
        Ok(places)
    }
}

#[cfg(test)]
mod upgrade_tests {
    use std::time::Duration;

    use distlock_api::{LockKey, LockStore, QueuedAttempt, Token, Ttl};
    use sqlx::Connection;

    use super::SqliteLockStore;

    /// A database file whose queue and intents tables lack the `placed_ms` column gets it
    /// when opened, and its waiters still queue in arrival order.
    #[tokio::test]
    async fn places_record_their_age_in_a_file_made_without_the_column() {
        let path = std::env::temp_dir().join(format!("distlock-upgrade-{}.db", Token::generate().as_str()));
        let url = format!("sqlite://{}", path.display());
        {
            let options = sqlx::sqlite::SqliteConnectOptions::new().filename(&path).create_if_missing(true);
            let mut conn = sqlx::SqliteConnection::connect_with(&options).await.unwrap();
            for table in ["distlock_queue", "distlock_intents"] {
                let mode = if table == "distlock_intents" {
                    "mode TEXT NOT NULL, ticket INTEGER NOT NULL,"
                } else {
                    "seq INTEGER NOT NULL,"
                };
                let ddl = format!(
                    "CREATE TABLE {table} (key TEXT NOT NULL, token TEXT NOT NULL, {mode} boot TEXT NOT NULL, \
                     expires_ms INTEGER NOT NULL, pid INTEGER NOT NULL, pid_start INTEGER NOT NULL, \
                     pid_ns INTEGER NOT NULL, PRIMARY KEY (key, token)) WITHOUT ROWID"
                );
                sqlx::query(&ddl).execute(&mut conn).await.unwrap();
            }
            conn.close().await.unwrap();
        }
        let store = SqliteLockStore::connect(&url).await.unwrap();
        let key = LockKey::new("upgraded").unwrap().to_store_key();
        let (holder, waiter) = (Token::generate(), Token::generate());
        let ttl = Ttl::new(Duration::from_secs(30)).unwrap();
        assert!(store.try_acquire(&key, &holder, ttl).await.unwrap().is_acquired());
        let queue = store.queue().expect("a fair queue");
        let attempt = QueuedAttempt { key: &key, token: &waiter, ttl, place: ttl };
        assert!(!queue.try_acquire_queued(attempt).await.unwrap().is_acquired());
        let places = queue.queue_places(&key).await.unwrap();
        assert_eq!(places.iter().map(|place| &place.token).collect::<Vec<_>>(), [&waiter]);
        assert!(places[0].waited.is_some_and(|waited| waited < Duration::from_secs(10)), "{places:?}");
        drop(store);
        let _ = std::fs::remove_file(&path);
    }
}
