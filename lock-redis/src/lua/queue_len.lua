-- 排队人数
local t = redis.call("time")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call("zcount", KEYS[1], "(" .. now, "+inf")
