-- The names ({list}), ? token: removes the token's holds and the names' expired holds,
-- before a grant writes its own.
DELETE FROM {holders} WHERE name IN ({list}) AND (token = ? OR expires_at <= CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))
