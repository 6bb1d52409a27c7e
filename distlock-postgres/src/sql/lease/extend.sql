-- $1 key, $2 token, $3 TTL in ms → 1 row affected when extended.
UPDATE {table} SET expires_at = clock_timestamp() + $3 * interval '1 millisecond'
WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()
