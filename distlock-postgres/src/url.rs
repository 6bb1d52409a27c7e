//! Store URLs: the layout parameters a `postgres://` URL may carry, parsed and validated
//! without I/O, and the rest of the URL handed to sqlx.

use std::fmt;
use std::str::FromStr;

use distlock_api::LockError;
use distlock_sql::query::{flag, identifier, read_query, unknown};
use sqlx::postgres::PgConnectOptions;

use crate::config::Identifier;

/// The layout parameters of a store URL, removed before sqlx sees it.
const LAYOUT_PARAMETERS: [&str; 6] = ["schema", "table", "sequence", "unlogged", "create", "notifications"];

/// The query parameters sqlx's PostgreSQL driver reads (besides `options[…]`); they are
/// passed through to it.
const CONNECTION_PARAMETERS: &[&str] = &[
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
];

/// A parsed `postgres://` (or `postgresql://`) store URL: the store layout it names and
/// the connection settings for sqlx. Parsing does no I/O.
///
/// Besides sqlx's own connection parameters (`sslmode`, `sslrootcert`, `sslcert`,
/// `sslkey`, `application_name`, `options`, `host`, `port`, `dbname`, `user`,
/// `password`, `statement-cache-capacity`, `options[…]` and their spellings with
/// dashes), the query may carry:
///
/// | parameter | meaning | default |
/// |---|---|---|
/// | `schema=NAME` | schema of the lease table and the fence sequence | `public` |
/// | `table=NAME` | the lease table | `distribute_lock` |
/// | `sequence=NAME` | the fence sequence | `distlock_fence_seq` |
/// | `unlogged=true\|false` | create the table `UNLOGGED` | `false` |
/// | `create=true\|false` | whether the store may create what is missing (`false`: only verify, for a role without DDL rights) | `true` |
/// | `notifications=true\|false` | release notifications (`LISTEN`/`NOTIFY`) | `true` |
///
/// Names must match `[A-Za-z_][A-Za-z0-9_]{0,62}`. Any other parameter, a parameter
/// given twice, or a malformed value is a [`LockError::Config`] naming the parameter; no
/// error repeats the URL (it may hold a password).
///
/// ```
/// use distlock_postgres::PostgresUrl;
///
/// let url = PostgresUrl::parse("postgres://app:secret@db/app?schema=locks&unlogged=true&sslmode=require")?;
/// assert_eq!(url.schema(), Some("locks"));
/// assert_eq!(url.table(), None);
/// assert_eq!(url.unlogged(), Some(true));
/// assert!(!format!("{url:?}").contains("secret"));
///
/// let err = PostgresUrl::parse("postgres://db/app?tabel=locks").unwrap_err();
/// assert!(err.to_string().contains("`tabel`"), "{err}");
/// # Ok::<(), distlock_api::LockError>(())
/// ```
#[derive(Clone)]
pub struct PostgresUrl {
    options: PgConnectOptions,
    schema: Option<Identifier>,
    table: Option<Identifier>,
    sequence: Option<Identifier>,
    unlogged: Option<bool>,
    create: Option<bool>,
    notifications: Option<bool>,
}

impl PostgresUrl {
    /// Parses and validates `url`.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] when the scheme is not `postgres://` or `postgresql://`, a
    /// query parameter is unknown, repeated or malformed (the message names it), or sqlx
    /// cannot read the connection part.
    pub fn parse(url: &str) -> Result<Self, LockError> {
        let scheme_ok = url
            .split_once("://")
            .is_some_and(|(scheme, _)| ["postgres", "postgresql"].iter().any(|s| scheme.eq_ignore_ascii_case(s)));
        if !scheme_ok {
            return Err(config("not a PostgreSQL URL: expected `postgres://…` or `postgresql://…`".to_owned()));
        }
        let (without_fragment, fragment) = match url.split_once('#') {
            Some((before, after)) => (before, Some(after)),
            None => (url, None),
        };
        let (base, query) = without_fragment.split_once('?').unwrap_or((without_fragment, ""));
        let mut parsed = Self {
            options: PgConnectOptions::new_without_pgpass(),
            schema: None,
            table: None,
            sequence: None,
            unlogged: None,
            create: None,
            notifications: None,
        };
        let mut passed_on = Vec::new();
        read_query(
            query,
            &LAYOUT_PARAMETERS,
            |name, value| parsed.set(name, value),
            |name, pair| {
                if !is_connection_parameter(name) {
                    return Err(unknown(
                        "PostgreSQL",
                        name,
                        &format!(
                            "one of {} or a connection parameter (sslmode, sslrootcert, sslcert, sslkey, \
                             application_name, options, host, port, dbname, user, password, statement-cache-capacity)",
                            LAYOUT_PARAMETERS.join(", ")
                        ),
                    ));
                }
                passed_on.push(pair);
                Ok(())
            },
        )?;
        let mut connection_url = base.to_owned();
        if !passed_on.is_empty() {
            connection_url.push('?');
            connection_url.push_str(&passed_on.join("&"));
        }
        if let Some(fragment) = fragment {
            connection_url.push('#');
            connection_url.push_str(fragment);
        }
        // sqlx's messages name the part that is wrong, never the whole URL.
        parsed.options = PgConnectOptions::from_str(&connection_url)
            .map_err(|error| config(format!("unusable PostgreSQL URL: {}", sqlx_message(&error))))?;
        Ok(parsed)
    }

    fn set(&mut self, name: &str, value: &str) -> Result<(), LockError> {
        let identifier = || identifier(name, value);
        let boolean = || flag(name, value);
        match name {
            "schema" => self.schema = Some(identifier()?),
            "table" => self.table = Some(identifier()?),
            "sequence" => self.sequence = Some(identifier()?),
            "unlogged" => self.unlogged = Some(boolean()?),
            "create" => self.create = Some(boolean()?),
            _ => self.notifications = Some(boolean()?),
        }
        Ok(())
    }

