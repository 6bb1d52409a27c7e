-- ? key, ? token → 1 row affected when the token's running claim was deleted.
DELETE FROM {table} WHERE idem_key = ? AND token = ? AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
