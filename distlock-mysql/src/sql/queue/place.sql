-- ? key, ? token, ? place TTL ms: takes a place at the back of the queue, or refreshes the
-- token's place (keeping its arrival, and when it was taken unless it had lapsed;
-- `placed_at` is assigned before `expires_at` changes).
INSERT INTO {queue} (lock_key, token, placed_at, expires_at) VALUES (?, ?, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED), CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) + ? * 1000)
ON DUPLICATE KEY UPDATE placed_at = IF(expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED), placed_at, VALUES(placed_at)), expires_at = VALUES(expires_at)
