-- {rows}: one "(?, ?, ?, ?, ?, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) + ? * 1000)" per member (name, token, mode, owner, fence, TTL ms).
INSERT INTO {holders} (name, token, mode, owner, fence, expires_at) VALUES {rows}
