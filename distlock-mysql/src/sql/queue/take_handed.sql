-- ? TTL ms, ? key, ? token: takes the lease a release handed to the token, while it is
-- live, keeping its fence (the insert id). No row matched: the token does not hold it.
UPDATE {table} SET
    fence = LAST_INSERT_ID(fence),
    expires_at = CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) + ? * 1000,
    handed = 0
WHERE lock_key = ? AND token = ? AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
