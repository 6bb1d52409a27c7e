//! Store URLs: the connection (what `redis` understands) plus the store's layout
//! (`prefix`, `fencing`, `fences`, `notifications`, `fair`) as query parameters. Pure
//! parsing, no I/O.

use std::fmt;

use distlock_api::LockError;

use crate::config::validate_key_prefix;

/// The store's own query parameters.
const LAYOUT_PARAMETERS: [&str; 5] = ["prefix", "fencing", "fences", "notifications", "fair"];
/// Parameters handed to the `redis` crate on every scheme.
const DRIVER_PARAMETERS: [&str; 1] = ["protocol"];
/// Parameters handed to the `redis` crate on Unix-socket URLs only (on TCP URLs the
/// database is the path and the credentials are in front of the host).
const UNIX_SOCKET_PARAMETERS: [&str; 3] = ["db", "user", "pass"];

/// A parsed and checked Redis store URL: where to connect, and the store's layout.
///
/// ```text
/// redis://[[user]:password@]host[:port][/db][?prefix=…&fencing=…&fences=…&notifications=…&fair=…&protocol=…]
/// rediss://…   (TLS: needs a `redis` crate built with a TLS feature)
/// redis+unix:///path/to/redis.sock[?db=…&user=…&pass=…&prefix=…&…]   (also unix://)
/// ```
///
/// `valkey://`, `valkeys://` and `valkey+unix://` are accepted as synonyms.
///
/// | parameter | meaning | values | builder setting |
/// |---|---|---|---|
/// | `prefix` | key prefix: keys are `{prefix}:lock:{key}` (empty: `lock:{key}`) | 0–256 bytes, no control characters (percent-encoded as needed) | [`key_prefix`](crate::RedisLockStoreBuilder::key_prefix) |
/// | `fencing` | fencing numbers on every acquisition | `true`, `false` | [`fencing`](crate::RedisLockStoreBuilder::fencing) |
/// | `fences` | where fencing numbers come from: the counter alone, or the server's clock and the counter (restart-safe) | `counter`, `clock` | [`clock_fences`](crate::RedisLockStoreBuilder::clock_fences) |
/// | `notifications` | publish releases and wake waiters through them | `true`, `false` | [`release_notifications`](crate::RedisLockStoreBuilder::release_notifications) |
/// | `fair` | fair waiting: waiters queue on the server and a release hands the key to the oldest | `true`, `false` | [`fair_queue`](crate::RedisLockStoreBuilder::fair_queue) |
/// | `protocol` | passed to `redis`: the wire protocol | `resp2` (or `2`), `resp3` (or `3`) | — |
/// | `db`, `user`, `pass` | passed to `redis`, Unix-socket URLs only: database, user name, password | | — |
///
/// Nothing is ignored: an unknown parameter, a parameter given twice, a malformed value,
/// a URL fragment (other than TLS's `#insecure`) or a database path that is not a
/// non-negative integer is a [`LockError::Config`] naming the culprit. Names and values
/// are case-sensitive; booleans are exactly `true` or `false`. The layout parameters are removed before the URL reaches
/// the `redis` crate. Whether the server accepts the database number and the
/// credentials is checked when connecting
/// ([`RedisLockStoreBuilder::connect`](crate::RedisLockStoreBuilder::connect)).
///
/// Neither errors nor [`Display`](fmt::Display) / [`Debug`] ever show the password: they
/// print it as `***`.
///
/// ```
/// use distlock_redis::RedisUrl;
///
/// let url = RedisUrl::parse("redis://:s3cret@127.0.0.1:6379/2?prefix=neton&fencing=true")?;
/// assert_eq!(url.key_prefix(), Some("neton"));
/// assert_eq!(url.fencing(), Some(true));
/// assert_eq!(url.release_notifications(), None); // not in the URL: the builder decides
/// assert_eq!(url.to_string(), "redis://:***@127.0.0.1:6379/2?prefix=neton&fencing=true");
/// # Ok::<(), distlock_api::LockError>(())
/// ```
#[derive(Clone)]
pub struct RedisUrl {
    client: redis::Client,
    redacted: String,
    key_prefix: Option<String>,
    fencing: Option<bool>,
    clock_fences: Option<bool>,
    release_notifications: Option<bool>,
    fair_queue: Option<bool>,
}

