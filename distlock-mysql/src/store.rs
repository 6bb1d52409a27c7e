//! `MysqlLockStore`: the `LockStore` implementation over a `MySqlPool`.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use distlock_api::waiters::deadline_after;
use distlock_api::{
    async_trait, Acquire, BoxError, Capabilities, GroupLockStore, KeyPattern, LeaseValueStore, ListCursor, ListPage,
    LockError, LockInfo, LockMode, LockStore, QueueStore, QueuedAttempt, StoreKey, Token, Ttl, WaitingPlace,
    LOCK_NAMESPACE,
};
use sqlx::mysql::MySqlPool;
use sqlx::{Connection, MySql};

use crate::config::Layout;
use crate::error::{error_number, is_connection_lost, is_deadlock, is_refusal, UnexpectedAnswer, BACKEND};
use crate::notify::Notifier;
use crate::sql::{self, Statements};
use distlock_sql::connect::explain_refusal;
use distlock_sql::listing::{held_lock, lock_info, page_start, waiting_place};
use distlock_sql::{InFlight, KeptConnections, Retry};

/// A [`LockStore`] keeping leases in a MySQL or MariaDB table.
///
/// Every single-lock operation is one autocommit statement on the pool, timed by the
/// server's clock (`NOW(6)`); queued (fair) attempts and group grants are short
/// transactions that lock the rows they decide on. See the crate documentation for the
/// tables and the statements. Fencing is always on.
///
/// # Connections
///
/// Acquisitions and releases keep their connection for the next one: sqlx gives a
/// connection back to its pool with a ping, a round trip per statement. A connection goes
/// back to the pool when its statement failed or was cancelled, when it has been out of
/// the pool for 250 ms, and when no acquisition or release used it for 50 ms, so the
/// pool's other users, its `max_lifetime` and `idle_timeout`, and `Pool::close` still get
/// every connection back soon. An operation that finds no kept connection takes the first
/// of a kept one handed back and one from the pool.
///
/// # Dead connections
///
/// After a server restart or `KILL <id>`, the pool still holds connections whose server
/// threads are gone. An operation that meets one runs its statement again on the next
/// connection (at most once per pooled connection, plus one). Re-running is harmless:
/// release and extend are token-checked, and an acquisition recognises a live lease of
/// its own token as acquired, keeping its fence.
///
/// Cloning is cheap and clones share the pool.
#[derive(Clone)]
pub struct MysqlLockStore {
    pub(crate) pool: MySqlPool,
    pub(crate) sql: Arc<Statements>,
    layout: Arc<Layout>,
    create_schema: bool,
    in_flight: Arc<InFlight>,
    /// Connections kept between acquire and release statements (see "Connections" above).
    kept: Arc<KeptConnections<MySql>>,
    notifier: Arc<Notifier>,
}

impl fmt::Debug for MysqlLockStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlLockStore")
            .field("table", &self.table_name())
            .field("create_schema", &self.create_schema)
            .field("pool_size", &self.pool.size())
            .finish()
    }
}

/// Why a release or extend that found nothing to change after a lost connection is an
/// error, not `false`: the first attempt may have done it before the connection died
/// (the server commits, then cannot answer), so "not held" would be a false answer.
pub(crate) const UNKNOWN_OUTCOME: &str =
    "the connection was lost while the statement ran and it may have taken effect: outcome unknown";

impl MysqlLockStore {
    pub(crate) fn from_parts(pool: MySqlPool, sql: Arc<Statements>, layout: Arc<Layout>, create_schema: bool) -> Self {
        let notifier = Arc::new(Notifier::new(&pool.connect_options(), sql.listen.clone(), sql.purge_waiters.clone()));
        let kept = Arc::new(KeptConnections::new(pool.clone()));
        Self { pool, sql, layout, create_schema, in_flight: Arc::default(), kept, notifier }
    }

    /// The pool the store works on.
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// The lease table, quoted as it appears in the SQL, e.g. `` `distribute_lock` ``.
    pub fn table_name(&self) -> String {
        self.layout.table.quoted()
    }

