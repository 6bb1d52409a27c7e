-- The names ({list}), ? token: removes the token's places.
DELETE FROM {places} WHERE name IN ({list}) AND token = ?
