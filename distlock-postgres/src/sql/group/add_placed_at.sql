-- Adds `placed_at` to a holders table created without it. Rows written before have none:
-- their places' age reads as zero until they are placed again.
ALTER TABLE {holders} ADD COLUMN IF NOT EXISTS placed_at timestamptz
