//! Plain validated configuration: SQL identifiers, the table layout and the defaults.
//! Imports nothing from the rest of the crate.

use std::fmt;
use std::time::Duration;

use distlock_api::LockError;

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
/// [`LockError::Store`].
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest [`acquire_timeout`](crate::PostgresLockStoreBuilder::acquire_timeout) a
/// builder accepts: one hour.
pub const MAX_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3600);

/// The shortest purge horizon: [`PostgresLockStore::purge`](crate::PostgresLockStore::purge)
/// never deletes a row whose lease ended less than this long ago, and an acquire
/// statement that ran this long is refused (see "The purge horizon" in the
/// [crate documentation](crate)). One minute.
pub const MIN_PURGE_HORIZON: Duration = Duration::from_secs(60);

/// A PostgreSQL identifier that matched `[A-Za-z_][A-Za-z0-9_]{0,62}`.
///
/// Only such names are ever spliced into SQL text, and always double-quoted, so a
/// configured name can neither inject SQL nor be silently case-folded or truncated by
/// the server (63 bytes is PostgreSQL's `NAMEDATALEN - 1`).
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct Identifier(String);

impl Identifier {
    const MAX_LEN: usize = 63;

    /// Validates `name`; `what` ("schema", "table"…) goes into the error message.
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

    /// The identifier double-quoted, ready for SQL text.
    pub(crate) fn quoted(&self) -> String {
        format!("\"{}\"", self.0)
    }

    /// The name of an object that belongs to this one: `<name>_<suffix>`, or, when that
    /// would exceed 63 bytes, the name cut short followed by `_`, a 32-bit FNV-1a hash of
    /// the whole name in hex and `_<suffix>` (so two long names stay apart). `suffix` is
    /// one of this crate's constants: lower-case ASCII letters, digits and `_`.
    pub(crate) fn derived(&self, suffix: &str) -> Self {
        let plain = format!("{}_{suffix}", self.0);
        if plain.len() <= Self::MAX_LEN {
            return Self(plain);
        }
        let hash =
            self.0.bytes().fold(0x811c_9dc5_u32, |hash, byte| (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193));
        // An identifier is ASCII, so any byte offset is a character boundary.
        let keep = Self::MAX_LEN.saturating_sub(suffix.len() + 10).min(self.0.len());
        Self(format!("{}_{hash:08x}_{suffix}", &self.0[..keep]))
    }
}

impl fmt::Debug for Identifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

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
    fn identifiers_follow_the_plain_pattern() {
        for good in ["a", "_", "public", "Locks_2", "_x9", &"n".repeat(63)] {
            let id = Identifier::new("table", good).unwrap();
            assert_eq!(id.quoted(), format!("\"{good}\""));
        }
        let too_long = "n".repeat(64);
        for bad in ["", "9a", "x; DROP TABLE y", "a\"b", "a-b", "a b", "ü", "a.b", "a'b", "a\0", too_long.as_str()] {
            let err = Identifier::new("table", bad).unwrap_err();
            assert!(matches!(err, LockError::Config { .. }), "{bad:?}: {err}");
        }
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
        for suffix in ["holders", "permits", "holders_owner", "acquire_group", "queue", "queue_order"] {
            let (a, b) = (long.derived(suffix), other.derived(suffix));
            assert!(a.as_str().len() <= 63 && a.as_str().ends_with(&format!("_{suffix}")), "{a:?}");
            assert_eq!(Identifier::new("derived", a.as_str()).unwrap(), a);
            assert_ne!(a, b, "long names that differ only at the end stay apart");
            assert_eq!(a, long.derived(suffix), "stable");
        }
    }

    #[test]
    fn config_errors_name_the_identifier() {
        let err = Identifier::new("schema", "a\"b").unwrap_err();
        assert!(err.to_string().contains("schema name \"a\\\"b\""), "{err}");
    }
}
