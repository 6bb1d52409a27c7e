-- ? name → the live holds (token, fence, mode, owner, µs left).
SELECT token, fence, mode, owner, GREATEST(expires_at - CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED), 1)
FROM {holders} WHERE name = ? AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) ORDER BY fence, token
