//! The parsed `redis+sentinel://` URL: the sentinels, the master's name, the master's
//! credentials and layout, and the store's own `wait_replicas`. Pure parsing, no I/O.

use std::time::Duration;

use distlock_api::LockError;

/// A `redis+sentinel://` URL, checked.
#[derive(Debug)]
pub(super) struct SentinelUrl {
    /// `host:port` of each sentinel, in URL order.
    pub(super) sentinels: Vec<String>,
    pub(super) master_name: String,
    /// `user:password@` or empty.
    pub(super) auth: String,
    /// `/<db>?<layout>` as given (the store's own parameters removed).
    pub(super) tail: String,
    /// `WAIT` for this many replicas, this long, after every acquisition.
    pub(super) wait_replicas: Option<(u32, Duration)>,
}

impl SentinelUrl {
    /// The single-node URL of the master at `address` (`host:port`).
    pub(super) fn master_url(&self, address: &str) -> String {
        format!("redis://{}{address}{}", self.auth, self.tail)
    }
}

/// `redis+sentinel://auth@s1,s2/name[/db]?query` (no I/O).
pub(super) fn parse_sentinel_url(url: &str) -> Result<SentinelUrl, LockError> {
    let family = &crate::url::SENTINEL;
    let split = family.split(url)?;
    let no_master = || family.error("the master's name is missing: …/<master name>");
    let rest = split.tail.strip_prefix('/').ok_or_else(no_master)?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (master_name, db) = path.split_once('/').unwrap_or((path, ""));
    if master_name.is_empty() {
        return Err(no_master());
    }
    let config = |message: String| family.error(message);
    let (mut replicas, mut timeout) = (None, Duration::from_millis(100));
    let mut layout = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "wait_replicas" => {
                let n: u32 =
                    value.parse().map_err(|_| config(format!("`wait_replicas` must be a count, not `{value}`")))?;
                replicas = (n > 0).then_some(n);
            }
            "wait_timeout_ms" => {
                let ms: u64 = value
                    .parse()
                    .ok()
                    .filter(|&ms| ms > 0)
                    .ok_or_else(|| config(format!("`wait_timeout_ms` must be a positive number, not `{value}`")))?;
                timeout = Duration::from_millis(ms);
            }
            _ => layout.push(pair),
        }
    }
    let mut tail = if db.is_empty() { String::new() } else { format!("/{db}") };
    if !layout.is_empty() {
        tail.push('?');
        tail.push_str(&layout.join("&"));
    }
    Ok(SentinelUrl {
        sentinels: split.hosts.iter().map(|host| (*host).to_owned()).collect(),
        master_name: master_name.to_owned(),
        auth: split.auth.to_owned(),
        tail,
        wait_replicas: replicas.map(|n| (n, timeout)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_the_sentinels_the_master_and_the_layout() {
        let url = parse_sentinel_url(
            "redis+sentinel://:pw@a:26379,b:26379/main/2?prefix=x&wait_replicas=1&wait_timeout_ms=50",
        )
        .unwrap();
        assert_eq!(url.sentinels, ["a:26379", "b:26379"]);
        assert_eq!((url.master_name.as_str(), url.auth.as_str(), url.tail.as_str()), ("main", ":pw@", "/2?prefix=x"));
        assert_eq!(url.wait_replicas, Some((1, Duration::from_millis(50))));
        for bad in [
            "redis://a",
            "redis+sentinel://a,b",
            "redis+sentinel://a,,b/m",
            "redis+sentinel://a/",
            "redis+sentinel://a/m?wait_replicas=x",
            "redis+sentinel://a/m?wait_timeout_ms=0",
        ] {
            assert!(matches!(parse_sentinel_url(bad), Err(LockError::Config { .. })), "{bad}");
        }
    }
}
