//! Plain validated configuration: SQL identifiers, the table layout and the defaults.
//! Imports nothing from the rest of the crate.

use std::fmt;
use std::time::Duration;

use distlock_api::LockError;

/// The lease table used unless [`MysqlLockStoreBuilder::table`](crate::MysqlLockStoreBuilder::table)
/// or `?table=` says otherwise, in the URL's database. The queue and group tables are
/// named after it (`distribute_lock_queue`, `distribute_lock_holders`, …).
pub const DEFAULT_TABLE: &str = "distribute_lock";
/// The pool size of [`MysqlLockStore::connect`](crate::MysqlLockStore::connect).
pub const DEFAULT_MAX_CONNECTIONS: u32 = 8;
/// How long the pool of [`MysqlLockStore::connect`](crate::MysqlLockStore::connect)
/// waits for a connection (including opening one) before an operation fails with
/// [`LockError::Store`].
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long [`MysqlLockStoreBuilder::connect`](crate::MysqlLockStoreBuilder::connect)
/// waits for the server's first answer.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest [`acquire_timeout`](crate::MysqlLockStoreBuilder::acquire_timeout) or
/// [`connect_timeout`](crate::MysqlLockStoreBuilder::connect_timeout) a builder accepts:
/// one hour.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// A table name that matched `[A-Za-z_][A-Za-z0-9_]{0,47}`.
///
/// Only such names are spliced into SQL text, always in backticks, so a configured name
/// cannot inject SQL. 48 bytes leave room for the suffixes of the derived tables and
/// indexes within MySQL's 64-byte limit.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct Identifier(String);

impl Identifier {
    const MAX_LEN: usize = 48;

    /// Validates `name`; `what` ("table") goes into the error message.
    pub(crate) fn new(what: &str, name: &str) -> Result<Self, LockError> {
        let mut chars = name.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if first_ok && rest_ok && name.len() <= Self::MAX_LEN {
            Ok(Self(name.to_owned()))
        } else {
            Err(LockError::Config {
                message: format!(
                    "{what} name {name:?} is not a plain SQL identifier: expected 1 to {} characters \
                     matching [A-Za-z_][A-Za-z0-9_]*",
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

    /// The identifier in backticks, ready for SQL text.
    pub(crate) fn quoted(&self) -> String {
        format!("`{}`", self.0)
    }

    /// The name of a table or index that belongs to this one: `<name>_<suffix>` (at most
    /// 48 + 1 + 15 bytes; `suffix` is one of this crate's constants).
    pub(crate) fn derived(&self, suffix: &str) -> Self {
        Self(format!("{}_{suffix}", self.0))
    }
}

impl fmt::Debug for Identifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

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
    fn identifiers_follow_the_plain_pattern() {
        for good in ["a", "_", "locks", "Locks_2", "_x9", &"n".repeat(48)] {
            let id = Identifier::new("table", good).unwrap();
            assert_eq!(id.quoted(), format!("`{good}`"));
        }
        let too_long = "n".repeat(49);
        for bad in ["", "9a", "x; DROP TABLE y", "a`b", "a-b", "a b", "ü", "a.b", "a'b", "a\0", too_long.as_str()] {
            let err = Identifier::new("table", bad).unwrap_err();
            assert!(matches!(err, LockError::Config { .. }), "{bad:?}: {err}");
        }
    }

    #[test]
    fn the_default_name_is_a_valid_identifier() {
        assert_eq!(Identifier::new("table", DEFAULT_TABLE).unwrap(), Identifier::trusted(DEFAULT_TABLE));
        let longest = Identifier::new("table", &"n".repeat(48)).unwrap().derived("holders_owner");
        assert!(longest.as_str().len() <= 64);
    }
}
