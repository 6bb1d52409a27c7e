-- $1 name → (token, mode, µs left, µs waited) per live place (intent of a waiting
-- group), oldest ticket first; the time waited counts from when the place was taken.
SELECT token::text, mode::text,
    GREATEST((extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint, 1),
    GREATEST((extract(epoch FROM clock_timestamp() - placed_at) * 1000000)::bigint, 0)
FROM {holders}
WHERE name = $1 AND token IS NOT NULL AND mode IN ('I', 'J') AND expires_at > clock_timestamp()
ORDER BY ticket, token
