//! The versioned-update builder: one `UPDATE` that checks and bumps the version (the
//! statement one would write by hand), and, only when it changed nothing, one `SELECT`
//! that tells stale, fenced-out and missing rows apart.

use std::fmt::{self, Display, Write as _};

use sqlx::{Acquire, Connection as _, Encode, FromRow, Postgres, Type, TypeInfo as _};

use crate::dialect::{Dialect, Int, NewVersion};
use crate::error::{FencedOut, OptimisticError, RowId, StaleRecord};
use crate::ident::Identifier;
use crate::version::{self, Expected, Version};

/// The alias of the new version the update returns (when it returns one); chosen so that
/// no sensible table has a column of this name.
const NEW_VERSION: &str = "__distlock_new_version";

/// A column assignment or key comparison: the column and the number of its bound value.
#[derive(Debug, Clone)]
struct Bound {
    column: Identifier,
    param: usize,
}

/// An `UPDATE` of one row that checks and bumps an integer version column in the same
/// statement (optimistic locking), and can also refuse writers whose lock fence is lower
/// than the one the row was last written with (fenced writes).
///
/// Built at run time (`sqlx::query`, no `DATABASE_URL` at build time), for PostgreSQL
/// (`VersionedUpdate::table`, the default `DB`) or, with the features of the same names,
/// SQLite and MySQL/MariaDB (`VersionedUpdate::<Sqlite>::new`, `VersionedUpdate::<MySql>::new`;
/// see the crate documentation for how each runs). Table and column names must match
/// `[A-Za-z_][A-Za-z0-9_]{0,62}` and are quoted (backticks on MySQL, double quotes
/// elsewhere); values are always bound parameters. A mistake in building (a bad name, a value that cannot be encoded, no
/// key, no version column) is reported by [`execute`](Self::execute) as
/// [`OptimisticError::Invalid`] before any I/O.
///
/// The version column may be `smallint`, `integer` or `bigint`: the expected version is an
/// `i16`, `i32` or `i64` ([`Version`]) and is bound as that type; the new version and the
/// versions in errors are `i64`, which holds all three. The key must identify at most one row (a primary key or a unique column set):
/// the `UPDATE` changes every row it matches.
///
/// ```no_run
/// use distlock_optimistic::{OptimisticError, VersionedUpdate};
/// # async fn demo(pool: &sqlx::PgPool) -> Result<(), OptimisticError> {
/// // Read the row with its version …
/// let (title, version): (String, i64) = (String::from("Hello"), 5);
/// // … and write it back only if nobody changed it since.
/// match VersionedUpdate::table("posts")
///     .key("id", 42_i64)
///     .version("version", version)
///     .set("title", &title)
///     .execute(pool)
///     .await
/// {
///     Ok(new_version) => assert_eq!(new_version, version + 1),
///     Err(OptimisticError::Stale(stale)) => println!("changed meanwhile: {stale}"),
///     Err(other) => return Err(other),
/// }
/// # Ok(()) }
/// ```
///
/// # The statement
///
/// For `posts` keyed by `id` with version `version`, the update is the statement one
/// would write by hand:
///
/// ```sql
/// UPDATE "posts" SET "title" = $2, "version" = "version" + 1 WHERE "id" = $1 AND "version" = $3
/// ```
///
/// One row changed means updated, and the new version is the expected one plus 1
/// (`force` and [`execute_returning`](Self::execute_returning) add
/// `RETURNING "version"::int8, …` to learn it; on MySQL, which has no `RETURNING`,
/// `"version" = LAST_INSERT_ID("version" + 1)`). Only when it changed nothing does a
/// second statement, on the same connection, read what the row holds now
/// (`SELECT "version"::int8, … FROM "posts" WHERE "id" = $1`): a row with another version
/// means stale (or fenced out), no row means missing. Inside a transaction both run in
/// it; on a pool both run on one pooled connection. On SQLite and MySQL the refusal is
/// confirmed in a transaction (a savepoint inside the caller's): the update runs again
/// and the row is read while that transaction holds the update's locks, so the answer is
/// the row's state at the refusal.
///
/// # Cancel safety
///
/// The update is one autocommit statement (or part of the caller's transaction): dropping
/// the future either lets it run or not, never half.
#[must_use = "a VersionedUpdate does nothing until `execute` or `execute_returning` is awaited"]
pub struct VersionedUpdate<DB: Dialect = Postgres> {
    table_name: String,
    schema: Option<Identifier>,
    table: Option<Identifier>,
    keys: Vec<Bound>,
    /// Each key column, its value's text, and whether the value is an integer.
    id: Vec<(String, String, bool)>,
    sets: Vec<Bound>,
    version: Option<(Identifier, Expected)>,
    force: bool,
    fence: Option<(Identifier, u64)>,
    args: DB::Values,
    key_args: DB::Values,
    params: usize,
    error: Option<String>,
}

