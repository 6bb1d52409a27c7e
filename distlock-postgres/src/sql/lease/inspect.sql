-- $1 key → (token, fence, µs left) of an unexpired lease, or no row.
SELECT token, fence,
    GREATEST((extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint, 1)
FROM {table} WHERE key = $1 AND expires_at > clock_timestamp()
