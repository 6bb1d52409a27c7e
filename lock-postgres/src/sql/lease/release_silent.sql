-- release.sql for a store without release notifications: notifies no one.
WITH released AS (
    UPDATE {table} SET token = NULL, expires_at = clock_timestamp()
    WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()
    RETURNING key)
SELECT count(*) FROM released
