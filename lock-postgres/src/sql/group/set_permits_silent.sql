-- set_permits.sql for a store without release notifications.
WITH changed AS (
    INSERT INTO {permits} (name, mode, permits) VALUES ($1, $2::"char", $3)
    ON CONFLICT (name, mode) DO UPDATE SET permits = EXCLUDED.permits
    RETURNING name)
SELECT count(*) FROM changed
