-- $1 key, $2 token → one row: count 1 when released. The lease is freed, or handed to
-- the oldest live waiter other than $2 (with a new fence, for the rest of its place);
-- $2's own place goes. A waiter flagged the lease: the release (or hand-over) is
-- notified, a hand-over only to the waiter it is for ('turn:<token>'), a release that
-- leaves the key free to every waiter of the key; a store without notifications notifies no
-- one.
--
-- The next waiter is found by walking the key's places in arrival order on the
-- (key, arrival) index, one `ORDER BY arrival LIMIT 1` step at a time, past lapsed places
-- and $2's own. A single `ORDER BY arrival LIMIT 1` filtered on liveness is planned as a
-- bitmap scan and a sort while the table is small, and a connection keeps that plan: a
-- bitmap scan reads every index entry of the key, the dead ones of earlier places too,
-- which a hot key piles up by the thousand until autovacuum runs; an ordered index scan
-- marks them dead as it passes and skips them afterwards.
WITH RECURSIVE walk AS (
    (SELECT arrival, token, expires_at, token <> $2 AND expires_at > clock_timestamp() AS live
     FROM {queue} WHERE key = $1 ORDER BY arrival LIMIT 1)
    UNION ALL
    SELECT later.* FROM walk, LATERAL (
        SELECT arrival, token, expires_at, token <> $2 AND expires_at > clock_timestamp() AS live
        FROM {queue} WHERE key = $1 AND arrival > walk.arrival ORDER BY arrival LIMIT 1) AS later
    WHERE NOT walk.live),
next AS (SELECT token, expires_at FROM walk WHERE live),
left_queue AS (DELETE FROM {queue} WHERE key = $1 AND token = $2),
released AS (
    UPDATE {table} AS held
    SET token = (SELECT token FROM next),
        expires_at = coalesce((SELECT expires_at FROM next), clock_timestamp()),
        fence = CASE WHEN EXISTS (SELECT 1 FROM next)
                     THEN GREATEST(held.fence + 1, nextval('{sequence}')) ELSE held.fence END
    WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()
    RETURNING key, waiting, token)
{notify}
SELECT count(CASE WHEN released.waiting
             THEN pg_notify({channel}, CASE WHEN released.token IS NULL THEN released.key
                                            ELSE 'turn:' || released.token END)::text
             ELSE '' END)
FROM released
{silent}
SELECT count(CASE WHEN released.waiting THEN '' ELSE '' END) FROM released
{end}
