-- One page of a listing: ? lowest key (inclusive), ? cursor (exclusive), ? upper bound
-- (exclusive), ? page size → the rows of the page in key order (key, token, fence,
-- µs left or NULL when not held): a range scan of the primary key. The caller filters
-- by the pattern and takes the last key as the cursor.
SELECT lock_key, token, fence, IF(token IS NOT NULL AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED), GREATEST(expires_at - CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED), 1), NULL)
FROM {table}
WHERE lock_key >= ? AND lock_key > ? AND lock_key < ?
ORDER BY lock_key LIMIT ?
