//! `PostgresLockStore`: the `LockStore` implementation over a `PgPool`.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use distlock_api::waiters::{deadline_after, KeyState};
use distlock_api::{
    async_trait, Acquire, Capabilities, GroupLockStore, KeyPattern, LeaseValueStore, ListCursor, ListPage, LockError,
    LockInfo, LockStore, QueueStore, QueuedAttempt, StoreKey, Token, Ttl, WaitingPlace, LOCK_NAMESPACE,
};
use sqlx::postgres::PgPool;
use sqlx::Postgres;
use tokio::sync::OnceCell;

use crate::config::{Layout, MIN_PURGE_HORIZON};
use crate::error::{
    is_connection_lost, is_deadlock, GroupSchemaMissing, SchemaProblem, SlowAcquire, UnexpectedAnswer, BACKEND,
};
use crate::group_sql::{GroupSchemaState, GroupStatements, HOLDER_COLUMNS, PERMIT_COLUMNS};
use crate::notify::{Notifier, TURN};
use crate::sql::{self, SchemaState, Statements, SCHEMA_LOCK_KEY};
use distlock_sql::connect::explain;
use distlock_sql::listing::{held_lock, lock_info, page_start};
use distlock_sql::{InFlight, KeptConnections, Retry};

/// Whether the queue table is there (checked, or created, once per store), and the keys
/// this store recently saw waiters queue for.
#[derive(Debug, Default)]
pub(crate) struct QueueState {
    pub(crate) ready: OnceCell<bool>,
    pub(crate) queued: crate::recent::RecentlyQueued,
}

impl QueueState {
    /// What the check found, if it ran.
    pub(crate) fn is_ready(&self) -> Option<bool> {
        self.ready.get().copied()
    }
}

/// A [`LockStore`] keeping leases in a PostgreSQL table.
///
/// Every operation is one autocommit statement on the pool, timed by the server's
/// `clock_timestamp()`; see the crate documentation for the table and the statements.
/// Fencing is always on: every acquisition returns a fence strictly greater than every
/// earlier one for the key.
///
/// # Connections
///
/// Acquisitions and releases keep their connection for the next one: sqlx gives a
/// connection back to its pool with a ping, a round trip per statement that costs a third
/// of the statements per second on a busy client. A connection goes back to the pool when
/// its statement failed or was cancelled, when it has been out of the pool for 250 ms,
/// and when no acquisition or release used it for 50 ms, so the pool's other users, its
/// `max_lifetime` and `idle_timeout`, and `Pool::close` still get every connection
/// back soon. An operation that finds no kept connection takes the first of a kept one handed
/// back and one from the pool.
///
/// # Dead connections
///
/// After a server restart, a failover or `pg_terminate_backend`, the pool still holds
/// connections whose backends are gone. An operation that meets one runs its statement
/// again on the next connection (at most once per pooled connection, plus one), so a
/// release, an extend or an acquisition gets through as soon as a live connection can be
/// had, instead of failing once per dead connection. Re-running is harmless: release and
/// extend are token-checked, and a re-run acquisition recognises a lease its first run
/// wrote for the same token (`lease/reacquire.sql`), keeping its fence. Only errors
/// that mean the connection was lost are retried; a pool timeout is not.
///
/// Cloning is cheap and clones share the pool.
#[derive(Clone)]
pub struct PostgresLockStore {
    pool: PgPool,
    sql: Arc<Statements>,
    layout: Arc<Layout>,
    create_schema: bool,
    /// Set once the group objects were found (or made) usable: checked at the first group
    /// operation, not at connect, so a schema made by a version without groups works for
    /// single locks as it is.
    group_schema: Arc<tokio::sync::OnceCell<()>>,
    pub(crate) in_flight: Arc<InFlight>,
    /// Connections kept between acquire and release statements (see "Connections" above).
    pub(crate) kept: Arc<KeptConnections<Postgres>>,
    pub(crate) notifier: Arc<Notifier>,
    queue: Arc<QueueState>,
    /// Set once the table of lease values was found (or made): checked at the first
    /// `set_value` or `inspect_value`, like the group objects.
    values: Arc<OnceCell<()>>,
}

