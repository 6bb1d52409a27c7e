-- $1 names, $2 token, $3 TTL ms → rows affected: the live holds extended. `$1`, the
-- names, is read through a scalar subquery, which the planner does not look into: a
-- custom plan for the actual (mostly one-element) array looks cheaper than the generic
-- plan, so PostgreSQL would plan the statement again at every call; this way both cost
-- the same and it keeps the generic plan after five calls.
UPDATE {holders} SET expires_at = clock_timestamp() + $3 * interval '1 millisecond'
WHERE name = ANY((SELECT $1::text[])::text[]) AND token = $2::uuid AND mode NOT IN ('I', 'J')
  AND expires_at > clock_timestamp()
