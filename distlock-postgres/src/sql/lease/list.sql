-- One page of a listing: $1 lowest key (inclusive), $2 cursor (exclusive), $3 upper bound
-- (exclusive), $4 page size, $5 LIKE pattern → per held matching key (last key
-- examined, rows examined, key, token, fence, µs left), or one row with only the first
-- two. MATERIALIZED: the page is read once, by the index range scan; both the aggregate
-- and the join use that snapshot of at most $4 rows. E'\\' is one backslash whatever
-- standard_conforming_strings says.
WITH page AS MATERIALIZED (
    SELECT key, token, fence, expires_at FROM {table}
    WHERE key >= $1 AND key > $2 AND key < $3
    ORDER BY key LIMIT $4)
SELECT examined.last, examined.count, held.key, held.token, held.fence,
    GREATEST((extract(epoch FROM held.expires_at - clock_timestamp()) * 1000000)::bigint, 1)
FROM (SELECT max(key) AS last, count(*) AS count FROM page) AS examined
LEFT JOIN page AS held
    ON held.key LIKE $5 ESCAPE E'\\' AND held.token IS NOT NULL
       AND held.expires_at > clock_timestamp()
ORDER BY held.key
