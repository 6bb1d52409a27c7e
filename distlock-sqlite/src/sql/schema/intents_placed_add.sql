-- When a place was taken, added to an intents table created without it: a database
-- file made by an earlier version (its places in force then get 0, the boot's start).
ALTER TABLE {intents} ADD COLUMN placed_ms INTEGER NOT NULL DEFAULT 0
