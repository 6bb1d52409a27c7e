-- The names ({list}), ? token → rows affected: the token's live holds freed. (Its expired
-- holds go with the next grant of the name.) One statement: a group holds no places
-- once granted, since the grant removes the token's places in its own transaction.
DELETE FROM {holders} WHERE name IN ({list}) AND token = ? AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
