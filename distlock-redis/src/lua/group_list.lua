-- The holders and places of a page of names, read only: `{holders, places}` per name, in
-- the order of the names (see lib/group_read.lua for each). KEYS = every name's h, then
-- every name's s. ARGV = the beginning of the lease keys (on one server the same for
-- every name; on Redis Cluster the names of one run share a tag).

local now = now_ms()
local n = #KEYS / 2
local out = {}
for i = 1, n do
    out[i] = { holders_of(KEYS[i], KEYS[n + i], ARGV[1], now), places_of(KEYS[i], now) }
end
return out