    /// Whether [`ensure_schema`](Self::ensure_schema) may create what is missing (see
    /// [`create_schema`](crate::MysqlLockStoreBuilder::create_schema)).
    pub fn creates_schema(&self) -> bool {
        self.create_schema
    }

    /// The `CREATE TABLE IF NOT EXISTS` statements of this store's tables, exactly as
    /// [`ensure_schema`](Self::ensure_schema) sends them: for a DBA to run where the
    /// store's role may not create tables.
    pub fn ddl(&self) -> Vec<&str> {
        self.sql.ddl().to_vec()
    }

    /// The statements of this store that are of use outside it (its DDL and the upgrade
    /// of an older layout), exactly as it sends them.
    pub fn statements(&self) -> &Statements {
        &self.sql
    }

    /// Creates the store's tables if they do not exist (`CREATE TABLE IF NOT EXISTS`,
    /// safe when many processes call it at once), gives a queue or places table created
    /// without it its `placed_at` column ([`Statements::upgrade`]), then checks that the
    /// lease table has the columns the store reads. With
    /// [`create_schema(false)`](crate::MysqlLockStoreBuilder::create_schema) it creates
    /// nothing and only checks.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] (operation `"ensure schema"`) when the server fails or
    /// refuses (the server's message names the missing table, column or privilege).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: each statement is idempotent.
    pub async fn ensure_schema(&self) -> Result<(), LockError> {
        const OPERATION: &str = "ensure schema";
        if self.create_schema {
            for ddl in self.sql.ddl() {
                self.retrying(OPERATION, || sqlx::query(ddl).execute(&self.pool))
                    .await
                    .map_err(|error| LockError::store(BACKEND, OPERATION, None, error))?;
            }
            for [check, add, date] in self.sql.upgrade() {
                self.add_column(OPERATION, &check, &add, &date)
                    .await
                    .map_err(|error| LockError::store(BACKEND, OPERATION, None, error))?;
            }
        }
        self.check_schema(OPERATION).await
    }

    /// Runs `add` and then `date` when `check` fails because a column is missing (1054);
    /// a concurrent store that added it first (1060) is as good.
    async fn add_column(&self, operation: &str, check: &str, add: &str, date: &str) -> Result<(), BoxError> {
        match sqlx::query(check).execute(&self.pool).await {
            Err(error) if error_number(&error) == Some(1054) => {}
            Err(error) => return Err(self.explain(error).await),
            Ok(_) => return Ok(()),
        }
        match sqlx::query(add).execute(&self.pool).await {
            Err(error) if error_number(&error) != Some(1060) => return Err(self.explain(error).await),
            _ => {}
        }
        self.retrying(operation, || sqlx::query(date).execute(&self.pool)).await.map(|_| ())
    }

    /// Checks that the lease table exists with the columns the statements use.
    pub(crate) async fn check_schema(&self, operation: &'static str) -> Result<(), LockError> {
        self.retrying(operation, || sqlx::query(&self.sql.check_table).execute(&self.pool))
            .await
            .map(|_| ())
            .map_err(|error| LockError::store(BACKEND, operation, None, error))
    }

    pub(crate) fn fail(
        &self,
        operation: &'static str,
        key: &StoreKey,
        error: impl Into<distlock_api::BoxError>,
    ) -> LockError {
        LockError::store(BACKEND, operation, Some(key.lock_key()), error)
    }

    /// How often an operation runs its statement again after a lost connection: once per
    /// connection the pool may hold, so that a pool full of dead connections is drained.
    fn retries(&self) -> u32 {
        self.pool.options().get_max_connections()
    }

