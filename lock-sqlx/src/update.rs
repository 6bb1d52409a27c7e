//! The versioned-update builder: one `UPDATE` that checks and bumps the version (the
//! statement one would write by hand), and, only when it changed nothing, one `SELECT`
//! that tells stale, fenced-out and missing rows apart.

use std::fmt::{self, Display, Write as _};

use sqlx::postgres::{PgArguments, PgRow};
use sqlx::{Acquire, Arguments as _, Encode, FromRow, Postgres, Row as _, Type};

use crate::error::{FencedOut, OptimisticError, StaleRecord};
use crate::ident::Identifier;
use crate::version::{self, Expected, Version};

/// The alias of the new version the update returns (when it returns one); chosen so that
/// no sensible table has a column of this name.
const NEW_VERSION: &str = "__distlock_new_version";

/// A column assignment or key comparison: the column and the number of its bound value.
#[derive(Debug)]
struct Bound {
    column: Identifier,
    param: usize,
}

/// An `UPDATE` of one row that checks and bumps an integer version column in the same
/// statement (optimistic locking), and can also refuse writers whose lock fence is lower
/// than the one the row was last written with (fenced writes).
///
/// Built at run time (`sqlx::query`, no `DATABASE_URL` at build time). Table and column
/// names must match `[A-Za-z_][A-Za-z0-9_]{0,62}` and are double-quoted; values are always
/// bound parameters. A mistake in building (a bad name, a value that cannot be encoded, no
/// key, no version column) is reported by [`execute`](Self::execute) as
/// [`OptimisticError::Invalid`] before any I/O.
///
/// The version column may be `smallint`, `integer` or `bigint`: the expected version is an
/// `i16`, `i32` or `i64` ([`Version`]) and is bound as that type; the new version and the
/// versions in errors are `i64`, which holds all three. The key must identify at most one row (a primary key or a unique column set):
/// the `UPDATE` changes every row it matches.
///
/// ```no_run
/// use distlock_sqlx::{OptimisticError, VersionedUpdate};
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
/// `RETURNING "version"::int8, …` to learn it). Only when it changed nothing does a second
/// statement, on the same connection, read what the row holds now
/// (`SELECT "version"::int8, … FROM "posts" WHERE "id" = $1`): a row with another version
/// means stale (or fenced out), no row means missing. Inside a transaction both run in
/// it; on a pool both run on one pooled connection.
///
/// # Cancel safety
///
/// The update is one autocommit statement (or part of the caller's transaction): dropping
/// the future either lets it run or not, never half.
#[derive(Debug)]
#[must_use = "a VersionedUpdate does nothing until `execute` or `execute_returning` is awaited"]
pub struct VersionedUpdate {
    table_name: String,
    schema: Option<Identifier>,
    table: Option<Identifier>,
    keys: Vec<Bound>,
    id: Vec<(String, String)>,
    sets: Vec<Bound>,
    version: Option<(Identifier, Expected)>,
    force: bool,
    fence: Option<(Identifier, u64)>,
    args: PgArguments,
    key_args: PgArguments,
    params: usize,
    error: Option<String>,
}

