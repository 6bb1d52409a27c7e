-- $1 key, $2 token → one row (count 1 when released, whether the key's queue holds a
-- place). The release of a key nobody queues for, as cheap as the plain release: the lease
-- is freed only while the key's queue is empty. A key with places (live or lapsed, also
-- $2's own) is left alone here and released by the queue release (release.sql), which
-- hands it over; the store sends that one next. A flagged lease is notified as the plain
-- release does it; a store without notifications notifies no one.
-- The queue is read once, for its first place on the (key, arrival) index: an ordered
-- LIMIT 1 the planner cannot serve by scanning the table, as it would serve an EXISTS while
-- the table is small, and would go on doing after waiting has filled it with dead rows.
WITH queued AS (
    SELECT (SELECT arrival FROM {queue} WHERE key = $1 ORDER BY arrival LIMIT 1) IS NOT NULL AS queued),
released AS (
    UPDATE {table} SET token = NULL, expires_at = clock_timestamp()
    WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()
        AND NOT (SELECT queued FROM queued)
    RETURNING key{notify}, waiting{end})
{notify}
SELECT (SELECT count(CASE WHEN released.waiting
                     THEN pg_notify({channel}, released.key)::text ELSE '' END)
        FROM released),
{silent}
SELECT (SELECT count(*) FROM released),
{end}
    (SELECT queued FROM queued)
