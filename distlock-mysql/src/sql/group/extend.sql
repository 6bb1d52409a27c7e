-- ? TTL ms, the names ({list}), ? token → rows matched: the live holds extended.
UPDATE {holders} SET expires_at = CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) + ? * 1000
WHERE name IN ({list}) AND token = ? AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
