-- Withdraw intents: a waiting group gave up.
-- KEYS = per name `h`. ARGV = token, channel (`""`: do not publish), and the publish
-- command (absent: PUBLISH; Redis Cluster passes SPUBLISH). Returns how many intents were
-- removed.

local token, channel, publish = ARGV[1], ARGV[2], ARGV[3] or "PUBLISH"
local removed = {}
for i = 1, #KEYS do
    local score = tonumber(redis.call("ZSCORE", KEYS[i], token))
    if score and score >= INTENTS then
        redis.call("ZREM", KEYS[i], token, "#" .. token)
        removed[#removed + 1] = KEYS[i]
    end
end
if #removed > 0 and channel ~= "" then
    redis.call(publish, channel, table.concat(removed, "\n"))
end
return #removed
