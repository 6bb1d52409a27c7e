-- 查看当前持有者
local token = redis.call("get", KEYS[1])
if not token then
    return false
end
local pttl = redis.call("pttl", KEYS[1])
local fence = false
if KEYS[2] then
    fence = fence_of(KEYS[2], token)
end
return {token, pttl, fence}
