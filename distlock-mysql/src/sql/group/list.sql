-- One page of the group listing: ? lowest name (inclusive), ? cursor (exclusive), ? upper
-- bound (exclusive), ? page size in names → (last name examined, names examined, name,
-- token, kind 0 hold / 1 place, mode, owner, fence, µs left, µs waited) per live hold or
-- place of a name of the page, or one row with only the first two. The page is a range
-- scan of the names table's primary key; the caller filters by the pattern.
WITH page AS (
    SELECT name FROM {names} WHERE name >= ? AND name > ? AND name < ? ORDER BY name LIMIT ?)
SELECT (SELECT MAX(name) FROM page), (SELECT CAST(COUNT(*) AS SIGNED) FROM page),
    live.name, live.token, live.kind, live.mode, live.owner, live.fence, live.micros_left, live.micros_waited
FROM (SELECT 1 AS one) AS one
LEFT JOIN (
    SELECT h.name, h.token, 0 AS kind, h.mode, h.owner, h.fence,
        GREATEST(h.expires_at - CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED), 1) AS micros_left, NULL AS micros_waited, h.fence AS ord
    FROM page JOIN {holders} AS h ON h.name = page.name WHERE h.expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
    UNION ALL
    SELECT p.name, p.token, 1, p.mode, NULL, NULL,
        GREATEST(p.expires_at - CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED), 1), GREATEST(CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) - p.placed_at, 0), p.ticket
    FROM page JOIN {places} AS p ON p.name = page.name WHERE p.expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
) AS live ON TRUE
ORDER BY live.name, live.kind, live.ord, live.token
