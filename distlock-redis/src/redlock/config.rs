//! The masters of a `redlock://` URL, and the layout they must share: one single-node URL
//! per master, checked before any I/O.

use distlock_api::LockError;

use crate::url::{RedisUrl, REDLOCK};

/// `redlock://auth@h1,h2,h3/db?query` → `redis://auth@h1/db?query`, … (no I/O).
pub(super) fn split_redlock_url(url: &str) -> Result<Vec<String>, LockError> {
    let split = REDLOCK.split(url)?;
    for (index, host) in split.hosts.iter().enumerate() {
        if split.hosts[..index].contains(host) {
            return Err(REDLOCK.error(format_args!("the master `{host}` is listed twice")));
        }
    }
    Ok(split.node_urls())
}

/// Whether the masters fence: the builder's `fencing` (`None`: not set) and every
/// master URL's must agree; a master URL asking for a fair queue or counter fences is
/// refused (Redlock has neither).
pub(super) fn masters_fencing(builder: Option<bool>, masters: &[RedisUrl]) -> Result<bool, LockError> {
    let mut fencing = builder;
    for url in masters {
        if url.fair_queue() == Some(true) {
            return Err(LockError::Config {
                message: "Redlock has no fair queue (one queue per master gives no one order across them): \
                          `fair` may only be `false`"
                    .into(),
            });
        }
        if url.clock_fences() == Some(false) {
            return Err(LockError::Config {
                message: "Redlock fences are always clock fences: `fences` may only be `clock`".into(),
            });
        }
        match (fencing, url.fencing()) {
            (Some(a), Some(b)) if a != b => {
                return Err(LockError::Config {
                    message: format!("the URL's `fencing` ({b}) contradicts the builder's `fencing` ({a})"),
                })
            }
            (None, given) => fencing = given,
            _ => {}
        }
    }
    Ok(fencing.unwrap_or(false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_masters() {
        assert_eq!(
            split_redlock_url("redlock://:pw@a:1,b:2,c/3?prefix=x").unwrap(),
            ["redis://:pw@a:1/3?prefix=x", "redis://:pw@b:2/3?prefix=x", "redis://:pw@c/3?prefix=x"]
        );
        assert_eq!(
            split_redlock_url("redlock://a,b?fencing=true").unwrap(),
            ["redis://a?fencing=true", "redis://b?fencing=true"]
        );
        for bad in ["redis://a", "redlock://a,,b", "redlock://a,a", "redlock://"] {
            assert!(matches!(split_redlock_url(bad), Err(LockError::Config { .. })), "{bad}");
        }
    }
}
