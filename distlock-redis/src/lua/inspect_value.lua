-- The current holder with its lease's value, one atomic step.
-- KEYS: lock key, value key, optional fence key (fencing mode). Returns nil when the key
-- is free, else {token, pttl, fence-or-nil, value-or-nil}: the value only when the value
-- key (`<token>:<value>`, set_value.lua) was written for the holder's token. A value key
-- written for any other token (a lease released, expired or handed over) is deleted: the
-- release script cannot, and nobody can read it any more.
local holder = redis.call("get", KEYS[1])
local tagged = redis.call("get", KEYS[2])
local value = false
if tagged then
    local tag = holder and holder .. ":"
    if tag and string.sub(tagged, 1, #tag) == tag then
        value = string.sub(tagged, #tag + 1)
    else
        redis.call("del", KEYS[2])
    end
end
if not holder then
    return false
end
local fence = false
if KEYS[3] then
    fence = fence_of(KEYS[3], holder)
end
return {holder, redis.call("pttl", KEYS[1]), fence, value}