impl RedisUrl {
    /// Parses and checks `url` without any I/O.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] naming what is wrong (see the [type's docs](Self)); the
    /// message never repeats the URL's credentials.
    pub fn parse(url: &str) -> Result<Self, LockError> {
        let Some(mut parsed) = redis::parse_redis_url(url) else {
            return Err(config(match scheme_of(url) {
                Some(scheme) if !is_redis_scheme(scheme) => format!(
                    "unsupported scheme `{scheme}`: expected redis://, rediss://, redis+unix:// or unix:// (or their valkey forms)"
                ),
                _ => "not a valid URL: expected redis://[[user]:password@]host[:port][/db][?prefix=…]".to_owned(),
            }));
        };
        let unix_socket = matches!(parsed.scheme(), "unix" | "redis+unix" | "valkey+unix");
        let tls = matches!(parsed.scheme(), "rediss" | "valkeys");
        if parsed.fragment().is_some() && !tls {
            return Err(config(
                "a URL fragment (`#…`) is not supported (only `#insecure`, on rediss:// URLs)".to_owned(),
            ));
        }
        if !unix_socket {
            check_database_path(parsed.path())?;
        }

        let pairs: Vec<(String, String)> =
            parsed.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
        let (mut key_prefix, mut fencing, mut clock_fences, mut release_notifications, mut fair_queue) =
            (None, None, None, None, None);
        let mut seen: Vec<&str> = Vec::new();
        let mut passed_on: Vec<(&str, &str)> = Vec::new();
        for (name, value) in &pairs {
            if seen.contains(&name.as_str()) {
                return Err(config(format!("the parameter `{name}` is given more than once")));
            }
            seen.push(name);
            match name.as_str() {
                "prefix" => {
                    validate_key_prefix(value)?;
                    key_prefix = Some(value.clone());
                }
                "fencing" => fencing = Some(parse_bool(name, value)?),
                "fences" => {
                    clock_fences = Some(match value.as_str() {
                        "clock" => true,
                        "counter" => false,
                        _ => {
                            return Err(config(format!(
                                "the parameter `fences` must be `counter` or `clock`, not `{value}`"
                            )))
                        }
                    });
                }
                "notifications" => release_notifications = Some(parse_bool(name, value)?),
                "fair" => fair_queue = Some(parse_bool(name, value)?),
                "protocol" => {
                    if !matches!(value.as_str(), "2" | "3" | "resp2" | "resp3") {
                        return Err(config(format!(
                            "the parameter `protocol` must be `resp2` or `resp3` (or `2`, `3`), not `{value}`"
                        )));
                    }
                    passed_on.push((name, value));
                }
                "db" | "user" | "pass" if unix_socket => {
                    if name == "db" && value.parse::<u32>().is_err() {
                        return Err(config("the parameter `db` must be a non-negative integer".to_owned()));
                    }
                    passed_on.push((name, value));
                }
                _ => return Err(unknown_parameter(name, unix_socket)),
            }
        }

        // The URL for display: everything the user wrote, the secrets masked.
        let mut redacted = parsed.clone();
        if redacted.password().is_some() {
            // Only fails for URLs that cannot have a password, which then have none.
            let _ = redacted.set_password(Some("***"));
        }
        redacted.set_query(None);
        if !pairs.is_empty() {
            let mut query = redacted.query_pairs_mut();
            for (name, value) in &pairs {
                query.append_pair(name, if name == "pass" { "***" } else { value });
            }
        }
        let redacted = redacted.to_string();

        // The URL for the driver: the layout parameters removed.
        parsed.set_query(None);
        if !passed_on.is_empty() {
            let mut query = parsed.query_pairs_mut();
            for (name, value) in passed_on {
                query.append_pair(name, value);
            }
        }
        // `redis` only reports what it cannot use (no host, no TLS support…), never the URL.
        let client =
            redis::Client::open(parsed).map_err(|err| config(format!("the `redis` crate cannot use it: {err}")))?;
        Ok(Self { client, redacted, key_prefix, fencing, clock_fences, release_notifications, fair_queue })
    }

