-- Fails on an intents table created without `placed_ms` (see intents_placed_add.sql).
SELECT placed_ms FROM {intents} LIMIT 0
