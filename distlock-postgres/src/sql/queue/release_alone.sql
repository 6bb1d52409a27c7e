-- $1 key, $2 token → one row (count 1 when released, whether the key's queue holds a
-- place). The release of a key nobody queues for, as cheap as the plain release: the lease
-- is freed only while the key's queue is empty. A key with places (live or lapsed, also
-- $2's own) is left alone here and released by the queue release (release.sql), which
-- hands it over; the store sends that one next. A flagged lease is notified as the plain
-- release does it; a store without notifications notifies no one.
WITH released AS (
    UPDATE {table} SET token = NULL, expires_at = clock_timestamp()
    WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()
        AND NOT EXISTS (SELECT 1 FROM {queue} WHERE key = $1)
    RETURNING key{notify}, waiting{end})
{notify}
SELECT (SELECT count(CASE WHEN released.waiting
                     THEN pg_notify({channel}, released.key)::text ELSE '' END)
        FROM released),
{silent}
SELECT (SELECT count(*) FROM released),
{end}
    EXISTS (SELECT 1 FROM {queue} WHERE key = $1)
