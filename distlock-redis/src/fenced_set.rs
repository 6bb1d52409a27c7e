//! Resource-side fencing on Redis: a value that only writers with a fence at least as high
//! as the last writer's can replace.

use redis::aio::ConnectionLike;
use redis::{RedisResult, ToRedisArgs};

use crate::scripts::SCRIPTS;

/// The hash field [`fenced_set`] writes the value to (read it with `HGET key value`).
pub const FENCED_VALUE_FIELD: &str = "value";

/// The hash field [`fenced_set`] keeps the highest fence that wrote the value in.
pub const FENCE_FIELD: &str = "fence";

/// What [`fenced_set`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a refused write changed nothing: the writer lost its lock"]
pub enum FencedSet {
    /// The value and the fence were stored.
    Written,
    /// The hash was written with a higher fence than this write carried: the writer's lock
    /// was lost to a later holder. Nothing was changed.
    Refused {
        /// The fence stored in the hash.
        current_fence: u64,
    },
}

/// Writes `value` to the hash `key` (field [`FENCED_VALUE_FIELD`]) only if `fence` is not
/// lower than the fence stored beside it (field [`FENCE_FIELD`]), in one script, and then
/// stores `fence` there. Pass the fence of the lock that guards the resource
/// ([`DistributedLock::fence`](distlock_api::DistributedLock::fence)): a holder paused past
/// its lease, whose lock was taken and used by another, gets [`FencedSet::Refused`]
/// instead of overwriting the newer value.
///
/// The hash must not expire (or be deleted) while writers may still come: without the
/// stored fence, any fence is accepted.
///
/// ```no_run
/// use distlock_redis::{fenced_set, FencedSet};
/// # async fn demo(conn: &mut distlock_redis::redis::aio::ConnectionManager, fence: u64) -> distlock_redis::redis::RedisResult<()> {
/// match fenced_set(conn, "report:daily", fence, "done").await? {
///     FencedSet::Written => {}
///     FencedSet::Refused { current_fence } => eprintln!("lock lost to fence {current_fence}"),
/// }
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// The connection's or the server's error, e.g. `WRONGTYPE` when `key` is not a hash.
pub async fn fenced_set<C, V>(conn: &mut C, key: &str, fence: u64, value: V) -> RedisResult<FencedSet>
where
    C: ConnectionLike + Send,
    V: ToRedisArgs + Send + Sync,
{
    let (written, stored): (i64, String) = SCRIPTS
        .fenced_set
        .run(conn, |cmd| {
            cmd.arg(1).arg(key).arg(fence.to_string()).arg(&value);
        })
        .await?;
    if written == 1 {
        return Ok(FencedSet::Written);
    }
    let current_fence = stored.parse().map_err(|_| {
        redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "the stored fence is not a 64-bit unsigned integer",
            format!("key {key:?}, field {FENCE_FIELD:?}: {stored:?}"),
        ))
    })?;
    Ok(FencedSet::Refused { current_fence })
}
