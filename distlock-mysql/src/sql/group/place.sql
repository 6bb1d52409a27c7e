-- {rows}: one "(?, ?, ?, ?, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) + ? * 1000)" per place (name, token, mode, ticket, TTL ms);
-- a place the token already has is refreshed, keeping its ticket.
INSERT INTO {places} (name, token, mode, ticket, expires_at) VALUES {rows}
ON DUPLICATE KEY UPDATE mode = VALUES(mode), expires_at = VALUES(expires_at)
