-- {rows}: one "(?, ?, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) + ? * 1000)" per name (name, listener connection id,
-- ms): registers the listener as waiting for a change of each group name for that long
-- (or longer, when it already was). Group names share the waiters table with single
-- keys: a name that is also a key wakes that key's waiters too, who check and sleep again.
INSERT INTO {waiters} (lock_key, listener, expires_at) VALUES {rows}
ON DUPLICATE KEY UPDATE expires_at = GREATEST(expires_at, VALUES(expires_at))
