-- Renew an idempotency claim. KEYS[1] = the record; ARGV = token, lease in ms.
-- Returns 1 renewed, 0 not claimed by the token.
if redis.call('HGET', KEYS[1], 'tok') ~= ARGV[1] then return 0 end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