impl<DB: Dialect> fmt::Debug for VersionedUpdate<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VersionedUpdate")
            .field("table", &self.table_name)
            .field("schema", &self.schema)
            .field("id", &self.id)
            .field("sets", &self.sets)
            .field("version", &self.version)
            .field("force", &self.force)
            .field("fence", &self.fence)
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl VersionedUpdate<Postgres> {
    /// Starts an update of a row of PostgreSQL table `table` (in the connection's
    /// `search_path`, unless [`schema`](Self::schema) names one). For SQLite or MySQL, name
    /// the database: `VersionedUpdate::<Sqlite>::new("posts")`.
    pub fn table(table: &str) -> Self {
        Self::new(table)
    }
}

impl<DB: Dialect> VersionedUpdate<DB> {
    /// Starts an update of a row of `table` on the database `DB` (`Postgres`, `Sqlite`
    /// or `MySql`), e.g. `VersionedUpdate::<sqlx::Sqlite>::new("posts")`. On PostgreSQL
    /// the table is looked up in the connection's `search_path`, on MySQL in the
    /// connection's database, unless [`schema`](Self::schema) names one.
    pub fn new(table: &str) -> Self {
        let mut update = Self {
            table_name: table.to_owned(),
            schema: None,
            table: None,
            keys: Vec::new(),
            id: Vec::new(),
            sets: Vec::new(),
            version: None,
            force: false,
            fence: None,
            args: DB::Values::default(),
            key_args: DB::Values::default(),
            params: 0,
            error: None,
        };
        update.table = update.identifier("table", table);
        update
    }

    /// The schema of the table (on MySQL, its database; on SQLite, an attached
    /// database's name). Defaults to none: the connection's own.
    pub fn schema(mut self, schema: &str) -> Self {
        self.schema = self.identifier("schema", schema);
        self
    }

    /// Selects the row by `column = value`. Call it once per column of a composite key;
    /// at least once. `value`'s `Display` text names the row in errors.
    pub fn key<'q, T>(mut self, column: &str, value: T) -> Self
    where
        T: Encode<'q, DB> + Type<DB> + Display + Clone + 'q,
    {
        self.id.push((column.to_owned(), value.to_string(), integer_type(T::type_info().name())));
        // The probe that tells a stale row from a missing one binds the keys alone.
        if let Err(err) = DB::push(&mut self.key_args, value.clone()) {
            self.fail(format!("the value of key column {column} cannot be encoded: {err}"));
        }
        if let Some(bound) = self.bind("key column", column, value) {
            self.keys.push(bound);
        }
        self
    }

    /// Sets `column` to `value`. A `None` of an `Option` sets `NULL`; use
    /// [`set_some`](Self::set_some) to leave a column out instead.
    pub fn set<'q, T>(mut self, column: &str, value: T) -> Self
    where
        T: Encode<'q, DB> + Type<DB> + 'q,
    {
        if let Some(bound) = self.bind("column", column, value) {
            self.sets.push(bound);
        }
        self
    }

    /// Sets `column` to the value when there is one, leaves it out of the update when
    /// `None` (the fields of a patch).
    pub fn set_some<'q, T>(self, column: &str, value: Option<T>) -> Self
    where
        T: Encode<'q, DB> + Type<DB> + 'q,
    {
        match value {
            Some(value) => self.set(column, value),
            None => self,
        }
    }

    /// The integer version column and the version the row had when it was read, as an
    /// `i16` (`smallint`), `i32` (`integer`) or `i64` (`bigint`). The update applies only
    /// while the row still has this version, and adds 1 to it. Required.
    pub fn version<V: Version>(mut self, column: &str, expected: V) -> Self {
        self.version = self.identifier("version column", column).map(|column| (column, version::expected(expected)));
        self
    }