    /// Runs `statement` (a fresh future per call, each on a connection from the pool),
    /// again while it fails because its connection was lost (see "Dead connections") or
    /// its transaction was a deadlock's victim (rolled back, so nothing of it remains).
    /// Getting no connection is reported as [`NoConnection`](distlock_sql::NoConnection)
    /// (see [`explain`](Self::explain)).
    pub(crate) async fn retrying<T, F, Fut>(&self, operation: &str, statement: F) -> Result<T, BoxError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        let retry =
            Retry { lost_connections: self.retries(), deadlocks: DEADLOCK_RETRIES, is_connection_lost, is_deadlock };
        match retry.run(operation, statement).await {
            Ok(value) => Ok(value),
            Err(error) => Err(self.explain(error).await),
        }
    }

    /// The cause to report for `error`, an operation's error on the pool: a pool timeout
    /// or the server refusing a new connection becomes
    /// [`NoConnection`](distlock_sql::NoConnection), saying whether the pool was busy or
    /// which limit of the server was reached; any other error is kept.
    pub(crate) async fn explain(&self, error: sqlx::Error) -> BoxError {
        explain_refusal(&self.pool, error, is_refusal).await
    }

    /// The queued attempt (see [`LockStore::try_acquire_queued`]) as one transaction: the
    /// key's lease row is locked (made first, by its own autocommit statement, when the
    /// key has none yet), the oldest live place read when the lease is free, and then
    /// either the lease taken (the token's place and the expired places removed) or the
    /// token's place taken or refreshed.
    ///
    /// A waiter a release handed the key to (as this store saw) leaves its place with one
    /// `DELETE` and takes the lease with one token-checked `UPDATE` instead (no
    /// transaction: a lease its token holds is no other attempt's to change), falling
    /// back to the transaction when the lease is not its own after all.
    async fn acquire_queued(
        &self,
        key: &StoreKey,
        token: &Token,
        ttl: Ttl,
        place: Ttl,
    ) -> Result<Acquire, sqlx::Error> {
        let me = token.as_str().as_bytes();
        let mut attempt = self.in_flight.begin(token);
        let conn = self.pool.acquire().await?;
        let conn = attempt.hold(conn);
        if self.notifier.take_handed(token.as_str()) {
            // The place goes first: cancelled after the take, the attempt would leave a
            // place no release removes (the lease no longer marked as handed), to which
            // a later release would hand the key. A lease handed to the token ends with
            // its place, so a place removed here had lapsed when the lease turns out not
            // to be the token's.
            sqlx::query(&self.sql.leave).bind(key.as_str()).bind(token.as_str()).execute(&mut **conn).await?;
            let done = sqlx::query(&self.sql.take_handed)
                .bind(sql::millis(ttl.as_duration()))
                .bind(key.as_str())
                .bind(token.as_str())
                .execute(&mut **conn)
                .await?;
            if done.rows_affected() == 1 {
                attempt.finish();
                return Ok(Acquire::Acquired { fence: Some(done.last_insert_id()) });
            }
        }
        let lock_lease = || sqlx::query_as::<_, (Option<Vec<u8>>, i64, i64)>(&self.sql.lock_lease).bind(key.as_str());
        let mut tx = conn.begin().await?;
        let mut row = lock_lease().fetch_optional(&mut *tx).await?;
        if row.is_none() {
            // Made outside the transaction, so that two attempts never both hold a lock
            // on the missing row and then wait for each other.
            tx.rollback().await?;
            sqlx::query(&self.sql.ensure_row).bind(key.as_str()).execute(&mut **conn).await?;
            tx = conn.begin().await?;
            row = lock_lease().fetch_optional(&mut *tx).await?;
        }
        let (holder, live, micros_left) = row.ok_or(sqlx::Error::RowNotFound)?;
        let live = live != 0 && holder.is_some();
        let mine = live && holder.as_deref() == Some(me);
        let first = if live {
            false
        } else {
            let head: Option<Vec<u8>> =
                sqlx::query_scalar(&self.sql.head).bind(key.as_str()).fetch_optional(&mut *tx).await?;
            head.is_none_or(|head| head == me)
        };
        let answer = if mine || first {
            let done = sqlx::query(&self.sql.take)
                .bind(token.as_str())
                .bind(token.as_str())
                .bind(sql::millis(ttl.as_duration()))
                .bind(key.as_str())
                .execute(&mut *tx)
                .await?;
            sqlx::query(&self.sql.leave).bind(key.as_str()).bind(token.as_str()).execute(&mut *tx).await?;
            Acquire::Acquired { fence: Some(done.last_insert_id()) }
        } else {
            sqlx::query(&self.sql.place)
                .bind(key.as_str())
                .bind(token.as_str())
                .bind(sql::millis(place.as_duration()))
                .execute(&mut *tx)
                .await?;
            let ttl_left = live.then(|| Duration::from_micros(u64::try_from(micros_left).unwrap_or(1)));
            Acquire::Held { ttl_left }
        };
        tx.commit().await?;
        attempt.finish();
        Ok(answer)
    }
}

