-- 续租：仅当 value 等于传入的 token 时才 PEXPIRE
if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("pexpire", KEYS[1], ARGV[2])
else
    return 0
end
