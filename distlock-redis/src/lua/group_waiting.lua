-- The live places (of waiting groups) on one name, read only. KEYS = h.

local now = now_ms()

local now_s = fmt(now)
return redis.call("ZCOUNT", KEYS[1], "(2" .. now_s, "(30000000000000")
    + redis.call("ZCOUNT", KEYS[1], "(4" .. now_s, "(50000000000000")
