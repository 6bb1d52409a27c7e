-- ? key, ? token: removes the token's place and the key's expired places.
DELETE FROM {queue} WHERE lock_key = ? AND (token = ? OR expires_at <= CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))
