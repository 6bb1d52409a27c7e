-- $1 the schema lock key: serialises concurrent `ensure_schema` calls (`CREATE … IF NOT
-- EXISTS` alone can fail with a unique violation in `pg_type` when two sessions create
-- the same table at once).
SELECT pg_advisory_xact_lock($1)
