//! Store URLs: the layout parameters a `mysql://` URL may carry, parsed and validated
//! without I/O, and the rest of the URL handed to sqlx.

use std::fmt;
use std::str::FromStr;

use distlock_api::LockError;
use distlock_sql::query::{flag, identifier, read_query, unknown};
use sqlx::mysql::MySqlConnectOptions;

use crate::config::Identifier;

/// The layout parameters of a store URL, removed before sqlx sees it.
const LAYOUT_PARAMETERS: [&str; 3] = ["table", "create", "notifications"];

/// The query parameters sqlx's MySQL driver reads; they are passed through to it.
const CONNECTION_PARAMETERS: &[&str] = &[
    "sslmode",
    "ssl-mode",
    "sslca",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "charset",
    "collation",
    "statement-cache-capacity",
    "socket",
];

/// A parsed `mysql://` (or `mariadb://`) store URL: the table it names and the connection
/// settings for sqlx. Parsing does no I/O.
///
/// The URL is `mysql://user:password@host:port/database`; the tables live in that
/// database. Besides sqlx's own connection parameters (`ssl-mode`, `ssl-ca`, `ssl-cert`,
/// `ssl-key`, `charset`, `collation`, `statement-cache-capacity`, `socket`), the query
/// may carry:
///
/// | parameter | meaning | default |
/// |---|---|---|
/// | `table=NAME` | the lease table (the other tables are named after it) | `distribute_lock` |
/// | `create=true\|false` | whether the store may create missing tables (`false`: only verify, for a role without DDL rights) | `true` |
/// | `notifications=true\|false` | release notifications (a listener connection woken by `KILL QUERY`) | `true` |
///
/// Names must match `[A-Za-z_][A-Za-z0-9_]{0,47}`. Any other parameter (among them
/// `timezone`: the store's connections keep UTC), a parameter given twice, or a malformed
/// value is a [`LockError::Config`] naming the parameter; no error repeats the URL (it
/// may hold a password).
///
/// ```
/// use distlock_mysql::MysqlUrl;
///
/// let url = MysqlUrl::parse("mysql://app:secret@db:3306/app?table=leases&ssl-mode=required")?;
/// assert_eq!(url.table(), Some("leases"));
/// assert_eq!(url.create(), None);
/// assert!(!format!("{url:?}").contains("secret"));
///
/// let err = MysqlUrl::parse("mariadb://db/app?tabel=locks").unwrap_err();
/// assert!(err.to_string().contains("`tabel`"), "{err}");
/// # Ok::<(), distlock_api::LockError>(())
/// ```
#[derive(Clone)]
pub struct MysqlUrl {
    options: MySqlConnectOptions,
    table: Option<Identifier>,
    create: Option<bool>,
    notifications: Option<bool>,
}

impl fmt::Debug for MysqlUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlUrl")
            .field("host", &self.options.get_host())
            .field("port", &self.options.get_port())
            .field("database", &self.options.get_database())
            .field("username", &self.options.get_username())
            .field("table", &self.table)
            .field("create", &self.create)
            .field("notifications", &self.notifications)
            .finish_non_exhaustive()
    }
}

impl MysqlUrl {
    /// Parses and validates `url`.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for another scheme, an unknown, repeated or malformed
    /// parameter, a bad table name, or a URL sqlx cannot read.
    pub fn parse(url: &str) -> Result<Self, LockError> {
        let config = |message: String| LockError::Config { message };
        let rest = ["mysql://", "mariadb://"]
            .iter()
            .find_map(|scheme| url.strip_prefix(scheme))
            .ok_or_else(|| config("a MySQL store URL starts with mysql:// or mariadb://".to_owned()))?;
        let (base, query) = rest.split_once('?').unwrap_or((rest, ""));
        let mut passed = Vec::new();
        let (mut table, mut create, mut notifications) = (None, None, None);
        read_query(
            query,
            &LAYOUT_PARAMETERS,
            |name, value| {
                match name {
                    "table" => table = Some(identifier(name, value)?),
                    "create" => create = Some(flag(name, value)?),
                    _ => notifications = Some(flag(name, value)?),
                }
                Ok(())
            },
            |name, pair| {
                if !CONNECTION_PARAMETERS.contains(&name) {
                    let expected = format!(
                        "a parameter the store reads ({}) or one sqlx reads ({})",
                        LAYOUT_PARAMETERS.join(", "),
                        CONNECTION_PARAMETERS.join(", ")
                    );
                    return Err(unknown("MySQL", name, &expected));
                }
                passed.push(pair);
                Ok(())
            },
        )?;
        let mut sqlx_url = format!("mysql://{base}");
        if !passed.is_empty() {
            sqlx_url.push('?');
            sqlx_url.push_str(&passed.join("&"));
        }
        let options = MySqlConnectOptions::from_str(&sqlx_url)
            .map_err(|error| config(format!("not a usable MySQL URL: {}", strip_url(&error.to_string()))))?;
        Ok(Self { options, table, create, notifications })
    }

    /// The connection settings for sqlx.
    pub fn connect_options(&self) -> &MySqlConnectOptions {
        &self.options
    }

    /// The `table` parameter, if given.
    pub fn table(&self) -> Option<&str> {
        self.table.as_ref().map(Identifier::as_str)
    }

    /// The `create` parameter, if given.
    pub fn create(&self) -> Option<bool> {
        self.create
    }

    /// The `notifications` parameter, if given.
    pub fn notifications(&self) -> Option<bool> {
        self.notifications
    }

    pub(crate) fn table_identifier(&self) -> Option<Identifier> {
        self.table.clone()
    }
}

/// A driver message with anything after `mysql://` cut, so no password is repeated.
fn strip_url(message: &str) -> String {
    match message.find("mysql://") {
        Some(at) => format!("{}mysql://…", &message[..at]),
        None => message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_read_and_checked() {
        let url = MysqlUrl::parse("mariadb://u:p@h:3307/db?create=false&table=t1&ssl-mode=disabled").unwrap();
        assert_eq!((url.table(), url.create()), (Some("t1"), Some(false)));
        assert_eq!(url.connect_options().get_port(), 3307);
        assert_eq!(url.connect_options().get_database(), Some("db"));
        for bad in [
            "postgres://h/db",
            "mysql://h/db?table=a;b",
            "mysql://h/db?create=yes",
            "mysql://h/db?table=a&table=b",
            "mysql://h/db?timezone=UTC",
        ] {
            let err = MysqlUrl::parse(bad).unwrap_err();
            assert!(matches!(err, LockError::Config { .. }), "{bad}: {err}");
        }
    }
}
