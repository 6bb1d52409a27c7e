-- $1 key, $2 token, $3 TTL ms → the fence when a release had handed the lease to $2 and
-- it was still live: it is taken for $3 (keeping its fence, and its `waiting` flag:
-- waiters that flagged it while it was handed still wait for its release) and $2's place
-- leaves the queue. No row when the lease is not $2's (it lapsed, or another token took
-- it): nothing changes, and the waiter makes the full queued attempt (acquire.sql).
WITH taken AS (
    UPDATE {table}
    SET expires_at = clock_timestamp() + $3 * interval '1 millisecond'
    WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()
    RETURNING fence),
left_queue AS (
    DELETE FROM {queue} WHERE key = $1 AND token = $2 AND EXISTS (SELECT 1 FROM taken))
SELECT fence FROM taken
