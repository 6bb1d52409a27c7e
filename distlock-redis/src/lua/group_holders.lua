-- Holders of one name, read only: `{mode, token, ms left, fence, owner}` per live holder.
-- KEYS = h, s. ARGV = the beginning of the lease keys (the lease key without the token),
-- which share the slot of `h` on Redis Cluster.

return holders_of(KEYS[1], KEYS[2], ARGV[1], now_ms())
