-- ? key, ? token → µs left of a live lease of another token than ? (a lease handed to
-- the token counts as free), or no row when the key is free.
SELECT GREATEST(expires_at - CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED), 1) FROM {table}
WHERE lock_key = ? AND token IS NOT NULL AND token <> ? AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
