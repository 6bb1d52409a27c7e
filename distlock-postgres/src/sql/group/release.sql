-- $1 names, $2 token → one row (live holds freed, notifications): frees the token's
-- live holds and all its intents of those names (a hold that ended stays until a grant
-- or the purge reclaims it), and notifies per freed flagged row (PostgreSQL folds equal
-- notifications of one transaction): 'group-shared:<name>' for shared holds and places,
-- 'group:<name>' for exclusive ones.
WITH freed AS (
    UPDATE {holders} SET token = NULL, expires_at = clock_timestamp()
    WHERE name = ANY((SELECT $1::text[])::text[]) AND token = $2::uuid
      AND (mode IN ('I', 'J') OR expires_at > clock_timestamp())
    RETURNING name, mode, waiting)
{freed_counts}
