//! Single locks and their queue of waiters: `SET … NX PX` and the lock scripts.

use std::time::Duration;

use distlock_api::{Acquire, LockError, LockInfo, LockMode, QueuedAttempt, StoreKey, Token, Ttl, WaitingPlace};
use redis::{Cmd, FromRedisValue, RedisResult, Value};

use super::{unexpected, Commands, Conn, Failure};
use crate::scripts::{fence_flag, Loaded, LuaScript, SCRIPTS};

impl Commands {
    /// The channel argument of the scripts that publish: the key's channel, or `""` when
    /// releases are not published.
    fn channel_arg(&self, key: &StoreKey) -> String {
        if self.notifications {
            self.layout.release_channel(key)
        } else {
            String::new()
        }
    }

    /// `SET {lease} <token> NX PX <ttl_ms>`, or in fencing mode the fenced acquire script
    /// (`fenced_acquire.lua`, or `fenced_acquire_clock.lua` with clock fences).
    pub(crate) async fn try_acquire(
        &self,
        conn: &mut impl Conn,
        key: &StoreKey,
        token: &Token,
        ttl: Ttl,
    ) -> Result<Acquire, LockError> {
        let redis_key = self.layout.lock_key(key);
        if !self.fencing {
            // Sized for its arguments up front: `redis::cmd` grows both buffers arg by arg.
            let mut set = Cmd::with_capacity(6, redis_key.len() + token.as_str().len() + 32);
            let reply: Value = set
                .arg("SET")
                .arg(&redis_key)
                .arg(token.as_str())
                .arg("NX")
                .arg("PX")
                .arg(ttl.as_millis())
                .query_async(conn)
                .await
                .map_err(|err| self.error("acquire", key, err))?;
            return match reply {
                Value::Okay => Ok(Acquire::Acquired { fence: None }),
                Value::SimpleString(ref s) if s == "OK" => Ok(Acquire::Acquired { fence: None }),
                Value::Nil => Ok(Acquire::Held { ttl_left: None }),
                other => Err(self.error("acquire", key, unexpected("SET … NX PX", &other))),
            };
        }
        let (counter, fence_key) = (self.layout.fence_counter_key(key), self.layout.fence_key(key));
        let script = if self.clock_fences { &SCRIPTS.fenced_acquire_clock } else { &SCRIPTS.fenced_acquire };
        let (acquired, number): (i64, i64) = script
            .run(conn, |cmd| {
                cmd.arg(3).arg(&redis_key).arg(&counter).arg(&fence_key).arg(token.as_str()).arg(ttl.as_millis());
            })
            .await
            .map_err(|err| self.error("acquire", key, err))?;
        self.acquired_or_held(key, acquired, number)
    }

    /// The compare-and-delete [`RELEASE_SCRIPT`](crate::RELEASE_SCRIPT) (after a `SCRIPT
    /// LOAD` when `loaded` says this store has not loaded it), with the release's publish
    /// pipelined behind it when releases are published: one round trip, the publish runs
    /// after the script, and a failed publish does not fail the release.
    pub(crate) async fn release(
        &self,
        conn: &mut impl Conn,
        loaded: Option<&Loaded>,
        key: &StoreKey,
        token: &Token,
    ) -> Result<bool, LockError> {
        let redis_key = self.layout.lock_key(key);
        let args = |cmd: &mut Cmd| {
            cmd.arg(1).arg(&redis_key).arg(token.as_str());
        };
        let script = &SCRIPTS.release;
        let deleted: i64 = if self.notifications {
            let mut publish = redis::cmd(self.layout.publish_command().unwrap_or("PUBLISH"));
            publish.arg(self.layout.release_channel(key)).arg(&redis_key);
            let (deleted, published) = match loaded {
                Some(loaded) => script.run_loaded_then(conn, loaded, args, &publish).await,
                None => script.run_then(conn, args, &publish).await,
            }
            .map_err(|err| self.error("release", key, err))?;
            if let Err(err) = published {
                tracing::debug!(
                    redis.key = %redis_key,
                    error = &err as &dyn std::error::Error,
                    "PUBLISH of a release failed; waiters will poll"
                );
            }
            deleted
        } else {
            run_maybe_loaded(script, conn, loaded, args).await.map_err(|err| self.error("release", key, err))?
        };
        self.flag("release", key, deleted)
    }

