-- 获取锁并发放 fencing 号（时钟 fencing：重启后仍严格递增）
-- The fencing-mode acquire (fenced_acquire.lua) with the fence drawn from the server's clock
-- as well as the counter: max(counter + 1, TIME in µs), stored in the counter. A server
-- without persistence loses the counter when it restarts and INCR would start again at 1;
-- the clock's first number after a restart is greater than every number issued before it,
-- as long as the clock (TIME) does not go backwards across the restart or failover and
-- numbers were issued at most one per µs on average. Values reach about 1.8e15, exact in
-- Lua's doubles (below 2^53), returned as a decimal string. A counter already ahead of the
-- clock keeps growing by one, so switching between counter and clock fences never makes
-- numbers go backwards. The queued and group acquires draw clock fences the same way.
-- KEYS: lock key, counter, fence key. ARGV: token, ttl ms. Returns {1, fence} or {0, pttl}.
if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
    local t = redis.call("TIME")
    local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    local last = tonumber(redis.call("GET", KEYS[2]) or "0") or 0
    local fence = string.format("%.0f", math.max(last + 1, us))
    redis.call("SET", KEYS[2], fence)
    redis.call("set", KEYS[3], fence .. ":" .. ARGV[1], "PX", ARGV[2])
    return {1, fence}
end
return {0, redis.call("pttl", KEYS[1])}
