-- $1 name → (token, mode, owner, fence, µs left) per live hold.
SELECT token::text, mode::text, owner, fence,
    GREATEST((extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint, 1)
FROM {holders}
WHERE name = $1 AND token IS NOT NULL AND mode NOT IN ('I', 'J') AND expires_at > clock_timestamp()
ORDER BY fence, token
