-- ? key → the listeners to wake after the key's release, each with the token the lease
-- was handed to (NULL when it was freed). A lease handed to a queued waiter wakes only the
-- listeners registered for that token or for any release; a freed one wakes them all.
SELECT DISTINCT waiter.listener, lease.token FROM {waiters} AS waiter
LEFT JOIN {table} AS lease ON lease.lock_key = waiter.lock_key AND lease.handed = 1
WHERE waiter.lock_key = ? AND waiter.expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
    AND (waiter.token = '' OR lease.token IS NULL OR waiter.token = lease.token)
