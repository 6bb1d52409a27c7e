-- release_owner.sql for a store without release notifications.
WITH freed AS (
    UPDATE {holders} SET token = NULL, expires_at = clock_timestamp()
    WHERE owner = $1 AND token IS NOT NULL
      AND (mode IN ('I', 'J') OR expires_at > clock_timestamp())
    RETURNING name, mode, waiting)
SELECT count(*) FILTER (WHERE mode NOT IN ('I', 'J')), 0::bigint FROM freed
