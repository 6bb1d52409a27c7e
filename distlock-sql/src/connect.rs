//! What a builder's `connect` does the same for every SQL store: merge settings with the
//! URL, check timeouts, open a first connection, configure the pool.

use std::time::Duration;

use std::fmt;

use distlock_api::{probe, BoxError, LockError};
use sqlx::pool::PoolOptions;
use sqlx::{Connection, Database, Pool};

use crate::retry::ConnectTimedOut;

/// One setting made on the builder (`builder`), in the URL (`url`), both, or neither:
/// the value set, or `default` when neither sets it.
///
/// # Errors
///
/// [`LockError::Config`] naming `parameter` when the builder and the URL set different
/// values, so that a deployment's URL and the application's code never silently point at
/// two different places.
pub fn merge<T: PartialEq>(parameter: &str, builder: Option<T>, url: Option<T>, default: T) -> Result<T, LockError> {
    match (builder, url) {
        (Some(a), Some(b)) if a != b => Err(LockError::Config {
            message: format!(
                "URL parameter `{parameter}` contradicts the builder's `{parameter}` setting; set it in one place"
            ),
        }),
        (Some(value), _) | (None, Some(value)) => Ok(value),
        (None, None) => Ok(default),
    }
}

/// Checks that each `(setting name, timeout)` lies between 1 ms and `max`.
///
/// # Errors
///
/// [`LockError::Config`] naming the first setting out of range.
pub fn check_timeouts(timeouts: &[(&str, Duration)], max: Duration) -> Result<(), LockError> {
    for &(name, timeout) in timeouts {
        if timeout.is_zero() || timeout > max {
            return Err(LockError::Config {
                message: format!("{name} must be between 1 ms and {max:?}, got {timeout:?}"),
            });
        }
    }
    Ok(())
}

/// The pool every SQL store's `connect` builds: `max_connections` (0 counts as 1), an
/// `acquire_timeout` that bounds how long an operation waits for a connection, and no
/// ping before each operation (a round trip added to every lock operation): the store
/// runs a statement again on another connection when its connection turns out to be
/// dead, and sqlx discards a connection that failed.
pub fn pool_options<DB: Database>(max_connections: u32, acquire_timeout: Duration) -> PoolOptions<DB> {
    PoolOptions::new()
        .max_connections(max_connections.max(1))
        .acquire_timeout(acquire_timeout)
        .test_before_acquire(false)
}

/// Opens and closes one connection `C` with `options`, within `timeout` (the builder setting
/// named `setting`): a lazy pool retries a refused connection until its acquire timeout
/// and then reports only "pool timed out", while one direct connection reports the real
/// cause at once. On a TCP `address` (`None` for a Unix socket), a failure also says what
/// answers there ([`distlock_api::probe`]): nothing, or another kind of server.
///
/// # Errors
///
/// [`LockError::Store`] of `backend`, operation `"connect"`, with the driver's error or
/// [`ConnectTimedOut`] as its cause.
pub async fn first_connection<C: Connection>(
    backend: &'static str,
    options: &C::Options,
    address: Option<(&str, u16)>,
    setting: &'static str,
    timeout: Duration,
) -> Result<(), LockError> {
    let connected = match tokio::time::timeout(timeout, C::connect_with(options)).await {
        Err(_) => Err(Box::new(ConnectTimedOut { setting, timeout }) as BoxError),
        Ok(result) => result.map_err(|error| Box::new(error) as BoxError),
    };
    let conn = match (connected, address) {
        (Ok(conn), _) => conn,
        (Err(cause), Some((host, port))) => return Err(probe::connect_error(backend, host, port, cause).await),
        (Err(cause), None) => return Err(LockError::store(backend, "connect", None, cause)),
    };
    if let Err(error) = conn.close().await {
        tracing::debug!(%error, "closing the first connection failed");
    }
    Ok(())
}