impl fmt::Debug for PostgresLockStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresLockStore")
            .field("table", &self.table_name())
            .field("sequence", &self.sequence_name())
            .field("unlogged", &self.layout.unlogged)
            .field("create_schema", &self.create_schema)
            .field("channel", &self.notifier.channel())
            .field("pool_size", &self.pool.size())
            .finish()
    }
}

impl PostgresLockStore {
    pub(crate) fn from_parts(pool: PgPool, sql: Arc<Statements>, layout: Arc<Layout>, create_schema: bool) -> Self {
        let notifier = Arc::new(Notifier::new(sql.channel.clone(), pool.clone()));
        Self {
            kept: Arc::new(KeptConnections::new(pool.clone())),
            pool,
            sql,
            layout,
            create_schema,
            group_schema: Arc::default(),
            in_flight: Arc::default(),
            notifier,
            queue: Arc::default(),
            values: Arc::default(),
        }
    }

    pub(crate) fn queue_state(&self) -> &QueueState {
        &self.queue
    }

    /// Whether the table of lease values was found (or made) usable.
    pub(crate) fn values_state(&self) -> &OnceCell<()> {
        &self.values
    }

    /// The pool the store works on.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The lease table, qualified and quoted as it appears in the SQL, e.g.
    /// `"public"."distribute_lock"`.
    pub fn table_name(&self) -> String {
        format!("{}.{}", self.layout.schema.quoted(), self.layout.table.quoted())
    }

    /// The fence sequence, qualified and quoted, e.g. `"public"."distlock_fence_seq"`.
    pub fn sequence_name(&self) -> String {
        format!("{}.{}", self.layout.schema.quoted(), self.layout.sequence.quoted())
    }

    /// Whether [`ensure_schema`](Self::ensure_schema) creates the table `UNLOGGED`.
    pub fn is_unlogged(&self) -> bool {
        self.layout.unlogged
    }

    /// Whether [`ensure_schema`](Self::ensure_schema) may create what is missing (see
    /// [`create_schema`](crate::PostgresLockStoreBuilder::create_schema)).
    pub fn creates_schema(&self) -> bool {
        self.create_schema
    }

    /// The statements of this store that are of use outside it: its DDL and its
    /// notification channel, exactly as it sends them.
    pub fn statements(&self) -> &Statements {
        &self.sql
    }

