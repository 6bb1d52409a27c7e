-- The answer of release.sql, withdraw.sql and release_owner.sql (their placeholder
-- `freed_counts`), over the rows (name, mode, waiting) their CTE `freed` returns: (live
-- holds freed, notifications sent), one notification per freed flagged row; a store
-- without release notifications sends none and answers 0.
SELECT count(*) FILTER (WHERE mode NOT IN ('I', 'J')),
{notify}
    count(CASE WHEN waiting THEN pg_notify({channel},
        CASE WHEN mode IN ('R', 'J') THEN 'group-shared:' ELSE 'group:' END
        || name)::text END)
{silent}
    0::bigint
{end}
FROM freed