/// Why an operation got no connection from its pool within the acquire timeout: the
/// cause of a [`LockError::Store`] in place of sqlx's bare `PoolTimedOut`, which says
/// neither whether the pool was full nor what the server answered.
#[derive(Debug)]
#[non_exhaustive]
pub enum NoConnection {
    /// Every connection of the pool was in use for the whole acquire timeout: the
    /// application runs more operations at once than the pool has connections.
    Busy {
        /// The pool's `max_connections`.
        max_connections: u32,
        /// The pool's acquire timeout.
        timeout: Duration,
    },
    /// The pool had room for another connection but could not open one: the server
    /// refused it (its own `max_connections`, a role's connection limit, a shutdown) or
    /// did not answer in time.
    Refused {
        /// Connections the pool held when the wait ended.
        held: u32,
        /// The pool's `max_connections`.
        max_connections: u32,
        /// The pool's acquire timeout.
        timeout: Duration,
        /// The server's (or the network's) answer to one more connection attempt made
        /// right after the timeout, or `None` when that attempt succeeded (the server
        /// accepts connections again).
        server: Option<String>,
    },
    /// The pool had room for another connection and the server refused to open it, at
    /// once: MySQL and MariaDB answer a connection over one of their limits
    /// (`max_connections`, a user's `MAX_USER_CONNECTIONS`) with an error the pool
    /// reports without waiting out its acquire timeout.
    Rejected {
        /// Connections the pool held when the server refused another.
        held: u32,
        /// The pool's `max_connections`.
        max_connections: u32,
        /// The server's answer.
        server: String,
    },
    /// The pool had room for another connection but could not open the database file
    /// within the acquire timeout (SQLite: the file held locked, a slow disk, the file's
    /// permissions changed).
    Unopened {
        /// Connections the pool held when the wait ended.
        held: u32,
        /// The pool's `max_connections`.
        max_connections: u32,
        /// The pool's acquire timeout.
        timeout: Duration,
        /// Why one more attempt to open the file, made right after the timeout, failed,
        /// or `None` when it succeeded (the file opens again).
        cause: Option<String>,
    },
}

impl fmt::Display for NoConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Busy { max_connections, timeout } => write!(
                f,
                "all {max_connections} connections of the pool are busy and none came free within the acquire \
                 timeout ({timeout:?}): raise the pool's max_connections or run fewer operations at once"
            ),
            Self::Refused { held, max_connections, timeout, server: Some(server) } => write!(
                f,
                "the server refused new connections: {server} (the pool holds {held} of its {max_connections} \
                 connections and could not open another within the acquire timeout ({timeout:?}); raise the \
                 server's connection limit or open fewer connections to it)"
            ),
            Self::Refused { held, max_connections, timeout, server: None } => write!(
                f,
                "the pool could not open a connection within the acquire timeout ({timeout:?}) (it holds {held} of \
                 its {max_connections} connections): the server refused or was slow to accept new connections, \
                 and accepts them again now"
            ),
            Self::Rejected { held, max_connections, server } => write!(
                f,
                "the server refused a new connection: {server} (the pool holds {held} of its {max_connections} \
                 connections and could not open another; raise the server's connection limit or open fewer \
                 connections to it)"
            ),
            Self::Unopened { held, max_connections, timeout, cause: Some(cause) } => write!(
                f,
                "the database file could not be opened: {cause} (the pool holds {held} of its {max_connections} \
                 connections and could not open another within the acquire timeout ({timeout:?}))"
            ),
            Self::Unopened { held, max_connections, timeout, cause: None } => write!(
                f,
                "the pool could not open the database file within the acquire timeout ({timeout:?}) (it holds \
                 {held} of its {max_connections} connections), and opens it again now: the file was held locked \
                 or the disk was slow"
            ),
        }
    }
}

impl std::error::Error for NoConnection {}

/// The cause to report for `error`, an operation's error on `pool`: a pool timeout
/// becomes [`NoConnection`], saying whether the pool's connections were all busy or the
/// server refused new ones; any other error is kept.
///
/// sqlx counts a connection being opened as part of the pool, so a full pool does not
/// tell the two apart: one more connection attempt, with the pool's own options and
/// bounded by its acquire timeout, does. Its answer is the server's refusal, or, when it
/// connects, shows that the server accepts connections and the pool was busy.
pub async fn explain<DB: Database>(pool: &Pool<DB>, error: sqlx::Error) -> BoxError {
    if !matches!(error, sqlx::Error::PoolTimedOut) {
        return Box::new(error);
    }
    let Diagnosis { held, max_connections, timeout, answer } = diagnose(pool).await;
    let server = match answer {
        Answer::Connected if held >= max_connections => {
            return Box::new(NoConnection::Busy { max_connections, timeout })
        }
        Answer::Connected => None,
        Answer::Failed(error) => Some(error),
        Answer::TimedOut => Some(ConnectTimedOut { setting: "acquire timeout", timeout }.to_string()),
    };
    Box::new(NoConnection::Refused { held, max_connections, timeout, server })
}

/// As [`explain`], for a server that refuses a connection over one of its limits at once
/// (MySQL, MariaDB) rather than in a way the pool waits out: an error for which
/// `is_refusal` holds (the driver's codes for those limits) becomes
/// [`NoConnection::Rejected`], with the server's answer.
pub async fn explain_refusal<DB: Database>(
    pool: &Pool<DB>,
    error: sqlx::Error,
    is_refusal: fn(&sqlx::Error) -> bool,
) -> BoxError {
    if is_refusal(&error) {
        let (held, max_connections) = (pool.size(), pool.options().get_max_connections());
        return Box::new(NoConnection::Rejected { held, max_connections, server: error.to_string() });
    }
    explain(pool, error).await
}

