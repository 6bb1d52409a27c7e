-- $1 schema, $2 holders table, $3 permits table, $4 function names, $5 and $6 the
-- required columns of the two tables, $7 the function's body → (holders
-- relpersistence, holders columns missing, holders privileges missing, permits exists,
-- permits columns missing, permits privileges missing, function exists, function
-- executable, function body is $7). Catalog reads only.
WITH s AS (SELECT oid FROM pg_namespace WHERE nspname = $1),
    h AS (SELECT c.oid, c.relpersistence FROM pg_class c JOIN s ON s.oid = c.relnamespace
          WHERE c.relname = $2 AND c.relkind IN ('r', 'p')),
    p AS (SELECT c.oid FROM pg_class c JOIN s ON s.oid = c.relnamespace
          WHERE c.relname = $3 AND c.relkind IN ('r', 'p')),
    f AS (SELECT f.oid FROM pg_proc f JOIN s ON s.oid = f.pronamespace WHERE f.proname = $4)
SELECT (SELECT relpersistence::text FROM h),
    ARRAY(SELECT wanted FROM unnest($5::text[]) AS wanted, h
          WHERE NOT EXISTS (SELECT 1 FROM pg_attribute a
                            WHERE a.attrelid = h.oid AND a.attname = wanted AND NOT a.attisdropped)),
    ARRAY(SELECT wanted FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) AS wanted, h
          WHERE NOT has_table_privilege(h.oid, wanted)),
    EXISTS (SELECT 1 FROM p),
    ARRAY(SELECT wanted FROM unnest($6::text[]) AS wanted, p
          WHERE NOT EXISTS (SELECT 1 FROM pg_attribute a
                            WHERE a.attrelid = p.oid AND a.attname = wanted AND NOT a.attisdropped)),
    ARRAY(SELECT wanted FROM unnest(ARRAY['SELECT']) AS wanted, p
          WHERE NOT has_table_privilege(p.oid, wanted)),
    EXISTS (SELECT 1 FROM f),
    (SELECT bool_and(has_function_privilege(f.oid, 'EXECUTE')) FROM f),
    (SELECT bool_and(p.prosrc = $7) FROM f JOIN pg_proc p ON p.oid = f.oid)
