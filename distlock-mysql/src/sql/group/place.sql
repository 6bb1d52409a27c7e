-- {rows}: one "(?, ?, ?, ?, <now µs>, <now µs> + ? * 1000)" per place (name, token, mode, ticket, TTL ms);
-- a place the token already has is refreshed, keeping its ticket and when it was taken.
INSERT INTO {places} (name, token, mode, ticket, placed_at, expires_at) VALUES {rows}
ON DUPLICATE KEY UPDATE mode = VALUES(mode), expires_at = VALUES(expires_at)
