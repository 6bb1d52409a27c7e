//! URLs that name several servers — `redis+cluster://`, `redlock://`,
//! `redis+sentinel://` — split once: `scheme://[auth@]host1,host2,…[/path][?query]`.
//! Pure parsing, no I/O.

use distlock_api::LockError;

/// A scheme of the multi-server family, and how its errors name it.
#[derive(Debug)]
pub(crate) struct Family {
    /// `redis+cluster://`, …
    pub(crate) scheme: &'static str,
    /// `Redis Cluster URL`, … (the start of every error message).
    pub(crate) name: &'static str,
    /// The URL's shape, shown when the scheme is wrong.
    pub(crate) shape: &'static str,
    /// What the hosts are: `nodes`, `masters`, `sentinels`.
    pub(crate) members: &'static str,
}

/// Redis Cluster: any reachable nodes.
pub(crate) const CLUSTER: Family = Family {
    scheme: "redis+cluster://",
    name: "Redis Cluster URL",
    shape: "redis+cluster://host1:port1,host2:port2,…",
    members: "nodes",
};

/// Redlock: independent masters.
pub(crate) const REDLOCK: Family = Family {
    scheme: "redlock://",
    name: "Redlock URL",
    shape: "redlock://host1:port1,host2:port2,…",
    members: "masters",
};

/// Redis Sentinel: the sentinels, then the master's name as the path.
pub(crate) const SENTINEL: Family = Family {
    scheme: "redis+sentinel://",
    name: "Redis Sentinel URL",
    shape: "redis+sentinel://sentinel1:26379,sentinel2:26379/<master name>",
    members: "sentinels",
};

/// The parts of a multi-server URL.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Hosts<'a> {
    /// `user:password@`, or empty.
    pub(crate) auth: &'a str,
    /// `host[:port]` each, none empty.
    pub(crate) hosts: Vec<&'a str>,
    /// Everything after the hosts: `/path?query`, `?query`, or empty.
    pub(crate) tail: &'a str,
}

impl Family {
    /// A [`LockError::Config`] about a URL of this family.
    pub(crate) fn error(&self, message: impl std::fmt::Display) -> LockError {
        LockError::Config { message: format!("{}: {message}", self.name) }
    }

    /// Splits `url` into its credentials, hosts and tail.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for another scheme or an empty host.
    pub(crate) fn split<'a>(&self, url: &'a str) -> Result<Hosts<'a>, LockError> {
        let Some(rest) = url.strip_prefix(self.scheme) else {
            return Err(self.error(format_args!("expected {}", self.shape)));
        };
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        let (auth, hosts) = match authority.rfind('@') {
            Some(at) => authority.split_at(at + 1),
            None => ("", authority),
        };
        let hosts: Vec<&str> = hosts.split(',').collect();
        if hosts.iter().any(|host| host.is_empty()) {
            return Err(self.error(format_args!("an empty host in the list of {}", self.members)));
        }
        Ok(Hosts { auth, hosts, tail })
    }
}

impl Hosts<'_> {
    /// One single-server URL per host: `redis://{auth}{host}{tail}`.
    pub(crate) fn node_urls(&self) -> Vec<String> {
        self.hosts.iter().map(|host| format!("redis://{}{host}{}", self.auth, self.tail)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_split_once_for_every_family() {
        let split = CLUSTER.split("redis+cluster://u:p@w@a:1,b:2/0?prefix=x").unwrap();
        assert_eq!(split, Hosts { auth: "u:p@w@", hosts: vec!["a:1", "b:2"], tail: "/0?prefix=x" });
        assert_eq!(split.node_urls(), ["redis://u:p@w@a:1/0?prefix=x", "redis://u:p@w@b:2/0?prefix=x"]);
        assert_eq!(REDLOCK.split("redlock://a").unwrap(), Hosts { auth: "", hosts: vec!["a"], tail: "" });
        for (family, bad) in [(&CLUSTER, "redis://a"), (&REDLOCK, "redlock://a,,b"), (&SENTINEL, "redis+sentinel://")] {
            let err = family.split(bad).unwrap_err();
            assert!(matches!(err, LockError::Config { .. }), "{bad}: {err}");
            assert!(err.to_string().contains(family.name), "{err}");
        }
    }
}