/// As [`explain`], for a database in a file (SQLite), where there is no server to refuse:
/// a pool timeout is [`NoConnection::Busy`] when the pool is full and the file opens,
/// else [`NoConnection::Unopened`].
pub async fn explain_file<DB: Database>(pool: &Pool<DB>, error: sqlx::Error) -> BoxError {
    if !matches!(error, sqlx::Error::PoolTimedOut) {
        return Box::new(error);
    }
    let Diagnosis { held, max_connections, timeout, answer } = diagnose(pool).await;
    let cause = match answer {
        Answer::Connected if held >= max_connections => {
            return Box::new(NoConnection::Busy { max_connections, timeout })
        }
        Answer::Connected => None,
        Answer::Failed(error) => Some(error),
        Answer::TimedOut => Some("opening it once more timed out too".to_owned()),
    };
    Box::new(NoConnection::Unopened { held, max_connections, timeout, cause })
}

/// What a pool looked like when an operation's wait for a connection ended, and the
/// answer to one more connection attempt.
struct Diagnosis {
    held: u32,
    max_connections: u32,
    timeout: Duration,
    answer: Answer,
}

/// How one more connection attempt ended.
enum Answer {
    Connected,
    /// The driver's error, as text.
    Failed(String),
    /// It took longer than the pool's acquire timeout.
    TimedOut,
}

/// sqlx counts a connection being opened as part of the pool, so a full pool does not
/// tell a busy pool from one that cannot open connections: one more connection attempt,
/// with the pool's own options and bounded by its acquire timeout, does.
async fn diagnose<DB: Database>(pool: &Pool<DB>) -> Diagnosis {
    let (max_connections, timeout) = (pool.options().get_max_connections(), pool.options().get_acquire_timeout());
    let held = pool.size();
    let options = pool.connect_options();
    let answer = match tokio::time::timeout(timeout, DB::Connection::connect_with(&options)).await {
        Err(_) => Answer::TimedOut,
        Ok(Err(error)) => Answer::Failed(error.to_string()),
        Ok(Ok(conn)) => {
            if let Err(error) = conn.close().await {
                tracing::debug!(%error, "closing the diagnostic connection failed");
            }
            Answer::Connected
        }
    };
    Diagnosis { held, max_connections, timeout, answer }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_made_twice_must_agree() {
        assert_eq!(merge("table", Some(1), None, 0).unwrap(), 1);
        assert_eq!(merge("table", None, Some(2), 0).unwrap(), 2);
        assert_eq!(merge("table", Some(3), Some(3), 0).unwrap(), 3);
        assert_eq!(merge::<i32>("table", None, None, 7).unwrap(), 7);
        let err = merge("table", Some(1), Some(2), 0).unwrap_err();
        assert!(matches!(&err, LockError::Config { message } if message.contains("`table`")), "{err}");
    }

    #[test]
    fn no_connection_says_which_limit_was_reached() {
        let timeout = Duration::from_millis(500);
        let busy = NoConnection::Busy { max_connections: 8, timeout }.to_string();
        assert!(busy.starts_with("all 8 connections of the pool are busy"), "{busy}");
        let server = Some("sorry, too many clients already".to_owned());
        let refused = NoConnection::Refused { held: 3, max_connections: 8, timeout, server }.to_string();
        assert!(
            refused.starts_with("the server refused new connections: sorry, too many clients already"),
            "{refused}"
        );
        assert!(refused.contains("the pool holds 3 of its 8 connections"), "{refused}");
        let server = "1226 (42000): User 'app' has exceeded the 'max_user_connections' resource".to_owned();
        let rejected = NoConnection::Rejected { held: 1, max_connections: 2, server }.to_string();
        assert!(rejected.starts_with("the server refused a new connection: 1226 (42000): User 'app'"), "{rejected}");
        assert!(rejected.contains("the pool holds 1 of its 2 connections and could not open another;"), "{rejected}");
        let cause = Some("unable to open database file".to_owned());
        let unopened = NoConnection::Unopened { held: 2, max_connections: 4, timeout, cause }.to_string();
        assert!(unopened.starts_with("the database file could not be opened: unable to open"), "{unopened}");
        assert!(!unopened.contains("server"), "{unopened}");
    }

    #[test]
    fn timeouts_are_checked_by_name() {
        const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
        let second = Duration::from_secs(1);
        check_timeouts(&[("a", second), ("b", MAX_TIMEOUT)], MAX_TIMEOUT).unwrap();
        for bad in [Duration::ZERO, MAX_TIMEOUT + second] {
            let err = check_timeouts(&[("a", second), ("b", bad)], MAX_TIMEOUT).unwrap_err();
            assert!(matches!(&err, LockError::Config { message } if message.starts_with("b must be")), "{err}");
        }
    }
}
