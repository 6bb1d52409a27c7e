//! The Lua scripts of lock groups (see the crate README, "Lock groups", for the key
//! layout). A leaf beside `scripts`: it only borrows its `EVALSHA`/`EVAL` runner.
//!
//! Every script that decides expiry reads the server's clock (`TIME`, in milliseconds);
//! Redis 5 and later replicate a script's effects, not the script, so reading the clock
//! before writing is allowed and replicas see the same writes. The release needs no
//! clock: the group's lease key says whether its holds are live. Needs Redis 6.2
//! (`GETDEL`, `SET … PXAT`).
//!
//! Per name `N` (the *stem* is `{prefix}:group:{N'}`, `N'` the name with `%`, `{` and `}`
//! percent-encoded, so every key of a name shares one hash tag): `stem:s`, a **string**: the
//! token of the holder that found the name free (`+token` for a shared hold), expiring with
//! that hold (a grant of free names writes only these: one `SET … PX` per name, as a single
//! lock); and `stem:h`, one sorted set of everything else a name has but its permits, in
//! score bands of `B` = 10^13 ms (year
//! 2286): shared holds `[0, B)` and exclusive holds `[B, 2B)` (member = the group's token,
//! score = band + expiry), the places of waiting groups — exclusive `[2B, 3B)` and shared
//! `[4B, 5B)` (member = token, score = band + place expiry) — and their tickets
//! `[3B, 4B)` (member = `#token`, score = band + ticket);
//! so one `ZCOUNT` (and the `s` holder) counts the live holders of a mode, one `ZSCORE`
//! tells what a token has on the name, and a grant's `ZADD` replaces the group's own intent.
//! Scripts that take names get every `h`, then every `s` (`KEYS[… + i]`, `KEYS[… + n + i]`). `stem:p`, hash of the
//! permits (`shared`, `exclusive`). Per granted group: its **lease key**
//! `{prefix}:group-lease:<token>` (on Redis Cluster `{prefix}:group-lease:{<tag>}:<token>`),
//! a string `name \n name … \n\n owner \n fence \n expiry` (expiry `-` for a group granted
//! in strings: its holds are its names' `s`, which stay its own while the lease lives) that
//! expires with the group's holds (`PX` ttl at the grant, again at every extension): whether it still exists is
//! whether the group is live, and it names the group's owner for `release_owner` (a `SCAN`
//! of the lease keys) and `holders`. A group that expires leaves nothing to clean up.
//!
//! Costs, in `redis.call`s and arguments (a `redis.call` costs about as much on the server
//! as a whole command sent by a client, an argument about a third of that, so both are kept
//! few): an acquire of free names is one `EXISTS` over the names, one `SET … PX` per name
//! and the lease key's `SET … PX`, with no clock read (a held name costs `TIME` and a
//! `ZADD` per name, and the checks). A release is the lease key's `GETDEL` (live or not),
//! one `GETDEL` of `s` or `ZREM` from `h` per name (of the token's hold, or, for a group
//! without a lease key, of its place and ticket) and one `PUBLISH` — no
//! `TIME`, no score read; the message is the names' `h` keys joined by newlines (`KEYS` as
//! they are). Key expiries of the names only grow: a write that needs a key to live `ttl`
//! more reads its `PTTL` and, when shorter, sets it to `2 × ttl` (so the next writes of the
//! same TTL within `ttl` leave it alone). Nothing sets an expiry on release: keys only
//! shrink, and an emptied key is gone.

use std::sync::LazyLock;

use crate::scripts::LuaScript;

/// Helpers every group script that reads the clock starts with: the score bands and
/// `now`, the server's time in ms.
///
/// Scores and bounds are passed as text (Redis formats every number argument with
/// `%.17g`), made with `fmt(ms)` (`string.format("%d")`, half the cost of `tostring`'s
/// `%.14g`). The current time in ms has 13 digits (2001–2286), so the scores of a band are
/// its digit followed by the 13-digit expiry: shared `<expiry>`, exclusive `1<expiry>`,
/// intents `2<expiry>`.
macro_rules! prelude {
    () => {
        concat!(
            bands!(),
            r##"
local clock = redis.call("TIME")
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
"##
        )
    };
}

