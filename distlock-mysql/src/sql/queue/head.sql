-- ? key → the token of the oldest live place in the key's queue, or no row.
SELECT token FROM {queue} WHERE lock_key = ? AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) ORDER BY arrival LIMIT 1