/// How often a transaction the server rolled back as a deadlock's victim is run again.
const DEADLOCK_RETRIES: u32 = 5;

/// The longest one registration of a waiter lasts (a longer wait returns early, and the
/// caller registers again).
const MAX_REGISTRATION: Duration = Duration::from_secs(60);

/// How long after a lease's end (as the server computed it) a waiter wakes to retry.
const EXPIRY_MARGIN: Duration = Duration::from_millis(2);

impl MysqlLockStore {
    /// Waits at most `max` until `key` is released (or handed to `me`): registers the
    /// store's listener for the key's release, checks that the key is still held, and
    /// sleeps until the listener is interrupted, the lease runs out, or `max`.
    async fn wait_until_free(&self, key: &StoreKey, me: Option<&Token>, max: Duration) -> Result<(), LockError> {
        let me = me.map_or("", Token::as_str);
        let fail = |error| self.fail("wait for release", key, error);
        let register = |listener: i64, registration: Duration| async move {
            self.retrying("wait for release", || {
                sqlx::query(&self.sql.register)
                    .bind(key.as_str())
                    .bind(listener)
                    .bind(me)
                    .bind(sql::millis(registration))
                    .execute(&self.pool)
            })
            .await
            .map(drop)
            .map_err(fail)
        };
        let held = || async move {
            let left: Option<i64> = self
                .retrying("wait for release", || {
                    sqlx::query_scalar(&self.sql.held).bind(me).bind(key.as_str()).fetch_optional(&self.pool)
                })
                .await
                .map_err(fail)?;
            if left == Some(0) {
                // Handed to `me`: its next queued attempt takes it without a transaction.
                self.notifier.mark_handed(me);
                return Ok(None);
            }
            Ok(left)
        };
        let target = (!me.is_empty()).then_some(me);
        self.wait_woken(&[key.as_str()], target, max, register, held).await
    }

