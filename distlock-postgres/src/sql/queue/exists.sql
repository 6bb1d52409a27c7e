-- Whether the queue table exists (it is created on first use), and whether it has the
-- `placed_at` column.
SELECT to_regclass('{queue}') IS NOT NULL,
    EXISTS (SELECT 1 FROM pg_attribute
            WHERE attrelid = to_regclass('{queue}') AND attname = 'placed_at' AND NOT attisdropped)
