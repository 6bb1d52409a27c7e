-- ? name → the live places of waiting groups on it, oldest ticket first (token, mode,
-- µs left, µs waited since the place was taken).
SELECT token, mode, GREATEST(expires_at - CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED), 1), GREATEST(CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) - placed_at, 0)
FROM {places} WHERE name = ? AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) ORDER BY ticket, token
