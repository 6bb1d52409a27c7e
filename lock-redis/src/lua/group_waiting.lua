-- The live places (of waiting groups) on one name, read only. KEYS = h.

-- Score bands of `stem:h`: shared holds [0, B), exclusive holds [B, 2B), exclusive places
-- [2B, 3B), the places' tickets [3B, 4B), shared places [4B, 5B).
local B = 10000000000000
local INTENTS = 2 * B
local SHARED_INTENTS = 4 * B

local clock = redis.call("TIME")
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)

local function fmt(ms)
    return string.format("%d", ms)
end

local now_s = fmt(now)
return redis.call("ZCOUNT", KEYS[1], "(2" .. now_s, "(30000000000000")
    + redis.call("ZCOUNT", KEYS[1], "(4" .. now_s, "(50000000000000")
