-- 续租（fencing 模式）：仅当 value 等于传入的 token 时才 PEXPIRE，fencing 号同步续期
if redis.call("get", KEYS[1]) == ARGV[1] then
    redis.call("pexpire", KEYS[2], ARGV[2])
    return redis.call("pexpire", KEYS[1], ARGV[2])
else
    return 0
end