    /// Skips the version check (an administrator's override): the update applies whatever
    /// the row's version, and still adds 1 to it. A fence set with
    /// [`fenced`](Self::fenced) is still checked.
    pub fn force(mut self) -> Self {
        self.force = true;
        self
    }

    /// Guards the write with a lock's fence ([`DistributedLock::fence`]): the update
    /// applies only if `column` is `NULL` or holds a fence not greater than `fence`, and
    /// stores `fence` there. A writer whose lease expired while another holder took the
    /// lock and wrote gets [`OptimisticError::FencedOut`]. `column` is a `bigint`.
    ///
    /// [`DistributedLock::fence`]: https://docs.rs/distlock-api/latest/distlock_api/struct.DistributedLock.html#method.fence
    pub fn fenced(mut self, column: &str, fence: u64) -> Self {
        if i64::try_from(fence).is_err() {
            self.fail(format!("fence {fence} does not fit a bigint column"));
        }
        self.fence = self.identifier("fence column", column).map(|column| (column, fence));
        self
    }

    /// The SQL text [`execute`](Self::execute) sends (for logs and tests).
    ///
    /// # Errors
    ///
    /// [`OptimisticError::Invalid`] when the update was built wrong.
    pub fn sql(&self) -> Result<String, OptimisticError> {
        self.statement(false).map(|statement| statement.sql.sql)
    }

    /// Runs the update on `executor` (a pool such as `&PgPool`, a connection such as
    /// `&mut PgConnection`, or `&mut tx` / `&mut *tx` inside a transaction) and returns
    /// the row's new version.
    ///
    /// # Errors
    ///
    /// - [`OptimisticError::Stale`]: the row's version is not the expected one;
    /// - [`OptimisticError::FencedOut`]: the row was written with a higher fence;
    /// - [`OptimisticError::NotFound`]: no row has the key;
    /// - [`OptimisticError::VersionOverflow`]: the version is at its column type's maximum;
    /// - [`OptimisticError::Invalid`]: the update was built wrong (before any I/O);
    /// - [`OptimisticError::Database`]: the statement failed.
    pub async fn execute<'e, A>(self, executor: A) -> Result<i64, OptimisticError>
    where
        A: Acquire<'e, Database = DB>,
    {
        let (_, new_version) = self.run(executor, false).await?;
        Ok(new_version)
    }

    /// Like [`execute`](Self::execute), and returns the updated row (all its columns, with
    /// the new version) as `T`.
    ///
    /// ```no_run
    /// use distlock_optimistic::{OptimisticError, VersionedUpdate};
    ///
    /// #[derive(sqlx::FromRow)]
    /// struct Post {
    ///     id: i64,
    ///     title: String,
    ///     version: i32,
    /// }
    ///
    /// # async fn demo(pool: &sqlx::PgPool) -> Result<(), OptimisticError> {
    /// let post: Post = VersionedUpdate::table("posts")
    ///     .key("id", 42_i64)
    ///     .version("version", 5)
    ///     .set("title", "Hello")
    ///     .execute_returning(pool)
    ///     .await?;
    /// assert_eq!(post.version, 6);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`execute`](Self::execute), and [`OptimisticError::Database`] when the row does
    /// not decode as `T`.
    pub async fn execute_returning<'e, T, A>(self, executor: A) -> Result<T, OptimisticError>
    where
        A: Acquire<'e, Database = DB>,
        T: for<'r> FromRow<'r, DB::Row>,
    {
        let table = self.table_name.clone();
        let (row, _) = self.run(executor, true).await?;
        let row = row.ok_or_else(|| OptimisticError::Invalid { message: format!("no row returned ({table})") })?;
        T::from_row(&row).map_err(|source| OptimisticError::Database { table, source })
    }

