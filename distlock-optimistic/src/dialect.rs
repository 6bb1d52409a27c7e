//! `Dialect`: what a versioned update needs to know about each sqlx driver — how it
//! quotes names, numbers parameters, reads an integer and learns the new version. Imports
//! nothing from the rest of the crate.

use sqlx::error::BoxDynError;
use sqlx::{Database, Encode, Type};

/// A database [`VersionedUpdate`](crate::VersionedUpdate) runs on: sqlx's `Postgres`
/// (always), `Sqlite` (feature `sqlite`) or `MySql` (feature
/// `mysql`, for MySQL and MariaDB).
///
/// Sealed: implemented for those drivers only.
pub trait Dialect: Database + sealed::Sealed {}

pub(crate) use sealed::{Done, Future, Int, Sealed};

/// How the update learns the new version of a row it changed without knowing the old one
/// (a forced update, or one that returns the row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewVersion {
    /// `UPDATE … RETURNING`: the new version and the row come back with the update.
    Returning,
    /// `version = LAST_INSERT_ID(version + 1)`: the OK packet's insert id is the new
    /// version; the row is read after the update, in a transaction that holds its lock.
    InsertId,
}

mod sealed {
    use super::*;

    /// A statement's future, `Send` whatever the driver.
    pub(crate) type Future<'c, T> =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, sqlx::Error>> + Send + 'c>>;

    /// An integer of one of the three widths a version or fence column may have.
    #[derive(Debug, Clone, Copy)]
    pub enum Int {
        /// `smallint`.
        I16(i16),
        /// `integer`.
        I32(i32),
        /// `bigint`.
        I64(i64),
    }

    /// What an `UPDATE` reports.
    #[derive(Debug, Clone, Copy)]
    pub struct Done {
        /// The rows it matched.
        pub rows: u64,
        /// The insert id of the OK packet (MySQL), else 0.
        pub insert_id: u64,
    }

    /// The driver-specific parts of a versioned update.
    pub trait Sealed: Database + Sized {
        /// Values bound so far, in the order the builder received them.
        type Values: Default + Send;

        /// How the new version of a changed row is learned.
        const NEW_VERSION: super::NewVersion;
        /// Whether a refused update is confirmed in a transaction: run again there, and
        /// the row read while the update's lock is held, so the answer is the row's
        /// state at that moment. Otherwise the row is read right after, on the same
        /// connection.
        const CONFIRM_IN_TRANSACTION: bool;
        /// What a read of the row adds to hold its lock (`FOR UPDATE`), if anything.
        const LOCKING_READ: &'static str;

        /// `name`, quoted for this database.
        fn quote(name: &str) -> String;

        /// The text of parameter `n` (numbered from 1 in the order values were bound).
        fn placeholder(n: usize) -> String;

        /// `expr` read as a 64-bit integer.
        fn int8(expr: &str) -> String;

        /// Adds `value` to `values`, encoded now.
        fn push<'q, T>(values: &mut Self::Values, value: T) -> Result<(), BoxDynError>
        where
            T: Encode<'q, Self> + Type<Self> + 'q;

        /// Adds an integer to `values` as its own type (`smallint`, `integer`, `bigint`).
        fn push_int(values: &mut Self::Values, value: Int) -> Result<(), BoxDynError>;

        /// The arguments of a statement whose placeholders, in text order, are the
        /// parameters `order`.
        fn arguments(values: &Self::Values, order: &[usize]) -> Result<Self::Arguments<'static>, BoxDynError>;

        /// Runs `sql` and reports the rows it matched and its insert id (0 where the
        /// database has none).
        fn execute<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c str,
            args: Self::Arguments<'static>,
        ) -> Future<'c, Done>;

        /// Runs `sql` and returns its first row, if any.
        fn fetch_optional<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c str,
            args: Self::Arguments<'static>,
        ) -> Future<'c, Option<Self::Row>>;

        /// The 64-bit integer (or `NULL`) in column `index` of `row`.
        fn int8_at(row: &Self::Row, index: usize) -> Result<Option<i64>, sqlx::Error>;

        /// The 64-bit integer in the column named `name` of `row`.
        fn int8_named(row: &Self::Row, name: &str) -> Result<i64, sqlx::Error>;
    }
}