    /// The fair release (`fair_release.lua`): the compare-and-delete, then the hand-over
    /// of a free key to the oldest queued waiter, publishing the release and any hand-over.
    pub(crate) async fn fair_release(
        &self,
        conn: &mut impl Conn,
        key: &StoreKey,
        token: &Token,
    ) -> Result<bool, LockError> {
        let redis_key = self.layout.lock_key(key);
        let (queue, queue_ttl) = self.layout.queue_keys(key);
        let channel = self.channel_arg(key);
        let deleted: i64 = SCRIPTS
            .fair_release
            .run(conn, |cmd| {
                cmd.arg(3).arg(&redis_key).arg(&queue).arg(&queue_ttl).arg(token.as_str()).arg(&channel);
                if let Some(publish) = self.layout.publish_command() {
                    cmd.arg(publish);
                }
            })
            .await
            .map_err(|err| self.error("release", key, err))?;
        self.flag("release", key, deleted)
    }

    /// The extend script (`extend.lua`: `GET` == token, then `PEXPIRE`; after a `SCRIPT
    /// LOAD` when `loaded` says this store has not loaded it), or in fencing mode
    /// `fenced_extend.lua`, which also moves the expiry of the fence key.
    pub(crate) async fn extend(
        &self,
        conn: &mut impl Conn,
        loaded: Option<&Loaded>,
        key: &StoreKey,
        token: &Token,
        ttl: Ttl,
    ) -> Result<bool, LockError> {
        let redis_key = self.layout.lock_key(key);
        let extended: RedisResult<i64> = if self.fencing {
            let fence_key = self.layout.fence_key(key);
            SCRIPTS
                .fenced_extend
                .run(conn, |cmd| {
                    cmd.arg(2).arg(&redis_key).arg(&fence_key).arg(token.as_str()).arg(ttl.as_millis());
                })
                .await
        } else {
            run_maybe_loaded(&SCRIPTS.extend, conn, loaded, |cmd| {
                cmd.arg(1).arg(&redis_key).arg(token.as_str()).arg(ttl.as_millis());
            })
            .await
        };
        let extended = extended.map_err(|err| self.error("extend", key, err))?;
        self.flag("extend", key, extended)
    }

