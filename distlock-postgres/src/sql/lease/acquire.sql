-- $1 key, $2 token, $3 TTL in ms → one row (fence, finished within the purge horizon)
-- when acquired, no row when another lease holds the key. An attempt on a key with a live
-- lease inserts nothing, so it draws no fence (a waiter's attempts leave no gaps in the
-- sequence); the fence of a taken-over row is drawn in the SET list, after the row lock
-- (see `sql.rs`); 60000 is MIN_PURGE_HORIZON in ms. A new lease starts with no known
-- waiters (a store without notifications has no `waiting` flag).
INSERT INTO {table} AS held (key, token, fence, expires_at)
SELECT $1, $2,
    -- A key with a row (an ended lease) gets its fence in the SET list: none drawn here.
    CASE WHEN EXISTS (SELECT 1 FROM {table} WHERE key = $1) THEN 0 ELSE nextval('{sequence}') END,
    clock_timestamp() + $3 * interval '1 millisecond'
WHERE NOT EXISTS (SELECT 1 FROM {table} WHERE key = $1 AND expires_at > clock_timestamp())
ON CONFLICT (key) DO UPDATE
SET token = EXCLUDED.token,
    fence = GREATEST(held.fence + 1, nextval('{sequence}')),
    expires_at = clock_timestamp() + $3 * interval '1 millisecond'{notify}, waiting = false{end}
WHERE held.expires_at <= clock_timestamp()
RETURNING held.fence,
    clock_timestamp() - statement_timestamp() < 60000 * interval '1 millisecond'
