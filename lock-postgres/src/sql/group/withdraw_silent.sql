-- withdraw.sql for a store without release notifications.
WITH freed AS (
    UPDATE {holders} SET token = NULL, expires_at = clock_timestamp()
    WHERE name = ANY((SELECT $1::text[])::text[]) AND token = $2::uuid AND mode IN ('I', 'J')
      AND (mode IN ('I', 'J') OR expires_at > clock_timestamp())
    RETURNING name, mode, waiting)
SELECT count(*) FILTER (WHERE mode NOT IN ('I', 'J')), 0::bigint FROM freed