    /// The waiting both single keys and groups do: once the store's listener is connected,
    /// `register` records it (with how long the registration must last) as waiting for
    /// what the caller waits for, `blocked` then tells whether that is still taken (µs
    /// until its lease ends; `None`: free, the wait ends at once; asked again after each
    /// wake-up from another store), and the wait lasts
    /// until the listener is interrupted (or a release in this process wakes the waiter
    /// of `names`, the fair waiter `token` or, with `None`, any), that lease ends, or
    /// `max`. Registering before the check means a release between the two is never
    /// missed.
    pub(crate) async fn wait_woken<R, RF, B, BF>(
        &self,
        names: &[&str],
        token: Option<&str>,
        max: Duration,
        register: R,
        blocked: B,
    ) -> Result<(), LockError>
    where
        R: FnOnce(i64, Duration) -> RF,
        RF: Future<Output = Result<(), LockError>>,
        B: Fn() -> BF,
        BF: Future<Output = Result<Option<i64>, LockError>>,
    {
        let deadline = deadline_after(max);
        if !self.layout.notify {
            tokio::time::sleep_until(deadline).await;
            return Ok(());
        }
        let mut changes = self.notifier.subscribe();
        let bell = self.notifier.bell().notified();
        tokio::pin!(bell);
        bell.as_mut().enable();
        let local = self.notifier.wait_locally(names, token);
        let woken = local.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        // Until the listener is connected no release can reach this waiter: sleep, cut
        // short when it comes up.
        let listener = loop {
            if let Some(listener) = self.notifier.listener() {
                break listener;
            }
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => return Ok(()),
                changed = changes.changed() => {
                    if changed.is_err() {
                        tokio::time::sleep_until(deadline).await;
                        return Ok(());
                    }
                }
            }
        };
        changes.mark_unchanged();
        let registration = max.min(MAX_REGISTRATION);
        register(i64::try_from(listener).unwrap_or(i64::MAX), registration + Duration::from_secs(1)).await?;
        let registered_until = deadline_after(registration);
        loop {
            let Some(micros_left) = blocked().await? else { return Ok(()) };
            let left = Duration::from_micros(u64::try_from(micros_left).unwrap_or(1)).saturating_add(EXPIRY_MARGIN);
            let until = deadline.min(deadline_after(left)).min(registered_until);
            tokio::select! {
                // Another store's release interrupted the listener, which wakes every
                // waiter of this store: look again, and sleep on when still blocked (the
                // release was of another key, or handed this one to another waiter).
                () = bell.as_mut() => {
                    bell.set(self.notifier.bell().notified());
                    bell.as_mut().enable();
                }
                () = woken.as_mut() => return Ok(()),
                () = tokio::time::sleep_until(until) => return Ok(()),
                _ = changes.changed() => return Ok(()),
            }
        }
    }

    /// Wakes, in a task of its own, the waiters of `key`'s release: in this process in
    /// memory, in other stores by interrupting their listeners. A lease handed to a
    /// queued waiter wakes only that waiter (and waiters for any release), whose
    /// registration is then deleted.
    fn wake(&self, key: &StoreKey) {
        let (pool, sql, notifier) = (self.pool.clone(), Arc::clone(&self.sql), Arc::clone(&self.notifier));
        let key = key.as_str().to_owned();
        tokio::spawn(async move {
            let listeners = sqlx::query_as::<_, (i64, Option<Vec<u8>>)>(&sql.listeners).bind(&key).fetch_all(&pool);
            let listeners = match listeners.await {
                Ok(listeners) => listeners,
                Err(error) => {
                    tracing::debug!(%error, key, "could not read the waiting listeners");
                    return;
                }
            };
            let handed = listeners.iter().find_map(|(_, token)| token.as_deref()).map(token_text);
            notifier.wake(listeners.iter().map(|(listener, _)| *listener).collect(), &[key.as_str()], handed);
            if let Some(handed) = handed {
                if let Err(error) = sqlx::query(&sql.forget_waiter).bind(&key).bind(handed).execute(&pool).await {
                    tracing::debug!(%error, key, "could not delete the registration of the waiter handed the key");
                }
            }
        });
    }

    /// Wakes, in a task of its own, the waiters for a change of one of `names` (group
    /// names whose holds or places went): the caller does not wait for it.
    pub(crate) fn wake_names(&self, names: Vec<String>) {
        if !self.layout.notify || names.is_empty() {
            return;
        }
        let (pool, sql, notifier) = (self.pool.clone(), Arc::clone(&self.sql), Arc::clone(&self.notifier));
        tokio::spawn(async move {
            let statement = sql::in_list(&sql.listeners_of, names.len());
            let mut query = sqlx::query_scalar::<_, i64>(&statement);
            for name in &names {
                query = query.bind(name.as_str());
            }
            match query.fetch_all(&pool).await {
                Ok(listeners) => {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    notifier.wake(listeners, &names, None);
                }
                Err(error) => tracing::debug!(%error, "could not read the listeners waiting for a group"),
            }
        });
    }
}