/// The score bands alone (the acquire reads the clock only when it needs it).
macro_rules! bands {
    () => {
        r##"
-- Score bands of `stem:h`: shared holds [0, B), exclusive holds [B, 2B), exclusive places
-- [2B, 3B), the places' tickets [3B, 4B), shared places [4B, 5B).
local B = 10000000000000
local INTENTS = 2 * B
local SHARED_INTENTS = 4 * B
"##
    };
}

/// `fmt(ms)`: a number as text, `string.format("%d")`.
macro_rules! fmt {
    () => {
        r##"
local function fmt(ms)
    return string.format("%d", ms)
end
"##
    };
}

/// `holder_of(value)`: a name's `s` value → the holder's token and whether its hold is
/// shared (`+token`).
macro_rules! holder_of {
    () => {
        r##"
local function holder_of(value)
    if string.byte(value, 1) == 43 then
        return string.sub(value, 2), true
    end
    return value, false
end
"##
    };
}

/// `keep(key, ttl, ttl2)`: makes `key` live at least `ttl` ms more, never shortening it:
/// when shorter, sets it to `ttl2` = 2 × ttl (text; made from `ttl` when not given).
/// Returns whether it did. An assignment to a `local keep` the script declares (the
/// acquire makes the closure only when a name is held), after `fmt`.
macro_rules! keep {
    () => {
        r##"
keep = function(key, ttl, ttl2)
    if redis.call("PTTL", key) < ttl then
        redis.call("PEXPIRE", key, ttl2 or fmt(2 * ttl))
        return true
    end
    return false
end
"##
    };
}

/// `parse_entry(entry)`: a lease key's value `name \n name … \n\n owner \n fence \n
/// expiry` (names have no control characters and are never empty, so `\n\n` ends them)
/// → the names (one string), owner, fence, expiry.
macro_rules! parse_entry {
    () => {
        r##"
local function parse_entry(entry)
    local names, owner, fence, expiry = string.match(entry, "^(.-)\n\n([^\n]*)\n([^\n]*)\n([^\n]*)$")
    return names or "", owner or "", fence or "0", expiry or "0"
end
"##
    };
}

