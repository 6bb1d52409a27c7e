-- ? key → the live places of its queue in arrival order (token, µs left, µs waited since
-- the place was taken).
SELECT token, GREATEST(expires_at - CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED), 1), GREATEST(CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) - placed_at, 0)
FROM {queue} WHERE lock_key = ? AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) ORDER BY arrival
