-- 释放锁：仅当 value 等于传入的 token 时才删除；有排队者时交给最早的排队者
-- KEYS: lock key, queue, queue-ttl. ARGV: token, channel ("": do not publish), and the
-- publish command (absent: PUBLISH; Redis Cluster passes SPUBLISH, the lock's shard
-- channel). Returns 1 when the token's lease was deleted, 0 otherwise. One message per
-- release: the hand-over to the first waiter (lib/queue.lua), or else the lock key.
local publish = ARGV[3] or "publish"
local released = 0
if redis.call("get", KEYS[1]) == ARGV[1] then
    released = redis.call("del", KEYS[1])
end
if redis.call("exists", KEYS[2]) == 1 then
    redis.call("zrem", KEYS[2], ARGV[1])
    redis.call("zrem", KEYS[3], ARGV[1])
    if redis.call("exists", KEYS[1]) == 0 and hand_over(KEYS[1], KEYS[2], KEYS[3], clock(), ARGV[2], publish) then
        return released
    end
end
if released == 1 and ARGV[2] ~= "" then
    redis.call(publish, ARGV[2], KEYS[1])
end
return released
