-- ? key, ? token (twice each), ? key, ? token → 1 row matched when released. The lease
-- goes to the oldest live queued waiter other than the releaser (with a new fence, for
-- the rest of that waiter's place), or is freed. The insert id reports the released
-- lease: 1, plus 1 when it had been handed to the releaser as a queued waiter (whose
-- place the caller then removes), plus 2 when a listener waits for the key's release
-- (whom the caller then wakes). `handed` becomes whether the lease was handed on.
UPDATE {table} SET
    handed = 0 * LAST_INSERT_ID(1 + handed + 2 * EXISTS (
                 SELECT 1 FROM {waiters} AS waiter
                 WHERE waiter.lock_key = {table}.lock_key AND waiter.expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)))
             + EXISTS (
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
