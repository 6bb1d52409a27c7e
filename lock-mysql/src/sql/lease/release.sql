-- ? key (twice), ? token (twice), ? key, ? token → 1 row affected when released. The
-- lease goes to the oldest live queued waiter other than the releaser (with a new fence,
-- for the rest of that waiter's place), or is freed. The insert id reports what the
-- released lease was: 1 a plain lease, 2 one handed to the releaser as a queued waiter
-- (whose place the caller then removes).
UPDATE {table} SET
    handed = LAST_INSERT_ID(handed + 1) - handed - 1 + EXISTS (
        SELECT 1 FROM {queue} AS place
        WHERE place.lock_key = ? AND place.token <> ? AND place.expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)),
    fence = IF(handed = 1, GREATEST(fence + 1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)), fence),
    token = (SELECT place.token FROM {queue} AS place
             WHERE place.lock_key = ? AND place.token <> ? AND place.expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
             ORDER BY place.arrival LIMIT 1),
    expires_at = IF(token IS NULL, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED),
                    (SELECT place.expires_at FROM {queue} AS place
                     WHERE place.lock_key = {table}.lock_key AND place.token = {table}.token))
WHERE lock_key = ? AND token = ? AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