impl VersionedUpdate {
    /// Starts an update of a row of `table` (in the connection's `search_path`, unless
    /// [`schema`](Self::schema) names one).
    pub fn table(table: &str) -> Self {
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
            args: PgArguments::default(),
            key_args: PgArguments::default(),
            params: 0,
            error: None,
        };
        update.table = update.identifier("table", table);
        update
    }

    /// The schema of the table. Defaults to none: the table is looked up in the
    /// connection's `search_path`.
    pub fn schema(mut self, schema: &str) -> Self {
        self.schema = self.identifier("schema", schema);
        self
    }

    /// Selects the row by `column = value`. Call it once per column of a composite key;
    /// at least once. `value`'s `Display` text names the row in errors.
    pub fn key<'q, T>(mut self, column: &str, value: T) -> Self
    where
        T: Encode<'q, Postgres> + Type<Postgres> + Display + Clone + 'q,
    {
        self.id.push((column.to_owned(), value.to_string()));
        // The probe that tells a stale row from a missing one binds the keys alone.
        if let Err(err) = self.key_args.add(value.clone()) {
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
        T: Encode<'q, Postgres> + Type<Postgres> + 'q,
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
        T: Encode<'q, Postgres> + Type<Postgres> + 'q,
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
        self.statement(false).map(|statement| statement.update)
    }

    /// Runs the update on `executor` (a `&PgPool`, a `&mut PgConnection`, or `&mut tx` /
    /// `&mut *tx` inside a transaction) and returns the row's new version.
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
        A: Acquire<'e, Database = Postgres>,
    {
        let (_, new_version) = self.run(executor, false).await?;
        Ok(new_version)
    }

    /// Like [`execute`](Self::execute), and returns the updated row (all its columns, with
    /// the new version) as `T`.
    ///
    /// ```no_run
    /// use distlock_sqlx::{OptimisticError, VersionedUpdate};
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
        A: Acquire<'e, Database = Postgres>,
        T: for<'r> FromRow<'r, PgRow>,
    {
        let table = self.table_name.clone();
        let (row, _) = self.run(executor, true).await?;
        let row = row.ok_or_else(|| OptimisticError::Invalid { message: format!("no row returned ({table})") })?;
        T::from_row(&row).map_err(|source| OptimisticError::Database { table, source })
    }

    async fn run<'e, A>(mut self, executor: A, returning: bool) -> Result<(Option<PgRow>, i64), OptimisticError>
    where
        A: Acquire<'e, Database = Postgres>,
    {
        let statement = self.statement(returning)?;
        // The parameters numbered after the keys and values, in the order `statement`
        // numbered them.
        if statement.version_param.is_some() {
            if let Some((_, expected)) = self.version {
                expected.bind(&mut self.args).map_err(|err| OptimisticError::Invalid { message: err.to_string() })?;
            }
        }
        if statement.fence_param.is_some() {
            let fence = self.fence.as_ref().map_or(0, |(_, fence)| i64::try_from(*fence).unwrap_or(i64::MAX));
            self.args.add(fence).map_err(|err| OptimisticError::Invalid { message: err.to_string() })?;
        }
        let args = std::mem::take(&mut self.args);
        let mut conn = executor.acquire().await.map_err(|source| self.database_error(source))?;
        let updated = if statement.returns {
            let row = sqlx::query_with(&statement.update, args)
                .fetch_optional(&mut *conn)
                .await
                .map_err(|source| self.database_error(source))?;
            match row {
                Some(row) => {
                    let new_version = row
                        .try_get::<i64, _>(NEW_VERSION)
                        .map_err(|source| OptimisticError::Database { table: self.table_name.clone(), source })?;
                    Some((Some(row), new_version))
                }
                None => None,
            }
        } else {
            let done = sqlx::query_with(&statement.update, args)
                .execute(&mut *conn)
                .await
                .map_err(|source| self.database_error(source))?;
            // Checked, unforced: the version was the expected one and is now one more.
            (done.rows_affected() > 0).then(|| (None, self.expected_version() + 1))
        };
        if let Some(updated) = updated {
            return Ok(updated);
        }
        // Nothing changed: what does the row hold now?
        let args = std::mem::take(&mut self.key_args);
        let row = sqlx::query_with(&self.probe(), args)
            .fetch_optional(&mut *conn)
            .await
            .map_err(|source| self.database_error(source))?;
        let (actual_version, actual_fence) = match row {
            Some(row) => {
                let column = |index: usize| {
                    row.try_get::<Option<i64>, _>(index)
                        .map_err(|source| OptimisticError::Database { table: self.table_name.clone(), source })
                };
                (column(0)?, column(1)?)
            }
            None => (None, None),
        };
        Err(self.refusal(actual_version, actual_fence))
    }

    fn expected_version(&self) -> i64 {
        self.version.as_ref().map_or(0, |(_, expected)| expected.get())
    }

    /// A failed statement: a version at its type's maximum (`22003`) is an overflow.
    fn database_error(&self, source: sqlx::Error) -> OptimisticError {
        let overflow = source.as_database_error().and_then(|db| db.code()).is_some_and(|code| code == "22003");
        if overflow {
            OptimisticError::VersionOverflow { table: self.table_name.clone(), id: id_text(&self.id), source }
        } else {
            OptimisticError::Database { table: self.table_name.clone(), source }
        }
    }

    /// Why the update changed nothing, from what the statement's snapshot showed.
    fn refusal(self, actual_version: Option<i64>, actual_fence: Option<i64>) -> OptimisticError {
        let id = id_text(&self.id);
        let table = self.table_name;
        let Some(actual_version) = actual_version else {
            return OptimisticError::NotFound { table, id };
        };
        if let Some((_, fence)) = self.fence {
            let current = actual_fence.and_then(|current| u64::try_from(current).ok());
            if current.is_some_and(|current| current > fence) {
                return FencedOut { table, id, fence, current_fence: current }.into();
            }
        }
        let expected_version = self.version.map_or(0, |(_, expected)| expected.get());
        if !self.force {
            let actual = (actual_version != expected_version).then_some(actual_version);
            return StaleRecord { table, id, expected_version, actual_version: actual }.into();
        }
        match self.fence {
            // Forced, and the snapshot allowed the write: a concurrent writer raised the
            // fence (or deleted the row) while this statement waited for the row lock.
            Some((_, fence)) => FencedOut { table, id, fence, current_fence: None }.into(),
            None => OptimisticError::NotFound { table, id },
        }
    }

    /// The statements and the parameter numbers of the expected version and the fence.
    fn statement(&self, returning: bool) -> Result<Statement, OptimisticError> {
        if let Some(message) = &self.error {
            return Err(OptimisticError::Invalid { message: message.clone() });
        }
        let invalid = |message: &str| OptimisticError::Invalid { message: format!("{message} ({})", self.table_name) };
        let table = self.table.as_ref().ok_or_else(|| invalid("no table"))?;
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

        let target = match &self.schema {
            Some(schema) => format!("{schema}.{table}"),
            None => table.to_string(),
        };
        let keys = Joined(&self.keys, " AND ");
        let mut update = format!("UPDATE {target} SET ");
        for set in &self.sets {
            let _ = write!(update, "{} = ${}, ", set.column, set.param);
        }
        let _ = write!(update, "{version} = {version} + 1");
        if let (Some((fence, _)), Some(param)) = (&self.fence, fence_param) {
            let _ = write!(update, ", {fence} = ${param}");
        }
        let _ = write!(update, " WHERE {keys}");
        if let Some(param) = version_param {
            let _ = write!(update, " AND {version} = ${param}");
        }
        if let (Some((fence, _)), Some(param)) = (&self.fence, fence_param) {
            let _ = write!(update, " AND ({fence} IS NULL OR {fence} <= ${param})");
        }
        // A checked update knows its new version (the expected one plus 1): it needs no
        // `RETURNING`, and is the statement one would write by hand.
        let returns = returning || self.force;
        if returns {
            let _ = write!(update, " RETURNING {version}::int8 AS {NEW_VERSION}");
            if returning {
                update.push_str(", *");
            }
        }
        Ok(Statement { update, version_param, fence_param, returns })
    }

    /// The read that tells why the update changed nothing (built only then): the row's
    /// version and fence, by the keys alone, numbered from `$1`.
    fn probe(&self) -> String {
        let target = match (&self.schema, &self.table) {
            (Some(schema), Some(table)) => format!("{schema}.{table}"),
            (None, Some(table)) => table.to_string(),
            (_, None) => String::new(),
        };
        let version = self.version.as_ref().map_or_else(|| "NULL".to_owned(), |(column, _)| column.to_string());
        let fence = self.fence.as_ref().map_or_else(|| "NULL".to_owned(), |(column, _)| column.to_string());
        let mut probe = format!("SELECT {version}::int8, {fence}::int8 FROM {target} WHERE ");
        for (i, key) in self.keys.iter().enumerate() {
            let _ = write!(probe, "{}{} = ${}", if i > 0 { " AND " } else { "" }, key.column, i + 1);
        }
        probe
    }

    /// Binds `value` for `column`, or records why it cannot be.
    fn bind<'q, T>(&mut self, what: &str, column: &str, value: T) -> Option<Bound>
    where
        T: Encode<'q, Postgres> + Type<Postgres> + 'q,
    {
        let column = self.identifier(what, column)?;
        if let Err(err) = self.args.add(value) {
            self.fail(format!("the value of {what} {column} cannot be encoded: {err}"));
            return None;
        }
        self.params += 1;
        Some(Bound { column, param: self.params })
    }

    fn identifier(&mut self, what: &str, name: &str) -> Option<Identifier> {
        Identifier::new(what, name).map_err(|message| self.fail(message)).ok()
    }

    /// Keeps the first mistake, reported by `execute`.
    fn fail(&mut self, message: String) {
        self.error.get_or_insert(message);
    }
}