#[async_trait]
impl LockStore for MysqlLockStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE.with_fencing(true).with_fair_queue(true).with_release_notifications(self.layout.notify)
    }

    /// Always: see "Lock groups" in the crate documentation.
    fn queue(&self) -> Option<&dyn QueueStore> {
        Some(self)
    }

    fn groups(&self) -> Option<&dyn GroupLockStore> {
        Some(self)
    }

    /// Always: see "Values attached to leases" in the crate documentation.
    fn values(&self) -> Option<&dyn LeaseValueStore> {
        Some(self)
    }

    /// One `INSERT … ON DUPLICATE KEY UPDATE` whose conditional assignments take a free
    /// or expired row and report the fence through `LAST_INSERT_ID(expr)` (run again on
    /// another connection when its connection was lost).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the statement either commits or not. If the future is dropped while
    /// the statement is in flight, a [`release`](LockStore::release) with the same token
    /// first waits until the statement has been answered.
    async fn try_acquire(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<Acquire, LockError> {
        let ttl_ms = sql::millis(ttl.as_duration());
        let mut attempt = self.in_flight.begin(token);
        let mut retries = self.retries();
        let done = loop {
            let conn = match self.kept.checkout().await {
                Ok(conn) => conn,
                Err(error) => return Err(self.fail("acquire", key, self.explain(error).await)),
            };
            let done = sqlx::query(&self.sql.acquire)
                .bind(key.as_str())
                .bind(token.as_str())
                .bind(ttl_ms)
                .bind(token.as_str())
                .bind(token.as_str())
                .bind(token.as_str())
                .bind(ttl_ms)
                .execute(&mut **attempt.hold(conn))
                .await;
            match done {
                Err(error) if retries > 0 && is_connection_lost(&error) => {
                    retries -= 1;
                    tracing::debug!(%error, "lost a pooled connection; acquiring again on another");
                }
                done => break done,
            }
        };
        let conn = attempt.finish();
        let fence = done.map_err(|error| self.fail("acquire", key, error))?.last_insert_id();
        if let Some(conn) = conn {
            self.kept.keep(conn);
        }
        Ok(if fence == 0 { Acquire::Held { ttl_left: None } } else { Acquire::Acquired { fence: Some(fence) } })
    }

    /// One token-checked `UPDATE` that frees the lease or hands it to the oldest live
    /// queued waiter, sent once any cancelled acquisition with the same token has been
    /// answered; then, when the token was (or had been handed the key as) a queued
    /// waiter, one `DELETE` of its place.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: each statement either committed or did not; a place left behind
    /// expires with its lease.
    async fn release(&self, key: &StoreKey, token: &Token) -> Result<bool, LockError> {
        self.in_flight.settled(token).await;
        let mut attempts = 0;
        let done = self
            .retrying("release", || {
                attempts += 1;
                async move {
                    let mut conn = self.kept.checkout().await?;
                    let query = sqlx::query(&self.sql.release).bind(key.as_str()).bind(token.as_str());
                    let query = query.bind(key.as_str()).bind(token.as_str()).bind(key.as_str()).bind(token.as_str());
                    let done = query.execute(&mut **conn).await;
                    if done.is_ok() {
                        self.kept.keep(conn);
                    }
                    done
                }
            })
            .await
            .map_err(|error| self.fail("release", key, error))?;
        if done.rows_affected() == 0 && attempts > 1 {
            return Err(self.fail("release", key, UNKNOWN_OUTCOME));
        }
        let released = done.rows_affected() == 1;
        let bits = done.last_insert_id().saturating_sub(1);
        if released && bits & 2 != 0 {
            self.wake(key);
        }
        // The lease had been handed to this token as a waiter, whose place remains.
        if !released || bits & 1 != 0 {
            self.retrying("release", || {
                sqlx::query(&self.sql.remove_place).bind(key.as_str()).bind(token.as_str()).execute(&self.pool)
            })
            .await
            .map_err(|error| self.fail("release", key, error))?;
        }
        Ok(released)
    }

    /// One token-checked `UPDATE … SET expires_at = <clock> + ttl`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the statement either committed or did not.
    async fn extend(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<bool, LockError> {
        let mut attempts = 0;
        let done = self
            .retrying("extend", || {
                attempts += 1;
                sqlx::query(&self.sql.extend)
                    .bind(sql::millis(ttl.as_duration()))
                    .bind(key.as_str())
                    .bind(token.as_str())
                    .execute(&self.pool)
            })
            .await
            .map_err(|error| self.fail("extend", key, error))?;
        if done.rows_affected() == 0 && attempts > 1 {
            return Err(self.fail("extend", key, UNKNOWN_OUTCOME));
        }
        Ok(done.rows_affected() == 1)
    }

    /// One `SELECT`; the time left is computed on the server.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn inspect(&self, key: &StoreKey) -> Result<Option<LockInfo>, LockError> {
        let row = self
            .retrying("inspect", || {
                sqlx::query_as::<_, (Option<Vec<u8>>, i64, i64)>(&self.sql.inspect)
                    .bind(key.as_str())
                    .fetch_optional(&self.pool)
            })
            .await
            .map_err(|error| self.fail("inspect", key, error))?;
        let Some((Some(token), fence, micros_left)) = row else {
            return Ok(None);
        };
        let info = lock_info(token_text(&token), fence, micros_left)
            .map_err(|what| self.fail("inspect", key, UnexpectedAnswer(what)))?;
        Ok(Some(info))
    }

    /// Registers the store's listener for the release of `key` (one upsert), checks that
    /// the key is still held (one `SELECT`: a free key returns at once), and waits until
    /// a release interrupts the listener, the lease runs out, or `max` (see "Waiting" in
    /// the crate documentation). With
    /// [`release_notifications(false)`](crate::MysqlLockStoreBuilder::release_notifications),
    /// or while the listener is not connected, it sleeps `max`.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] (operation `"wait for release"`) when the registration or
    /// the check failed; the caller then sleeps instead.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a registration left behind expires.
    async fn wait_for_release(&self, key: &StoreKey, max: Duration) -> Result<(), LockError> {
        self.wait_until_free(key, None, max).await
    }

    /// One `SELECT` per page: keyset pagination over the primary key.
    ///
    /// The page is the next `limit` rows (at most [`ListPage::MAX_LIMIT`]) after the
    /// cursor within the key range of the pattern's literal prefix (a range scan of the
    /// binary primary key), whether they match or not; of those it returns the held ones
    /// that match. The cursor is the last key examined. It takes no row locks.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] when the statement fails; [`LockError::Config`] for a cursor
    /// that is not a key of this store.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn list(
        &self,
        pattern: &KeyPattern,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, LockError> {
        let after = page_start(cursor, "MySQL")?;
        let unexpected = |what: String| LockError::store(BACKEND, "list", None, UnexpectedAnswer(what));
        let (lowest, beyond) = key_range(pattern).map_err(unexpected)?;
        let limit = limit.clamp(1, ListPage::MAX_LIMIT);
        let page_size = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows: Vec<ListRow> = self
            .retrying("list", || {
                sqlx::query_as(&self.sql.list)
                    .bind(&lowest)
                    .bind(after)
                    .bind(&beyond)
                    .bind(page_size)
                    .fetch_all(&self.pool)
            })
            .await
            .map_err(|error| LockError::store(BACKEND, "list", None, error))?;
        let examined = rows.len();
        let last = rows.last().map(|(key, ..)| key.clone());
        let mut locks = Vec::new();
        for (key, token, fence, micros_left) in rows {
            let (Some(token), Some(micros_left)) = (token, micros_left) else { continue };
            let key =
                String::from_utf8(key).map_err(|_| unexpected("the table holds a key that is not UTF-8".into()))?;
            locks.extend(held_lock(pattern, &key, token_text(&token), fence, micros_left).map_err(unexpected)?);
        }
        let next = match last {
            Some(last) if examined >= limit => Some(ListCursor::new(
                String::from_utf8(last).map_err(|_| unexpected("the table holds a key that is not UTF-8".into()))?,
            )),
            _ => None,
        };
        Ok(ListPage::new(locks, next))
    }
}

