-- Abandon an idempotency claim. KEYS[1] = the record; ARGV = token.
-- Returns 1 deleted, 0 not claimed by the token.
if redis.call('HGET', KEYS[1], 'tok') ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
