//! The Redlock vote: one command sent to every master in parallel, each bounded by a
//! timeout, and what the answers add up to. Over the masters' single-node stores; it
//! imports nothing of the Redlock store itself.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use distlock_api::{LockError, LockStore, StoreKey, Token, Ttl};
use futures_util::stream::{FuturesUnordered, StreamExt};

use crate::commands::Failure;
use crate::scripts::SCRIPTS;
use crate::single::RedisLockStore;

/// The name reported by the Redlock store and in its errors.
pub(super) const BACKEND: &str = "redlock";

/// The longest random pause added after a wait ends.
pub(super) const MAX_JITTER: Duration = Duration::from_millis(3);

/// What one master answered to one command.
pub(super) enum Vote<T> {
    Answer(T),
    Failed(LockError),
}

/// A Redlock failure of `operation` (on `key`, when there is one).
pub(super) fn error(
    operation: &'static str,
    key: Option<&StoreKey>,
    err: impl Into<distlock_api::BoxError>,
) -> LockError {
    LockError::store(BACKEND, operation, key.map(StoreKey::lock_key), err)
}

/// Runs `op` on every master in parallel, each bounded by `timeout`.
pub(super) async fn fan_out<'a, T, F, Fut>(masters: &'a [RedisLockStore], timeout: Duration, op: F) -> Vec<Vote<T>>
where
    F: Fn(&'a RedisLockStore) -> Fut,
    Fut: std::future::Future<Output = Result<T, LockError>> + 'a,
{
    let calls = masters.iter().map(|master| vote(timeout, op(master)));
    futures_util::future::join_all(calls).await
}

/// One master's answer to `call`, bounded by `timeout`.
async fn vote<T>(timeout: Duration, call: impl std::future::Future<Output = Result<T, LockError>>) -> Vote<T> {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(answer)) => Vote::Answer(answer),
        Ok(Err(err)) => Vote::Failed(err),
        Err(_) => Vote::Failed(error("master", None, Failure("the master did not answer in time".into()))),
    }
}

/// Runs `op(master index)` on each of `masters` masters in parallel, each bounded by
/// `timeout`, and returns the votes in the order they came as soon as `decided(votes so
/// far, still outstanding)` says the outcome can no longer change — once a majority
/// agreed — without waiting for the slowest masters. Their calls are **not** dropped (a
/// dropped call may never be sent): they run to the end in a background task, so every
/// master still gets the command. Only for token-checked commands whose late run is
/// harmless (release, extend).
pub(super) async fn fan_out_until<T, F, Fut>(
    masters: usize,
    timeout: Duration,
    op: F,
    decided: impl Fn(&[Vote<T>], usize) -> bool,
) -> Vec<Vote<T>>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<T, LockError>> + Send + 'static,
{
    let mut calls: FuturesUnordered<_> = (0..masters).map(|index| vote(timeout, op(index))).collect();
    let mut votes = Vec::with_capacity(masters);
    while let Some(vote) = calls.next().await {
        votes.push(vote);
        if !calls.is_empty() && decided(&votes, calls.len()) {
            tokio::spawn(async move { while calls.next().await.is_some() {} });
            break;
        }
    }
    votes
}

/// The bound of one acquire or extend on one master: the store's, at most half the TTL.
pub(super) fn per_master_timeout(response_timeout: Duration, ttl: Ttl) -> Duration {
    response_timeout.min(ttl.as_duration() / 2).max(Duration::from_millis(1))
}

/// Releases `token` on one master: the raise-and-delete script when a fence was
/// granted, the single-node release otherwise.
pub(super) async fn release_on(
    master: &RedisLockStore,
    key: &StoreKey,
    token: &Token,
    fence: Option<u64>,
) -> Result<bool, LockError> {
    let Some(fence) = fence else { return master.release(key, token).await };
    let (redis_key, counter) = (master.redis_key(key), master.fence_counter_key());
    let mut conn = master.connection_manager().clone();
    let args = |cmd: &mut redis::Cmd| {
        cmd.arg(2).arg(&redis_key).arg(&counter).arg(token.as_str()).arg(fence);
    };
    let deleted: i64 = match master.release_channel() {
        Some(channel) => {
            let mut publish = redis::cmd("PUBLISH");
            publish.arg(channel).arg(&redis_key);
            SCRIPTS.redlock_release.run_then(&mut conn, args, &publish).await.map(|(deleted, _)| deleted)
        }
        None => SCRIPTS.redlock_release.run(&mut conn, args).await,
    }
    .map_err(|err| error("release", Some(key), err))?;
    Ok(deleted == 1)
}

/// A random pause of up to [`MAX_JITTER`].
pub(super) fn jitter() -> Duration {
    let random = RandomState::new().build_hasher().finish();
    let max = u64::try_from(MAX_JITTER.as_micros()).unwrap_or(1).max(1);
    Duration::from_micros(random % max)
}

/// The drift allowance of the published algorithm: 1 % of the TTL plus 2 ms.
pub(super) fn drift(ttl: Ttl) -> Duration {
    ttl.as_duration() / 100 + Duration::from_millis(2)
}

pub(super) fn first_error<T>(votes: Vec<Vote<T>>) -> Option<LockError> {
    votes.into_iter().find_map(|vote| match vote {
        Vote::Failed(err) => Some(err),
        Vote::Answer(_) => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        assert_eq!(drift(Ttl::new(Duration::from_secs(10)).unwrap()), Duration::from_millis(102));
    }

    #[test]
    fn the_release_script_keeps_seed_000s_check_first() {
        let second_line = SCRIPTS.redlock_release.code().lines().nth(1).unwrap();
        assert!(second_line.contains(r#"redis.call("get", KEYS[1]) == ARGV[1]"#));
    }
}
