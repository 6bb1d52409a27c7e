-- ? value, ? key, ? token → 1 or 2 rows affected when written, 0 when the token holds no
-- live lease on the key (the SELECT finds no row, nothing is written). The lease row is
-- read with a shared lock until the statement ends, so no release, expiry take-over or
-- hand-over of the lease comes between the check and the write. The row takes the
-- lease's token and fence, replacing whatever an earlier lease left.
INSERT INTO {values} (lock_key, token, fence, value)
SELECT lock_key, token, fence, ? FROM {table}
WHERE lock_key = ? AND token = ? AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
ON DUPLICATE KEY UPDATE token = VALUES(token), fence = VALUES(fence), value = VALUES(value)
