-- Fails on a queue table created without `placed_ms` (see queue_placed_add.sql).
SELECT placed_ms FROM {queue} LIMIT 0
