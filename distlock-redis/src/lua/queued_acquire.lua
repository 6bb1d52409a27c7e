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
        hand_over(KEYS[1], KEYS[2], KEYS[3], now, ARGV[5], publish)
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
        -- A clock fence (lib/clock_fence.lua): max(counter + 1, server clock in µs).
        fence = clock_fence(KEYS[4])
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
