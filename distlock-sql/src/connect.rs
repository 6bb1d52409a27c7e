//! What a builder's `connect` does the same for every SQL store: merge settings with the
//! URL, check timeouts, open a first connection, configure the pool.

use std::time::Duration;

use distlock_api::{probe, BoxError, LockError};
use sqlx::pool::PoolOptions;
use sqlx::{Connection, Database};

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
