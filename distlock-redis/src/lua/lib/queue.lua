-- Queue helpers, placed before the fair release and the queued acquire (`scripts.rs` joins
-- them at compile time). A key's queue is two sorted sets (see queued_acquire.lua): `q`
-- (member: a waiter's token, score: its arrival, µs) and `e` (member: the token, score:
-- when its place expires, ms).

-- The server's clock: ms, and µs.
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
-- expires; the hand-over is published on `channel` (`""`: not published) with the command
-- `publish` as `k` and the waiter's token joined by a tab, which wakes that waiter alone.
-- Returns whether someone got it.
local function hand_over(k, q, e, now, channel, publish)
    purge(q, e, now)
    local head = redis.call("zrange", q, 0, 0)[1]
    if not head then
        return false
    end
    local left = tonumber(redis.call("zscore", e, head)) - now
    redis.call("set", k, head, "PX", math.max(left, 1))
    if channel ~= "" then
        redis.call(publish, channel, k .. "\t" .. head)
    end
    return true
end