    async fn run<'e, A>(mut self, executor: A, returning: bool) -> Result<(Option<DB::Row>, i64), OptimisticError>
    where
        A: Acquire<'e, Database = DB>,
    {
        let statement = self.statement(returning)?;
        // The parameters numbered after the keys and values, in the order `statement`
        // numbered them.
        if statement.version_param.is_some() {
            if let Some((_, expected)) = self.version {
                expected
                    .bind::<DB>(&mut self.args)
                    .map_err(|err| OptimisticError::Invalid { message: err.to_string() })?;
            }
        }
        if statement.fence_param.is_some() {
            let fence = self.fence.as_ref().map_or(0, |(_, fence)| i64::try_from(*fence).unwrap_or(i64::MAX));
            DB::push_int(&mut self.args, Int::I64(fence))
                .map_err(|err| OptimisticError::Invalid { message: err.to_string() })?;
        }
        let mut conn = executor.acquire().await.map_err(|source| self.database_error(source))?;
        // Without `RETURNING` the row is read after the update, in a transaction that
        // holds its lock.
        let read_back = returning && DB::NEW_VERSION == NewVersion::InsertId;
        if !read_back {
            if let Some(updated) = self.attempt(&mut conn, &statement).await? {
                return Ok(updated);
            }
            if !DB::CONFIRM_IN_TRANSACTION {
                // Nothing changed: what does the row hold now?
                return Err(self.refused(&mut conn).await?);
            }
        }
        // Nothing changed (or the row is to be read back): the update again inside a
        // transaction, whose lock on the row (or, for a missing row, on its place in the
        // key) lasts until the row has been read, so the answer is the row's state at
        // that moment, not a later one.
        let mut tx = conn.begin().await.map_err(|source| self.database_error(source))?;
        let outcome = match self.attempt(&mut tx, &statement).await? {
            Some((_, new_version)) if read_back => {
                let select = self.probe(Some("*"));
                let args = DB::arguments(&self.key_args, &select.order).map_err(|err| self.invalid(&err))?;
                let row = DB::fetch_optional(&mut tx, &select.sql, args)
                    .await
                    .map_err(|source| self.database_error(source))?;
                Ok((row, new_version))
            }
            Some(updated) => Ok(updated),
            None => Err(self.refused(&mut tx).await?),
        };
        tx.commit().await.map_err(|source| self.database_error(source))?;
        outcome
    }

    /// Runs the update once on `conn`: `Some((returned row, new version))` when it
    /// changed the row.
    async fn attempt(
        &self,
        conn: &mut DB::Connection,
        statement: &Statement,
    ) -> Result<Option<(Option<DB::Row>, i64)>, OptimisticError> {
        let args = DB::arguments(&self.args, &statement.sql.order).map_err(|err| self.invalid(&err))?;
        if statement.returns && DB::NEW_VERSION == NewVersion::Returning {
            let row = DB::fetch_optional(conn, &statement.sql.sql, args)
                .await
                .map_err(|source| self.database_error(source))?;
            return match row {
                Some(row) => {
                    let new_version = DB::int8_named(&row, NEW_VERSION)
                        .map_err(|source| OptimisticError::Database { table: self.table_name.clone(), source })?;
                    Ok(Some((Some(row), new_version)))
                }
                None => Ok(None),
            };
        }
        let done = DB::execute(conn, &statement.sql.sql, args).await.map_err(|source| self.database_error(source))?;
        if done.rows == 0 {
            return Ok(None);
        }
        let new_version = if statement.returns {
            // `LAST_INSERT_ID(version + 1)`: the insert id's 64 bits are the new version.
            i64::from_ne_bytes(done.insert_id.to_ne_bytes())
        } else {
            // Checked, unforced: the version was the expected one and is now one more.
            self.expected_version() + 1
        };
        Ok(Some((None, new_version)))
    }

    /// Why the update changed nothing, read from the row on `conn`.
    async fn refused(&self, conn: &mut DB::Connection) -> Result<OptimisticError, OptimisticError> {
        let probe = self.probe(None);
        let args = DB::arguments(&self.key_args, &probe.order).map_err(|err| self.invalid(&err))?;
        let row = DB::fetch_optional(conn, &probe.sql, args).await.map_err(|source| self.database_error(source))?;
        let (actual_version, actual_fence) = match row {
            Some(row) => {
                let column = |index: usize| {
                    DB::int8_at(&row, index)
                        .map_err(|source| OptimisticError::Database { table: self.table_name.clone(), source })
                };
                (column(0)?, column(1)?)
            }
            None => (None, None),
        };
        Ok(self.refusal(actual_version, actual_fence))
    }

