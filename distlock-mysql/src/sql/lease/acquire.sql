-- ? key, ? token, ? TTL ms, ? token, ? token, ? token, ? TTL ms. Acquired exactly when the
-- statement's insert id (LAST_INSERT_ID(expr), reported in the OK packet) is not 0: it is
-- then the fence. A new row takes the clock in microseconds as its fence; an expired row
-- is taken over with GREATEST(fence + 1, clock); a live lease of the same token (a run
-- again after a lost connection) counts as acquired and keeps its fence; a live lease of
-- another token sets the insert id to 0 and changes nothing. MySQL assigns left to right,
-- each assignment seeing the ones before: `fence` and `token` read the old row,
-- `expires_at` reads the new token.
INSERT INTO {table} (lock_key, token, fence, expires_at, handed)
VALUES (?, ?, LAST_INSERT_ID(CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)), CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) + ? * 1000, 0)
ON DUPLICATE KEY UPDATE
    fence = IF(expires_at <= CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED),
               LAST_INSERT_ID(GREATEST(fence + 1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))),
               IF(token = ?, LAST_INSERT_ID(fence), fence + LAST_INSERT_ID(0))),
    handed = IF(expires_at <= CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED), 0, handed),
    token = IF(expires_at <= CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED), ?, token),
    expires_at = IF(token = ?, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) + ? * 1000, expires_at)