    /// The read-only inspect script (`GET`, `PTTL`, and the fence key in fencing mode).
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] also when the key holds something a store did not write (not a
    /// token, or no expiry).
    pub(crate) async fn inspect(&self, conn: &mut impl Conn, key: &StoreKey) -> Result<Option<LockInfo>, LockError> {
        let redis_key = self.layout.lock_key(key);
        let fence_key = self.fencing.then(|| self.layout.fence_key(key));
        let holder: Option<(String, i64, Option<u64>)> = SCRIPTS
            .inspect
            .run(conn, |cmd| match &fence_key {
                Some(fence_key) => {
                    cmd.arg(2).arg(&redis_key).arg(fence_key);
                }
                None => {
                    cmd.arg(1).arg(&redis_key);
                }
            })
            .await
            .map_err(|err| self.error("inspect", key, err))?;
        let Some((token, pttl, fence)) = holder else { return Ok(None) };
        let token = Token::parse(&token).map_err(|err| self.error("inspect", key, err))?;
        let Ok(ms) = u64::try_from(pttl) else {
            return Err(self.error("inspect", key, Failure(format!("the lock key has no expiry (PTTL {pttl})"))));
        };
        Ok(Some(LockInfo::new(token, fence, Duration::from_millis(ms))))
    }

    /// A queued waiter's attempt (`queued_acquire.lua`): takes the key when it was handed
    /// to the token or is free with the token first in line, else takes or refreshes the
    /// token's place.
    pub(crate) async fn try_acquire_queued(
        &self,
        conn: &mut impl Conn,
        attempt: QueuedAttempt<'_>,
    ) -> Result<Acquire, LockError> {
        let QueuedAttempt { key, token, ttl, place } = attempt;
        let redis_key = self.layout.lock_key(key);
        let (queue, queue_ttl) = self.layout.queue_keys(key);
        let (counter, fence_key) = (self.layout.fence_counter_key(key), self.layout.fence_key(key));
        let channel = self.channel_arg(key);
        let (acquired, number): (i64, i64) = SCRIPTS
            .queued_acquire
            .run(conn, |cmd| {
                cmd.arg(5).arg(&redis_key).arg(&queue).arg(&queue_ttl).arg(&counter).arg(&fence_key);
                cmd.arg(token.as_str()).arg(ttl.as_millis()).arg(place.as_millis());
                cmd.arg(fence_flag(self.fencing, self.clock_fences)).arg(&channel);
                if let Some(publish) = self.layout.publish_command() {
                    cmd.arg(publish);
                }
            })
            .await
            .map_err(|err| self.error("acquire", key, err))?;
        self.acquired_or_held(key, acquired, number)
    }

    /// How many live places the key's queue has (`queue_len.lua`, read only).
    pub(crate) async fn queue_len(&self, conn: &mut impl Conn, key: &StoreKey) -> Result<usize, LockError> {
        let (_, queue_ttl) = self.layout.queue_keys(key);
        let len: i64 = SCRIPTS
            .queue_len
            .run(conn, |cmd| {
                cmd.arg(1).arg(&queue_ttl);
            })
            .await
            .map_err(|err| self.error("queue_len", key, err))?;
        usize::try_from(len).map_err(|_| self.error("queue_len", key, Failure(format!("ZCOUNT gave {len}"))))
    }

    /// The read-only queue places script (`queue_places.lua`): the live places of the
    /// key's queue in arrival order, with their expiries (ms) and arrivals (µs).
    pub(crate) async fn queue_places(
        &self,
        conn: &mut impl Conn,
        key: &StoreKey,
    ) -> Result<Vec<WaitingPlace>, LockError> {
        let (queue, queue_ttl) = self.layout.queue_keys(key);
        let rows: Vec<(String, u64, u64)> = SCRIPTS
            .queue_places
            .run(conn, |cmd| {
                cmd.arg(2).arg(&queue).arg(&queue_ttl);
            })
            .await
            .map_err(|err| self.error("queue_places", key, err))?;
        rows.into_iter()
            .map(|(token, left, waited)| {
                let token = Token::parse(&token).map_err(|err| self.error("queue_places", key, err))?;
                let (left, waited) = (Duration::from_millis(left), Duration::from_micros(waited));
                Ok(WaitingPlace::new(token, LockMode::Exclusive, Some(waited), left))
            })
            .collect()
    }

    /// `{1, fence}` (`fence` 0 without fencing) or `{0, pttl}`, as the acquire scripts answer.
    fn acquired_or_held(&self, key: &StoreKey, acquired: i64, number: i64) -> Result<Acquire, LockError> {
        match (acquired, u64::try_from(number)) {
            (1, Ok(0)) if !self.fencing => Ok(Acquire::Acquired { fence: None }),
            (1, Ok(fence)) if self.fencing && fence > 0 => Ok(Acquire::Acquired { fence: Some(fence) }),
            (0, Ok(ms)) => Ok(Acquire::Held { ttl_left: Some(Duration::from_millis(ms)) }),
            // PTTL -1: a key without expiry, not written by a store.
            (0, Err(_)) => Ok(Acquire::Held { ttl_left: None }),
            _ => Err(self.error("acquire", key, Failure(format!("acquire returned {{{acquired}, {number}}}")))),
        }
    }
}

/// `script` with `EVALSHA`, after a `SCRIPT LOAD` when `loaded` is given.
async fn run_maybe_loaded<T: FromRedisValue>(
    script: &LuaScript,
    conn: &mut impl Conn,
    loaded: Option<&Loaded>,
    args: impl Fn(&mut Cmd),
) -> RedisResult<T> {
    match loaded {
        Some(loaded) => script.run_loaded(conn, loaded, args).await,
        None => script.run(conn, args).await,
    }
}
