-- Claim an idempotency record (one hash: `fp` fingerprint, `tok` running claim's token,
-- `resp` completed result). KEYS[1] = the record; ARGV = fingerprint, token, lease in ms.
-- Returns {0} started, {1, response} replay, {2, pttl} in progress, {3, fingerprint}
-- mismatch. A record whose lease or retention ended has expired with its key.
local r = redis.call('HMGET', KEYS[1], 'fp', 'tok', 'resp')
if not r[1] then
  redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'tok', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {0}
end
if r[1] ~= ARGV[1] then return {3, r[1]} end
if r[3] then return {1, r[3]} end
if r[2] == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {0}
end
return {2, redis.call('PTTL', KEYS[1])}
