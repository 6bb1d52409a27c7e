-- The names ({list}), ? token: removes the token's places and the names' expired places.
DELETE FROM {places} WHERE name IN ({list}) AND (token = ? OR expires_at <= CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))
