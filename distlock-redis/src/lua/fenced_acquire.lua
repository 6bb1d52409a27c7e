-- 获取锁并发放 fencing 号（单个原子脚本）
if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
    local fence = redis.call("incr", KEYS[2])
    redis.call("set", KEYS[3], fence .. ":" .. ARGV[1], "PX", ARGV[2])
    return {1, fence}
end
return {0, redis.call("pttl", KEYS[1])}
