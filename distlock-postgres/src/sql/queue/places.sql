-- $1 key → (token, µs left, µs waited) per live place of its queue, in arrival order;
-- the time waited counts from when the place was taken.
SELECT token,
    GREATEST((extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint, 1),
    GREATEST((extract(epoch FROM clock_timestamp() - placed_at) * 1000000)::bigint, 0)
FROM {queue}
WHERE key = $1 AND expires_at > clock_timestamp()
ORDER BY arrival