#[async_trait]
impl QueueStore for MysqlLockStore {
    /// A queued attempt does more than a plain one: the manager queues after a plain
    /// attempt found the key held.
    fn queues_in_first_attempt(&self) -> bool {
        false
    }

    /// One short transaction (MySQL has no data-modifying common table expressions, so
    /// reading the queue and writing the lease cannot be one statement): takes the key
    /// when it was handed to `token`, or is free with `token` first in line (or nobody
    /// waiting); otherwise takes or refreshes `token`'s place in the queue table for
    /// `place`. See "Fair waiting" in the crate documentation.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped transaction is rolled back (a release with the same token
    /// waits until it has been); a place left behind expires, and the manager's release
    /// with the same token removes it.
    async fn try_acquire_queued(&self, attempt: QueuedAttempt<'_>) -> Result<Acquire, LockError> {
        let QueuedAttempt { key, token, ttl, place } = attempt;
        self.retrying("acquire", || self.acquire_queued(key, token, ttl, place))
            .await
            .map_err(|error| self.fail("acquire", key, error))
    }

    /// As [`wait_for_release`](LockStore::wait_for_release); a lease handed to `token`
    /// counts as free.
    async fn wait_for_turn(&self, key: &StoreKey, token: &Token, max: Duration) -> Result<(), LockError> {
        self.wait_until_free(key, Some(token), max).await
    }