/// The parts of [`Sealed`] every driver implements alike, for a concrete driver `$db`
/// whose query result is `$result` and insert id is read by `$insert_id`.
macro_rules! run_with {
    ($db:ty, $insert_id:expr) => {
        fn push_int(values: &mut Self::Values, value: Int) -> Result<(), BoxDynError> {
            match value {
                Int::I16(value) => Self::push(values, value),
                Int::I32(value) => Self::push(values, value),
                Int::I64(value) => Self::push(values, value),
            }
        }

        fn execute<'c>(
            conn: &'c mut <$db as Database>::Connection,
            sql: &'c str,
            args: <$db as Database>::Arguments<'static>,
        ) -> Future<'c, Done> {
            Box::pin(async move {
                let args: <$db as Database>::Arguments<'c> = args;
                let done = sqlx::query_with(sql, args).execute(conn).await?;
                let insert_id: fn(&<$db as Database>::QueryResult) -> u64 = $insert_id;
                Ok(Done { rows: done.rows_affected(), insert_id: insert_id(&done) })
            })
        }

        fn fetch_optional<'c>(
            conn: &'c mut <$db as Database>::Connection,
            sql: &'c str,
            args: <$db as Database>::Arguments<'static>,
        ) -> Future<'c, Option<<$db as Database>::Row>> {
            Box::pin(async move {
                let args: <$db as Database>::Arguments<'c> = args;
                sqlx::query_with(sql, args).fetch_optional(conn).await
            })
        }

        fn int8_at(row: &<$db as Database>::Row, index: usize) -> Result<Option<i64>, sqlx::Error> {
            sqlx::Row::try_get(row, index)
        }

        fn int8_named(row: &<$db as Database>::Row, name: &str) -> Result<i64, sqlx::Error> {
            sqlx::Row::try_get(row, name)
        }
    };
}

mod postgres {
    use sqlx::postgres::PgArguments;
    use sqlx::{Arguments as _, Postgres};

    use super::*;

    impl Dialect for Postgres {}

    impl Sealed for Postgres {
        type Values = PgArguments;

        const NEW_VERSION: NewVersion = NewVersion::Returning;
        const CONFIRM_IN_TRANSACTION: bool = false;
        const LOCKING_READ: &'static str = "";

        fn quote(name: &str) -> String {
            format!("\"{name}\"")
        }

        fn placeholder(n: usize) -> String {
            format!("${n}")
        }

        fn int8(expr: &str) -> String {
            format!("{expr}::int8")
        }

        fn push<'q, T>(values: &mut PgArguments, value: T) -> Result<(), BoxDynError>
        where
            T: Encode<'q, Self> + Type<Self> + 'q,
        {
            values.add(value)
        }

        /// Numbered parameters: the values go in the order they were bound.
        fn arguments(values: &PgArguments, _order: &[usize]) -> Result<PgArguments, BoxDynError> {
            Ok(values.clone())
        }

        run_with!(Postgres, |_| 0);
    }
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use std::borrow::Cow;

    use sqlx::encode::IsNull;
    use sqlx::sqlite::{SqliteArgumentValue, SqliteArguments, SqliteTypeInfo};
    use sqlx::{Arguments as _, Sqlite};

    use super::*;

    impl Dialect for Sqlite {}

    /// A value encoded for SQLite and owned, so the update keeps no borrow of it.
    #[derive(Debug, Clone)]
    pub struct Owned(SqliteArgumentValue<'static>);

    impl Encode<'static, Sqlite> for Owned {
        fn encode_by_ref(&self, buf: &mut Vec<SqliteArgumentValue<'static>>) -> Result<IsNull, BoxDynError> {
            buf.push(self.0.clone());
            Ok(IsNull::No)
        }
    }

    impl Type<Sqlite> for Owned {
        fn type_info() -> SqliteTypeInfo {
            // Unused: SQLite binds each value by its own storage class.
            <Vec<u8> as Type<Sqlite>>::type_info()
        }
    }

