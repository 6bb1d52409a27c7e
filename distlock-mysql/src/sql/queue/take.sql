-- ? token, ? TTL ms, ? key (row locked by lock_lease.sql). The insert id is the fence: kept
-- for a lease handed to the token, else GREATEST(fence + 1, clock).
UPDATE {table} SET
    fence = LAST_INSERT_ID(IF(token = ? AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED), fence, GREATEST(fence + 1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)))),
    token = ?,
    expires_at = CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) + ? * 1000,
    handed = 0
WHERE lock_key = ?
