-- remove_permits.sql for a store without release notifications.
WITH changed AS (
    DELETE FROM {permits} WHERE name = $1 AND mode = $2::"char" RETURNING name)
SELECT count(*) FROM changed