    /// Creates the schema, the fence sequence, the lease table and the objects of lock
    /// groups if they do not exist, then checks that the table has the columns the store
    /// uses and that this role may use it. With
    /// [`create_schema(false)`](crate::PostgresLockStoreBuilder::create_schema) it creates
    /// nothing and only checks the lease table's layout: the group objects are checked at
    /// the first group operation (see [`GroupSchemaMissing`](crate::GroupSchemaMissing)).
    ///
    /// Idempotent and safe when many processes call it at the same moment: when anything
    /// is missing, the `CREATE … IF NOT EXISTS` statements run in one transaction
    /// serialised by `pg_advisory_xact_lock`. When everything exists it only reads the
    /// catalog, so a role without `CREATE` privileges may call it too. An existing table
    /// is left as it is (a logged table is not made `UNLOGGED` or the reverse; a
    /// mismatch is logged as a warning).
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] (operation `"ensure schema"`) when the server fails or
    /// refuses, or when the layout is incomplete or unusable (the message names what is
    /// missing: the schema, the sequence, the table, a column such as `waiting`, or a
    /// privilege).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped transaction is rolled back; nothing half-created remains.
    pub async fn ensure_schema(&self) -> Result<(), LockError> {
        const OPERATION: &str = "ensure schema";
        if !self.create_schema {
            return self.check_schema(OPERATION).await;
        }
        let fail = |error: sqlx::Error| LockError::store(BACKEND, OPERATION, None, error);
        let (schema, _, sequence, _, table, ..) = self.schema_state(&self.pool).await.map_err(fail)?;
        let groups = self.group_schema_state(&self.pool).await.map_err(fail)?;
        if !(schema && sequence && table.is_some() && GroupStatements::complete(&groups)) {
            let mut tx = self.begin_schema_change().await.map_err(fail)?;
            // Re-read under the lock: `CREATE SCHEMA IF NOT EXISTS` needs the CREATE
            // privilege on the database even when the schema exists.
            let (schema, ..) = self.schema_state(&mut *tx).await.map_err(fail)?;
            if !schema {
                sqlx::query(&self.sql.create_schema).execute(&mut *tx).await.map_err(fail)?;
            }
            sqlx::query(&self.sql.create_sequence).execute(&mut *tx).await.map_err(fail)?;
            sqlx::query(&self.sql.create_table).execute(&mut *tx).await.map_err(fail)?;
            self.create_group_objects(&mut tx).await.map_err(fail)?;
            tx.commit().await.map_err(fail)?;
        }
        self.check_schema(OPERATION).await?;
        self.ensure_group_schema().await
    }

    /// Makes sure the objects of lock groups exist and are usable, once per store (and
    /// its clones): at the first group operation, so that connecting to a schema created
    /// by a version without groups (or with `create_schema(false)`) works for single locks.
    /// Creates what is missing when the store may create; otherwise fails with
    /// [`GroupSchemaMissing`] naming it. A failure is not remembered: the next group
    /// operation checks again.
    pub(crate) async fn ensure_group_schema(&self) -> Result<(), LockError> {
        const OPERATION: &str = "prepare lock groups";
        self.group_schema
            .get_or_try_init(|| async {
                let fail = |error: sqlx::Error| LockError::store(BACKEND, OPERATION, None, error);
                let state = self.group_schema_state(&self.pool).await.map_err(fail)?;
                let mut problems = self.sql.groups.problems(&self.layout.schema, &state);
                if !self.create_schema && !GroupStatements::function_current(&state) {
                    tracing::warn!(
                        function = self.sql.groups.function_name.as_str(),
                        "the group grant function in the schema is not the one this version of distlock \
                         creates, and the store does not create its schema: run its statement of \
                         Statements::ddl to replace it"
                    );
                }
                if !GroupStatements::complete(&state) && self.create_schema {
                    let mut tx = self.begin_schema_change().await.map_err(fail)?;
                    self.create_group_objects(&mut tx).await.map_err(fail)?;
                    tx.commit().await.map_err(fail)?;
                    let state = self.group_schema_state(&self.pool).await.map_err(fail)?;
                    problems = self.sql.groups.problems(&self.layout.schema, &state);
                }
                if problems.is_empty() {
                    return Ok(());
                }
                let statements = self.sql.groups.ddl().iter().map(|ddl| (*ddl).to_owned()).collect();
                Err(LockError::store(
                    BACKEND,
                    OPERATION,
                    None,
                    GroupSchemaMissing { missing: problems, statements, may_create: self.create_schema },
                ))
            })
            .await
            .map(|_| ())
    }

    /// A transaction for DDL, serialised with every other store's by
    /// `pg_advisory_xact_lock`: plain `CREATE … IF NOT EXISTS` run at the same moment by
    /// several processes can fail with a unique violation in the catalog.
    pub(crate) async fn begin_schema_change(&self) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(&self.sql.lock_schema).bind(SCHEMA_LOCK_KEY).execute(&mut *tx).await?;
        Ok(tx)
    }

    /// Creates the group objects missing as `tx` sees them (an existing function is never
    /// replaced).
    async fn create_group_objects(&self, tx: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
        let state = self.group_schema_state(&mut *tx).await?;
        for ddl in self.sql.groups.creation(&state) {
            sqlx::query(ddl).execute(&mut *tx).await?;
        }
        Ok(())
    }

    /// Whether the holders table exists (for the purge, which skips it otherwise).
    pub(crate) async fn has_group_tables(&self) -> Result<bool, sqlx::Error> {
        if self.group_schema.initialized() {
            return Ok(true);
        }
        Ok(self.group_schema_state(&self.pool).await?.0.is_some())
    }

    /// Checks that the schema, the sequence and the table exist, that the table has the
    /// columns the statements use, and that this role may use them; the error names
    /// everything missing.
    pub(crate) async fn check_schema(&self, operation: &'static str) -> Result<(), LockError> {
        let state =
            self.schema_state(&self.pool).await.map_err(|error| LockError::store(BACKEND, operation, None, error))?;
        let (schema, schema_usable, sequence, sequence_usable, table, missing_columns, missing_privileges) = state;
        let mut missing = Vec::new();
        let (schema_name, table_name, sequence_name) =
            (self.layout.schema.quoted(), self.table_name(), self.sequence_name());
        if !schema {
            missing.push(format!("schema {schema_name} does not exist"));
        } else if schema_usable == Some(false) {
            missing.push(format!("no USAGE privilege on schema {schema_name}"));
        }
        if schema && !sequence {
            missing.push(format!("sequence {sequence_name} does not exist"));
        } else if sequence_usable == Some(false) {
            missing.push(format!("no USAGE privilege on sequence {sequence_name}"));
        }
        match &table {
            None if schema => missing.push(format!("table {table_name} does not exist")),
            None => {}
            Some(persistence) => {
                if !missing_columns.is_empty() {
                    missing.push(format!("table {table_name} has no column {}", missing_columns.join(", ")));
                }
                if !missing_privileges.is_empty() {
                    missing.push(format!("no {} privilege on table {table_name}", missing_privileges.join(", ")));
                }
                let unlogged = persistence == "u";
                if unlogged != self.layout.unlogged {
                    tracing::warn!(
                        table = %table_name,
                        existing_unlogged = unlogged,
                        configured_unlogged = self.layout.unlogged,
                        "the lease table exists with another persistence than configured; leaving it as it is"
                    );
                }
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let hint = if self.create_schema {
            "the lease table was not created by this version of distlock; drop it or use another table"
        } else {
            "create_schema is off, so the store creates nothing: run the statements of `Statements::ddl` as the owner"
        };
        Err(LockError::store(BACKEND, operation, None, SchemaProblem(format!("{} ({hint})", missing.join("; ")))))
    }

    async fn schema_state<'e, E>(&self, executor: E) -> Result<SchemaState, sqlx::Error>
    where
        E: sqlx::Executor<'e, Database = sqlx::Postgres>,
    {
        sqlx::query_as::<_, SchemaState>(&self.sql.schema_state)
            .bind(self.layout.schema.as_str())
            .bind(self.layout.sequence.as_str())
            .bind(self.layout.table.as_str())
            .bind(&self.sql.columns)
            .fetch_one(executor)
            .await
    }

    async fn group_schema_state<'e, E>(&self, executor: E) -> Result<GroupSchemaState, sqlx::Error>
    where
        E: sqlx::Executor<'e, Database = sqlx::Postgres>,
    {
        let groups = &self.sql.groups;
        sqlx::query_as::<_, GroupSchemaState>(&groups.state)
            .bind(self.layout.schema.as_str())
            .bind(groups.holders_name.as_str())
            .bind(groups.permits_name.as_str())
            .bind(groups.function_name.as_str())
            .bind(HOLDER_COLUMNS)
            .bind(PERMIT_COLUMNS)
            .bind(&groups.function_body)
            .fetch_one(executor)
            .await
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
    /// A pool timeout is reported as [`NoConnection`](distlock_sql::NoConnection): the
    /// pool busy, or the server refusing new connections.
    pub(crate) async fn retrying<T, F, Fut>(&self, operation: &str, statement: F) -> Result<T, distlock_api::BoxError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        let retry =
            Retry { lost_connections: self.retries(), deadlocks: DEADLOCK_RETRIES, is_connection_lost, is_deadlock };
        match retry.run(operation, statement).await {
            Ok(value) => Ok(value),
            Err(error) => Err(explain(&self.pool, error).await),
        }
    }
}

#[async_trait]
impl LockStore for PostgresLockStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        // Until the queue table was found missing (and not created), waiting is fair.
        let fair = self.queue.is_ready() != Some(false);
        Capabilities::NONE.with_fencing(true).with_release_notifications(self.layout.notify).with_fair_queue(fair)
    }

    /// Always: see "Lock groups" in the crate documentation.
    fn queue(&self) -> Option<&dyn QueueStore> {
        self.capabilities().fair_queue.then_some(self as &dyn QueueStore)
    }

    fn groups(&self) -> Option<&dyn GroupLockStore> {
        Some(self)
    }

    /// Always: see "Values attached to leases" in the crate documentation.
    fn values(&self) -> Option<&dyn LeaseValueStore> {
        Some(self)
    }

    /// One `INSERT … ON CONFLICT (key) DO UPDATE … WHERE <expired> RETURNING fence`
    /// (run again on another connection when its connection was lost: see "Dead
    /// connections" on [`PostgresLockStore`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the statement either commits or not. If the future is dropped while
    /// the statement is in flight, a [`release`](LockStore::release) with the same token
    /// first waits until the statement has been answered, so that the release cannot run
    /// before a late acquisition (the manager releases cancelled attempts that way).
    async fn try_acquire(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<Acquire, LockError> {
        let mut attempt = self.in_flight.begin(token);
        let mut statement = &self.sql.acquire;
        let mut retries = self.retries();
        let row = loop {
            let conn = match self.kept.checkout().await {
                Ok(conn) => conn,
                Err(error) => return Err(self.fail("acquire", key, explain(&self.pool, error).await)),
            };
            let row = sqlx::query_as::<_, (i64, bool)>(statement)
                .bind(key.as_str())
                .bind(token.as_str())
                .bind(sql::millis(ttl.as_duration()))
                .fetch_optional(&mut **attempt.hold(conn))
                .await;
            match row {
                Err(error) if retries > 0 && is_connection_lost(&error) => {
                    retries -= 1;
                    // The first run may have committed before its backend died.
                    statement = &self.sql.reacquire;
                    tracing::debug!(%error, "lost a pooled connection; acquiring again on another");
                }
                row => break row,
            }
        };
        let conn = attempt.finish();
        let row = row.map_err(|error| self.fail("acquire", key, error))?;
        if let Some(conn) = conn {
            self.kept.keep(conn);
        }
        let Some((fence, in_time)) = row else {
            return Ok(Acquire::Held { ttl_left: None });
        };
        if !in_time {
            return Err(self.fail("acquire", key, SlowAcquire { horizon: MIN_PURGE_HORIZON }));
        }
        let fence = u64::try_from(fence)
            .map_err(|_| self.fail("acquire", key, UnexpectedAnswer(format!("negative fence {fence}"))))?;
        Ok(Acquire::Acquired { fence: Some(fence) })
    }

    /// One token-checked `UPDATE … SET token = NULL, expires_at = clock_timestamp()` that
    /// also `pg_notify`s the key when it released a lease a waiter flagged, sent once any
    /// cancelled acquisition with the same token has been answered. Once the queue table of
    /// fair waiting exists, the `UPDATE` also checks that the key's queue is empty; when
    /// it is not, a second statement hands the key to the oldest live waiter.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: each statement either committed or did not; one cancelled between
    /// the two leaves the lease held, to be released again or to expire.
    async fn release(&self, key: &StoreKey, token: &Token) -> Result<bool, LockError> {
        self.in_flight.settled(token).await;
        if self.queue_ready("release").await? {
            return self.release_handing_on(key, token).await;
        }
        let released: i64 = self
            .retrying("release", || {
                sqlx::query_scalar(&self.sql.release).bind(key.as_str()).bind(token.as_str()).fetch_one(&self.pool)
            })
            .await
            .map_err(|error| self.fail("release", key, error))?;
        Ok(released == 1)
    }

    /// One token-checked `UPDATE … SET expires_at = clock_timestamp() + ttl`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the statement either committed or did not.
    async fn extend(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<bool, LockError> {
        let done = self
            .retrying("extend", || {
                sqlx::query(&self.sql.extend)
                    .bind(key.as_str())
                    .bind(token.as_str())
                    .bind(sql::millis(ttl.as_duration()))
                    .execute(&self.pool)
            })
            .await
            .map_err(|error| self.fail("extend", key, error))?;
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
                sqlx::query_as::<_, (Option<String>, i64, i64)>(&self.sql.inspect)
                    .bind(key.as_str())
                    .fetch_optional(&self.pool)
            })
            .await
            .map_err(|error| self.fail("inspect", key, error))?;
        let Some((Some(token), fence, micros_left)) = row else {
            return Ok(None);
        };
        let info =
            lock_info(&token, fence, micros_left).map_err(|what| self.fail("inspect", key, UnexpectedAnswer(what)))?;
        Ok(Some(info))
    }

    /// Waits for a `NOTIFY` of a release of `key` on the store's one listener connection,
    /// for the lease to run out, or for `max`, whichever comes first. (With
    /// [`release_notifications(false)`](crate::PostgresLockStoreBuilder::release_notifications)
    /// it sleeps `max`.)
    ///
    /// The waiter registers for the key before it flags the key's lease as waited for (one
    /// statement; see `lease/wait.sql`), so a release between the caller's failed
    /// attempt and the registration is not slept through: it returns at once when the key
    /// is free. Releases notify only flagged leases. While the listener is not
    /// connected (first use, or re-connecting after a lost connection) it sleeps, so the
    /// caller polls; a waiter registered when the listener loses its connection returns
    /// early. Never returns later than `max` (plus scheduling); `max` may be any
    /// duration (`Duration::MAX` waits without a deadline).
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] (operation `"wait for release"`) when the lease could not be
    /// flagged or read; the caller then sleeps instead.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped waiter unregisters; a flag it set costs at most one
    /// notification nobody waits for.
    async fn wait_for_release(&self, key: &StoreKey, max: Duration) -> Result<(), LockError> {
        self.wait_until_free(key, None, max).await
    }

    /// One `lease/list.sql` statement: keyset pagination over the primary key.
    ///
    /// The page is the next `limit` rows (at most [`ListPage::MAX_LIMIT`]) after the
    /// cursor within the key range of the pattern's literal prefix (`key >= 'lock:' ||
    /// prefix AND key < <its successor>`, an index range scan of the `COLLATE "C"`
    /// primary key), whether they match or not: a page costs the same however few keys
    /// match or how many rows are released or expired. Of those rows it returns the held
    /// ones that match (`LIKE … ESCAPE`). The cursor is the last key examined. Each page
    /// is its own autocommit statement and snapshot; it takes no row locks, so
    /// acquisitions and releases go on beside it.
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
        let after = page_start(cursor, "PostgreSQL")?;
        let unexpected = |what: String| LockError::store(BACKEND, "list", None, UnexpectedAnswer(what));
        let lowest = format!("{LOCK_NAMESPACE}{}", pattern.literal_prefix());
        // Never `None`: the namespace's own characters can be incremented.
        let beyond = sql::prefix_successor(&lowest)
            .ok_or_else(|| unexpected(format!("no key range for the prefix {lowest:?}")))?;
        let like = pattern.to_sql_like(LOCK_NAMESPACE);
        let limit = limit.clamp(1, ListPage::MAX_LIMIT);
        let page_size = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows: Vec<ListRow> = self
            .retrying("list", || {
                sqlx::query_as(&self.sql.list)
                    .bind(&lowest)
                    .bind(after)
                    .bind(&beyond)
                    .bind(page_size)
                    .bind(&like)
                    .fetch_all(&self.pool)
            })
            .await
            .map_err(|error| LockError::store(BACKEND, "list", None, error))?;
        let (last, examined) = match rows.first() {
            Some((last, examined, ..)) => (last.clone(), *examined),
            None => return Err(unexpected("the list statement returned no row".to_owned())),
        };
        let mut locks = Vec::with_capacity(rows.len());
        for (_, _, key, token, fence, micros_left) in rows {
            let (Some(key), Some(token), Some(fence), Some(micros_left)) = (key, token, fence, micros_left) else {
                continue;
            };
            // The LIKE already matched; matching again also keeps `?` exact where the
            // database's encoding makes `_` match a byte rather than a character.
            locks.extend(held_lock(pattern, &key, &token, fence, micros_left).map_err(unexpected)?);
        }
        let complete = usize::try_from(examined).map_or(true, |examined| examined < limit);
        let next = match last {
            Some(last) if !complete => Some(ListCursor::new(last)),
            _ => None,
        };
        Ok(ListPage::new(locks, next))
    }
}

