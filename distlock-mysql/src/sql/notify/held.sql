-- ? token, ? key → µs left of a live lease of another token, 0 for a live lease the token
-- holds (one a release handed to it as a queued waiter: free to take), or no row when the
-- key is free. A token of '' is no token's.
SELECT IF(token = ?, 0, GREATEST(expires_at - CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED), 1)) FROM {table}
WHERE lock_key = ? AND token IS NOT NULL AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
