-- One page of the group listing: $1 lowest name (inclusive), $2 cursor (exclusive), $3
-- upper bound (exclusive), $4 page size in names, $5 LIKE pattern → per live hold or
-- place of a matching name (last name examined, names examined, name, token, mode,
-- owner, fence, µs left, µs waited), or one row with only the first two. The page is the
-- next $4 names of the primary key's index range, read once (MATERIALIZED); holds come
-- before places, by fence, places by ticket. E'\\' is one backslash whatever
-- standard_conforming_strings says.
WITH page AS MATERIALIZED (
    SELECT DISTINCT name FROM {holders}
    WHERE name >= $1 AND name > $2 AND name < $3
    ORDER BY name LIMIT $4)
SELECT examined.last, examined.count, live.name, live.token::text, live.mode::text, live.owner, live.fence,
    GREATEST((extract(epoch FROM live.expires_at - clock_timestamp()) * 1000000)::bigint, 1),
    GREATEST((extract(epoch FROM clock_timestamp() - live.placed_at) * 1000000)::bigint, 0)
FROM (SELECT max(name) AS last, count(*) AS count FROM page) AS examined
LEFT JOIN (
    SELECT h.* FROM page JOIN {holders} AS h ON h.name = page.name
    WHERE h.name LIKE $5 ESCAPE E'\\' AND h.token IS NOT NULL AND h.expires_at > clock_timestamp()) AS live
    ON true
ORDER BY live.name, live.mode IN ('I', 'J'), live.fence, live.ticket, live.token
