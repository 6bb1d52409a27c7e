-- Reading a fence key, placed before inspect.lua and list.lua (`scripts.rs` joins them at
-- compile time). A fence key holds `<fence>:<token>`, written for the holder it was issued
-- to.

-- The number the fence key `key` records for `token`: false when there is none, or it was
-- issued to another token.
local function fence_of(key, token)
    local issued = redis.call("get", key)
    if issued then
        local number, owner = string.match(issued, "^(%d+):(.+)$")
        if owner == token then
            return number
        end
    end
    return false
end

