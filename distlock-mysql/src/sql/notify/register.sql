-- ? key, ? listener connection id, ? ms: registers the listener as waiting for the key's
-- release for that long (or longer, when it already was).
INSERT INTO {waiters} (lock_key, listener, expires_at) VALUES (?, ?, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) + ? * 1000)
ON DUPLICATE KEY UPDATE expires_at = GREATEST(expires_at, VALUES(expires_at))
