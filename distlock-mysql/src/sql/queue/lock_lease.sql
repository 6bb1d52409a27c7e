-- ? key → (token, live, µs left) of the key's lease row, locked until the transaction ends.
SELECT token, expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED), GREATEST(expires_at - CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED), 1) FROM {table} WHERE lock_key = ? FOR UPDATE
