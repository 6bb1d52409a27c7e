-- Lock-group helpers, placed before every group_*.lua script (`scripts.rs` joins them at
-- compile time; the key layout: distlock-redis/src/commands/group.rs).

-- Score bands of `stem:h`: shared holds [0, B), exclusive holds [B, 2B), exclusive places
-- [2B, 3B), the places' tickets [3B, 4B), shared places [4B, 5B).
local B = 10000000000000
local INTENTS = 2 * B
local SHARED_INTENTS = 4 * B

-- The server's clock, in ms.
local function now_ms()
    local clock = redis.call("TIME")
    return clock[1] * 1000 + math.floor(clock[2] / 1000)
end

local function fmt(ms)
    return string.format("%d", ms)
end

-- Keeps `key` alive for `ttl` ms at least: when it has less left, it gets `ttl2` (default
-- 2 × `ttl`). Returns whether it was extended.
local function keep(key, ttl, ttl2)
    if redis.call("PTTL", key) < ttl then
        redis.call("PEXPIRE", key, ttl2 or fmt(2 * ttl))
        return true
    end
    return false
end

-- The *waited-for mark* of the name whose `stem:h` is `h`: `stem:w`, beside `h` (the same
-- stem, so the same hash tag and slot), as the permits hash `stem:p` is. A string that a
-- waiting group's probe (`group_acquire.lua`, mode `P`) writes with an expiry when the
-- name blocks it, and that a release which changes the name deletes when it publishes.
local function mark_of(h)
    return string.sub(h, 1, -2) .. "w"
end

-- A lease key's value: `name \n name … \n\n owner \n fence \n expiry`.
local function parse_entry(entry)
    local names, owner, fence, expiry = string.match(entry, "^(.-)\n\n([^\n]*)\n([^\n]*)\n([^\n]*)$")
    return names or "", owner or "", fence or "0", expiry or "0"
end

-- A name's `s` value: the holder's token, and whether the hold is shared (`+token`).
local function holder_of(value)
    if string.byte(value, 1) == 43 then
        return string.sub(value, 2), true
    end
    return value, false
end

