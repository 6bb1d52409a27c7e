-- The live places of a key's queue in arrival order, read only (`clock` is
-- lib/queue.lua's): `{token, ms left, µs waited}` each. KEYS = queue, queue-ttl.

local now, now_us = clock()
local out = {}
for _, token in ipairs(redis.call("zrange", KEYS[1], 0, -1)) do
    local expires = tonumber(redis.call("zscore", KEYS[2], token))
    local arrival = tonumber(redis.call("zscore", KEYS[1], token))
    if expires and expires > now then
        out[#out + 1] = { token, expires - now, string.format("%d", now_us - arrival) }
    end
end
return out
