-- Fenced write: store a value only if the fence it carries is not lower than the fence
-- stored beside it, then store that fence too.
-- KEYS[1]: a hash with the fields `value` and `fence`.
-- ARGV[1]: the writer's fence, as a decimal without leading zeros (compared as text, so
--          all 64 bits count: Lua numbers are doubles).
-- ARGV[2]: the value.
-- Returns {1, fence} when written, {0, stored fence} when refused.
local current = redis.call('HGET', KEYS[1], 'fence')
if current and (#current > #ARGV[1] or (#current == #ARGV[1] and current > ARGV[1])) then
  return {0, current}
end
redis.call('HSET', KEYS[1], 'value', ARGV[2], 'fence', ARGV[1])
return {1, ARGV[1]}
