//! Plain validated configuration: the table name, the layout and the defaults. Imports
//! nothing from the rest of the crate.

use std::time::Duration;

use distlock_sql::IdentifierRules;

/// The name of the lease table unless [`SqliteLockStoreBuilder::table`](crate::SqliteLockStoreBuilder::table)
/// or `?table=` says otherwise; the store's other tables are named after it
/// (`distlock_queue`, `distlock_holders`, …).
pub const DEFAULT_TABLE: &str = "distlock";
/// How long opening the database file and, later, waiting for a pooled connection may
/// take before an operation fails with [`LockError::Store`](distlock_api::LockError::Store).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a write waits for another process's write transaction to end before it
/// fails (SQLite's `busy_timeout`).
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(30);
/// The pool size of [`SqliteLockStore::connect`](crate::SqliteLockStore::connect).
pub const DEFAULT_MAX_CONNECTIONS: u32 = 4;
/// The longest [`connect_timeout`](crate::SqliteLockStoreBuilder::connect_timeout) or
/// [`busy_timeout`](crate::SqliteLockStoreBuilder::busy_timeout) a builder accepts: one
/// hour.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// SQLite's names, double-quoted: at most 48 bytes (which leave room for the suffixes
/// of the derived table and index names), not starting with `sqlite_` (reserved).
#[derive(Debug)]
pub(crate) struct SqliteNames;

impl IdentifierRules for SqliteNames {
    const MAX_LEN: usize = 48;
    const SERVER_MAX_LEN: usize = usize::MAX;
    const QUOTE: char = '"';
    const RESERVED_PREFIX: Option<&'static str> = Some("sqlite_");
}

/// An SQLite identifier that matched `[A-Za-z_][A-Za-z0-9_]{0,47}`.
pub(crate) type Identifier = distlock_sql::Identifier<SqliteNames>;

/// What the store keeps where, and which of its optional behaviours are on.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub(crate) table: Identifier,
    /// Whether releases wake waiters in other processes (datagrams to their sockets).
    pub(crate) notifications: bool,
    /// Whether waiting acquisitions queue in arrival order.
    pub(crate) fair_queue: bool,
    /// Whether a lease whose holder process is gone counts as free.
    pub(crate) liveness: bool,
}

impl Default for Layout {
    fn default() -> Self {
        Self { table: Identifier::trusted(DEFAULT_TABLE), notifications: true, fair_queue: true, liveness: true }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_up_to_48_bytes_not_reserved_are_double_quoted() {
        let longest = "n".repeat(48);
        assert_eq!(Identifier::new("table", &longest).unwrap().quoted(), format!("\"{longest}\""));
        for bad in [format!("{longest}n"), "sqlite_x".to_owned(), "SQLite_x".to_owned()] {
            assert!(Identifier::new("table", &bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_default_table_is_a_valid_identifier() {
        assert_eq!(Identifier::new("table", DEFAULT_TABLE).unwrap(), Identifier::trusted(DEFAULT_TABLE));
    }
}
