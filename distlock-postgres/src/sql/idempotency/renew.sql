-- $1 key, $2 token, $3 lease in ms → 1 row affected when the token's claim was renewed.
UPDATE {table} SET expires_at = clock_timestamp() + $3 * interval '1 millisecond'
WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()
