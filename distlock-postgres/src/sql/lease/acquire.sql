-- $1 key, $2 token, $3 TTL in ms → one row (fence, finished within the purge horizon)
-- when acquired, no row when another lease holds the key. The fence of a taken-over row
-- is drawn in the SET list, after the row lock (see `sql.rs`); 60000 is
-- MIN_PURGE_HORIZON in ms. A new lease starts with no known waiters
-- (a store without notifications has no `waiting` flag).
INSERT INTO {table} AS held (key, token, fence, expires_at)
VALUES ($1, $2, nextval('{sequence}'), clock_timestamp() + $3 * interval '1 millisecond')
ON CONFLICT (key) DO UPDATE
SET token = EXCLUDED.token,
    fence = GREATEST(held.fence + 1, nextval('{sequence}')),
    expires_at = clock_timestamp() + $3 * interval '1 millisecond'{notify}, waiting = false{end}
WHERE held.expires_at <= clock_timestamp()
RETURNING held.fence,
    clock_timestamp() - statement_timestamp() < 60000 * interval '1 millisecond'
