-- Attach a value to a lease: only the token holding the lock writes it.
-- KEYS: lock key, value key. ARGV: token, value. The value key holds `<token>:<value>`,
-- without expiry (extend.lua moves only the lock key's), so a renewal keeps it; a value
-- key whose token no longer holds the lock is never read as a value (inspect_value.lua
-- deletes it). Returns 1 when written, 0 (nothing written) otherwise.
if redis.call("get", KEYS[1]) == ARGV[1] then
    redis.call("set", KEYS[2], ARGV[1] .. ":" .. ARGV[2])
    return 1
end
return 0
