-- $1 names, $2 token → as release.sql, for the token's intents (places) only.
WITH freed AS (
    UPDATE {holders} SET token = NULL, expires_at = clock_timestamp()
    WHERE name = ANY((SELECT $1::text[])::text[]) AND token = $2::uuid AND mode IN ('I', 'J')
      AND (mode IN ('I', 'J') OR expires_at > clock_timestamp())
    RETURNING name, mode, waiting)
SELECT count(*) FILTER (WHERE mode NOT IN ('I', 'J')),
    count(CASE WHEN waiting THEN pg_notify({channel},
        CASE WHEN mode IN ('R', 'J') THEN 'group-shared:' ELSE 'group:' END
        || name)::text END)
FROM freed
