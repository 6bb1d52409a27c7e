//! Plain validated configuration: SQL identifiers, the table layout and the defaults.
//! Imports nothing from the rest of the crate.

use std::time::Duration;

use distlock_sql::IdentifierRules;

/// The schema used unless [`PostgresLockStoreBuilder::schema`](crate::PostgresLockStoreBuilder::schema) or `?schema=` says otherwise.
pub const DEFAULT_SCHEMA: &str = "public";
/// The lease table used unless [`PostgresLockStoreBuilder::table`](crate::PostgresLockStoreBuilder::table) or `?table=` says otherwise:
/// `distribute_lock`, in the store's own layout (see "What `ensure_schema` creates" in the
/// [crate documentation](crate)).
pub const DEFAULT_TABLE: &str = "distribute_lock";
/// The fence sequence used unless [`PostgresLockStoreBuilder::sequence`](crate::PostgresLockStoreBuilder::sequence) or `?sequence=` says otherwise.
pub const DEFAULT_SEQUENCE: &str = "distlock_fence_seq";
/// The `application_name` of connections opened by [`PostgresLockStore::connect`](crate::PostgresLockStore::connect).
pub const DEFAULT_APPLICATION_NAME: &str = "distlock";
/// The pool size of [`PostgresLockStore::connect`](crate::PostgresLockStore::connect).
pub const DEFAULT_MAX_CONNECTIONS: u32 = 8;
/// How long [`PostgresLockStore::connect`](crate::PostgresLockStore::connect)'s pool
/// waits for a connection (including opening one) before an operation fails with
/// [`LockError::Store`](distlock_api::LockError::Store).
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long [`PostgresLockStore::connect`](crate::PostgresLockStore::connect) waits for
/// the server's first answer.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest [`acquire_timeout`](crate::PostgresLockStoreBuilder::acquire_timeout) or
/// [`connect_timeout`](crate::PostgresLockStoreBuilder::connect_timeout) a builder
/// accepts: one hour.
pub const MAX_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3600);

/// The shortest purge horizon: [`PostgresLockStore::purge`](crate::PostgresLockStore::purge)
/// never deletes a row whose lease ended less than this long ago, and an acquire
/// statement that ran this long is refused (see "The purge horizon" in the
/// [crate documentation](crate)). One minute.
pub const MIN_PURGE_HORIZON: Duration = Duration::from_secs(60);

/// PostgreSQL's names: at most 63 bytes (`NAMEDATALEN - 1`, so a configured name is
/// never silently truncated by the server), double-quoted (never case-folded).
#[derive(Debug)]
pub(crate) struct PgNames;

impl IdentifierRules for PgNames {
    const MAX_LEN: usize = 63;
    const SERVER_MAX_LEN: usize = 63;
    const QUOTE: char = '"';
}

/// A PostgreSQL identifier that matched `[A-Za-z_][A-Za-z0-9_]{0,62}`.
pub(crate) type Identifier = distlock_sql::Identifier<PgNames>;

/// Where the store keeps its state: validated schema, table and sequence names.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub(crate) schema: Identifier,
    pub(crate) table: Identifier,
    pub(crate) sequence: Identifier,
    pub(crate) unlogged: bool,
    /// Whether release sends `pg_notify` (and waiters `LISTEN`).
    pub(crate) notify: bool,
}

impl Default for Layout {
    fn default() -> Self {
        Self {
            schema: Identifier::trusted(DEFAULT_SCHEMA),
            table: Identifier::trusted(DEFAULT_TABLE),
            sequence: Identifier::trusted(DEFAULT_SEQUENCE),
            unlogged: false,
            notify: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_up_to_63_bytes_are_double_quoted() {
        let longest = "n".repeat(63);
        assert_eq!(Identifier::new("table", &longest).unwrap().quoted(), format!("\"{longest}\""));
        assert!(Identifier::new("table", &format!("{longest}n")).is_err());
    }

    #[test]
    fn default_names_are_valid_identifiers() {
        for name in [DEFAULT_SCHEMA, DEFAULT_TABLE, DEFAULT_SEQUENCE] {
            assert_eq!(Identifier::new("name", name).unwrap(), Identifier::trusted(name));
        }
        let default = Layout::default();
        assert!(!default.unlogged && default.notify);
    }

    #[test]
    fn derived_names_are_identifiers_of_at_most_63_bytes() {
        let short = Identifier::new("table", "locks").unwrap();
        assert_eq!(short.derived("holders").as_str(), "locks_holders");
        let long = Identifier::new("table", &"n".repeat(63)).unwrap();
        let other = Identifier::new("table", &format!("{}m", "n".repeat(62))).unwrap();
        for suffix in ["holders", "permits", "holders_owner", "acquire_group", "queue", "queue_order", "values"] {
            let (a, b) = (long.derived(suffix), other.derived(suffix));
            assert!(a.as_str().len() <= 63 && a.as_str().ends_with(&format!("_{suffix}")), "{a:?}");
            assert_eq!(Identifier::new("derived", a.as_str()).unwrap(), a);
            assert_ne!(a, b, "long names that differ only at the end stay apart");
        }
    }
}
