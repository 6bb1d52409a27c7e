-- ? key, ? token, ? place TTL ms: takes a place at the back of the queue, or refreshes the
-- token's place (keeping its arrival).
INSERT INTO {queue} (lock_key, token, expires_at) VALUES (?, ?, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) + ? * 1000)
ON DUPLICATE KEY UPDATE expires_at = VALUES(expires_at)
