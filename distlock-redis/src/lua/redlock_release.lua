-- 释放锁（Redlock，fencing）：token 相等才 DEL，并把计数器抬到本次授予的 fencing 号
if redis.call("get", KEYS[1]) == ARGV[1] then
    local last = tonumber(redis.call("get", KEYS[2]) or "0") or 0
    if tonumber(ARGV[2]) > last then
        redis.call("set", KEYS[2], ARGV[2])
    end
    return redis.call("del", KEYS[1])
else
    return 0
end