#[async_trait]
impl QueueStore for PostgresLockStore {
    /// A queued attempt does more than a plain one: the manager queues after a plain
    /// attempt found the key held.
    fn queues_in_first_attempt(&self) -> bool {
        false
    }

    /// One statement (fair waiting): takes the key when it was handed to `token`, or is
    /// free with `token` first in line (or nobody waiting); otherwise takes or refreshes
    /// `token`'s place in the queue table for `place`. See "Fair waiting" in the crate
    /// documentation. Without the queue table, a plain [`try_acquire`](LockStore::try_acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the statement either commits or not; a cancelled place expires with
    /// its lease, and the manager's release with the same token removes it.
    async fn try_acquire_queued(&self, attempt: QueuedAttempt<'_>) -> Result<Acquire, LockError> {
        let QueuedAttempt { key, token, ttl, place } = attempt;
        if !self.queue_ready("acquire").await? {
            return self.try_acquire(key, token, ttl).await;
        }
        self.acquire_queued(key, token, ttl, place).await
    }

    /// As [`wait_for_release`](LockStore::wait_for_release); a lease handed to `token`
    /// counts as free.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped waiter unregisters.
    async fn wait_for_turn(&self, key: &StoreKey, token: &Token, max: Duration) -> Result<(), LockError> {
        self.wait_until_free(key, Some(token), max).await
    }

