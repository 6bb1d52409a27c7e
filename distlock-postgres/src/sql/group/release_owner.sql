-- $1 owner → as release.sql, for every live hold and intent of the owner (the owner
-- index).
WITH freed AS (
    UPDATE {holders} SET token = NULL, expires_at = clock_timestamp()
    WHERE owner = $1 AND token IS NOT NULL
      AND (mode IN ('I', 'J') OR expires_at > clock_timestamp())
    RETURNING name, mode, waiting)
{freed_counts}
