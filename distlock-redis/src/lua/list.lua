-- 列出一页锁的持有者（只读）
local n = tonumber(ARGV[1])
local held = {}
for i = 1, n do
    local key = KEYS[i]
    local token, pttl, fence = false, -2, false
    local len = redis.pcall("strlen", key)
    if type(len) == "number" and len > 0 and len <= 64 then
        pttl = redis.call("pttl", key)
        if pttl > 0 then
            token = redis.call("get", key)
            if KEYS[n + i] then
                fence = fence_of(KEYS[n + i], token)
            end
        end
    end
    held[3 * i - 2] = token
    held[3 * i - 1] = pttl
    held[3 * i] = fence
end
return held
