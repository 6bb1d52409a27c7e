-- Adds `placed_at` to a queue table created without it; places already queued count
-- their age from now.
ALTER TABLE {queue} ADD COLUMN IF NOT EXISTS placed_at timestamptz NOT NULL DEFAULT clock_timestamp()
