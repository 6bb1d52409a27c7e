-- $1 schema, $2 sequence, $3 table names, $4 required columns → (schema exists, schema
-- usable, sequence exists, sequence usable, table relpersistence, columns missing, table
-- privileges missing). Catalog reads only (no lookups that fail on a missing name or a
-- missing privilege), so it can describe what is missing.
WITH s AS (SELECT oid FROM pg_namespace WHERE nspname = $1),
    q AS (SELECT c.oid FROM pg_class c JOIN s ON s.oid = c.relnamespace
          WHERE c.relname = $2 AND c.relkind = 'S'),
    t AS (SELECT c.oid, c.relpersistence FROM pg_class c JOIN s ON s.oid = c.relnamespace
          WHERE c.relname = $3 AND c.relkind IN ('r', 'p'))
SELECT EXISTS (SELECT 1 FROM s),
    (SELECT has_schema_privilege(oid, 'USAGE') FROM s),
    EXISTS (SELECT 1 FROM q),
    (SELECT has_sequence_privilege(oid, 'USAGE') OR has_sequence_privilege(oid, 'UPDATE') FROM q),
    (SELECT relpersistence::text FROM t),
    ARRAY(SELECT wanted FROM unnest($4::text[]) AS wanted, t
          WHERE NOT EXISTS (SELECT 1 FROM pg_attribute a
                            WHERE a.attrelid = t.oid AND a.attname = wanted AND NOT a.attisdropped)),
    ARRAY(SELECT wanted FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE']) AS wanted, t
          WHERE NOT has_table_privilege(t.oid, wanted))
