-- Acquire: one atomic attempt at every member of a lock group, or a probe of whether the
-- request could be granted now (the key layout: distlock-redis/src/commands/group.rs).
--
-- KEYS = the group's lease key, the fence counter (modes `C` and `F` only), then every
-- member's `h`, then every member's `s` (its permits hash `p`, read only when the name is
-- held, is found beside `h`: the same stem, so the same hash tag and slot; so is a blocking
-- name's waited-for mark `w`, written only by a probe). ARGV = token,
-- `name \n name … \n\n owner` (the lease key's value without its fence and expiry), ttl ms
-- (for a probe: how long its mark lives), the *flags* — the mode (`F`: grant with the
-- counter's fence, `C`: grant with a clock fence, `N`: grant without, `P`: a waiting
-- caller's probe, which grants nothing and records no place but, when the request is
-- blocked, marks the first name that blocks it, see below), the members' modes as one letter
-- each (`S` or `X`, in KEYS order) and, for a waiting group, `intent ttl:2 × intent
-- ttl:ticket` (each part may be empty: no intents, no ticket yet; `:b` after it when
-- barging), say `NXS` or `NXS30000:60000:` — then, only when some member has default
-- permits, each member's default permits (`""`: unlimited). Every argument costs the
-- server about a third of a `redis.call` (the KEYS and ARGV tables are built anew for each
-- call), so there are few.
-- Returns the fence (0 without fencing, and for a probe that could be granted) or, when
-- blocked, minus the ticket.
--
-- The probe's mark is what makes a release publish (`group_release.lua` publishes only
-- when one of the names it changes is marked or has places). The waiter registers for the
-- names' messages and subscribes *before* it sends this probe, and the probe checks and
-- marks in one atomic step: a release that ran before the probe is seen by the check (the
-- probe answers "grantable" and the waiter does not sleep), a release after it finds the
-- mark and publishes to a subscription that already exists. One blocking name is enough:
-- while it blocks, the request cannot be granted whatever happens to the others, and when
-- a release frees it the waiter is woken, attempts again and marks whatever blocks it
-- then. The mark's expiry only grows (`PTTL`, then `SET … PX` when shorter), so a short
-- wait on a name never cuts short the mark of a longer one.

local token = ARGV[1]
local ttl = tonumber(ARGV[3])
-- ARGV[4]: the mode letter, one letter per member (`S` or `X`; member i's at byte
-- `1 + i`), then the waiting part, if any. Letters are compared as bytes: `C` 67, `F` 70,
-- `P` 80, `X` 88.
local flags = ARGV[4]
local mode = string.byte(flags, 1)
local hs = (mode == 70 or mode == 67) and 2 or 1 -- KEYS[hs + i]: member i's `h`; KEYS[hs + n + i]: its `s`
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
-- `now` as text: only a held name needs it (bounds, tickets).
local now_s = nil
-- Every name free (no `h`, no `s`): the grant writes each name's `s`, with no clock read.
local free = redis.call("EXISTS", unpack(KEYS, hs + 1, hs + 2 * n)) == 0
local now = 0
if not free then
    now = now_ms()
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
    -- The first member whose name does not admit the request (nil: none).
    local blocked = nil
    for i = 1, n do
        sizes[i] = redis.call("ZCARD", KEYS[hs + i])
        local holder = redis.call("GET", KEYS[hs + n + i])
        if holder then
            string_holder[i], string_shared[i] = holder_of(holder)
        end
        if not blocked and (sizes[i] > 0 or holder) and not grantable(i) then
            blocked = i
        end
    end

    if blocked then
        if mode == 80 then
            local mark = mark_of(KEYS[hs + blocked])
            if redis.call("PTTL", mark) < ttl then
                redis.call("SET", mark, "1", "PX", ARGV[3])
            end
        elseif intent_ttl ~= "" then
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
elseif mode == 67 then
    -- A clock fence (lib/clock_fence.lua): max(counter + 1, server clock in µs).
    fence = clock_fence(KEYS[2])
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
