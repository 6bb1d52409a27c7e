-- $1 owner → as release.sql, for every live hold and intent of the owner (the owner
-- index).
WITH freed AS (
    UPDATE {holders} SET token = NULL, expires_at = clock_timestamp()
    WHERE owner = $1 AND token IS NOT NULL
      AND (mode IN ('I', 'J') OR expires_at > clock_timestamp())
    RETURNING name, mode, waiting)
SELECT count(*) FILTER (WHERE mode NOT IN ('I', 'J')),
    count(CASE WHEN waiting THEN pg_notify({channel},
        CASE WHEN mode IN ('R', 'J') THEN 'group-shared:' ELSE 'group:' END
        || name)::text END)
FROM freed
