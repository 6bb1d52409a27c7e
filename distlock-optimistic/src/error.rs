//! What a versioned or fenced update can end in, besides success. Imports nothing from
//! the rest of the crate.

use std::fmt;

/// The key of a row, as errors name it: the key's value, or `column=value` pairs joined by
/// `, ` for a composite key. Shown and compared as that text; a key that is one integer
/// column's value is also a number ([`as_integer`](Self::as_integer)), which is how HTTP
/// answers write it.
///
/// ```
/// use distlock::optimistic::RowId;
///
/// assert_eq!(RowId::from(7_i64).as_integer(), Some(7));
/// assert_eq!(RowId::from("7").as_integer(), None); // a text key that reads like a number
/// assert_eq!(RowId::from(7_i64), "7");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RowId {
    text: String,
    /// One integer column's value.
    integer: bool,
}

impl RowId {
    /// A key that is one integer column's value, written `text`: a number when `text`
    /// reads as one, else text.
    pub(crate) fn integer(text: String) -> Self {
        Self { text, integer: true }
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The key as a number, when it is one integer column's value.
    pub fn as_integer(&self) -> Option<i128> {
        self.integer.then(|| self.text.parse().ok()).flatten()
    }
}

impl fmt::Display for RowId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl From<String> for RowId {
    fn from(text: String) -> Self {
        Self { text, integer: false }
    }
}

impl From<&str> for RowId {
    fn from(text: &str) -> Self {
        text.to_owned().into()
    }
}

macro_rules! integer_row_id {
    ($($int:ty),*) => {$(
        impl From<$int> for RowId {
            fn from(id: $int) -> Self {
                Self { text: id.to_string(), integer: true }
            }
        }
    )*};
}
integer_row_id!(i16, i32, i64, u16, u32, u64);

impl PartialEq<str> for RowId {
    fn eq(&self, other: &str) -> bool {
        self.text == other
    }
}

impl PartialEq<&str> for RowId {
    fn eq(&self, other: &&str) -> bool {
        self.text == *other
    }
}

/// A versioned update found the row changed since it was read: its version is no longer
/// the one the update expected.
///
/// Re-read the row, re-apply the change and try again, or tell the user that someone else
/// changed it first. The crate never retries by itself.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StaleRecord {
    /// The table, as given to the builder (unquoted).
    pub table: String,
    /// The key of the row: the key value, or `column=value` pairs joined by `, ` for a
    /// composite key.
    pub id: RowId,
    /// The version the update expected.
    pub expected_version: i64,
    /// The version the row had just after the refused update (read by a second statement),
    /// when it differed from the expected one. `None` when the row still showed the expected
    /// version to that read: inside a `REPEATABLE READ` transaction whose snapshot predates
    /// the concurrent change, for one.
    pub actual_version: Option<i64>,
}

impl fmt::Display for StaleRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stale record in {} (id {}): expected version {}", self.table, self.id, self.expected_version)?;
        match self.actual_version {
            Some(actual) => write!(f, ", found version {actual}"),
            None => write!(f, ", the row was changed by a concurrent update"),
        }
    }
}

impl std::error::Error for StaleRecord {}

/// A fenced write carried a lower fence than the one the row (or Redis value) was last
/// written with: its writer's lock was lost — its lease expired and another holder, with
/// a higher fence, has written since. The write changed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FencedOut {
    /// The table, as given to the builder (unquoted).
    pub table: String,
    /// The key of the row (as in [`StaleRecord::id`]).
    pub id: RowId,
    /// The fence this write carried.
    pub fence: u64,
    /// The highest fence that wrote the row, when the statement saw it; `None` when it was
    /// raised by a transaction that committed while this statement waited for the row lock.
    pub current_fence: Option<u64>,
}

impl fmt::Display for FencedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "write to {} (id {}) with fence {} refused", self.table, self.id, self.fence)?;
        match self.current_fence {
            Some(current) => write!(f, ": the row was written with fence {current}"),
            None => write!(f, ": a concurrent write raised the row's fence"),
        }
    }
}

impl std::error::Error for FencedOut {}

/// Why a [`VersionedUpdate`](crate::VersionedUpdate) changed nothing.
///
/// Match on the variant: `Stale` and `FencedOut` are conflicts to handle (409 under the
/// `axum` feature), `NotFound` is a missing row (404), `Invalid` a bug in the calling code
/// found before any I/O, `Database` a failure of the server or the connection.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OptimisticError {
    /// The row's version is not the expected one.
    #[error(transparent)]
    Stale(StaleRecord),
    /// The row was last written with a higher fence than this write carried.
    #[error(transparent)]
    FencedOut(FencedOut),
    /// No row has this key.
    #[error("no row in {table} has id {id}")]
    NotFound {
        /// The table, as given to the builder (unquoted).
        table: String,
        /// The key of the row (as in [`StaleRecord::id`]).
        id: RowId,
    },
    /// Incrementing the version would overflow its column's integer type (SQLSTATE
    /// 22003). The row is unchanged; widen the column or reset its version.
    #[error("the version of {table} (id {id}) is at the largest value its column can hold")]
    VersionOverflow {
        /// The table, as given to the builder (unquoted).
        table: String,
        /// The key of the row (as in [`StaleRecord::id`]).
        id: RowId,
        /// The server's error.
        #[source]
        source: sqlx::Error,
    },
    /// The update was built wrong (a name that is not a plain identifier, no key, no
    /// column to set, a value that cannot be encoded…). Found before any I/O.
    #[error("invalid versioned update: {message}")]
    Invalid {
        /// What is wrong.
        message: String,
    },
    /// The statement failed on the server or the connection.
    #[error("versioned update of {table} failed")]
    Database {
        /// The table, as given to the builder (unquoted).
        table: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
}

impl OptimisticError {
    /// Whether this is a conflict ([`Stale`](Self::Stale) or [`FencedOut`](Self::FencedOut)):
    /// the row exists but was changed by someone else.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Stale(_) | Self::FencedOut(_))
    }
}

impl From<StaleRecord> for OptimisticError {
    fn from(stale: StaleRecord) -> Self {
        Self::Stale(stale)
    }
}

impl From<FencedOut> for OptimisticError {
    fn from(fenced: FencedOut) -> Self {
        Self::FencedOut(fenced)
    }
}
