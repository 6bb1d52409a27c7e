-- ? key, ? listener connection id, ? token ('' for any release), ? ms: registers the
-- listener as waiting for the key's release for that long (or longer, when it already
-- was), for the fair waiter with that token.
INSERT INTO {waiters} (lock_key, listener, token, expires_at) VALUES (?, ?, ?, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) + ? * 1000)
ON DUPLICATE KEY UPDATE expires_at = GREATEST(expires_at, VALUES(expires_at))