    /// One `SELECT COUNT(*)` of the key's live places.
    async fn queue_len(&self, key: &StoreKey) -> Result<usize, LockError> {
        let count: i64 = self
            .retrying("queue length", || {
                sqlx::query_scalar(&self.sql.queue_len).bind(key.as_str()).fetch_one(&self.pool)
            })
            .await
            .map_err(|error| self.fail("queue length", key, error))?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    /// One `SELECT` of the key's live places in arrival order, with the times left and
    /// waited (since the place was taken) on the server's clock.
    async fn queue_places(&self, key: &StoreKey) -> Result<Vec<WaitingPlace>, LockError> {
        let found: Vec<(Vec<u8>, i64, i64)> = self
            .retrying("queue places", || {
                sqlx::query_as(&self.sql.queue_places).bind(key.as_str()).fetch_all(&self.pool)
            })
            .await
            .map_err(|error| self.fail("queue places", key, error))?;
        found
            .into_iter()
            .map(|(token, micros_left, micros_waited)| {
                waiting_place(token_text(&token), LockMode::Exclusive, micros_left, micros_waited)
                    .map_err(|what| self.fail("queue places", key, UnexpectedAnswer(what)))
            })
            .collect()
    }
}

/// One row of `lease/list.sql`: `(key, token, fence, µs left when held)`.
type ListRow = (Vec<u8>, Option<Vec<u8>>, i64, Option<i64>);

/// A token as stored (ASCII bytes), or `None` when it is not one distlock wrote.
pub(crate) fn parse_token(bytes: &[u8]) -> Option<Token> {
    Token::parse(token_text(bytes)).ok()
}

/// A stored token's text; empty (not a token) when the bytes are not UTF-8.
pub(crate) fn token_text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap_or_default()
}

/// The range of stored keys a listing of `pattern` reads: from the namespace and the
/// pattern's literal prefix (inclusive) to the first key beyond them (exclusive).
///
/// # Errors
///
/// What is wrong, for the store's "unexpected answer" error: no key follows the prefix.
pub(crate) fn key_range(pattern: &KeyPattern) -> Result<(String, Vec<u8>), String> {
    let lowest = format!("{LOCK_NAMESPACE}{}", pattern.literal_prefix());
    let beyond =
        prefix_successor(lowest.as_bytes()).ok_or_else(|| format!("no key range for the prefix {lowest:?}"))?;
    Ok((lowest, beyond))
}

/// The smallest byte string greater than every string that starts with `prefix`, or
/// `None` when there is none (all bytes 0xFF).
fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut bytes = prefix.to_vec();
    while let Some(last) = bytes.pop() {
        if last < u8::MAX {
            bytes.push(last + 1);
            return Some(bytes);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_successors_bound_every_key_with_the_prefix() {
        assert_eq!(prefix_successor(b"lock:").as_deref(), Some(&b"lock;"[..]));
        assert_eq!(prefix_successor(b"lock:a\xff").as_deref(), Some(&b"lock:b"[..]));
        assert_eq!(prefix_successor(b"\xff"), None);
    }
}
