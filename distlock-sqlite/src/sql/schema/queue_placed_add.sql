-- When a place was taken, added to a queue table created without it: a database file
-- made by an earlier version (its places in force then get 0, the boot's start).
ALTER TABLE {queue} ADD COLUMN placed_ms INTEGER NOT NULL DEFAULT 0
