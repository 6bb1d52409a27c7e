-- 排队获取锁
-- KEYS: lock key, queue, queue-ttl, fence counter, fence key. ARGV: token, ttl ms, place
-- ttl ms, fencing (`0`: none, `1`: the counter's INCR, `c`: a clock fence), channel
-- (`""`: do not publish), and the publish command (absent: PUBLISH; Redis Cluster passes
-- SPUBLISH). Returns {1, fence} (fence 0 without fencing) or {0, pttl of the key}.
-- Per lock key `{prefix}:lock:<key>` the queue is two sorted sets, created by the first
-- waiter and gone with the last: `{prefix}:queue:lock:<key>` (member: a waiter's token,
-- score: its arrival, the server's clock in µs) and `{prefix}:queue-ttl:lock:<key>`
-- (member: the token, score: when its place expires, in ms). Both expire with the latest
-- place. A key *handed* to a waiter holds that waiter's token with the rest of its
-- place's lease as `PX`: no `SET NX` can take it meanwhile, and a waiter that died lets
-- it expire soon.
local publish = ARGV[6] or "publish"

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
-- expires; its release is published. Returns whether someone got it.
local function hand_over(k, q, e, now, channel)
    purge(q, e, now)
    local head = redis.call("zrange", q, 0, 0)[1]
    if not head then
        return false
    end
    local left = tonumber(redis.call("zscore", e, head)) - now
    redis.call("set", k, head, "PX", math.max(left, 1))
    if channel ~= "" then
        redis.call(publish, channel, k)
    end
    return true
end

local now, arrival = clock()
local token, ttl, place = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
purge(KEYS[2], KEYS[3], now)
local holder = redis.call("get", KEYS[1])
local mine = holder == token
if not holder then
    local head = redis.call("zrange", KEYS[2], 0, 0)[1]
    if head == nil or head == token then
        mine = true
    else
        hand_over(KEYS[1], KEYS[2], KEYS[3], now, ARGV[5])
    end
end
if mine then
    redis.call("set", KEYS[1], token, "PX", ttl)
    redis.call("zrem", KEYS[2], token)
    redis.call("zrem", KEYS[3], token)
    local fence = 0
    if ARGV[4] == "1" then
        fence = redis.call("incr", KEYS[4])
        redis.call("set", KEYS[5], fence .. ":" .. token, "PX", ttl)
    elseif ARGV[4] == "c" then
        -- A clock fence (see fenced_acquire_clock.lua): max(counter + 1, server clock in µs).
        local t = redis.call("TIME")
        local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
        local last = tonumber(redis.call("GET", KEYS[4]) or "0") or 0
        fence = string.format("%.0f", math.max(last + 1, us))
        redis.call("SET", KEYS[4], fence)
        redis.call("set", KEYS[5], fence .. ":" .. token, "PX", ttl)
    end
    return { 1, fence }
end
redis.call("zadd", KEYS[2], "NX", arrival, token)
redis.call("zadd", KEYS[3], now + place, token)
if redis.call("pttl", KEYS[2]) < place then
    redis.call("pexpire", KEYS[2], place)
    redis.call("pexpire", KEYS[3], place)
end
return { 0, redis.call("pttl", KEYS[1]) }