    fn owned(value: SqliteArgumentValue<'_>) -> SqliteArgumentValue<'static> {
        match value {
            SqliteArgumentValue::Null => SqliteArgumentValue::Null,
            SqliteArgumentValue::Text(text) => SqliteArgumentValue::Text(Cow::Owned(text.into_owned())),
            SqliteArgumentValue::Blob(blob) => SqliteArgumentValue::Blob(Cow::Owned(blob.into_owned())),
            SqliteArgumentValue::Double(value) => SqliteArgumentValue::Double(value),
            SqliteArgumentValue::Int(value) => SqliteArgumentValue::Int(value),
            SqliteArgumentValue::Int64(value) => SqliteArgumentValue::Int64(value),
        }
    }

    impl Sealed for Sqlite {
        type Values = Vec<Owned>;

        const NEW_VERSION: NewVersion = NewVersion::Returning;
        const CONFIRM_IN_TRANSACTION: bool = true;
        const LOCKING_READ: &'static str = "";

        fn quote(name: &str) -> String {
            format!("\"{name}\"")
        }

        fn placeholder(n: usize) -> String {
            format!("?{n}")
        }

        fn int8(expr: &str) -> String {
            expr.to_owned()
        }

        fn push<'q, T>(values: &mut Vec<Owned>, value: T) -> Result<(), BoxDynError>
        where
            T: Encode<'q, Self> + Type<Self> + 'q,
        {
            let mut buf = Vec::new();
            if value.encode(&mut buf)?.is_null() {
                buf.push(SqliteArgumentValue::Null);
            }
            values.extend(buf.into_iter().map(|value| Owned(owned(value))));
            Ok(())
        }

        /// Numbered parameters (`?NNN`): the values go in the order they were bound.
        fn arguments(values: &Vec<Owned>, _order: &[usize]) -> Result<SqliteArguments<'static>, BoxDynError> {
            let mut arguments = SqliteArguments::default();
            for value in values {
                arguments.add(value.clone())?;
            }
            Ok(arguments)
        }

        run_with!(Sqlite, |_| 0);
    }
}

#[cfg(feature = "mysql")]
mod mysql {
    use sqlx::encode::IsNull;
    use sqlx::mysql::{MySqlArguments, MySqlTypeInfo};
    use sqlx::{Arguments as _, MySql};

    use super::*;

    impl Dialect for MySql {}

    /// A value encoded for MySQL, with its type, bound later in any order.
    #[derive(Debug, Clone)]
    pub struct Encoded {
        bytes: Vec<u8>,
        type_info: MySqlTypeInfo,
        null: bool,
    }

    impl Encode<'_, MySql> for Encoded {
        fn encode_by_ref(&self, buf: &mut Vec<u8>) -> Result<IsNull, BoxDynError> {
            buf.extend_from_slice(&self.bytes);
            Ok(if self.null { IsNull::Yes } else { IsNull::No })
        }

        fn produces(&self) -> Option<MySqlTypeInfo> {
            Some(self.type_info.clone())
        }
    }

    impl Type<MySql> for Encoded {
        fn type_info() -> MySqlTypeInfo {
            // Unused: `produces` gives each value's own type.
            <Vec<u8> as Type<MySql>>::type_info()
        }

        fn compatible(_: &MySqlTypeInfo) -> bool {
            true
        }
    }

    impl Sealed for MySql {
        type Values = Vec<Encoded>;

        const NEW_VERSION: NewVersion = NewVersion::InsertId;
        const CONFIRM_IN_TRANSACTION: bool = true;
        const LOCKING_READ: &'static str = " FOR UPDATE";

        fn quote(name: &str) -> String {
            format!("`{name}`")
        }

        fn placeholder(_n: usize) -> String {
            "?".to_owned()
        }

        fn int8(expr: &str) -> String {
            format!("CAST({expr} AS SIGNED)")
        }

        fn push<'q, T>(values: &mut Vec<Encoded>, value: T) -> Result<(), BoxDynError>
        where
            T: Encode<'q, Self> + Type<Self> + 'q,
        {
            let type_info = value.produces().unwrap_or_else(T::type_info);
            let mut bytes = Vec::new();
            let null = value.encode(&mut bytes)?.is_null();
            values.push(Encoded { bytes, type_info, null });
            Ok(())
        }

        /// Positional parameters: each value goes where its number appears, as often
        /// as it appears.
        fn arguments(values: &Vec<Encoded>, order: &[usize]) -> Result<MySqlArguments, BoxDynError> {
            let mut arguments = MySqlArguments::default();
            for &n in order {
                let value = values.get(n.wrapping_sub(1)).ok_or_else(|| format!("no value for parameter {n}"))?;
                arguments.add(value.clone())?;
            }
            Ok(arguments)
        }

        run_with!(MySql, sqlx::mysql::MySqlQueryResult::last_insert_id);
    }
}