    fn invalid(&self, err: &sqlx::error::BoxDynError) -> OptimisticError {
        OptimisticError::Invalid { message: format!("{err} ({})", self.table_name) }
    }

    fn expected_version(&self) -> i64 {
        self.version.as_ref().map_or(0, |(_, expected)| expected.get())
    }

    /// A failed statement: a version at its type's maximum (`22003`) is an overflow.
    fn database_error(&self, source: sqlx::Error) -> OptimisticError {
        let overflow = source.as_database_error().and_then(|db| db.code()).is_some_and(|code| code == "22003");
        if overflow {
            OptimisticError::VersionOverflow { table: self.table_name.clone(), id: row_id(&self.id), source }
        } else {
            OptimisticError::Database { table: self.table_name.clone(), source }
        }
    }

    /// Why the update changed nothing, from what the statement's snapshot showed.
    fn refusal(&self, actual_version: Option<i64>, actual_fence: Option<i64>) -> OptimisticError {
        let id = row_id(&self.id);
        let table = self.table_name.clone();
        let Some(actual_version) = actual_version else {
            return OptimisticError::NotFound { table, id };
        };
        if let Some((_, fence)) = &self.fence {
            let fence = *fence;
            let current = actual_fence.and_then(|current| u64::try_from(current).ok());
            if current.is_some_and(|current| current > fence) {
                return FencedOut { table, id, fence, current_fence: current }.into();
            }
        }
        let expected_version = self.expected_version();
        if !self.force {
            let actual = (actual_version != expected_version).then_some(actual_version);
            return StaleRecord { table, id, expected_version, actual_version: actual }.into();
        }
        match &self.fence {
            // Forced, and the snapshot allowed the write: a concurrent writer raised the
            // fence (or deleted the row) while this statement waited for the row lock.
            Some((_, fence)) => FencedOut { table, id, fence: *fence, current_fence: None }.into(),
            None => OptimisticError::NotFound { table, id },
        }
    }

    /// The statements and the parameter numbers of the expected version and the fence.
    fn statement(&self, returning: bool) -> Result<Statement, OptimisticError> {
        if let Some(message) = &self.error {
            return Err(OptimisticError::Invalid { message: message.clone() });
        }
        let invalid = |message: &str| OptimisticError::Invalid { message: format!("{message} ({})", self.table_name) };
        self.table.as_ref().ok_or_else(|| invalid("no table"))?;
        if self.keys.is_empty() {
            return Err(invalid("no key column: call `key` at least once"));
        }
        let (version, _) = self.version.as_ref().ok_or_else(|| invalid("no version column: call `version`"))?;
        let mut next = self.params;
        let version_param = (!self.force).then(|| {
            next += 1;
            next
        });
        let fence_param = self.fence.as_ref().map(|_| {
            next += 1;
            next
        });

        let q = |ident: &Identifier| DB::quote(ident.as_str());
        let target = self.target();
        let version = q(version);
        let mut update = Sql::default();
        let _ = write!(update.sql, "UPDATE {target} SET ");
        for set in &self.sets {
            let _ = write!(update.sql, "{} = ", q(&set.column));
            update.param::<DB>(set.param);
            update.sql.push_str(", ");
        }
        // A checked update knows its new version (the expected one plus 1): it needs no
        // `RETURNING`, and is the statement one would write by hand.
        let returns = returning || self.force;
        if returns && DB::NEW_VERSION == NewVersion::InsertId {
            let _ = write!(update.sql, "{version} = LAST_INSERT_ID({version} + 1)");
        } else {
            let _ = write!(update.sql, "{version} = {version} + 1");
        }
        if let (Some((fence, _)), Some(param)) = (&self.fence, fence_param) {
            let _ = write!(update.sql, ", {} = ", q(fence));
            update.param::<DB>(param);
        }
        update.sql.push_str(" WHERE ");
        for (i, key) in self.keys.iter().enumerate() {
            let _ = write!(update.sql, "{}{} = ", if i > 0 { " AND " } else { "" }, q(&key.column));
            update.param::<DB>(key.param);
        }
        if let Some(param) = version_param {
            let _ = write!(update.sql, " AND {version} = ");
            update.param::<DB>(param);
        }
        if let (Some((fence, _)), Some(param)) = (&self.fence, fence_param) {
            let fence = q(fence);
            let _ = write!(update.sql, " AND ({fence} IS NULL OR {fence} <= ");
            update.param::<DB>(param);
            update.sql.push(')');
        }
        if returns && DB::NEW_VERSION == NewVersion::Returning {
            let _ = write!(update.sql, " RETURNING {} AS {NEW_VERSION}", DB::int8(&version));
            if returning {
                update.sql.push_str(", *");
            }
        }
        Ok(Statement { sql: update, version_param, fence_param, returns })
    }