    /// One `SELECT count(*)` of the key's live places.
    async fn queue_len(&self, key: &StoreKey) -> Result<usize, LockError> {
        self.queued(key).await
    }

    /// One `SELECT` of the key's live places in the queue table, in arrival order.
    async fn queue_places(&self, key: &StoreKey) -> Result<Vec<WaitingPlace>, LockError> {
        PostgresLockStore::queue_places(self, key).await
    }
}

/// One row of `lease/list.sql`: `(last key examined, rows examined, key, token, fence,
/// µs left)`.
type ListRow = (Option<String>, i64, Option<String>, Option<String>, Option<i64>, Option<i64>);

/// How long after a lease's end (as the server computed it) a waiter wakes to retry.
/// How often a statement PostgreSQL aborted as a deadlock's victim (`40P01`) is run
/// again. Group statements lock the rows of several names; two of them can wait for each
/// other, and the server then aborts one (after `deadlock_timeout`, 1 s by default).
const DEADLOCK_RETRIES: u32 = 5;

const EXPIRY_MARGIN: Duration = Duration::from_millis(2);

impl PostgresLockStore {
    /// Flags `key`'s live lease as waited for (so that its release notifies) and returns
    /// the time left on it, or `None` when the key is free (or a concurrent flag made it
    /// uncertain: the caller retries at once). With `me`, a lease handed to `me` counts as
    /// free.
    async fn flag_lease(&self, key: &StoreKey, me: Option<&Token>) -> Result<Option<Duration>, LockError> {
        let micros_left: Option<i64> = self
            .retrying("wait for release", || {
                let query = match me {
                    None => sqlx::query_scalar(&self.sql.wait).bind(key.as_str()),
                    Some(token) => sqlx::query_scalar(&self.sql.queue.wait).bind(key.as_str()).bind(token.as_str()),
                };
                query.fetch_optional(&self.pool)
            })
            .await
            .map_err(|error| self.fail("wait for release", key, error))?;
        Ok(micros_left.map(|micros| Duration::from_micros(u64::try_from(micros).unwrap_or(1))))
    }

    /// Waits at most `max` until `key` is released (or handed to `me`, a queued waiter,
    /// which is then also woken by a hand-over's own notification).
    async fn wait_until_free(&self, key: &StoreKey, me: Option<&Token>, max: Duration) -> Result<(), LockError> {
        if !self.layout.notify {
            tokio::time::sleep_until(deadline_after(max)).await;
            return Ok(());
        }
        // Run by the registry after the waiter registered and while the listener listens.
        let flag = || async {
            Ok(match self.flag_lease(key, me).await? {
                None => KeyState::Free,
                // An expiring lease is not notified: wake when it runs out on the server's
                // clock (a little late rather than early).
                Some(left) => KeyState::Held { expires_in: Some(left.saturating_add(EXPIRY_MARGIN)) },
            })
        };
        let turn = me.map(|token| format!("{TURN}{}", token.as_str()));
        let payloads: Vec<&str> = std::iter::once(key.as_str()).chain(turn.as_deref()).collect();
        let woken = self.notifier.waiters().wait_any(&payloads, max, flag).await?;
        tracing::trace!(?woken, "wait for release ended");
        Ok(())
    }
}
