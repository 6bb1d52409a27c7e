-- 获取锁并发放 fencing 号（时钟 fencing：重启后仍严格递增）
-- The fencing-mode acquire (fenced_acquire.lua) with the fence drawn from the server's clock
-- as well as the counter: max(counter + 1, TIME in µs), stored in the counter
-- (lib/clock_fence.lua explains when that holds). The queued and group acquires draw clock
-- fences the same way, with the same function.
-- KEYS: lock key, counter, fence key. ARGV: token, ttl ms. Returns {1, fence} or {0, pttl}.
if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
    local fence = clock_fence(KEYS[2])
    redis.call("set", KEYS[3], fence .. ":" .. ARGV[1], "PX", ARGV[2])
    return {1, fence}
end
return {0, redis.call("pttl", KEYS[1])}
