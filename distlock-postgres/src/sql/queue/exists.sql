-- Whether the queue table exists (it is created on first use).
SELECT to_regclass('{queue}') IS NOT NULL
