//! Store URLs: `sqlite:///path/to/locks.db?table=…`, parsed and validated without I/O.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use distlock_api::LockError;
use distlock_sql::query::{decode, flag, identifier, read_query, unknown};

use crate::config::Identifier;

/// The query parameters a store URL may carry.
const PARAMETERS: [&str; 4] = ["table", "notifications", "fair_queue", "liveness"];

/// A parsed `sqlite:` store URL: the database file and the store's settings. Parsing does
/// no I/O.
///
/// The path follows `sqlite://` (`sqlite:///var/lib/app/locks.db` is the absolute path
/// `/var/lib/app/locks.db`, `sqlite://locks.db` a path relative to the working
/// directory) or `sqlite:` (`sqlite:locks.db`); `%XX` escapes are decoded. The query may
/// carry:
///
/// | parameter | meaning | default |
/// |---|---|---|
/// | `table=NAME` | the lease table; the other tables are named after it | `distlock` |
/// | `notifications=true\|false` | releases wake waiters in other processes | `true` |
/// | `fair_queue=true\|false` | waiting acquisitions are served in arrival order | `true` |
/// | `liveness=true\|false` | a lease whose holder process is gone counts as free | `true` |
///
/// A name must match `[A-Za-z_][A-Za-z0-9_]{0,47}`. Any other parameter, a parameter
/// given twice, a malformed value, an in-memory database (`:memory:`, `mode=memory`:
/// one process only, while the store is for all the processes of a host) or an empty
/// path is a [`LockError::Config`] naming what is wrong.
///
/// ```
/// use distlock_sqlite::SqliteUrl;
///
/// let url = SqliteUrl::parse("sqlite:///var/lib/app/locks.db?table=jobs&fair_queue=false")?;
/// assert_eq!(url.path(), std::path::Path::new("/var/lib/app/locks.db"));
/// assert_eq!(url.table(), Some("jobs"));
/// assert_eq!(url.fair_queue(), Some(false));
/// assert_eq!(url.notifications(), None);
///
/// let err = SqliteUrl::parse("sqlite:///tmp/locks.db?tabel=x").unwrap_err();
/// assert!(err.to_string().contains("`tabel`"), "{err}");
/// # Ok::<(), distlock_api::LockError>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct SqliteUrl {
    path: PathBuf,
    table: Option<Identifier>,
    notifications: Option<bool>,
    fair_queue: Option<bool>,
    liveness: Option<bool>,
}

impl SqliteUrl {
    /// Parses and validates `url`.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] when the scheme is not `sqlite:`, the path is empty or names
    /// an in-memory database, or a query parameter is unknown, repeated or malformed (the
    /// message names it).
    pub fn parse(url: &str) -> Result<Self, LockError> {
        let rest = url
            .get(..7)
            .filter(|scheme| scheme.eq_ignore_ascii_case("sqlite:"))
            .map(|_| &url[7..])
            .ok_or_else(|| config("not an SQLite URL: expected `sqlite:///path/to/locks.db`".to_owned()))?;
        let rest = rest.strip_prefix("//").unwrap_or(rest);
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let path = decode(path, false).ok_or_else(|| config("the database path is not UTF-8".to_owned()))?;
        if path.is_empty() {
            return Err(config("the URL names no database file: expected `sqlite:///path/to/locks.db`".to_owned()));
        }
        if path == ":memory:" {
            return Err(in_memory());
        }
        let mut parsed =
            Self { path: PathBuf::from(path), table: None, notifications: None, fair_queue: None, liveness: None };
        read_query(
            query,
            &PARAMETERS,
            |name, value| parsed.set(name, value),
            |name, pair| match pair.split_once('=') {
                Some((_, value)) if name == "mode" && decode(value, false).as_deref() == Some("memory") => {
                    Err(in_memory())
                }
                _ => Err(unknown("SQLite", name, &format!("one of {}", PARAMETERS.join(", ")))),
            },
        )?;
        Ok(parsed)
    }

    fn set(&mut self, name: &str, value: &str) -> Result<(), LockError> {
        match name {
            "table" => self.table = Some(identifier(name, value)?),
            "notifications" => self.notifications = Some(flag(name, value)?),
            "fair_queue" => self.fair_queue = Some(flag(name, value)?),
            _ => self.liveness = Some(flag(name, value)?),
        }
        Ok(())
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `?table=`, if given.
    pub fn table(&self) -> Option<&str> {
        self.table.as_ref().map(Identifier::as_str)
    }

    /// `?notifications=`, if given.
    pub fn notifications(&self) -> Option<bool> {
        self.notifications
    }

    /// `?fair_queue=`, if given.
    pub fn fair_queue(&self) -> Option<bool> {
        self.fair_queue
    }

    /// `?liveness=`, if given.
    pub fn liveness(&self) -> Option<bool> {
        self.liveness
    }
}

impl fmt::Debug for SqliteUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteUrl")
            .field("path", &self.path)
            .field("table", &self.table)
            .field("notifications", &self.notifications)
            .field("fair_queue", &self.fair_queue)
            .field("liveness", &self.liveness)
            .finish()
    }
}

impl FromStr for SqliteUrl {
    type Err = LockError;

    fn from_str(url: &str) -> Result<Self, LockError> {
        Self::parse(url)
    }
}

fn config(message: String) -> LockError {
    LockError::Config { message }
}

fn in_memory() -> LockError {
    config(
        "an in-memory SQLite database lives in one process; the SQLite store shares locks between the processes \
         of a host through a file: name one, e.g. `sqlite:///var/lib/app/locks.db`"
            .to_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(url: &str) -> String {
        match SqliteUrl::parse(url) {
            Err(LockError::Config { message }) => message,
            other => panic!("{url}: expected a Config error, got {other:?}"),
        }
    }

    #[test]
    fn paths_and_parameters_are_read() {
        let url = SqliteUrl::parse("sqlite:///tmp/a%20b.db?table=t&notifications=FALSE&fair_queue=true&liveness=false")
            .unwrap();
        assert_eq!(url.path(), Path::new("/tmp/a b.db"));
        assert_eq!((url.table(), url.notifications()), (Some("t"), Some(false)));
        assert_eq!((url.fair_queue(), url.liveness()), (Some(true), Some(false)));
        assert_eq!(SqliteUrl::parse("sqlite://locks.db").unwrap().path(), Path::new("locks.db"));
        assert_eq!(SqliteUrl::parse("SQLite:locks.db").unwrap().path(), Path::new("locks.db"));
        assert_eq!(SqliteUrl::parse("sqlite:///x.db").unwrap().table(), None);
    }

    #[test]
    fn bad_urls_are_named() {
        for (url, named) in [
            ("postgres://h/db", "not an SQLite URL"),
            ("sqlite://", "no database file"),
            ("sqlite::memory:", "in-memory"),
            ("sqlite:///x.db?mode=memory", "in-memory"),
            ("sqlite:///x.db?mode=rwc", "`mode`"),
            ("sqlite:///x.db?table=a&table=b", "`table`"),
            ("sqlite:///x.db?table=x;%20DROP", "`table`"),
            ("sqlite:///x.db?liveness=yes", "`liveness`"),
            ("sqlite:///x.db?fair_queue=", "`fair_queue`"),
        ] {
            let message = message(url);
            assert!(message.contains(named), "{url}: {message}");
        }
    }
}
