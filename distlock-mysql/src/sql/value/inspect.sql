-- ? key → (token, fence, µs left, value or NULL) of a live lease, or no row: the lease
-- row as lease/inspect.sql reads it, with the value its own lease (same token and fence)
-- set. One consistent read of both tables.
SELECT lease.token, lease.fence, GREATEST(lease.expires_at - CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED), 1), attached.value
FROM {table} AS lease
LEFT JOIN {values} AS attached
    ON attached.lock_key = lease.lock_key AND attached.token = lease.token AND attached.fence = lease.fence
WHERE lease.lock_key = ? AND lease.token IS NOT NULL AND lease.expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
