-- Deletes (a bounded number of) registrations that ended.
DELETE FROM {waiters} WHERE expires_at < CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) LIMIT 1000
