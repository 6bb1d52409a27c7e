CREATE INDEX IF NOT EXISTS {expires_index} ON {table} (expires_at)
