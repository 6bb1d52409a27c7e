-- Read-only helpers of the group scripts that report holders and places (after
-- lib/group.lua, whose `B`, `fmt`, `parse_entry` and `holder_of` they use).

-- The live holders of the name with keys `h` and `s`: `{mode, token, ms left, fence,
-- owner}` each, the fence and owner read from the group lease keys (`leases` .. token).
local function holders_of(h, s, leases, now)
    local now_s = fmt(now)
    local out, lease_keys = {}, {}
    local holder = redis.call("GET", s)
    if holder then
        -- The holder that took the name free, expiring with its hold.
        local token, shared = holder_of(holder)
        out[1] = { shared and "S" or "X", token, redis.call("PTTL", s), "0", "" }
        lease_keys[1] = leases .. token
    end
    for _, band in ipairs({ { "S", 0, "(" .. now_s, "(10000000000000" }, { "X", B, "(1" .. now_s, "(20000000000000" } }) do
        local live = redis.call("ZRANGEBYSCORE", h, band[3], band[4], "WITHSCORES")
        for i = 1, #live, 2 do
            out[#out + 1] = { band[1], live[i], tonumber(live[i + 1]) - band[2] - now, "0", "" }
            lease_keys[#lease_keys + 1] = leases .. live[i]
        end
    end
    for i = 1, #lease_keys, 500 do
        local last = math.min(i + 499, #lease_keys)
        local entries = redis.call("MGET", unpack(lease_keys, i, last))
        for j = i, last do
            local entry = entries[j - i + 1]
            if entry then
                local _, owner, fence = parse_entry(entry)
                out[j][4], out[j][5] = fence, owner
            end
        end
    end
    return out
end

-- The live places on the name with key `h`: `{mode, token, ms left, ticket, ms waited}`
-- each. A ticket is the server's clock in ms when the group first took its places (one
-- more than the names' last ticket when that was larger), so it tells the time waited.
local function places_of(h, now)
    local now_s = fmt(now)
    local out = {}
    for _, band in ipairs({ { "X", INTENTS, "(2" .. now_s, "(30000000000000" }, { "S", SHARED_INTENTS, "(4" .. now_s, "(50000000000000" } }) do
        local live = redis.call("ZRANGEBYSCORE", h, band[3], band[4], "WITHSCORES")
        for i = 1, #live, 2 do
            local ticket = tonumber(redis.call("ZSCORE", h, "#" .. live[i]) or 3 * B + now) - 3 * B
            out[#out + 1] = { band[1], live[i], tonumber(live[i + 1]) - band[2] - now, fmt(ticket), math.max(now - ticket, 0) }
        end
    end
    return out
end
