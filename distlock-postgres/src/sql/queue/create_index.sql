CREATE INDEX IF NOT EXISTS {queue_order} ON {queue} (key, arrival)
