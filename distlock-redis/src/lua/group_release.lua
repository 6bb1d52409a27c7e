-- Release: removes the token's holds and places (with their tickets) from every name,
-- publishes the names' `h` keys when it changed anything and someone may wait for one of
-- the names (one message, the keys joined by newlines; a name whose hold had expired is
-- named too, and its waiters merely look again), and deletes the group's lease key — or,
-- when only some of its names are released, keeps it for the others.
--
-- Someone may wait for a name when it has a waited-for mark (`w`, found beside `h` as
-- `group_acquire.lua` writes it: see `mark_of`) or entries in the bands of places and
-- tickets of `h`; otherwise nothing is published, so an uncontended release sends no
-- message to the subscribers (the releasing client's own among them). The marks are
-- deleted when the message goes out: every waiter that marked one of the names is
-- registered for its message, so it is woken by this one and marks again if it is still
-- blocked. A mark therefore disappears only with a message naming its name or by its own
-- expiry, after its waiter's wait ended: a waiter is never left asleep by a release.
-- KEYS[1] = the group's lease key; then every name's `h`, then every name's `s` (each
-- name's mark `w` is not declared: it is derived from `h`, like the permits hash). ARGV =
-- token, channel (`""`: do not publish), the names each followed by a newline and one more
-- newline (the lease value's beginning when they are all its names), and the publish
-- command (absent: PUBLISH; Redis Cluster passes SPUBLISH). Returns how many live holds
-- were freed: a hold is live while the lease key exists.
local token, channel, publish = ARGV[1], ARGV[2], ARGV[4] or "PUBLISH"
-- KEYS[1 + i]: name i's `h`, KEYS[1 + n + i]: its `s`.
local n = (#KEYS - 1) / 2
local entry = redis.call("GETDEL", KEYS[1])
local freed, changed = 0, false
if not entry then
    -- No live group: the token may have places, each with its ticket (2 removed), or
    -- expired holds (1 removed: nothing changes for anyone). An `s` is another group's.
    for i = 1, n do
        if redis.call("ZREM", KEYS[1 + i], token, "#" .. token) == 2 then
            changed = true
        end
    end
else
    -- A live group holds each of its names (its grant replaced its places and removed
    -- their tickets): in `h`, or, granted as strings (the lease's expiry is `-`), in `s`,
    -- which is then its own (`token`, `+token` when shared) for as long as the lease lives.
    local strings = string.byte(entry, -1) == 45
    local whole = string.sub(entry, 1, #ARGV[3]) == ARGV[3]
    -- For a part release of a group in strings: what a released name had left.
    local left_ms = nil
    for i = 1, n do
        if strings then
            local s = KEYS[1 + n + i]
            -- All the group's names (the lease value begins with them, the common case):
            -- `s` is the group's. Some: only a name of the group is.
            local held = redis.call(whole and "GETDEL" or "GET", s)
            if held == token or held == "+" .. token then
                if not whole then
                    left_ms = left_ms or math.max(redis.call("PTTL", s), 1)
                    redis.call("DEL", s)
                end
                freed = freed + 1
            end
        elseif redis.call("ZREM", KEYS[1 + i], token) == 1 then
            freed = freed + 1
        end
    end
    if not whole then
        -- Some of the group's names: the others keep their lease, to the same expiry (the
        -- lease value's, or what a released name had left).
        local names, owner, fence, expiry = parse_entry(entry)
        local expire, at = "PXAT", expiry
        if strings then
            expire, at = "PX", left_ms
        end
        local released, left = {}, {}
        for name in string.gmatch(ARGV[3], "[^\n]+") do
            released[name] = true
        end
        for name in string.gmatch(names, "[^\n]+") do
            if not released[name] then
                left[#left + 1] = name
            end
        end
        -- (A group granted as strings none of whose names was released keeps no lease:
        -- its expiry is unknown; its holds end with their TTL, and extending it fails.)
        if #left > 0 and at then
            redis.call("SET", KEYS[1], table.concat(left, "\n") .. "\n\n" .. owner .. "\n" .. fence .. "\n" .. expiry, expire, at)
        end
    end
end
if (freed > 0 or changed) and channel ~= "" then
    -- One `EXISTS` over the names' marks and `h` keys tells an uncontended release (no
    -- mark, no `h`: nobody waits) from the others; only those read further.
    local marks, keys = {}, {}
    for i = 1, n do
        marks[i] = mark_of(KEYS[1 + i])
        keys[i], keys[n + i] = marks[i], KEYS[1 + i]
    end
    local waited = false
    if redis.call("EXISTS", unpack(keys)) > 0 then
        waited = redis.call("DEL", unpack(marks)) > 0
        -- Else the places and tickets of waiting groups, `[2B, 5B)` (expired ones too: a
        -- spurious message only makes waiters look again).
        local i = 1
        while not waited and i <= n do
            waited = redis.call("ZCOUNT", KEYS[1 + i], "20000000000000", "+inf") > 0
            i = i + 1
        end
    end
    if waited then
        redis.call(publish, channel, table.concat(KEYS, "\n", 2, n + 1))
    end
end
return freed
