-- $1 names, $2 token → as release.sql, for the token's intents (places) only.
WITH freed AS (
    UPDATE {holders} SET token = NULL, expires_at = clock_timestamp()
    WHERE name = ANY((SELECT $1::text[])::text[]) AND token = $2::uuid AND mode IN ('I', 'J')
      AND (mode IN ('I', 'J') OR expires_at > clock_timestamp())
    RETURNING name, mode, waiting)
{freed_counts}
