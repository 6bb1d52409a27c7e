//! Plain validated configuration: SQL identifiers, the table layout and the defaults.
//! Imports nothing from the rest of the crate.

use std::time::Duration;

use distlock_sql::IdentifierRules;

/// The lease table used unless [`MysqlLockStoreBuilder::table`](crate::MysqlLockStoreBuilder::table)
/// or `?table=` says otherwise, in the URL's database. The queue and group tables are
/// named after it (`distribute_lock_queue`, `distribute_lock_holders`, …).
pub const DEFAULT_TABLE: &str = "distribute_lock";
/// The pool size of [`MysqlLockStore::connect`](crate::MysqlLockStore::connect).
pub const DEFAULT_MAX_CONNECTIONS: u32 = 8;
/// How long the pool of [`MysqlLockStore::connect`](crate::MysqlLockStore::connect)
/// waits for a connection (including opening one) before an operation fails with
/// [`LockError::Store`](distlock_api::LockError::Store).
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long [`MysqlLockStoreBuilder::connect`](crate::MysqlLockStoreBuilder::connect)
/// waits for the server's first answer.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest [`acquire_timeout`](crate::MysqlLockStoreBuilder::acquire_timeout) or
/// [`connect_timeout`](crate::MysqlLockStoreBuilder::connect_timeout) a builder accepts:
/// one hour.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// MySQL's names, in backticks: at most 48 bytes, which leave room for the suffixes of
/// the derived tables and indexes within MySQL's 64-byte limit.
#[derive(Debug)]
pub(crate) struct MysqlNames;

impl IdentifierRules for MysqlNames {
    const MAX_LEN: usize = 48;
    const SERVER_MAX_LEN: usize = 64;
    const QUOTE: char = '`';
}

/// A table name that matched `[A-Za-z_][A-Za-z0-9_]{0,47}`.
pub(crate) type Identifier = distlock_sql::Identifier<MysqlNames>;

/// Where the store keeps its state: the validated lease table name (the other tables are
/// named after it).
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub(crate) table: Identifier,
    /// Whether waiters register for releases and releases wake them (see `notify.rs`).
    pub(crate) notify: bool,
}

impl Default for Layout {
    fn default() -> Self {
        Self { table: Identifier::trusted(DEFAULT_TABLE), notify: true }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_up_to_48_bytes_are_in_backticks() {
        let longest = "n".repeat(48);
        assert_eq!(Identifier::new("table", &longest).unwrap().quoted(), format!("`{longest}`"));
        assert!(Identifier::new("table", &format!("{longest}n")).is_err());
        assert!(Identifier::new("table", "a`b").is_err());
    }

    #[test]
    fn the_default_name_is_a_valid_identifier() {
        assert_eq!(Identifier::new("table", DEFAULT_TABLE).unwrap(), Identifier::trusted(DEFAULT_TABLE));
        let longest = Identifier::new("table", &"n".repeat(48)).unwrap().derived("holders_owner");
        assert_eq!(longest.as_str().len(), 48 + "_holders_owner".len(), "never shortened");
        assert!(longest.as_str().len() <= 64);
    }
}
