-- $1 key, $2 token → 1 row affected when the token's running claim was deleted.
DELETE FROM {table} WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()
