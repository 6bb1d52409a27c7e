-- The clock fence, placed before the scripts that issue one (`scripts.rs` joins them at
-- compile time): fenced_acquire_clock.lua, queued_acquire.lua and group_acquire.lua.
-- The fence is drawn from the server's clock as well as the counter: max(counter + 1, TIME
-- in µs), stored in the counter. A server without persistence loses the counter when it
-- restarts and INCR would start again at 1; the clock's first number after a restart is
-- greater than every number issued before it, as long as the clock (TIME) does not go
-- backwards across the restart or failover and numbers were issued at most one per µs on
-- average. Values reach about 1.8e15, exact in Lua's doubles (below 2^53), returned as a
-- decimal string. A counter already ahead of the clock keeps growing by one, so switching
-- between counter and clock fences never makes numbers go backwards.
local function clock_fence(counter)
    local t = redis.call("TIME")
    local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    local last = tonumber(redis.call("GET", counter) or "0") or 0
    local fence = string.format("%.0f", math.max(last + 1, us))
    redis.call("SET", counter, fence)
    return fence
end

