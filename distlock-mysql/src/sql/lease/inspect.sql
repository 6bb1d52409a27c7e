-- ? key → (token, fence, µs left) of a live lease, or no row.
SELECT token, fence, GREATEST(expires_at - CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED), 1)
FROM {table} WHERE lock_key = ? AND token IS NOT NULL AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
