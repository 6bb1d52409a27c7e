-- ? TTL ms, ? key, ? token → 1 row matched when extended.
UPDATE {table} SET expires_at = CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) + ? * 1000
WHERE lock_key = ? AND token = ? AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
