-- $1 key → (token, fence, µs left, value) of an unexpired lease, the value NULL when its
-- holder attached none; no row when the key is free. Only a value row naming this lease
-- (token and fence) counts: one left by an earlier lease of the key is never returned.
SELECT held.token, held.fence,
    GREATEST((extract(epoch FROM held.expires_at - clock_timestamp()) * 1000000)::bigint, 1),
    attached.value
FROM {table} AS held
LEFT JOIN {values} AS attached
    ON attached.key = held.key AND attached.token = held.token AND attached.fence = held.fence
WHERE held.key = $1 AND held.expires_at > clock_timestamp()
