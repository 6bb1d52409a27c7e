//! The Lua scripts of lock groups (see the crate README, "Lock groups", for the key
//! layout). A leaf beside `scripts`: it only borrows its `EVALSHA`/`EVAL` runner.
//!
//! Every script reads the server's clock (`TIME`, in milliseconds) and decides expiry by
//! it; Redis 5 and later replicate a script's effects, not the script, so reading the
//! clock before writing is allowed and replicas see the same writes.
//!
//! Per name `N` (the *stem* is `{prefix}:group:{N'}`, `N'` the name with `%`, `{` and `}`
//! percent-encoded, so every key of a name shares one hash tag):
//! `stem:r` / `stem:w` sorted sets of shared / exclusive holders (member token, score
//! expiry in ms), `stem:q` writer intents (member token, score expiry), `stem:t` hash of
//! the intents' tickets, `stem:p` hash of the permits (`shared`, `exclusive`). Per store:
//! `{prefix}:group-holds` (sorted set, token → latest expiry of the group),
//! `{prefix}:group-index` (hash, token → `fence \n owner \n name \n name …`),
//! `{prefix}:group-owners` (sorted set of `owner \n token`, all scores 0, read by lex range).

use std::sync::LazyLock;

use crate::scripts::LuaScript;

/// Helpers every group script starts with.
macro_rules! prelude {
    () => {
        r#"
local function now_ms()
    local t = redis.call("TIME")
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A sorted set of leases expires with its last lease (an empty one is gone already).
local function expire_with_last(key)
    local last = redis.call("ZRANGE", key, -1, -1, "WITHSCORES")
    if last[2] then
        redis.call("PEXPIREAT", key, last[2])
        return tonumber(last[2])
    end
    return nil
end

-- The tickets hash lives as long as the intents it describes.
local function expire_intents(q, t)
    local last = expire_with_last(q)
    if last then
        redis.call("PEXPIREAT", t, last)
    else
        redis.call("DEL", t)
    end
end

-- The per-store index keys expire with the latest group lease.
local function expire_index(holds, index, owners)
    local last = expire_with_last(holds)
    if last then
        redis.call("PEXPIREAT", index, last)
        redis.call("PEXPIREAT", owners, last)
    else
        redis.call("DEL", index, owners)
    end
end

local function hdel_all(key, fields)
    for i = 1, #fields, 500 do
        redis.call("HDEL", key, unpack(fields, i, math.min(i + 499, #fields)))
    end
end

-- Drops expired holders and intents of one name.
local function purge(r, w, q, t, now)
    redis.call("ZREMRANGEBYSCORE", r, "-inf", now)
    redis.call("ZREMRANGEBYSCORE", w, "-inf", now)
    local dead = redis.call("ZRANGEBYSCORE", q, "-inf", now)
    if #dead > 0 then
        redis.call("ZREMRANGEBYSCORE", q, "-inf", now)
        hdel_all(t, dead)
    end
end

-- `fence \n owner \n name …` → fence, owner, names.
local function parse_entry(entry)
    local fields = {}
    for field in string.gmatch(entry, "[^\n]+") do
        fields[#fields + 1] = field
    end
    local names = {}
    for i = 3, #fields do
        names[#names + 1] = fields[i]
    end
    return fields[1], fields[2], names
end

-- Forgets groups whose every lease ended without a release (a bounded number per call).
local function forget_expired_groups(holds, index, owners, now)
    local stale = redis.call("ZRANGEBYSCORE", holds, "-inf", now, "LIMIT", 0, 16)
    for _, token in ipairs(stale) do
        local entry = redis.call("HGET", index, token)
        if entry then
            local _, owner = parse_entry(entry)
            redis.call("ZREM", owners, owner .. "\n" .. token)
            redis.call("HDEL", index, token)
        end
        redis.call("ZREM", holds, token)
    end
end
"#
    };
}

/// Acquire: one atomic attempt at every member.
///
/// `KEYS[1..4]` = holds, index, owners, fence counter; then per member `r, w, q, t, p`.
/// `ARGV` = token, owner, ttl ms, intent ttl ms (`""`: none), ticket (`""`: now),
/// fencing (`1`/`0`), member count, then per member: mode (`S`/`X`), default permits
/// (`""`: unlimited), name.
/// Returns `{1, fence}` (fence 0 without fencing) or `{0, ticket}`.
const ACQUIRE: &str = concat!(
    prelude!(),
    r#"
local now = now_ms()
local token, owner = ARGV[1], ARGV[2]
local ttl = tonumber(ARGV[3])
-- A first attempt (no ticket) comes after every intent already recorded, even one
-- recorded in the same millisecond; a waiting group's retries compare tickets strictly,
-- so the oldest waiting group is never held back by an intent.
local ticket = tonumber(ARGV[5])
local first_attempt = ticket == nil
ticket = ticket or now
local n = tonumber(ARGV[7])
local holds, index, owners = KEYS[1], KEYS[2], KEYS[3]
forget_expired_groups(holds, index, owners, now)

local function member(i)
    local k, a = 4 + (i - 1) * 5, 7 + (i - 1) * 3
    local m = { r = KEYS[k + 1], w = KEYS[k + 2], q = KEYS[k + 3], t = KEYS[k + 4], p = KEYS[k + 5],
        exclusive = ARGV[a + 1] == "X", default = ARGV[a + 2], name = ARGV[a + 3] }
    if m.exclusive then
        m.mine, m.other, m.field = m.w, m.r, "exclusive"
    else
        m.mine, m.other, m.field = m.r, m.w, "shared"
    end
    return m
end

-- Live entries of `set` other than this token (the set is purged).
local function others(set)
    local count = redis.call("ZCARD", set)
    if redis.call("ZSCORE", set, token) then
        count = count - 1
    end
    return count
end

local function grantable(m)
    purge(m.r, m.w, m.q, m.t, now)
    if others(m.other) > 0 then
        return false
    end
    local permits = redis.call("HGET", m.p, m.field) or m.default
    if permits ~= "" and others(m.mine) + 1 > tonumber(permits) then
        return false
    end
    if not m.exclusive then
        -- Writer preference: intents of other groups that started waiting before this one.
        for _, other in ipairs(redis.call("ZRANGE", m.q, 0, -1)) do
            local started = tonumber(redis.call("HGET", m.t, other))
            if other ~= token and started and (started < ticket or (first_attempt and started == ticket)) then
                return false
            end
        end
    end
    return true
end

local members, blocked = {}, false
for i = 1, n do
    members[i] = member(i)
    if not blocked and not grantable(members[i]) then
        blocked = true
    end
end

if blocked then
    if ARGV[4] ~= "" then
        local intent_expiry = now + tonumber(ARGV[4])
        for _, m in ipairs(members) do
            if m.exclusive then
                redis.call("ZADD", m.q, intent_expiry, token)
                redis.call("HSET", m.t, token, ticket)
                expire_intents(m.q, m.t)
            end
        end
    end
    return { 0, ticket }
end

local fence = 0
if ARGV[6] == "1" then
    fence = redis.call("INCR", KEYS[4])
end
local expiry = now + ttl
local names = {}
for i, m in ipairs(members) do
    redis.call("ZADD", m.mine, expiry, token)
    expire_with_last(m.mine)
    if redis.call("ZREM", m.other, token) == 1 then
        expire_with_last(m.other)
    end
    if redis.call("ZREM", m.q, token) == 1 then
        redis.call("HDEL", m.t, token)
        expire_intents(m.q, m.t)
    end
    names[i] = m.name
end
redis.call("HSET", index, token, fence .. "\n" .. owner .. "\n" .. table.concat(names, "\n"))
local previous = tonumber(redis.call("ZSCORE", holds, token))
redis.call("ZADD", holds, math.max(expiry, previous or 0), token)
redis.call("ZADD", owners, 0, owner .. "\n" .. token)
expire_index(holds, index, owners)
return { 1, fence }
"#
);

/// Extend: every member still held (unexpired) by the token gets `ttl` from now; an
/// expired member is never revived.
///
/// `KEYS[1..3]` = holds, index, owners; then per name `r, w`. `ARGV` = token, ttl ms.
/// Returns how many members were extended.
const EXTEND: &str = concat!(
    prelude!(),
    r#"
local now = now_ms()
local token = ARGV[1]
local expiry = now + tonumber(ARGV[2])
local extended = 0
for i = 4, #KEYS do
    local score = redis.call("ZSCORE", KEYS[i], token)
    if score and tonumber(score) > now then
        redis.call("ZADD", KEYS[i], "XX", expiry, token)
        expire_with_last(KEYS[i])
        extended = extended + 1
    end
end
if extended > 0 then
    local previous = redis.call("ZSCORE", KEYS[1], token)
    if previous and tonumber(previous) < expiry then
        redis.call("ZADD", KEYS[1], "XX", expiry, token)
        expire_index(KEYS[1], KEYS[2], KEYS[3])
    end
end
return extended
"#
);

/// Release: removes the token's holds and intents from every name, publishes each name
/// whose holders or intents changed, and updates the index.
///
/// `KEYS[1..3]` = holds, index, owners; then per name `r, w, q, t`. `ARGV` = token,
/// channel (`""`: do not publish), owner (`""`: unknown; used when the index has no entry),
/// then per name: its stem (the published message) and its name.
/// Returns how many unexpired holds were freed.
const RELEASE: &str = concat!(
    prelude!(),
    r#"
local now = now_ms()
local token, channel, owner_hint = ARGV[1], ARGV[2], ARGV[3]
local holds, index, owners = KEYS[1], KEYS[2], KEYS[3]
local freed, released = 0, {}
for i = 0, (#KEYS - 3) / 4 - 1 do
    local k = 4 + i * 4
    local changed = false
    for _, set in ipairs({ KEYS[k], KEYS[k + 1] }) do
        local score = redis.call("ZSCORE", set, token)
        if score then
            redis.call("ZREM", set, token)
            expire_with_last(set)
            if tonumber(score) > now then
                freed = freed + 1
                changed = true
            end
        end
    end
    if redis.call("ZREM", KEYS[k + 2], token) == 1 then
        redis.call("HDEL", KEYS[k + 3], token)
        expire_intents(KEYS[k + 2], KEYS[k + 3])
        changed = true
    end
    released[ARGV[5 + i * 2]] = true
    if changed and channel ~= "" then
        redis.call("PUBLISH", channel, ARGV[4 + i * 2])
    end
end

local entry = redis.call("HGET", index, token)
if entry then
    local fence, owner, names = parse_entry(entry)
    local left = {}
    for _, name in ipairs(names) do
        if not released[name] then
            left[#left + 1] = name
        end
    end
    if #left == 0 then
        redis.call("HDEL", index, token)
        redis.call("ZREM", owners, owner .. "\n" .. token)
        redis.call("ZREM", holds, token)
    else
        redis.call("HSET", index, token, fence .. "\n" .. owner .. "\n" .. table.concat(left, "\n"))
    end
else
    if owner_hint ~= "" then
        redis.call("ZREM", owners, owner_hint .. "\n" .. token)
    end
    redis.call("ZREM", holds, token)
end
expire_index(holds, index, owners)
return freed
"#
);

/// Withdraw intents: a waiting group gave up.
///
/// `KEYS` = per name `q, t`. `ARGV` = token, channel (`""`: do not publish), then per
/// name its stem. Returns how many intents were removed.
const WITHDRAW: &str = concat!(
    prelude!(),
    r#"
local token, channel = ARGV[1], ARGV[2]
local removed = 0
for i = 0, #KEYS / 2 - 1 do
    local q, t = KEYS[1 + i * 2], KEYS[2 + i * 2]
    if redis.call("ZREM", q, token) == 1 then
        redis.call("HDEL", t, token)
        expire_intents(q, t)
        removed = removed + 1
        if channel ~= "" then
            redis.call("PUBLISH", channel, ARGV[3 + i])
        end
    end
end
return removed
"#
);

/// Holders of one name, read only: `{mode, token, ms left, fence, owner}` per live holder.
///
/// `KEYS` = index, r, w.
const HOLDERS: &str = concat!(
    prelude!(),
    r#"
local now = now_ms()
local out = {}
for _, pair in ipairs({ { "S", KEYS[2] }, { "X", KEYS[3] } }) do
    local live = redis.call("ZRANGEBYSCORE", pair[2], "(" .. now, "+inf", "WITHSCORES")
    for i = 1, #live, 2 do
        local token = live[i]
        local fence, owner = "0", ""
        local entry = redis.call("HGET", KEYS[1], token)
        if entry then
            fence, owner = parse_entry(entry)
        end
        out[#out + 1] = { pair[1], token, tonumber(live[i + 1]) - now, fence, owner }
    end
end
return out
"#
);

/// Whether every name is idle (no live holder, no live intent), read only: a waiter for
/// such a group need not wait. `KEYS` = per name `r, w, q`. Returns 1 or 0.
const IDLE: &str = concat!(
    prelude!(),
    r#"
local now = now_ms()
for i = 1, #KEYS do
    if redis.call("ZCOUNT", KEYS[i], "(" .. now, "+inf") > 0 then
        return 0
    end
end
return 1
"#
);

/// The group scripts, hashed once per process.
#[derive(Debug)]
pub(crate) struct GroupScripts {
    pub(crate) acquire: LuaScript,
    pub(crate) extend: LuaScript,
    pub(crate) release: LuaScript,
    pub(crate) withdraw: LuaScript,
    pub(crate) holders: LuaScript,
    pub(crate) idle: LuaScript,
}

pub(crate) static GROUP_SCRIPTS: LazyLock<GroupScripts> = LazyLock::new(|| GroupScripts {
    acquire: LuaScript::new(ACQUIRE),
    extend: LuaScript::new(EXTEND),
    release: LuaScript::new(RELEASE),
    withdraw: LuaScript::new(WITHDRAW),
    holders: LuaScript::new(HOLDERS),
    idle: LuaScript::new(IDLE),
});
