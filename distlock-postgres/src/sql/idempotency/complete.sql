-- $1 key, $2 token, $3 encoded response, $4 retention in ms → 1 row affected when the
-- token's claim became a completed record.
UPDATE {table} SET token = NULL, response = $3, expires_at = clock_timestamp() + $4 * interval '1 millisecond'
WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()
