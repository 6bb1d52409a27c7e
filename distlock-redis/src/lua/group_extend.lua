-- Extend: every member still held (unexpired) by the token gets `ttl` from now, and so
-- does the group's lease key; an expired member is never revived, and a group whose lease
-- key is gone (released or expired) is not extended at all.
-- KEYS[1] = the group's lease key; then every name's `h`, then every name's `s`.
-- ARGV = token, ttl ms, 2 × ttl ms. Returns how many members were extended.

local now = now_ms()

local entry = redis.call("GET", KEYS[1])
if not entry then
    return 0
end
local token = ARGV[1]
local ttl, ttl2 = tonumber(ARGV[2]), ARGV[3]
local expiry_s = fmt(now + ttl)
local extended = 0
-- Granted as strings (the lease's expiry is `-`): each hold is in the name's `s`.
local strings = string.byte(entry, -1) == 45
local n = (#KEYS - 1) / 2
for i = 1, n do
    local h, s = KEYS[1 + i], KEYS[1 + n + i]
    if strings then
        local holder = redis.call("GET", s)
        if holder == token or holder == "+" .. token then
            redis.call("PEXPIRE", s, ARGV[2])
            extended = extended + 1
        end
    else
        local score = tonumber(redis.call("ZSCORE", h, token))
        if score and score < INTENTS and score % B > now then
            redis.call("ZADD", h, "XX", (score >= B and "1" or "") .. expiry_s, token)
            keep(h, ttl, ttl2)
            extended = extended + 1
        end
    end
end
if extended > 0 then
    if strings then
        -- Granted as strings (expiry `-`): the value stays.
        redis.call("PEXPIRE", KEYS[1], ARGV[2])
    else
        -- The value with its last line, the expiry, replaced.
        redis.call("SET", KEYS[1], string.match(entry, "^(.*\n)") .. expiry_s, "PX", ARGV[2])
    end
end
return extended
