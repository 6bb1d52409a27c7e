-- $1 key, $2 token → one row: count 1 when released, else 0. `waiting` is returned as
-- the row had it (release leaves it alone); the CASE calls pg_notify (volatile, so never
-- pre-evaluated) only for a flagged row, and count() counts every released row ('' is
-- not NULL). The notification is delivered when the statement commits.
WITH released AS (
    UPDATE {table} SET token = NULL, expires_at = clock_timestamp()
    WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()
    RETURNING key, waiting)
SELECT count(CASE WHEN released.waiting
             THEN pg_notify({channel}, released.key)::text ELSE '' END)
FROM released
