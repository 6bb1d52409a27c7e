//! Store URLs: the members to connect to plus the store's layout (`prefix`,
//! `notifications`) and timeouts as query parameters. Pure parsing, no I/O.

use std::fmt;
use std::time::Duration;

use distlock_api::LockError;

use crate::config::{checked_timeout, validate_key_prefix};

/// A parsed and checked etcd store URL: the members, credentials, and the store's layout.
///
/// ```text
/// etcd://[user:password@]host:port[,host:port…][/][?prefix=…&notifications=…&timeout=…&connect_timeout=…]
/// ```
///
/// Every member of the cluster may be named; the client spreads requests over them and
/// keeps going while a majority answers. A member without a port gets etcd's client port
/// 2379.
///
/// | parameter | meaning | values | builder setting |
/// |---|---|---|---|
/// | `prefix` | key prefix: keys are `{prefix}/lock:{key}` | 1–256 bytes, no control characters (percent-encoded as needed) | [`key_prefix`](crate::EtcdLockStoreBuilder::key_prefix) |
/// | `notifications` | wake waiters through a watch | `true`, `false` | [`release_notifications`](crate::EtcdLockStoreBuilder::release_notifications) |
/// | `timeout` | the longest one request may take | a humantime-like duration: `500ms`, `5s`, `1m` | [`response_timeout`](crate::EtcdLockStoreBuilder::response_timeout) |
/// | `connect_timeout` | the longest connecting to a member may take | as `timeout` | [`connect_timeout`](crate::EtcdLockStoreBuilder::connect_timeout) |
///
/// Nothing is ignored: an unknown parameter, a parameter given twice, a malformed value,
/// a path other than `/`, or a URL fragment is a [`LockError::Config`] naming the culprit.
/// TLS (`etcds://`) is not supported by this build.
///
/// Neither errors nor [`Display`](fmt::Display) / [`Debug`] ever show the password.
///
/// ```
/// use distlock_etcd::EtcdUrl;
///
/// let url = EtcdUrl::parse("etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3?prefix=neton")?;
/// assert_eq!(url.endpoints(), ["http://10.0.0.1:2379", "http://10.0.0.2:2379", "http://10.0.0.3:2379"]);
/// assert_eq!(url.key_prefix(), Some("neton"));
/// # Ok::<(), distlock_api::LockError>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdUrl {
    endpoints: Vec<String>,
    user: Option<(String, String)>,
    key_prefix: Option<String>,
    release_notifications: Option<bool>,
    response_timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
}

impl EtcdUrl {
    /// Parses and checks `url` without any I/O.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] naming what is wrong; the message never repeats the URL's
    /// credentials.
    pub fn parse(url: &str) -> Result<Self, LockError> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(config("not an etcd URL: expected etcd://host:port[,host:port…][?prefix=…]"));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "etcd" => {}
            "etcds" => return Err(config("`etcds://` (TLS) is not supported by this build of distlock-etcd")),
            other => return Err(config(&format!("unsupported scheme `{other}://`: expected etcd://"))),
        }
        if rest.contains('#') {
            return Err(config("an etcd URL has no fragment (`#…`)"));
        }
        let (authority_and_path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = match authority_and_path.find('/') {
            Some(at) => authority_and_path.split_at(at),
            None => (authority_and_path, ""),
        };
        if !path.is_empty() && path != "/" {
            return Err(config("an etcd URL has no path: put the key prefix in `?prefix=…`"));
        }
        let (user, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => {
                let Some((name, password)) = userinfo.split_once(':') else {
                    return Err(config("etcd credentials must be `user:password@`"));
                };
                let (name, password) = (decode(name, "user name")?, decode(password, "password")?);
                if name.is_empty() {
                    return Err(config("the etcd user name is empty"));
                }
                (Some((name, password)), hosts)
            }
            None => (None, authority),
        };
        let endpoints = hosts.split(',').map(endpoint).collect::<Result<Vec<_>, _>>()?;
        let mut parsed = Self {
            endpoints,
            user,
            key_prefix: None,
            release_notifications: None,
            response_timeout: None,
            connect_timeout: None,
        };
        let mut seen = Vec::new();
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let name = decode(name, "parameter name")?;
            let value = decode(value, &format!("parameter `{name}`"))?;
            if seen.contains(&name) {
                return Err(config(&format!("the parameter `{name}` is given twice")));
            }
            match name.as_str() {
                "prefix" => {
                    validate_key_prefix(&value)?;
                    parsed.key_prefix = Some(value);
                }
                "notifications" => parsed.release_notifications = Some(boolean(&name, &value)?),
                "timeout" => parsed.response_timeout = Some(checked_timeout("timeout", duration(&name, &value)?)?),
                "connect_timeout" => {
                    parsed.connect_timeout = Some(checked_timeout("connect_timeout", duration(&name, &value)?)?);
                }
                _ => {
                    return Err(config(&format!(
                        "unknown etcd URL parameter `{name}` (known: prefix, notifications, timeout, connect_timeout)"
                    )))
                }
            }
            seen.push(name);
        }
        Ok(parsed)
    }

    /// The members' endpoints as the client takes them: `http://host:port`.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The user name, when the URL has credentials.
    pub fn user(&self) -> Option<&str> {
        self.user.as_ref().map(|(name, _)| name.as_str())
    }

    pub(crate) fn credentials(&self) -> Option<&(String, String)> {
        self.user.as_ref()
    }

    /// `?prefix=`, when given.
    pub fn key_prefix(&self) -> Option<&str> {
        self.key_prefix.as_deref()
    }

    /// `?notifications=`, when given.
    pub fn release_notifications(&self) -> Option<bool> {
        self.release_notifications
    }

    /// `?timeout=`, when given.
    pub fn response_timeout(&self) -> Option<Duration> {
        self.response_timeout
    }

    /// `?connect_timeout=`, when given.
    pub fn connect_timeout(&self) -> Option<Duration> {
        self.connect_timeout
    }
}

