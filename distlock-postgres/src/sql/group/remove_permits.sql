-- $1 name, $2 mode: deletes the permits entry, notifying as set_permits.sql does.
WITH changed AS (
    DELETE FROM {permits} WHERE name = $1 AND mode = $2::"char" RETURNING name)
{notify}
SELECT count(pg_notify({channel}, 'group:' || name)::text) FROM changed
{silent}
SELECT count(*) FROM changed
{end}
