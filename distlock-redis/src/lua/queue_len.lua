-- 排队人数 (the places that have not expired: `clock` is lib/queue.lua's)
return redis.call("zcount", KEYS[1], "(" .. clock(), "+inf")
