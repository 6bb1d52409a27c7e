//! Each operation once, as the server receives it: the command or script, its keys from
//! the [`Layout`], and the reading of its reply. Generic over the connection
//! (`ConnectionManager` on one server, a master's or the Cluster's connection), so every
//! topology sends the same commands; the stores only choose the connection. `lock.rs`:
//! single locks and their queue of waiters; `value.rs`: values attached to their leases;
//! `group.rs`: lock groups.

use std::fmt;

use distlock_api::{LockError, StoreKey};
use redis::aio::ConnectionLike;
use redis::Value;

use crate::layout::Layout;

mod group;
mod lock;
mod value;

pub(crate) use group::{owned_names, GroupNames, GROUP_LIST_BATCH, MAX_GROUP};

/// A connection the commands can be sent on.
pub(crate) trait Conn: ConnectionLike + Send {}

impl<C: ConnectionLike + Send> Conn for C {}

/// The settings that decide which commands a store sends, and the name its errors carry.
#[derive(Debug, Clone)]
pub(crate) struct Commands {
    pub(crate) layout: Layout,
    pub(crate) backend: &'static str,
    pub(crate) fencing: bool,
    /// Fencing numbers drawn from the server's clock and the counter.
    pub(crate) clock_fences: bool,
    /// Whether releases (and hand-overs) are published.
    pub(crate) notifications: bool,
}

impl Commands {
    /// A store failure of `operation` on `key`, named as the application knows it.
    pub(crate) fn error(
        &self,
        operation: &'static str,
        key: &StoreKey,
        err: impl Into<distlock_api::BoxError>,
    ) -> LockError {
        LockError::store(self.backend, operation, Some(key.lock_key()), err)
    }

    /// A script's `1` or `0`.
    fn flag(&self, operation: &'static str, key: &StoreKey, reply: i64) -> Result<bool, LockError> {
        match reply {
            1 => Ok(true),
            0 => Ok(false),
            other => Err(self.error(operation, key, Failure(format!("script returned {other}")))),
        }
    }
}

pub(crate) fn unexpected(command: &str, reply: &Value) -> Failure {
    Failure(format!("unexpected reply to {command}: {reply:?}"))
}

/// What went wrong, in words, where no error of the `redis` crate says it: the server
/// answered something a store never expects (another program wrote the key, or a proxy
/// changed the protocol), too few masters or replicas agreed, no sentinel answered.
#[derive(Debug)]
pub(crate) struct Failure(pub(crate) String);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failure {}