/// The update [`VersionedUpdate::run`] sends.
struct Statement {
    update: String,
    version_param: Option<usize>,
    fence_param: Option<usize>,
    /// Whether the update returns the new version (and maybe the row).
    returns: bool,
}

/// The row's key for errors: the value alone, or `column=value` pairs.
fn id_text(id: &[(String, String)]) -> String {
    match id {
        [(_, value)] => value.clone(),
        pairs => pairs.iter().map(|(column, value)| format!("{column}={value}")).collect::<Vec<_>>().join(", "),
    }
}

/// `"a" = $1 AND "b" = $2`.
struct Joined<'a>(&'a [Bound], &'static str);

impl Display for Joined<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, bound) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(self.1)?;
            }
            write!(f, "{} = ${}", bound.column, bound.param)?;
        }
        Ok(())
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
        let probe = probe.probe();
        assert_eq!(probe, "SELECT \"version\"::int8, \"fence\"::int8 FROM \"posts\" WHERE \"id\" = $1");
        // The probe binds the keys alone, numbered from 1 whatever came before them.
        let late_keys = VersionedUpdate::table("t").set("a", 1_i32).key("x", 1_i64).key("y", "k").version("v", 1);
        let statement = late_keys.statement(false).unwrap();
        assert!(statement.update.ends_with("WHERE \"x\" = $2 AND \"y\" = $3 AND \"v\" = $4"), "{}", statement.update);
        assert_eq!(late_keys.probe(), "SELECT \"v\"::int8, NULL::int8 FROM \"t\" WHERE \"x\" = $1 AND \"y\" = $2");
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
        assert_eq!(id_text(&[("a".into(), "1".into()), ("b".into(), "x".into())]), "a=1, b=x");
        assert_eq!(id_text(&[("a".into(), "1".into())]), "1");
    }
}
