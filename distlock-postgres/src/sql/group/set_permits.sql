-- $1 name, $2 mode ('R'/'W'), $3 permits: upsert into the permits table, notifying
-- 'group:<name>', which every waiter of the name keeps.
WITH changed AS (
    INSERT INTO {permits} (name, mode, permits) VALUES ($1, $2::"char", $3)
    ON CONFLICT (name, mode) DO UPDATE SET permits = EXCLUDED.permits
    RETURNING name)
{notify}
SELECT count(pg_notify({channel}, 'group:' || name)::text) FROM changed
{silent}
SELECT count(*) FROM changed
{end}