    /// The quoted, qualified table name.
    fn target(&self) -> String {
        let table = self.table.as_ref().map_or_else(String::new, |table| DB::quote(table.as_str()));
        match &self.schema {
            Some(schema) => format!("{}.{table}", DB::quote(schema.as_str())),
            None => table,
        }
    }

    /// The read of the row by the keys alone, numbered from 1: its version and fence
    /// (which tell why the update changed nothing), or the `columns` given, e.g. `*`.
    /// Inside a transaction it holds the row's lock where the database takes one.
    fn probe(&self, columns: Option<&str>) -> Sql {
        let int8 = |column: Option<&Identifier>| {
            DB::int8(&column.map_or_else(|| "NULL".to_owned(), |column| DB::quote(column.as_str())))
        };
        let columns = columns.map_or_else(
            || {
                let version = int8(self.version.as_ref().map(|(column, _)| column));
                format!("{version}, {}", int8(self.fence.as_ref().map(|(column, _)| column)))
            },
            str::to_owned,
        );
        let mut probe = Sql::default();
        let _ = write!(probe.sql, "SELECT {columns} FROM {} WHERE ", self.target());
        for (i, key) in self.keys.iter().enumerate() {
            let _ = write!(probe.sql, "{}{} = ", if i > 0 { " AND " } else { "" }, DB::quote(key.column.as_str()));
            probe.param::<DB>(i + 1);
        }
        probe.sql.push_str(DB::LOCKING_READ);
        probe
    }

    /// Binds `value` for `column`, or records why it cannot be.
    fn bind<'q, T>(&mut self, what: &str, column: &str, value: T) -> Option<Bound>
    where
        T: Encode<'q, DB> + Type<DB> + 'q,
    {
        let column = self.identifier(what, column)?;
        if let Err(err) = DB::push(&mut self.args, value) {
            self.fail(format!("the value of {what} {} cannot be encoded: {err}", column.quoted()));
            return None;
        }
        self.params += 1;
        Some(Bound { column, param: self.params })
    }

    fn identifier(&mut self, what: &str, name: &str) -> Option<Identifier> {
        Identifier::new(what, name)
            .map_err(|err| match err {
                distlock_api::LockError::Config { message } => self.fail(message),
                other => self.fail(other.to_string()),
            })
            .ok()
    }

    /// Keeps the first mistake, reported by `execute`.
    fn fail(&mut self, message: String) {
        self.error.get_or_insert(message);
    }
}

/// The update [`VersionedUpdate::run`] sends.
struct Statement {
    sql: Sql,
    version_param: Option<usize>,
    fence_param: Option<usize>,
    /// Whether the update returns the new version (and maybe the row).
    returns: bool,
}

/// The row's key for errors: the value alone (a number for an integer column), or
/// `column=value` pairs.
fn row_id(id: &[(String, String, bool)]) -> RowId {
    match id {
        [(_, value, true)] => RowId::integer(value.clone()),
        [(_, value, false)] => RowId::from(value.clone()),
        pairs => {
            pairs.iter().map(|(column, value, _)| format!("{column}={value}")).collect::<Vec<_>>().join(", ").into()
        }
    }
}

/// Whether sqlx's name of a type is an integer column type (PostgreSQL, MySQL with or
/// without `UNSIGNED`, SQLite).
fn integer_type(name: &str) -> bool {
    matches!(
        name.trim_end_matches(" UNSIGNED"),
        "INT2" | "INT4" | "INT8" | "TINYINT" | "SMALLINT" | "MEDIUMINT" | "INT" | "BIGINT" | "INTEGER"
    )
}

