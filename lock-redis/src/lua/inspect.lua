-- 查看当前持有者
local token = redis.call("get", KEYS[1])
if not token then
    return false
end
local pttl = redis.call("pttl", KEYS[1])
local fence = false
if KEYS[2] then
    local issued = redis.call("get", KEYS[2])
    if issued then
        local number, owner = string.match(issued, "^(%d+):(.+)$")
        if owner == token then
            fence = number
        end
    end
end
return {token, pttl, fence}
