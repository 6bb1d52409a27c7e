-- ? key → how many live places its queue has.
SELECT CAST(COUNT(*) AS SIGNED) FROM {queue} WHERE lock_key = ? AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
