-- Complete an idempotency claim. KEYS[1] = the record; ARGV = token, encoded response,
-- retention in ms. Returns 1 when the token still held the claim (now a completed
-- record), else 0 and nothing written.
if redis.call('HGET', KEYS[1], 'tok') ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], 'tok')
redis.call('HSET', KEYS[1], 'resp', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
