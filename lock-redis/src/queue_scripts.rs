//! The scripts of fair waiting: each key's queue of waiters, and the release that hands a
//! key to the oldest live waiter.
//!
//! Per lock key `{prefix}:lock:<key>` the queue is two sorted sets, created by the first
//! waiter and gone with the last: `{prefix}:queue:lock:<key>` (member: a waiter's token,
//! score: its arrival, the server's clock in µs) and `{prefix}:queue-ttl:lock:<key>`
//! (member: the token, score: when its place expires, in ms). Both expire with the latest
//! place. A key *handed* to a waiter holds that waiter's token with the rest of its
//! place's lease as `PX`: no `SET NX` can take it meanwhile, and a waiter that died lets
//! it expire soon.

use std::sync::LazyLock;

use crate::scripts::LuaScript;

/// Helpers both scripts start with.
macro_rules! prelude {
    () => {
        r#"
local function clock()
    local t = redis.call("time")
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Drops the places that expired by `now` (ms).
local function purge(q, e, now)
    local dead = redis.call("zrangebyscore", e, "-inf", now)
    for _, token in ipairs(dead) do
        redis.call("zrem", q, token)
    end
    if #dead > 0 then
        redis.call("zremrangebyscore", e, "-inf", now)
    end
end

-- The free key `k` goes to the oldest live waiter, held by its token until its place
-- expires; its release is published. Returns whether someone got it.
local function hand_over(k, q, e, now, channel)
    purge(q, e, now)
    local head = redis.call("zrange", q, 0, 0)[1]
    if not head then
        return false
    end
    local left = tonumber(redis.call("zscore", e, head)) - now
    redis.call("set", k, head, "PX", math.max(left, 1))
    if channel ~= "" then
        redis.call("publish", channel, k)
    end
    return true
end
"#
    };
}

/// The release: seed 000's compare-and-delete (`GET` == token → `DEL`), then, only when
/// the key has a queue, the token's place leaves it and a free key is handed to the
/// oldest live waiter. Publishes the release (and any hand-over).
///
/// `KEYS` = lock key, queue, queue-ttl. `ARGV` = token, channel (`""`: do not publish).
/// Returns 1 when the token's lease was deleted, 0 otherwise.
pub const FAIR_RELEASE_SCRIPT: &str = concat!(
    "-- 释放锁：仅当 value 等于传入的 token 时才删除；有排队者时交给最早的排队者",
    r#"
local released = 0
if redis.call("get", KEYS[1]) == ARGV[1] then
    released = redis.call("del", KEYS[1])
    if ARGV[2] ~= "" then
        redis.call("publish", ARGV[2], KEYS[1])
    end
end
if redis.call("exists", KEYS[2]) == 0 then
    return released
end
"#,
    // Only when someone waits: the helpers (defining them costs every call).
    prelude!(),
    r#"
redis.call("zrem", KEYS[2], ARGV[1])
redis.call("zrem", KEYS[3], ARGV[1])
if redis.call("exists", KEYS[1]) == 0 then
    hand_over(KEYS[1], KEYS[2], KEYS[3], clock(), ARGV[2])
end
return released
"#
);

/// A queued waiter's attempt, one atomic step: the key is taken when it was handed to
/// the token, or is free and the token is first in line (or nobody waits); a free key
/// whose first waiter is someone else is handed to that waiter; otherwise the token's
/// place is taken (arrival order) or refreshed.
///
/// `KEYS` = lock key, queue, queue-ttl, fence counter, fence key. `ARGV` = token, ttl ms,
/// place ttl ms, fencing (`1`/`0`), channel (`""`: do not publish).
/// Returns `{1, fence}` (fence 0 without fencing) or `{0, pttl of the key}`.
pub const QUEUED_ACQUIRE_SCRIPT: &str = concat!(
    "-- 排队获取锁\n",
    prelude!(),
    r#"
local now, arrival = clock()
local token, ttl, place = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
purge(KEYS[2], KEYS[3], now)
local holder = redis.call("get", KEYS[1])
local mine = holder == token
if not holder then
    local head = redis.call("zrange", KEYS[2], 0, 0)[1]
    if head == nil or head == token then
        mine = true
    else
        hand_over(KEYS[1], KEYS[2], KEYS[3], now, ARGV[5])
    end
end
if mine then
    redis.call("set", KEYS[1], token, "PX", ttl)
    redis.call("zrem", KEYS[2], token)
    redis.call("zrem", KEYS[3], token)
    local fence = 0
    if ARGV[4] == "1" then
        fence = redis.call("incr", KEYS[4])
        redis.call("set", KEYS[5], fence .. ":" .. token, "PX", ttl)
    end
    return { 1, fence }
end
redis.call("zadd", KEYS[2], "NX", arrival, token)
redis.call("zadd", KEYS[3], now + place, token)
if redis.call("pttl", KEYS[2]) < place then
    redis.call("pexpire", KEYS[2], place)
    redis.call("pexpire", KEYS[3], place)
end
return { 0, redis.call("pttl", KEYS[1]) }
"#
);

/// How many live places a key's queue has, read only. `KEYS` = queue-ttl.
pub const QUEUE_LEN_SCRIPT: &str = r#"-- 排队人数
local t = redis.call("time")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call("zcount", KEYS[1], "(" .. now, "+inf")
"#;

/// The queue scripts, hashed once per process.
#[derive(Debug)]
pub(crate) struct QueueScripts {
    pub(crate) release: LuaScript,
    pub(crate) acquire: LuaScript,
    pub(crate) len: LuaScript,
}

pub(crate) static QUEUE_SCRIPTS: LazyLock<QueueScripts> = LazyLock::new(|| QueueScripts {
    release: LuaScript::new(FAIR_RELEASE_SCRIPT),
    acquire: LuaScript::new(QUEUED_ACQUIRE_SCRIPT),
    len: LuaScript::new(QUEUE_LEN_SCRIPT),
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RELEASE_SCRIPT;

    /// The fair release starts with seed 000's compare-and-delete, unchanged.
    #[test]
    fn the_fair_release_begins_with_the_seed_check() {
        let seed_check = RELEASE_SCRIPT.lines().nth(1).unwrap_or_default();
        let body = FAIR_RELEASE_SCRIPT.split("\nlocal released = 0\n").nth(1).unwrap_or_default();
        assert_eq!(body.lines().next(), Some(seed_check));
        assert!(body.contains(r#"released = redis.call("del", KEYS[1])"#));
    }
}
