-- Holders of one name, read only: `{mode, token, ms left, fence, owner}` per live holder.
-- KEYS = h, s. ARGV = the beginning of the lease keys (the lease key without the token),
-- which share the slot of `h` on Redis Cluster.

local now = now_ms()

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
