-- $1 key, $2 token → one row: count 1 when released, else 0. `waiting` is returned as
-- the row had it (release leaves it alone); the CASE sends the notification (a volatile
-- call, never pre-evaluated) only for a flagged row, and count() counts every released
-- row ('' is not NULL). The notification is delivered when the statement commits. A
-- store without notifications has no `waiting` flag and counts the released rows.
WITH released AS (
    UPDATE {table} SET token = NULL, expires_at = clock_timestamp()
    WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()
    RETURNING key{notify}, waiting{end})
{notify}
SELECT count(CASE WHEN released.waiting
             THEN pg_notify({channel}, released.key)::text ELSE '' END)
FROM released
{silent}
SELECT count(*) FROM released
{end}
