//! Plain validated configuration: the table name, the layout and the defaults. Imports
//! nothing from the rest of the crate.

use std::fmt;
use std::time::Duration;

use distlock_api::LockError;

/// The name of the lease table unless [`SqliteLockStoreBuilder::table`](crate::SqliteLockStoreBuilder::table)
/// or `?table=` says otherwise; the store's other tables are named after it
/// (`distlock_queue`, `distlock_holders`, …).
pub const DEFAULT_TABLE: &str = "distlock";
/// How long opening the database file and, later, waiting for a pooled connection may
/// take before an operation fails with [`LockError::Store`].
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

/// An SQLite identifier that matched `[A-Za-z_][A-Za-z0-9_]{0,47}`: only such names are
/// spliced into SQL text, always double-quoted. (48 bytes leave room for the suffixes of
/// the derived table and index names.)
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct Identifier(String);

impl Identifier {
    const MAX_LEN: usize = 48;

    /// Validates `name`; `what` ("table") goes into the error message.
    pub(crate) fn new(what: &str, name: &str) -> Result<Self, LockError> {
        let mut chars = name.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if first_ok && rest_ok && name.len() <= Self::MAX_LEN && !name.to_ascii_lowercase().starts_with("sqlite_") {
            Ok(Self(name.to_owned()))
        } else {
            Err(LockError::Config {
                message: format!(
                    "{what} name {name:?} is not a plain SQL identifier: expected 1 to {} characters \
                     matching [A-Za-z_][A-Za-z0-9_]*, not starting with `sqlite_`",
                    Self::MAX_LEN
                ),
            })
        }
    }

    /// One of this crate's constant default names (checked by a unit test).
    pub(crate) fn trusted(name: &'static str) -> Self {
        Self(name.to_owned())
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// `"<name>_<suffix>"`, double-quoted; `suffix` is one of this crate's constants
    /// (lower-case ASCII letters and `_`), so the result is a quoted identifier too.
    pub(crate) fn quoted_with(&self, suffix: &str) -> String {
        if suffix.is_empty() {
            format!("\"{}\"", self.0)
        } else {
            format!("\"{}_{suffix}\"", self.0)
        }
    }
}

impl fmt::Debug for Identifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

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
    fn identifiers_follow_the_plain_pattern() {
        for good in ["a", "_", "locks", "Locks_2", "_x9", &"n".repeat(48)] {
            let id = Identifier::new("table", good).unwrap();
            assert_eq!(id.quoted_with("queue"), format!("\"{good}_queue\""));
        }
        let too_long = "n".repeat(49);
        for bad in ["", "9a", "x; DROP TABLE y", "a\"b", "a-b", "a b", "ü", "a.b", "sqlite_x", too_long.as_str()] {
            let err = Identifier::new("table", bad).unwrap_err();
            assert!(matches!(err, LockError::Config { .. }), "{bad:?}: {err}");
        }
    }

    #[test]
    fn the_default_table_is_a_valid_identifier() {
        assert_eq!(Identifier::new("table", DEFAULT_TABLE).unwrap(), Identifier::trusted(DEFAULT_TABLE));
    }
}