/// SQL text and the numbers of its parameters in text order.
#[derive(Debug, Default)]
struct Sql {
    sql: String,
    order: Vec<usize>,
}

impl Sql {
    /// Appends parameter `n`.
    fn param<DB: Dialect>(&mut self, n: usize) {
        self.sql.push_str(&DB::placeholder(n));
        self.order.push(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_statement_with_bound_values() {
        let sql = VersionedUpdate::table("posts")
            .key("id", 7_i64)
            .version("version", 3)
            .set("title", "t")
            .fenced("fence", 9)
            .sql()
            .unwrap();
        assert_eq!(
            sql,
            "UPDATE \"posts\" SET \"title\" = $2, \"version\" = \"version\" + 1, \"fence\" = $4 \
             WHERE \"id\" = $1 AND \"version\" = $3 AND (\"fence\" IS NULL OR \"fence\" <= $4)"
        );
        let probe = VersionedUpdate::table("posts").key("id", 7_i64).version("version", 3).fenced("fence", 9);
        let probe = probe.probe(None).sql;
        assert_eq!(probe, "SELECT \"version\"::int8, \"fence\"::int8 FROM \"posts\" WHERE \"id\" = $1");
        // The probe binds the keys alone, numbered from 1 whatever came before them.
        let late_keys = VersionedUpdate::table("t").set("a", 1_i32).key("x", 1_i64).key("y", "k").version("v", 1);
        let statement = late_keys.statement(false).unwrap();
        assert!(statement.sql.sql.ends_with("WHERE \"x\" = $2 AND \"y\" = $3 AND \"v\" = $4"), "{}", statement.sql.sql);
        assert_eq!(
            late_keys.probe(None).sql,
            "SELECT \"v\"::int8, NULL::int8 FROM \"t\" WHERE \"x\" = $1 AND \"y\" = $2"
        );
    }

    #[test]
    fn force_drops_the_version_predicate_but_bumps() {
        let sql = VersionedUpdate::table("posts").schema("app").key("id", 7_i64).version("v", 3).force().sql().unwrap();
        assert_eq!(sql, "UPDATE \"app\".\"posts\" SET \"v\" = \"v\" + 1 WHERE \"id\" = $1 RETURNING \"v\"::int8 AS __distlock_new_version");
    }

    #[test]
    fn mistakes_are_invalid() {
        let cases = [
            VersionedUpdate::table("posts;").key("id", 1_i64).version("v", 1),
            VersionedUpdate::table("posts").key("id x", 1_i64).version("v", 1),
            VersionedUpdate::table("posts").key("id", 1_i64).version("v", 1).set("a\"b", 1_i32),
            VersionedUpdate::table("posts").key("id", 1_i64),
            VersionedUpdate::table("posts").version("v", 1),
            VersionedUpdate::table("posts").key("id", 1_i64).version("v", 1).fenced("f", u64::MAX),
        ];
        for case in cases {
            let err = case.sql().unwrap_err();
            assert!(matches!(err, OptimisticError::Invalid { .. }), "{err}");
        }
    }

    #[test]
    fn composite_ids_name_their_columns() {
        assert_eq!(row_id(&[("a".into(), "1".into(), true), ("b".into(), "x".into(), false)]), "a=1, b=x");
        assert_eq!(row_id(&[("a".into(), "1".into(), true)]).as_integer(), Some(1));
        assert_eq!(row_id(&[("a".into(), "1".into(), false)]).as_integer(), None);
    }

    #[test]
    fn integer_key_types_are_told_from_the_others() {
        fn integer<DB: sqlx::Database, T: Type<DB>>() -> bool {
            integer_type(T::type_info().name())
        }
        assert!(integer::<Postgres, i64>() && integer::<Postgres, i32>() && integer::<Postgres, i16>());
        assert!(!integer::<Postgres, String>() && !integer::<Postgres, bool>());
        #[cfg(feature = "sqlite")]
        assert!(integer::<sqlx::Sqlite, i64>() && !integer::<sqlx::Sqlite, String>());
        #[cfg(feature = "mysql")]
        assert!(integer::<sqlx::MySql, u64>() && integer::<sqlx::MySql, i32>() && !integer::<sqlx::MySql, String>());
    }
}