    /// `?schema=`, if given.
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_ref().map(Identifier::as_str)
    }

    /// `?table=`, if given.
    pub fn table(&self) -> Option<&str> {
        self.table.as_ref().map(Identifier::as_str)
    }

    /// `?sequence=`, if given.
    pub fn sequence(&self) -> Option<&str> {
        self.sequence.as_ref().map(Identifier::as_str)
    }

    /// `?unlogged=`, if given.
    pub fn unlogged(&self) -> Option<bool> {
        self.unlogged
    }

    /// `?create=`, if given.
    pub fn create(&self) -> Option<bool> {
        self.create
    }

    /// `?notifications=`, if given.
    pub fn notifications(&self) -> Option<bool> {
        self.notifications
    }

    /// The sqlx connect options of the URL, without the layout parameters.
    pub fn connect_options(&self) -> &PgConnectOptions {
        &self.options
    }
}

impl fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresUrl")
            .field("host", &self.options.get_host())
            .field("port", &self.options.get_port())
            .field("database", &self.options.get_database())
            .field("username", &self.options.get_username())
            .field("schema", &self.schema)
            .field("table", &self.table)
            .field("sequence", &self.sequence)
            .field("unlogged", &self.unlogged)
            .field("create", &self.create)
            .field("notifications", &self.notifications)
            .finish_non_exhaustive()
    }
}

impl FromStr for PostgresUrl {
    type Err = LockError;

    fn from_str(url: &str) -> Result<Self, LockError> {
        Self::parse(url)
    }
}

fn is_connection_parameter(name: &str) -> bool {
    CONNECTION_PARAMETERS.contains(&name) || (name.starts_with("options[") && name.ends_with(']'))
}

fn config(message: String) -> LockError {
    LockError::Config { message }
}

/// sqlx's message without its "error with configuration: " prefixes (it wraps some of its
/// own configuration errors in another, so the prefix can come twice).
fn sqlx_message(error: &sqlx::Error) -> String {
    let text = error.to_string();
    let mut rest = text.as_str();
    while let Some(inner) = rest.strip_prefix("error with configuration: ") {
        rest = inner;
    }
    rest.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_message(url: &str) -> String {
        match PostgresUrl::parse(url) {
            Err(LockError::Config { message }) => message,
            other => panic!("{url}: expected a Config error, got {other:?}"),
        }
    }

    #[test]
    fn a_driver_message_is_not_prefixed_twice() {
        let message = config_message("postgres://h/db?sslmode=sometimes");
        assert!(message.starts_with("unusable PostgreSQL URL: "), "{message}");
        assert!(!message.contains("error with configuration"), "{message}");
        assert!(message.contains("sometimes"), "{message}");
    }

    #[test]
    fn layout_parameters_are_read_and_removed() {
        let url = PostgresUrl::parse(
            "postgres://u:pw@h:5433/db?schema=locks&table=leases&sequence=fences&unlogged=TRUE&create=false\
             &notifications=false&sslmode=disable&application_name=app&options[statement_timeout]=5s",
        )
        .unwrap();
        assert_eq!((url.schema(), url.table(), url.sequence()), (Some("locks"), Some("leases"), Some("fences")));
        assert_eq!((url.unlogged(), url.create(), url.notifications()), (Some(true), Some(false), Some(false)));
        let options = url.connect_options();
        assert_eq!((options.get_host(), options.get_port(), options.get_database()), ("h", 5433, Some("db")));
        assert_eq!(options.get_application_name(), Some("app"));
        assert!(!format!("{url:?}").contains("pw"), "{url:?}");

        let plain = PostgresUrl::parse("postgresql://h/db").unwrap();
        assert_eq!((plain.schema(), plain.unlogged(), plain.create()), (None, None, None));
        let encoded = PostgresUrl::parse("postgres://h/db?table=a%5Fb").unwrap();
        assert_eq!(encoded.table(), Some("a_b"));
    }

    #[test]
    fn unknown_repeated_and_malformed_parameters_are_named() {
        for (url, named) in [
            ("postgres://h/db?prefix=x", "`prefix`"),
            ("postgres://h/db?tabel=x", "`tabel`"),
            ("postgres://h/db?table=a&table=b", "`table`"),
            ("postgres://h/db?table=x;%20DROP%20TABLE%20y", "`table`"),
            ("postgres://h/db?schema=", "`schema`"),
            ("postgres://h/db?unlogged=yes", "`unlogged`"),
            ("postgres://h/db?create=", "`create`"),
            ("postgres://h/db?notifications=1", "`notifications`"),
            ("postgres://h/db?sequence=%FF", "`sequence`"),
        ] {
            let message = config_message(url);
            assert!(message.contains(named), "{url}: {message}");
        }
        let message = config_message("postgres://h/db?sslmode=sometimes");
        assert!(message.contains("sometimes"), "{message}");
    }

    #[test]
    fn errors_never_repeat_credentials() {
        for url in [
            "user:secret@host/db?next=http://x",
            "secret@host/db",
            "mysql://user:secret@host/db",
            "postgres://user:secret@host/db?secretive=1",
            "postgres://user:secret@host:notaport/db",
            "",
        ] {
            let err = PostgresUrl::parse(url).unwrap_err();
            assert!(matches!(err, LockError::Config { .. }), "{url}: {err}");
            assert!(!err.to_string().replace("secretive", "").contains("secret"), "{url}: {err}");
        }
        let err = PostgresUrl::parse("postgres://user:pw@host/db?unlogged=maybe").unwrap_err();
        assert!(!err.to_string().contains("pw"), "{err}");
    }
}
