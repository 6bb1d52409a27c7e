-- 释放锁：仅当 value 等于传入的 token 时才删除；有排队者时交给最早的排队者
-- KEYS: lock key, queue, queue-ttl. ARGV: token, channel ("": do not publish), and the
-- publish command (absent: PUBLISH; Redis Cluster passes SPUBLISH, the lock's shard
-- channel). Returns 1 when the token's lease was deleted, 0 otherwise.
local publish = ARGV[3] or "publish"
local released = 0
if redis.call("get", KEYS[1]) == ARGV[1] then
    released = redis.call("del", KEYS[1])
    if ARGV[2] ~= "" then
        redis.call(publish, ARGV[2], KEYS[1])
    end
end
if redis.call("exists", KEYS[2]) == 0 then
    return released
end

redis.call("zrem", KEYS[2], ARGV[1])
redis.call("zrem", KEYS[3], ARGV[1])
if redis.call("exists", KEYS[1]) == 0 then
    hand_over(KEYS[1], KEYS[2], KEYS[3], clock(), ARGV[2], publish)
end
return released