impl fmt::Display for EtcdUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("etcd://")?;
        if let Some((name, _)) = &self.user {
            write!(f, "{name}:***@")?;
        }
        let hosts: Vec<&str> = self.endpoints.iter().map(|e| e.trim_start_matches("http://")).collect();
        f.write_str(&hosts.join(","))?;
        if let Some(prefix) = &self.key_prefix {
            write!(f, "?prefix={prefix}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for EtcdUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("EtcdUrl").field(&self.to_string()).finish()
    }
}

fn config(message: &str) -> LockError {
    LockError::Config { message: message.to_owned() }
}

/// `host[:port]` → `http://host:port` (port 2379 by default).
fn endpoint(host: &str) -> Result<String, LockError> {
    if host.is_empty() {
        return Err(config("an etcd URL names an empty member (expected host:port between commas)"));
    }
    let (name, port) = match host.rsplit_once(':') {
        // `[::1]:2379` and `host:2379`; a bare IPv6 address needs brackets.
        Some((name, port)) if !name.is_empty() && (!name.contains(':') || name.ends_with(']')) => (name, Some(port)),
        _ => (host, None),
    };
    if name.contains(['/', '@', '?', ' ']) || (name.contains(':') && !name.starts_with('[')) {
        return Err(config(&format!("`{host}` is not a host[:port]")));
    }
    let port = match port {
        Some(port) => {
            port.parse::<u16>().ok().filter(|&p| p > 0).ok_or_else(|| config(&format!("`{port}` is not a port")))?
        }
        None => 2379,
    };
    Ok(format!("http://{name}:{port}"))
}

fn boolean(name: &str, value: &str) -> Result<bool, LockError> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(config(&format!("the parameter `{name}` must be `true` or `false`"))),
    }
}

/// `250ms`, `5s`, `2m`.
fn duration(name: &str, value: &str) -> Result<Duration, LockError> {
    let digits = value.find(|c: char| !c.is_ascii_digit()).unwrap_or(value.len());
    let (number, unit) = value.split_at(digits);
    let number: u64 =
        number.parse().map_err(|_| config(&format!("the parameter `{name}` is not a duration such as 5s")))?;
    match unit {
        "ms" => Ok(Duration::from_millis(number)),
        "s" => Ok(Duration::from_secs(number)),
        "m" => Ok(Duration::from_secs(number.saturating_mul(60))),
        _ => Err(config(&format!("the parameter `{name}` is not a duration such as 5s (units: ms, s, m)"))),
    }
}

/// Percent-decoding; `what` names the part in errors (never its value: it may be secret).
fn decode(text: &str, what: &str) -> Result<String, LockError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok());
            let Some(byte) = hex else { return Err(config(&format!("the etcd URL's {what} has a bad %-escape"))) };
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| config(&format!("the etcd URL's {what} is not UTF-8")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_members_and_layout() {
        let url = EtcdUrl::parse("etcd://u:p%40ss@a:1,b:2/?prefix=my%2Fapp&notifications=false&timeout=250ms").unwrap();
        assert_eq!(url.endpoints(), ["http://a:1", "http://b:2"]);
        assert_eq!(url.credentials(), Some(&("u".to_owned(), "p@ss".to_owned())));
        assert_eq!(url.key_prefix(), Some("my/app"));
        assert_eq!(url.release_notifications(), Some(false));
        assert_eq!(url.response_timeout(), Some(Duration::from_millis(250)));
        assert_eq!(url.to_string(), "etcd://u:***@a:1,b:2?prefix=my/app");
        assert!(!format!("{url:?}").contains("p@ss"));
        assert_eq!(EtcdUrl::parse("etcd://[::1]:5").unwrap().endpoints(), ["http://[::1]:5"]);
    }

    #[test]
    fn refuses_what_it_does_not_understand() {
        for bad in [
            "redis://a:1",
            "etcds://a:1",
            "etcd://",
            "etcd://a:1,,b:2",
            "etcd://a:x",
            "etcd://a:1/db",
            "etcd://a:1?prefix=",
            "etcd://a:1?prefix=a&prefix=b",
            "etcd://a:1?fencing=true",
            "etcd://a:1?notifications=yes",
            "etcd://a:1?timeout=0s",
            "etcd://a:1?timeout=5h",
            "etcd://a:1#x",
            "etcd://secret@a:1",
        ] {
            let err = EtcdUrl::parse(bad).unwrap_err();
            assert!(matches!(err, LockError::Config { .. }), "{bad}: {err}");
            assert!(!err.to_string().contains("secret"), "{err}");
        }
    }
}
