-- release.sql for a store without release notifications.
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
SELECT count(CASE WHEN released.waiting THEN '' ELSE '' END) FROM released