    /// The key prefix given by `?prefix=`, if any.
    pub fn key_prefix(&self) -> Option<&str> {
        self.key_prefix.as_deref()
    }

    /// The fencing mode given by `?fencing=`, if any.
    pub fn fencing(&self) -> Option<bool> {
        self.fencing
    }

    /// Whether fencing numbers come from the server's clock (`?fences=clock`: `true`) or
    /// the counter alone (`?fences=counter`: `false`), if the URL says.
    pub fn clock_fences(&self) -> Option<bool> {
        self.clock_fences
    }

    /// Whether releases are published, as given by `?notifications=`, if at all.
    pub fn release_notifications(&self) -> Option<bool> {
        self.release_notifications
    }

    /// Whether waiters queue for fair waiting, as given by `?fair=`, if at all.
    pub fn fair_queue(&self) -> Option<bool> {
        self.fair_queue
    }

    /// A `redis` client for the connection part of the URL (the layout parameters
    /// removed). Making it does no I/O.
    pub fn client(&self) -> &redis::Client {
        &self.client
    }
}

impl std::str::FromStr for RedisUrl {
    type Err = LockError;

    /// [`RedisUrl::parse`].
    fn from_str(url: &str) -> Result<Self, LockError> {
        Self::parse(url)
    }
}

impl fmt::Display for RedisUrl {
    /// The URL as given (layout parameters included), the password shown as `***`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted)
    }
}

impl fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RedisUrl").field(&self.redacted).finish()
    }
}

fn config(message: String) -> LockError {
    LockError::Config { message: format!("Redis URL: {message}") }
}

fn unknown_parameter(name: &str, unix_socket: bool) -> LockError {
    let mut accepted: Vec<&str> = LAYOUT_PARAMETERS.iter().chain(&DRIVER_PARAMETERS).copied().collect();
    if unix_socket {
        accepted.extend(UNIX_SOCKET_PARAMETERS);
    }
    let hint = if UNIX_SOCKET_PARAMETERS.contains(&name) {
        " on a TCP URL (the database is the path, the credentials go before the host)"
    } else {
        ""
    };
    config(format!("unknown parameter `{name}`{hint}; accepted: {}", accepted.join(", ")))
}

fn parse_bool(name: &str, value: &str) -> Result<bool, LockError> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(config(format!("the parameter `{name}` must be `true` or `false`, not `{value}`"))),
    }
}

/// A TCP URL's path is the database number: empty, or one non-negative integer.
fn check_database_path(path: &str) -> Result<(), LockError> {
    let db = path.trim_matches('/');
    if db.is_empty() || db.parse::<u32>().is_ok() {
        Ok(())
    } else {
        // Not echoed: in a URL missing its `//` the "path" holds the credentials.
        Err(config("the path must be a database number (a non-negative integer)".to_owned()))
    }
}

/// The scheme at the start of `url`, if it starts with one (`[A-Za-z][A-Za-z0-9+.-]*:`).
/// Only what precedes the first `:` is looked at, so a later `://` (say in a query)
/// is never mistaken for the scheme's, and nothing after the scheme is ever echoed.
fn scheme_of(url: &str) -> Option<&str> {
    let (scheme, _) = url.split_once(':')?;
    let mut chars = scheme.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then_some(scheme)
}