/// Acquire: one atomic attempt at every member, or a read-only probe of whether the
/// request could be granted now.
///
/// `KEYS` = the group's lease key, the fence counter (fencing mode only), then every
/// member's `h`, then every member's `s` (its permits hash `p`, read only when the name is
/// held, is found beside `h`: the same stem, so the same hash tag and slot). `ARGV` = token,
/// `name \n name … \n\n owner` (the lease key's value without its fence and expiry), ttl
/// ms, the *flags* — the mode (`F`: grant with a fence, `N`: grant without, `P`: probe,
/// writes nothing), the members' modes as one letter each (`S` or `X`, in `KEYS` order) and, for a waiting group, `intent ttl:2 × intent ttl:ticket` (each part may be empty:
/// no intents, no ticket yet; `:b` after it when barging), say `NXS` or `NXS30000:60000:`
/// — then, only when some member has default permits, each member's default permits
/// (`""`: unlimited). Every argument costs the server about a third of a `redis.call`
/// (the script's `KEYS` and `ARGV` tables are built anew for each call), so there are few.
/// Returns the fence (0 without fencing, and for a probe that could be granted) or, when
/// blocked, minus the ticket.
const ACQUIRE: &str = concat!(
    bands!(),
    r##"
local token = ARGV[1]
local ttl = tonumber(ARGV[3])
-- ARGV[4]: the mode letter, one letter per member (`S` or `X`; member i's at byte
-- `1 + i`), then the waiting part, if any. Letters are compared as bytes: `F` 70, `P` 80,
-- `X` 88.
local flags = ARGV[4]
local mode = string.byte(flags, 1)
local hs = mode == 70 and 2 or 1 -- KEYS[hs + i]: member i's `h`; KEYS[hs + n + i]: its `s`
local n = (#KEYS - hs) / 2
local intent_ttl, intent_ttl2, ticket_s, barging = "", "", "", ""
if #flags > n + 1 then
    intent_ttl, intent_ttl2, ticket_s, barging = string.match(flags, "^(%d*):(%d*):(%d*):?(b?)$", n + 2)
end
-- A first attempt (no ticket) comes after every intent already recorded, even one
-- recorded in the same millisecond; a waiting group's retries compare tickets strictly,
-- so the oldest waiting group is never held back by an intent.
local first_attempt = ticket_s == ""

-- `sizes[i]`: the entries of member i's `h`, read when some name is held (a grant of free
-- names needs none).
local sizes = nil
-- `now` as text: only a held name needs it (bounds, tickets); so does `keep`, made with
-- `fmt` only then (a grant of free names formats its numbers itself).
local now_s = nil
local keep
-- Every name free (no `h`, no `s`): the grant writes each name's `s`, with no clock read.
local free = redis.call("EXISTS", unpack(KEYS, hs + 1, hs + 2 * n)) == 0
local now = 0
if not free then
    local clock = redis.call("TIME")
    now = clock[1] * 1000 + math.floor(clock[2] / 1000)
"##,
    fmt!(),
    keep!(),
    holder_of!(),
    r##"
    now_s = fmt(now)
    if first_attempt then
        ticket_s = now_s
    end
    -- Member i's `s` read once: the token of the holder that took the name free (nil: none)
    -- and whether that hold is shared (the value begins with `+`).
    local string_holder, string_shared = {}, {}
    -- Live holds of band `prefix` (`""` shared, `1` exclusive) on member i's name other
    -- than this token's: in `h`, and the one `s` records.
    local function others(i, prefix, floor)
        local h = KEYS[hs + i]
        local held = redis.call("ZCOUNT", h, "(" .. prefix .. now_s, "(" .. (prefix == "" and "1" or "2") .. "0000000000000")
        if held > 0 then
            local own = tonumber(redis.call("ZSCORE", h, token))
            if own and own > floor + now and own < floor + B then
                held = held - 1
            end
        end
        local holder = string_holder[i]
        if holder and holder ~= token and string_shared[i] == (prefix == "") then
            held = held + 1
        end
        return held
    end

    -- The live places of other groups with an older ticket (or, on a first attempt, any
    -- ticket up to now) on the name count as holders of their mode: nil when one is of
    -- the other mode than `exclusive`, else how many of the same mode there are. Tickets
    -- are the `#token` entries; a token's place is its entry in the intent bands.
    local function ahead(h, exclusive)
        local older = redis.call("ZRANGEBYSCORE", h, "30000000000000", first_attempt and "(40000000000000" or "(3" .. ticket_s)
        local same = 0
        for _, entry in ipairs(older) do
            local other = string.sub(entry, 2)
            if other ~= token then
                local place = tonumber(redis.call("ZSCORE", h, other))
                if place and place > INTENTS + now and place < 3 * B then
                    if not exclusive then
                        return nil
                    end
                    same = same + 1
                elseif place and place > SHARED_INTENTS + now and place < 5 * B then
                    if exclusive then
                        return nil
                    end
                    same = same + 1
                end
            end
        end
        return same
    end

    -- Whether member i's name admits it now (reads only).
    local function grantable(i)
        -- The permits hash `stem:p` beside `stem:h` (same hash tag, same slot): read only
        -- when a name is held, so it is not an argument of every attempt.
        local h = KEYS[hs + i]
        local p = string.sub(h, 1, -2) .. "p"
        local exclusive, default = string.byte(flags, 1 + i) == 88, ARGV[4 + i] or ""
        local mine, floor, other, field = "", 0, "1", "shared"
        if exclusive then
            mine, floor, other, field = "1", B, "", "exclusive"
        end
        if others(i, other, B - floor) > 0 then
            return false
        end
        local queued = ahead(h, exclusive)
        if queued == nil then
            return false
        end
        local held = others(i, mine, floor) + queued
        if default == "" then
            -- Unlimited unless the permits hash says otherwise.
            local permits = redis.call("HGET", p, field)
            if permits and held + 1 > tonumber(permits) then
                return false
            end
        elseif held > 0 and held + 1 > tonumber(redis.call("HGET", p, field) or default) then
            -- Permits are at least 1 (`set_permits` refuses 0): a name without another
            -- live holder or older place of the mode admits one whatever they say.
            return false
        end
        return true
    end

    sizes = {}
    local blocked = false
    for i = 1, n do
        sizes[i] = redis.call("ZCARD", KEYS[hs + i])
        local holder = redis.call("GET", KEYS[hs + n + i])
        if holder then
            string_holder[i], string_shared[i] = holder_of(holder)
        end
        if not blocked and (sizes[i] > 0 or holder) and not grantable(i) then
            blocked = true
        end
    end

    if blocked then
        if mode ~= 80 and intent_ttl ~= "" then
            if first_attempt then
                -- The ticket: now, or one more than the last ticket on its names when that
                -- is larger, so that a group blocked after another, even within one
                -- millisecond, stays behind it at every later attempt.
                local ticket = now
                for i = 1, n do
                    local last = redis.call("ZREVRANGEBYSCORE", KEYS[hs + i], "(40000000000000", "30000000000000", "WITHSCORES", "LIMIT", "0", "1")
                    if last[2] and tonumber(last[2]) - 3 * B >= ticket then
                        ticket = tonumber(last[2]) - 3 * B + 1
                    end
                end
                ticket_s = fmt(ticket)
            end
            local until_s = fmt(now + tonumber(intent_ttl))
            for i = 1, n do
                local exclusive = string.byte(flags, 1 + i) == 88
                if exclusive or barging == "" then
                    local h = KEYS[hs + i]
                    local place = (exclusive and "2" or "4") .. until_s
                    redis.call("ZADD", h, place, token, "3" .. ticket_s, "#" .. token)
                    -- Places that ran out, a bounded number per attempt, with their tickets.
                    local dead = redis.call("ZRANGEBYSCORE", h, "20000000000000", "2" .. now_s, "LIMIT", "0", "8")
                    local dead_shared = redis.call("ZRANGEBYSCORE", h, "40000000000000", "4" .. now_s, "LIMIT", "0", "8")
                    for _, other in ipairs(dead) do
                        redis.call("ZREM", h, other, "#" .. other)
                    end
                    for _, other in ipairs(dead_shared) do
                        redis.call("ZREM", h, other, "#" .. other)
                    end
                    keep(h, tonumber(intent_ttl), intent_ttl2)
                end
            end
        end
        return -tonumber(ticket_s)
    end
end
if mode == 80 then
    return 0
end

local fence = 0
if mode == 70 then
    fence = redis.call("INCR", KEYS[2])
end
local fence_s = fence == 0 and "0" or string.format("%d", fence)
if free then
    -- Each name's `s`: the token (`+token` for a shared member), expiring with the hold
    -- (one `SET` each, as a single-key lock); the lease's expiry is `-`: its own `PTTL`
    -- tells it.
    for i = 1, n do
        redis.call("SET", KEYS[hs + n + i], string.byte(flags, 1 + i) == 88 and token or "+" .. token, "PX", ARGV[3])
    end
    redis.call("SET", KEYS[1], ARGV[2] .. "\n" .. fence_s .. "\n-", "PX", ARGV[3])
    return fence
end
local expiry_s = string.format("%d", now + ttl)
for i = 1, n do
    local h = KEYS[hs + i]
    -- Replaces this token's intent on the name, if it had one.
    redis.call("ZADD", h, string.byte(flags, 1 + i) == 88 and "1" .. expiry_s or expiry_s, token)
    if sizes[i] > 0 then
        -- Expired holds of the mode, and this token's ticket.
        if string.byte(flags, 1 + i) == 88 then
            redis.call("ZREMRANGEBYSCORE", h, "10000000000000", "1" .. now_s)
        else
            redis.call("ZREMRANGEBYSCORE", h, "-inf", now_s)
        end
        if not first_attempt then
            redis.call("ZREM", h, "#" .. token)
        end
        keep(h, ttl)
    else
        -- A new key: it expires with this hold (a later grant extends it when needed).
        redis.call("PEXPIRE", h, ARGV[3])
    end
end
-- The group's lease: expires with its holds.
redis.call("SET", KEYS[1], ARGV[2] .. "\n" .. fence_s .. "\n" .. expiry_s, "PX", ARGV[3])
return fence
"##
);

