-- $1 key, $2 token → one row: count 1 when released. The lease is freed, or handed to
-- the oldest live waiter other than $2 (with a new fence, for the rest of its place);
-- $2's own place goes. A waiter flagged the lease: the release (or hand-over) is
-- notified, a hand-over only to the waiter it is for ('turn:<token>'), a release that
-- leaves the key free to every waiter of the key; a store without notifications notifies no
-- one.
WITH next AS (
    SELECT token, expires_at FROM {queue}
    WHERE key = $1 AND token <> $2 AND expires_at > clock_timestamp() ORDER BY arrival LIMIT 1),
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