fn is_redis_scheme(scheme: &str) -> bool {
    matches!(
        scheme.to_ascii_lowercase().as_str(),
        "redis" | "rediss" | "valkey" | "valkeys" | "redis+unix" | "valkey+unix" | "unix"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_error(url: &str) -> String {
        match RedisUrl::parse(url) {
            Ok(parsed) => panic!("{url:?} was accepted: {parsed:?}"),
            Err(err @ LockError::Config { .. }) => err.to_string(),
            Err(err) => panic!("{url:?}: not a Config error: {err:?}"),
        }
    }

    fn connection(url: &RedisUrl) -> &redis::ConnectionInfo {
        url.client().get_connection_info()
    }

    #[test]
    fn an_empty_prefix_is_a_prefix() {
        assert_eq!(RedisUrl::parse("redis://h/?prefix=").unwrap().key_prefix(), Some(""));
    }

    #[test]
    fn a_plain_url_sets_no_layout() {
        for plain in ["redis://127.0.0.1:6379", "redis://127.0.0.1:6379/", "redis://localhost", "valkey://h:1/0"] {
            let url = RedisUrl::parse(plain).unwrap();
            assert_eq!((url.key_prefix(), url.fencing(), url.release_notifications()), (None, None, None), "{plain}");
        }
    }

    #[test]
    fn layout_parameters_are_read_and_removed_before_the_driver_sees_the_url() {
        let url =
            RedisUrl::parse("redis://u:p@127.0.0.1:6380/3?prefix=neton&fencing=true&notifications=false").unwrap();
        assert_eq!(url.key_prefix(), Some("neton"));
        assert_eq!(url.fencing(), Some(true));
        assert_eq!(url.release_notifications(), Some(false));
        let info = connection(&url);
        assert_eq!(info.addr().to_string(), "127.0.0.1:6380");
        assert_eq!(info.redis_settings().db(), 3);
        assert_eq!(info.redis_settings().username(), Some("u"));
        assert_eq!(info.redis_settings().password(), Some("p"));

        let url = RedisUrl::parse("redis://h?fencing=false&notifications=true").unwrap();
        assert_eq!((url.fencing(), url.release_notifications()), (Some(false), Some(true)));
        let url = RedisUrl::parse("redis://h?fair=true").unwrap();
        assert_eq!((url.fair_queue(), url.release_notifications()), (Some(true), None));
        assert_eq!(RedisUrl::parse("redis://h?fair=false").unwrap().fair_queue(), Some(false));
    }

    #[test]
    fn values_are_percent_decoded() {
        let url = RedisUrl::parse("redis://h/?prefix=my%20app%3Av2").unwrap();
        assert_eq!(url.key_prefix(), Some("my app:v2"));
        let url = RedisUrl::parse("redis://h/?prefix=%E8%AE%A2%E5%8D%95").unwrap();
        assert_eq!(url.key_prefix(), Some("订单"));
    }

    #[test]
    fn the_protocol_parameter_is_passed_on() {
        for (value, resp3) in [("resp3", true), ("3", true), ("resp2", false), ("2", false)] {
            let url = RedisUrl::parse(&format!("redis://h/?protocol={value}&prefix=p")).unwrap();
            assert_eq!(connection(&url).redis_settings().protocol().supports_resp3(), resp3, "{value}");
            assert_eq!(url.key_prefix(), Some("p"));
        }
        let err = config_error("redis://h/?protocol=resp4");
        assert!(err.contains("`protocol`") && err.contains("resp4"), "{err}");
    }

    #[test]
    fn unix_socket_urls_take_db_user_and_pass_as_parameters() {
        let url = RedisUrl::parse("redis+unix:///tmp/redis.sock?db=2&user=app&pass=s3cret&prefix=neton").unwrap();
        assert_eq!(url.key_prefix(), Some("neton"));
        let settings = connection(&url).redis_settings();
        assert_eq!((settings.db(), settings.username(), settings.password()), (2, Some("app"), Some("s3cret")));
        assert!(!url.to_string().contains("s3cret"), "{url}");
        assert!(!format!("{url:?}").contains("s3cret"), "{url:?}");
        let err = config_error("unix:///tmp/redis.sock?db=two");
        assert!(err.contains("`db`"), "{err}");
    }

    #[test]
    fn fences_is_counter_or_clock() {
        assert_eq!(RedisUrl::parse("redis://h/?fences=clock").unwrap().clock_fences(), Some(true));
        assert_eq!(RedisUrl::parse("redis://h/?fences=counter").unwrap().clock_fences(), Some(false));
        assert_eq!(RedisUrl::parse("redis://h/").unwrap().clock_fences(), None);
        assert!(config_error("redis://h/?fences=time").contains("`counter` or `clock`"));
    }

    #[test]
    fn unknown_parameters_are_errors_naming_them() {
        for (url, name) in [
            ("redis://h/?prefx=neton", "prefx"),
            ("redis://h/?prefix=a&Fencing=true", "Fencing"),
            ("redis://h/?timeout=5s", "timeout"),
            ("redis://h/?fencing", "fencing"), // no value: malformed, named
            ("redis://h/?=x", "``"),
        ] {
            let err = config_error(url);
            assert!(err.contains(&format!("`{}`", name.trim_matches('`'))), "{url}: {err}");
        }
        let err = config_error("redis://h/?notify=true");
        assert!(err.contains("accepted: prefix, fencing, fences, notifications, fair, protocol"), "{err}");
        // The Unix-socket parameters have no meaning on a TCP URL, and say why.
        for name in ["db", "user", "pass"] {
            let err = config_error(&format!("redis://h/?{name}=1"));
            assert!(err.contains(&format!("`{name}`")) && err.contains("TCP URL"), "{err}");
        }
    }

    #[test]
    fn a_value_that_is_not_the_settings_kind_is_an_error_naming_the_parameter() {
        for (url, name) in [
            ("redis://h/?fencing=yes", "fencing"),
            ("redis://h/?fencing=1", "fencing"),
            ("redis://h/?fencing=TRUE", "fencing"),
            ("redis://h/?fencing=", "fencing"),
            ("redis://h/?notifications=off", "notifications"),
            ("redis://h/?fair=yes", "fair"),
        ] {
            let err = config_error(url);
            assert!(err.contains(&format!("`{name}`")) && err.contains("`true` or `false`"), "{url}: {err}");
        }
        for (url, problem) in [
            ("redis://h/?prefix=a%0Ab", "control character"),
            (&format!("redis://h/?prefix={}", "p".repeat(257)), "at most 256"),
        ] {
            let err = config_error(url);
            assert!(err.contains("key prefix") && err.contains(problem), "{url}: {err}");
        }
    }

    #[test]
    fn a_parameter_given_twice_is_an_error_even_with_equal_values() {
        for (url, name) in [
            ("redis://h/?prefix=a&prefix=b", "prefix"),
            ("redis://h/?fencing=true&fencing=true", "fencing"),
            ("redis://h/?protocol=resp2&protocol=resp3", "protocol"),
        ] {
            let err = config_error(url);
            assert!(err.contains(&format!("`{name}` is given more than once")), "{url}: {err}");
        }
    }

    #[test]
    fn paths_fragments_and_schemes_are_checked() {
        for (url, problem) in [
            ("redis://h/abc", "database number"),
            ("redis://h/-1", "database number"),
            ("redis://h/1/2", "database number"),
            ("redis://h/0#frag", "fragment"),
            ("http://h:6379", "unsupported scheme `http`"),
            ("postgres://u:pw@h/db", "unsupported scheme `postgres`"),
            ("redis://", "cannot use it"),
            ("redis://0.0.0.0", "wildcard"),
            ("", "not a valid URL"),
            ("127.0.0.1:6379", "not a valid URL"),
        ] {
            let err = config_error(url);
            assert!(err.contains(problem), "{url}: {err}");
        }
    }

    #[test]
    fn no_error_and_no_display_repeats_a_password() {
        // A URL without a scheme but with a later `://`, an unknown parameter after a
        // password, a bad database after one: none of them is ever echoed.
        for url in [
            "user:hunter2@host/db?next=http://x",
            "hunter2",
            "redis://:hunter2@h/?what=1",
            "redis://:hunter2@h/x",
            "redis://:hunter2@h/?fencing=maybe",
            "redis://u:hunter2@h/?prefix=a&prefix=a",
            "ftp://u:hunter2@h/",
            "redis://u:hunter2@0.0.0.0/",
        ] {
            let err = config_error(url);
            assert!(!err.contains("hunter2"), "{url}: {err}");
        }
        let url: RedisUrl = "redis://app:hunter2@h:1/2?prefix=neton".parse().unwrap();
        assert_eq!(url.to_string(), "redis://app:***@h:1/2?prefix=neton");
        assert!(!format!("{url:?}").contains("hunter2"));
        assert!(!format!("{:?}", url.client()).contains("hunter2"));
    }
}