/// Extend: every member still held (unexpired) by the token gets `ttl` from now, and so
/// does the group's lease key; an expired member is never revived, and a group whose lease
/// key is gone (released or expired) is not extended at all.
///
/// `KEYS[1]` = the group's lease key; then every name's `h`, then every name's `s`.
/// `ARGV` = token, ttl ms, 2 × ttl ms.
/// Returns how many members were extended.
const EXTEND: &str = concat!(
    prelude!(),
    fmt!(),
    "local keep\n",
    keep!(),
    parse_entry!(),
    r##"
local entry = redis.call("GET", KEYS[1])
if not entry then
    return 0
end
local token = ARGV[1]
local ttl, ttl2 = tonumber(ARGV[2]), ARGV[3]
local expiry_s = fmt(now + ttl)
local extended = 0
-- Granted as strings (the lease's expiry is `-`): each hold is in the name's `s`.
local strings = string.byte(entry, -1) == 45
local n = (#KEYS - 1) / 2
for i = 1, n do
    local h, s = KEYS[1 + i], KEYS[1 + n + i]
    if strings then
        local holder = redis.call("GET", s)
        if holder == token or holder == "+" .. token then
            redis.call("PEXPIRE", s, ARGV[2])
            extended = extended + 1
        end
    else
        local score = tonumber(redis.call("ZSCORE", h, token))
        if score and score < INTENTS and score % B > now then
            redis.call("ZADD", h, "XX", (score >= B and "1" or "") .. expiry_s, token)
            keep(h, ttl, ttl2)
            extended = extended + 1
        end
    end
end
if extended > 0 then
    if strings then
        -- Granted as strings (expiry `-`): the value stays.
        redis.call("PEXPIRE", KEYS[1], ARGV[2])
    else
        -- The value with its last line, the expiry, replaced.
        redis.call("SET", KEYS[1], string.match(entry, "^(.*\n)") .. expiry_s, "PX", ARGV[2])
    end
end
return extended
"##
);

/// Release: removes the token's holds and places (with their tickets) from every name,
/// publishes the names' `h` keys when it changed anything (one message, the keys joined
/// by newlines; a name whose hold had expired is named too, and its waiters merely look
/// again), and deletes the group's lease key — or, when only some of its names are
/// released, keeps it for the others.
///
/// `KEYS[1]` = the group's lease key; then every name's `h`, then every name's `s`. `ARGV` =
/// token, channel (`""`: do not publish), the names each followed by a newline and one more
/// newline (the lease value's beginning when they are all its names). Returns how many
/// live holds were freed: a hold is live while the lease key exists.
const RELEASE: &str = concat!(
    r##"
local token, channel = ARGV[1], ARGV[2]
-- KEYS[1 + i]: name i's `h`, KEYS[1 + n + i]: its `s`.
local n = (#KEYS - 1) / 2
local entry = redis.call("GETDEL", KEYS[1])
local freed, changed = 0, false
if not entry then
    -- No live group: the token may have places, each with its ticket (2 removed), or
    -- expired holds (1 removed: nothing changes for anyone). An `s` is another group's.
    for i = 1, n do
        if redis.call("ZREM", KEYS[1 + i], token, "#" .. token) == 2 then
            changed = true
        end
    end
else
    -- A live group holds each of its names (its grant replaced its places and removed
    -- their tickets): in `h`, or, granted as strings (the lease's expiry is `-`), in `s`,
    -- which is then its own (`token`, `+token` when shared) for as long as the lease lives.
    local strings = string.byte(entry, -1) == 45
    local whole = string.sub(entry, 1, #ARGV[3]) == ARGV[3]
    -- For a part release of a group in strings: what a released name had left.
    local left_ms = nil
    for i = 1, n do
        if strings then
            local s = KEYS[1 + n + i]
            -- All the group's names (the lease value begins with them, the common case):
            -- `s` is the group's. Some: only a name of the group is.
            local held = redis.call(whole and "GETDEL" or "GET", s)
            if held == token or held == "+" .. token then
                if not whole then
                    left_ms = left_ms or math.max(redis.call("PTTL", s), 1)
                    redis.call("DEL", s)
                end
                freed = freed + 1
            end
        elseif redis.call("ZREM", KEYS[1 + i], token) == 1 then
            freed = freed + 1
        end
    end
    if not whole then
        -- Some of the group's names: the others keep their lease, to the same expiry (the
        -- lease value's, or what a released name had left).
"##,
    parse_entry!(),
    r##"
        local names, owner, fence, expiry = parse_entry(entry)
        local expire, at = "PXAT", expiry
        if strings then
            expire, at = "PX", left_ms
        end
        local released, left = {}, {}
        for name in string.gmatch(ARGV[3], "[^\n]+") do
            released[name] = true
        end
        for name in string.gmatch(names, "[^\n]+") do
            if not released[name] then
                left[#left + 1] = name
            end
        end
        -- (A group granted as strings none of whose names was released keeps no lease:
        -- its expiry is unknown; its holds end with their TTL, and extending it fails.)
        if #left > 0 and at then
            redis.call("SET", KEYS[1], table.concat(left, "\n") .. "\n\n" .. owner .. "\n" .. fence .. "\n" .. expiry, expire, at)
        end
    end
end
if (freed > 0 or changed) and channel ~= "" then
    redis.call("PUBLISH", channel, table.concat(KEYS, "\n", 2, n + 1))
end
return freed
"##
);

/// Withdraw intents: a waiting group gave up.
///
/// `KEYS` = per name `h`. `ARGV` = token, channel (`""`: do not publish).
/// Returns how many intents were removed.
const WITHDRAW: &str = concat!(
    bands!(),
    r##"
local token, channel = ARGV[1], ARGV[2]
local removed = {}
for i = 1, #KEYS do
    local score = tonumber(redis.call("ZSCORE", KEYS[i], token))
    if score and score >= INTENTS then
        redis.call("ZREM", KEYS[i], token, "#" .. token)
        removed[#removed + 1] = KEYS[i]
    end
end
if #removed > 0 and channel ~= "" then
    redis.call("PUBLISH", channel, table.concat(removed, "\n"))
end
return #removed
"##
);

/// Holders of one name, read only: `{mode, token, ms left, fence, owner}` per live holder.
///
/// `KEYS` = h, s. `ARGV` = the beginning of the lease keys (the lease key without the
/// token), which share the slot of `h` on Redis Cluster.
const HOLDERS: &str = concat!(
    prelude!(),
    fmt!(),
    parse_entry!(),
    holder_of!(),
    r##"
local now_s = fmt(now)
local out, leases = {}, {}
local holder = redis.call("GET", KEYS[2])
if holder then
    -- The holder that took the name free, expiring with its hold.
    local token, shared = holder_of(holder)
    out[1] = { shared and "S" or "X", token, redis.call("PTTL", KEYS[2]), "0", "" }
    leases[1] = ARGV[1] .. token
end
for _, band in ipairs({ { "S", 0, "(" .. now_s, "(10000000000000" }, { "X", B, "(1" .. now_s, "(20000000000000" } }) do
    local live = redis.call("ZRANGEBYSCORE", KEYS[1], band[3], band[4], "WITHSCORES")
    for i = 1, #live, 2 do
        out[#out + 1] = { band[1], live[i], tonumber(live[i + 1]) - band[2] - now, "0", "" }
        leases[#leases + 1] = ARGV[1] .. live[i]
    end
end
for i = 1, #leases, 500 do
    local last = math.min(i + 499, #leases)
    local entries = redis.call("MGET", unpack(leases, i, last))
    for j = i, last do
        local entry = entries[j - i + 1]
        if entry then
            local _, owner, fence = parse_entry(entry)
            out[j][4], out[j][5] = fence, owner
        end
    end
end
return out
"##
);

/// The live places (of waiting groups) on one name, read only. `KEYS` = h.
const WAITING: &str = concat!(
    prelude!(),
    fmt!(),
    r##"
local now_s = fmt(now)
return redis.call("ZCOUNT", KEYS[1], "(2" .. now_s, "(30000000000000")
    + redis.call("ZCOUNT", KEYS[1], "(4" .. now_s, "(50000000000000")
"##
);

/// The group scripts, hashed once per process.
#[derive(Debug)]
pub(crate) struct GroupScripts {
    pub(crate) acquire: LuaScript,
    pub(crate) extend: LuaScript,
    pub(crate) release: LuaScript,
    pub(crate) withdraw: LuaScript,
    pub(crate) holders: LuaScript,
    pub(crate) waiting: LuaScript,
}

pub(crate) static GROUP_SCRIPTS: LazyLock<GroupScripts> = LazyLock::new(|| GroupScripts {
    acquire: LuaScript::new(ACQUIRE),
    extend: LuaScript::new(EXTEND),
    release: LuaScript::new(RELEASE),
    withdraw: LuaScript::new(WITHDRAW),
    holders: LuaScript::new(HOLDERS),
    waiting: LuaScript::new(WAITING),
});
