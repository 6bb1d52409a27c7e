-- ? encoded response, ? retention ms, ? key, ? token → 1 row matched when the token's
-- running claim became a completed record.
UPDATE {table} SET token = NULL, response = ?, expires_at = CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) + ? * 1000
WHERE idem_key = ? AND token = ? AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
