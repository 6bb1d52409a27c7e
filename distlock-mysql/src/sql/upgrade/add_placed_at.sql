-- Gives a queue or places table created without it (`{upgraded}`, filled per table) its
-- `placed_at` column: three statements that `ensure_schema` runs one after the other.
-- The first fails (error 1054) only when the column is missing; places already taken
-- then count their age from the upgrade.
SELECT placed_at FROM {upgraded} LIMIT 0;
ALTER TABLE {upgraded} ADD COLUMN placed_at BIGINT NOT NULL DEFAULT 0;
UPDATE {upgraded} SET placed_at = CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) WHERE placed_at = 0
