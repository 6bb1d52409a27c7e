-- 释放锁：仅当 value 等于传入的 token 时才删除；有排队者时交给最早的排队者
-- KEYS: lock key, queue, queue-ttl. ARGV: token, channel ("": do not publish), and the
-- publish command (absent: PUBLISH; Redis Cluster passes SPUBLISH, the lock's shard
-- channel). Returns 1 when the token's lease was deleted, 0 otherwise.
local publish = ARGV[3] or "publish"
local released = 0
if redis.call("get", KEYS[1]) == ARGV[1] then
    released = redis.call("del", KEYS[1])
    if ARGV[2] ~= "" then
        redis.call(publish, ARGV[2], KEYS[1])
    end
end
if redis.call("exists", KEYS[2]) == 0 then
    return released
end

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

redis.call("zrem", KEYS[2], ARGV[1])
redis.call("zrem", KEYS[3], ARGV[1])
if redis.call("exists", KEYS[1]) == 0 then
    hand_over(KEYS[1], KEYS[2], KEYS[3], clock(), ARGV[2])
end
return released
